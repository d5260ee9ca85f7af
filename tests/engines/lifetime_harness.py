"""A stand-in harness for engine-lifetime tests: starts one engine, prints its record,
and waits to be killed.

`python lifetime_harness.py STUDY.json LOG_DIR [thread]`: STUDY.json is a Study;
its first arm is started (from the main thread, or with `thread` from a worker
thread that then exits), and the EngineInfo is printed as one JSON line.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from harness.engines.running.lifecycle import start_engine
from harness.prereg.schema import Study


def main() -> None:
    study = Study.model_validate_json(Path(sys.argv[1]).read_text())
    log_dir = Path(sys.argv[2])
    engines = []

    def start() -> None:
        engines.append(start_engine(study.arms[0], study, log_dir))

    if sys.argv[3:] == ["thread"]:
        worker = threading.Thread(target=start)
        worker.start()
        worker.join()
    else:
        start()
    print(engines[0].info.model_dump_json(), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
