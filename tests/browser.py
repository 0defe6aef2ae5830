"""A small Chrome DevTools Protocol driver over ``--remote-debugging-pipe`` (stdlib only): open a local
HTML file in headless Chromium, collect console errors, evaluate an expression, take a full-page
screenshot. Used by tests/test_report_browser.py; also refreshes the README's screenshot:

    python -m tests.browser REPORT.html docs/report-screenshot.png [WIDTH]

The pipe protocol: Chromium reads NUL-terminated JSON commands on fd 3 and writes responses and events
on fd 4 (chromium's ``--remote-debugging-pipe`` switch).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Self

#: Debian's package installs /usr/bin/chromium; other names for the same browser.
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    """Path of a Chromium-family browser on PATH, or None."""
    for name in BROWSER_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    """The browser did not start, answer, or load the page in time."""


class Chromium:
    """One headless Chromium with one page, driven over the pipe. Use as a context manager."""

    def __init__(self, binary: str, *, width: int = 1400, height: int = 1000, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.width, self.height = width, height
        self._profile = tempfile.TemporaryDirectory(prefix="attnq-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._resp_r, resp_w = os.pipe()

        def wire() -> None:  # in the child: the pipes become fds 3 (commands in) and 4 (answers out)
            a = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(resp_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--hide-scrollbars", "--mute-audio", f"--user-data-dir={self._profile.name}",
                f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank"]
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the browser; closed in close()
        # preexec_fn: only os/fcntl calls (no locks), so it is safe even with other threads running
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                     preexec_fn=wire, close_fds=False)  # noqa: PLW1509
        os.close(cmd_r)
        os.close(resp_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None

    # -- protocol -----------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no answer from the browser in {self.timeout_s:.0f} s; log: {self.log()[-800:]}")
            ready, _, _ = select.select([self._resp_r], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._resp_r, 1 << 20)
                if not chunk:
                    raise BrowserError(f"the browser closed the pipe (exit {self.proc.poll()}); log: {self.log()[-800:]}")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = True) -> dict[str, Any]:
        """Send one command and wait for its answer (events meanwhile go to ``events``)."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._next_id:
                if "error" in m:
                    raise BrowserError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str) -> dict[str, Any]:
        """Wait for the first event ``method`` of the page session (already received ones count)."""
        deadline = time.monotonic() + self.timeout_s
        seen = 0
        while True:
            for ev in self.events[seen:]:
                if ev.get("method") == method:
                    return ev
            seen = len(self.events)
            self.events.append(self._read_message(deadline))

    # -- page -----------------------------------------------------------------------------------
    def open(self, path: Path) -> None:
        """Open ``path`` in a new page with the console and log domains on; returns once ``load`` fired."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                          "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.navigate", {"url": path.resolve().as_uri()})
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise BrowserError(f"evaluate failed: {res['exceptionDetails'].get('text')}")
        return res["result"].get("value")

    def console_errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error-level log entries (CSP violations, failed loads)."""
        out = []
        for ev in self.events:
            method, p = ev.get("method"), ev.get("params", {})
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                det = p.get("exceptionDetails", {})
                out.append("exception: " + str(det.get("exception", {}).get("description") or det.get("text")))
            elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}".strip())
        return out

    def screenshot(self, out: Path) -> tuple[int, int]:
        """Write a full-page PNG screenshot to ``out``; returns the page's (width, height) in CSS pixels."""
        metrics = self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        w, h = int(self.width), int(size["height"])
        self.send("Emulation.setDeviceMetricsOverride", {"width": w, "height": h, "deviceScaleFactor": 1,
                                                          "mobile": False})
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        out.write_bytes(base64.b64decode(data))
        return w, h

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send("Browser.close", session=False)
                self.proc.wait(timeout=10)
        except (BrowserError, OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=10)
        finally:
            for fd in (self._cmd_w, self._resp_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._log.close()
            self._profile.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Per figure of the report: key, what it shows (img / svg), whether it decoded, its size on the page.
FIGURES_JS = """
(() => [...document.querySelectorAll('figure.attnq-figure')].map(f => {
  const img = f.querySelector('img'), svg = f.querySelector('svg');
  const el = img || svg;
  const r = el ? el.getBoundingClientRect() : {x: 0, y: 0, width: 0, height: 0};
  return {key: f.dataset.key, kind: img ? 'img' : (svg ? 'svg' : 'none'),
          decoded: img ? (img.complete && img.naturalWidth > 0) : !!svg,
          naturalWidth: img ? img.naturalWidth : 0,
          shapes: svg ? svg.querySelectorAll('path, use').length : 0,
          hoverTitles: svg ? svg.querySelectorAll('title').length : 0,
          x: r.x + window.scrollX, y: r.y + window.scrollY, width: r.width, height: r.height};
}))()
"""


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = find_browser()
    if binary is None:
        print("no chromium on PATH", file=sys.stderr)
        return 3
    width = int(argv[2]) if len(argv) > 2 else 1400
    with Chromium(binary, width=width) as b:
        b.open(Path(argv[0]))
        errors = b.console_errors()
        figures = b.evaluate(FIGURES_JS)
        w, h = b.screenshot(Path(argv[1]))
    print(f"{len(figures)} figures, {len(errors)} console errors, screenshot {w}x{h} -> {argv[1]}")
    for e in errors:
        print("  " + e)
    return 1 if errors else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
