"""Headless Chromium driven through the DevTools protocol, for the tests that open pages.

    with Browser() as page:            # None of this runs where no Chromium is installed
        page.open("file:///.../deck.html")
        page.evaluate("document.title"); png = page.screenshot(); page.errors
        page.wait_for("document.querySelector('#done')", timeout=30, what="the page's answer")
        page.click(".some-button")     # a real mouse click at the element's centre

One Chromium process per ``Browser`` (its own profile in a temporary folder;
on exit, or when it fails to start, its whole process tree is stopped); one
page, whose console errors and uncaught exceptions are collected in
``errors``. Only the protocol's JSON over a websocket (websocket-client,
which Jupyter's server already needs). Waits poll a state of the page,
bounded in time; none sleeps a fixed time.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

from minidist.util.processes import stop_process_tree

CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUMS) if p), None)


class Browser:
    def __init__(self, width: int = 1280, height: int = 720, timeout: float = 60.0) -> None:
        self.width, self.height, self.timeout = width, height, timeout
        self.errors: list[str] = []
        self._id = 0

    def __enter__(self) -> Browser:
        self.profile = tempfile.TemporaryDirectory()
        self.ws = None
        self.process = subprocess.Popen(
            [find_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
            env={**os.environ, "TMPDIR": self.profile.name})  # its singleton folder goes too
        try:
            self._connect()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _connect(self) -> None:
        import websocket

        port = self._port()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            page = next(t for t in json.load(reply) if t["type"] == "page")
        # no Origin header: Chromium 111 and later refuse a DevTools client that sends one
        # from an origin it was not told to allow (--remote-allow-origins)
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"],
                                              timeout=self.timeout, suppress_origin=True)
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(method)
        self.call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)

    def __exit__(self, *exc) -> None:
        if self.ws is not None:
            self.ws.close()
        stop_process_tree(self.process)  # the browser, its renderers, GPU and zygote processes
        self.process.stderr.close()
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

    def _send(self, method: str, params: dict) -> int:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        return self._id

    def call(self, method: str, **params) -> dict:
        """Send one command; collect events until its reply; return its result."""
        sent = self._send(method, params)
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == sent:
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
        elif method == "Page.javascriptDialogOpening":  # e.g. "leave the page?" when navigating
            self._send("Page.handleJavaScriptDialog", {"accept": True})
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

    def evaluate(self, expression: str, await_promise: bool = False):
        """The value of a JavaScript expression (of the promise it gives, if ``await_promise``)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=await_promise)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise RuntimeError(f"{expression}: "
                               f"{details.get('exception', {}).get('description', details)}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float, what: str):
        """Poll ``expression`` until it is truthy and return its value; TimeoutError after
        ``timeout`` seconds, naming ``what`` was awaited."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for {what}")
            time.sleep(0.1)

    def click(self, selector: str) -> None:
        """Press and release the left mouse button at the centre of the element ``selector``."""
        box = self.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                            ".getBoundingClientRect(); return [r.x + r.width / 2, "
                            "r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left",
                      clickCount=1)

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
