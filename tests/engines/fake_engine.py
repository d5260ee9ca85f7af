"""A stand-in for `vllm serve` that misbehaves on request, for lifecycle tests.

Run as `python fake_engine.py serve MODEL --host H --port P --served-model-name N ...`
(or `--version`). FAKE_ENGINE_MODE picks the behaviour:
  ok      serve /health, /v1/models, /v1/chat/completions (SSE), /metrics
  exit    print an error line and exit 1 after a moment
  hang    never open the port
  slow    open the port only after FAKE_ENGINE_DELAY_S seconds
  wrong   serve, but under another model name
Either way it starts a child process (a long sleep) in its process group (in a
session of its own with FAKE_ENGINE_CHILD_SESSION=1), so a test can check that
stopping takes the whole group down. FAKE_ENGINE_PIDS names
a file the pids are appended to.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    if "--version" in sys.argv:
        print("0.32.0")
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("verb")
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--speculative-config", default=None)
    args, _ = parser.parse_known_args()
    mode = os.environ.get("FAKE_ENGINE_MODE", "ok")
    # FAKE_ENGINE_CHILD_SESSION=1: the child leaves the group, as a process that calls
    # setsid would (the engine guard must still stop it).
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)"],
        start_new_session=os.environ.get("FAKE_ENGINE_CHILD_SESSION") == "1",
    )
    pid_file = os.environ.get("FAKE_ENGINE_PIDS")
    if pid_file:
        with open(pid_file, "a") as fh:
            fh.write(f"{os.getpid()}\n{child.pid}\n")
    print(f"fake engine starting: {' '.join(sys.argv[1:])}", flush=True)
    hub = {k: os.environ[k] for k in ("HF_HUB_OFFLINE", "HF_HUB_CACHE") if k in os.environ}
    print(f"fake engine hub environment: {json.dumps(hub, sort_keys=True)}", flush=True)
    if mode == "exit":
        time.sleep(0.3)
        print("ValueError: fake engine refuses this configuration", flush=True)
        child.kill()
        return 1
    if mode == "hang":
        time.sleep(3600)
    if mode == "slow":
        time.sleep(float(os.environ.get("FAKE_ENGINE_DELAY_S", "2")))
    name = args.served_model_name or args.model
    if mode == "wrong":
        name = "some-other-model"
    Handler.served = name
    Handler.root = args.model
    Handler.speculative = args.speculative_config is not None
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print("fake engine ready", flush=True)
    server.serve_forever()
    return 0


class Handler(BaseHTTPRequestHandler):
    served = "model"
    root = "model"  # what it was loaded from, as vLLM reports it
    speculative = False

    def log_message(self, fmt: str, *args: object) -> None:
        print("fake engine:", fmt % args, flush=True)

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/v1/models":
            data = {"object": "list", "data": [{"id": self.served, "root": self.root}]}
            self._send(200, json.dumps(data).encode())
        elif self.path == "/version":
            self._send(200, b'{"version": "0.32.0"}')
        elif self.path == "/metrics":
            lines = [
                "# TYPE vllm:generation_tokens counter",
                'vllm:generation_tokens_total{engine="0",model_name="m"} 4.0',
            ]
            if self.speculative:
                lines += [
                    "# TYPE vllm:spec_decode_num_drafts counter",
                    'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1.0',
                    "# TYPE vllm:spec_decode_num_accepted_tokens counter",
                    'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 1.0',
                ]
            self._send(200, ("\n".join(lines) + "\n").encode(), "text/plain")
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/chat/completions" or body.get("model") != self.served:
            self._send(404, b'{"error": "unknown model"}')
            return
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
            {"choices": [{"index": 0, "delta": {"content": "hi"}}]},
        ]
        payload = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self._send(200, payload.encode(), "text/event-stream")


if __name__ == "__main__":
    sys.exit(main())
