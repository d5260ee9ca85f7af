"""Sample the engine's own count of running requests, from outside both clients.

Run as a separate process (its own session, normal priority) by peer_parity.py, so a
starved client cannot delay it: every `--interval` s it reads `vllm:num_requests_running`
and `vllm:num_requests_waiting` from /metrics and appends `monotonic_t running waiting`
to the output file (the monotonic clock is the clients' clock too: CLOCK_MONOTONIC).

    python _server_gauge.py METRICS_URL OUT [--interval 0.02]
"""

from __future__ import annotations

import argparse
import time
import urllib.request


def gauge(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in "{ "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("out")
    parser.add_argument("--interval", type=float, default=0.02)
    args = parser.parse_args()
    with open(args.out, "a", buffering=1) as out:
        due = time.monotonic()
        while True:
            t = time.monotonic()
            try:
                text = urllib.request.urlopen(args.url, timeout=2).read().decode()
                out.write(
                    f"{t:.6f} {gauge(text, 'vllm:num_requests_running'):g} "
                    f"{gauge(text, 'vllm:num_requests_waiting'):g}\n"
                )
            except OSError:
                pass
            due += args.interval
            time.sleep(max(0.0, due - time.monotonic()))


if __name__ == "__main__":
    main()
