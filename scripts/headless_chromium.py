"""Open an HTML report in headless Chromium (Debian's `chromium`) over the DevTools
protocol and say what rendered: each <section>'s height, whether each plotly figure drew
its SVG, every console error or uncaught exception, every request that left the file
(the report must need no network); and a PNG screenshot.

Used by the HTML report's test and by scripts/html_screenshot.py. The browser is driven
through one websocket to its browser target, with a flattened session on one page
(Target.attachToTarget flatten=True), so no HTTP endpoint is read.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
INSTALL = (
    "install Debian's chromium (as root: apt-get install -y chromium; scripts/setup.sh does it)"
)

# Reads every section and figure once the figures have drawn (or the wait gave up).
_PAGE_STATE = """JSON.stringify({
  sections: [...document.querySelectorAll('section.report-section')].map(s => ({
    id: s.id, height: s.getBoundingClientRect().height})),
  figures: [...document.querySelectorAll('div.plotly-graph-div')].map(d => ({
    id: d.id, svg: d.querySelectorAll('svg.main-svg').length > 0,
    height: d.getBoundingClientRect().height})),
  plotly: typeof Plotly !== 'undefined' ? Plotly.version : null,
})"""
# Without plotly.js nothing more will draw: stop waiting, the check says which figure lacks.
_DRAWN = (
    "typeof Plotly === 'undefined' || [...document.querySelectorAll("
    "'div.plotly-graph-div')].every(d => d.querySelector('svg.main-svg'))"
)


class ChromiumMissing(RuntimeError):
    pass


@dataclass
class PageCheck:
    sections: list[dict[str, Any]]
    figures: list[dict[str, Any]]
    plotly_version: str | None
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # URLs beyond the file itself
    screenshot: Path | None = None

    def problems(self) -> list[str]:
        """What keeps the page from reading as the report: empty list when it renders."""
        out = [f"section {s['id']} has no height" for s in self.sections if s["height"] <= 0]
        out += [f"figure {f['id']} drew no SVG" for f in self.figures if not f["svg"]]
        out += [f"console: {e}" for e in self.errors]
        out += [f"network request: {u}" for u in self.requests]
        return out


def find_chromium() -> str:
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    raise ChromiumMissing(f"no Chromium on PATH (looked for {', '.join(BROWSERS)}): {INSTALL}")


class _DevTools:
    """Commands and their replies over one websocket; events are kept as they arrive."""

    def __init__(self, ws: ClientConnection, timeout: float) -> None:
        self.ws = ws
        self.timeout = timeout
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        msg_id = next(self.ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + self.timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        seen = len(self.events)
        while not any(e.get("method") == method for e in self.events[seen:]):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {method} within {timeout:g} s")
            try:
                self.events.append(json.loads(self.ws.recv(timeout=left)))
            except TimeoutError:
                continue


def _launch(browser: str, profile: Path, timeout: float) -> tuple[subprocess.Popen, str]:
    log = (profile / "chromium.log").open("wb")
    # --no-sandbox: the test machines run as root, where Chromium's sandbox refuses to start.
    proc = subprocess.Popen(
        [
            browser,
            "--headless=new",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--hide-scrollbars",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    active = profile / "DevToolsActivePort"  # port, then the browser target's path
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        lines = active.read_text().split() if active.exists() else []
        if len(lines) >= 2:
            return proc, f"ws://127.0.0.1:{lines[0]}{lines[1]}"
        time.sleep(0.05)
    proc.kill()
    tail = (profile / "chromium.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"{browser} gave no DevTools port within {timeout:g} s: {tail}")


def _console_errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        p, method = e.get("params", {}), e.get("method")
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            out.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            out.append(f"{p['entry'].get('source')}: {p['entry'].get('text')}")
    return out


def check_page(
    html: Path,
    screenshot: Path | None = None,
    width: int = 1440,
    height: int = 900,
    full_page: bool = False,
    section: str | None = None,
    timeout: float = 60.0,
    draw_timeout: float | None = None,
) -> PageCheck:
    """Open `html` at width x height CSS pixels; `screenshot` gets the viewport's PNG (the
    whole page with full_page; the screen from the top of the section with that id).
    `timeout`: for the browser to start and load the page; `draw_timeout` (default the
    same): for its figures to draw, after which one that has not is a problem."""
    browser = find_chromium()
    url = Path(html).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="specbench-chromium-") as tmp:
        proc, ws_url = _launch(browser, Path(tmp), timeout)
        try:
            with connect(ws_url, max_size=None, open_timeout=timeout) as ws:
                dt = _DevTools(ws, timeout)
                target = dt.send("Target.createTarget", {"url": "about:blank"})["targetId"]
                session = dt.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
                    "sessionId"
                ]
                for domain in ("Page", "Runtime", "Log", "Network"):
                    dt.send(f"{domain}.enable", session=session)
                dt.send(
                    "Emulation.setDeviceMetricsOverride",
                    {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                    session=session,
                )
                dt.send("Page.navigate", {"url": url}, session=session)
                dt.wait_event("Page.loadEventFired", timeout)
                _wait_drawn(dt, session, timeout if draw_timeout is None else draw_timeout)
                state = json.loads(
                    dt.send(
                        "Runtime.evaluate",
                        {"expression": _PAGE_STATE, "returnByValue": True},
                        session=session,
                    )["result"]["value"]
                )
                check = PageCheck(
                    state["sections"],
                    state["figures"],
                    state["plotly"],
                    _console_errors(dt.events),
                    _requests(dt.events, url),
                )
                if section:
                    dt.send(
                        "Runtime.evaluate",
                        {
                            "expression": "document.getElementById("
                            f"{json.dumps(section)})?.scrollIntoView()"
                        },
                        session=session,
                    )
                if screenshot is not None:
                    params: dict[str, Any] = {"format": "png"}
                    if full_page:  # the page's whole height, not the screen's
                        size = dt.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
                        params.update(
                            captureBeyondViewport=True,
                            clip={
                                "x": 0,
                                "y": 0,
                                "width": size["width"],
                                "height": size["height"],
                                "scale": 1,
                            },
                        )
                    shot = dt.send("Page.captureScreenshot", params, session=session)
                    screenshot = Path(screenshot)
                    screenshot.parent.mkdir(parents=True, exist_ok=True)
                    screenshot.write_bytes(base64.b64decode(shot["data"]))
                    check.screenshot = screenshot
                return check
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_drawn(dt: _DevTools, session: str, timeout: float) -> None:
    """Until every plotly figure has its SVG (newPlot draws asynchronously), or the
    timeout: then the check reports which did not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = dt.send(
            "Runtime.evaluate", {"expression": _DRAWN, "returnByValue": True}, session=session
        )["result"].get("value")
        if done:
            return
        time.sleep(0.1)


def _requests(events: list[dict[str, Any]], page: str) -> list[str]:
    urls = [
        e["params"]["request"]["url"]
        for e in events
        if e.get("method") == "Network.requestWillBeSent"
    ]
    return [u for u in urls if u != page and not u.startswith(("data:", "blob:", "about:"))]
