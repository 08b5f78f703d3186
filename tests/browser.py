"""Headless Chromium driven through the DevTools protocol, for the tests that open pages.

    with Browser() as page:            # None of this runs where no Chromium is installed
        page.open("file:///.../deck.html")
        page.evaluate("document.title"); png = page.screenshot(); page.errors

One Chromium process per ``Browser`` (its own profile in a temporary folder,
stopped on exit); one page, whose console errors and uncaught exceptions are
collected in ``errors``. Only the protocol's JSON over a websocket
(websocket-client, which Jupyter's server already needs).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUMS) if p), None)


class Browser:
    def __init__(self, width: int = 1280, height: int = 720, timeout: float = 60.0) -> None:
        self.width, self.height, self.timeout = width, height, timeout
        self.errors: list[str] = []
        self._id = 0

    def __enter__(self) -> Browser:
        import websocket

        self.profile = tempfile.TemporaryDirectory()
        self.process = subprocess.Popen(
            [find_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile.name}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = self._port()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            page = next(t for t in json.load(reply) if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"],
                                              timeout=self.timeout)
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(method)
        self.call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)
        return self

    def __exit__(self, *exc) -> None:
        self.ws.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.profile.cleanup()

    def _port(self) -> int:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if match := re.search(r"DevTools listening on ws://[\d.]+:(\d+)/", line):
                return int(match.group(1))
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError("Chromium did not open its DevTools port")

    def call(self, method: str, **params) -> dict:
        """Send one command; collect events until its reply; return its result."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self._event(message)

    def _event(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description")))
                                        for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            self.errors.append(params["exceptionDetails"].get("text", "exception"))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(params["entry"]["text"])
        elif method == "Page.loadEventFired":
            self.loaded = True

    def open(self, url: str) -> None:
        self.loaded = False
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout
        while not self.loaded and time.monotonic() < deadline:
            self._event(json.loads(self.ws.recv()))
        if not self.loaded:
            raise TimeoutError(f"{url} did not load in {self.timeout} s")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
