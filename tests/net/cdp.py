# SPDX-License-Identifier: MIT
"""A small DevTools-protocol driver of headless Chromium for tests/net/web.sh.

Starts Debian's chromium headless with a private profile and a debugging
port, attaches to its page over the protocol's websocket (python3-websocket)
and offers: goto(url), js(expression) -> value, wait(expression, seconds)
and screenshot(path).  Everything is bounded in time; close() ends the
browser and its processes.
"""
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import websocket


def browser_path():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Browser:
    def __init__(self, width=1280, height=900, start_seconds=30):
        self.profile = tempfile.mkdtemp(prefix="dmarfs-cdp-")
        port = free_port()
        args = [browser_path(), "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=%d" % port,
                "--user-data-dir=" + self.profile, "--window-size=%d,%d" % (width, height),
                "about:blank"]
        self.log = open(os.path.join(self.profile, "chromium.log"), "w")
        # its own process group: close() ends the renderers too
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.ws = None
        self.next_id = 0
        deadline = time.monotonic() + start_seconds
        url = None
        while time.monotonic() < deadline and url is None:
            if self.proc.poll() is not None:
                raise RuntimeError("chromium exited (%d): %s" % (self.proc.returncode, self.tail()))
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/json" % port, timeout=2) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
                if pages:
                    url = pages[0]["webSocketDebuggerUrl"]
            except OSError:
                time.sleep(0.2)
        if url is None:
            raise RuntimeError("chromium's debugging port did not answer in %d s: %s" % (start_seconds, self.tail()))
        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.call("Page.enable")
        self.call("Runtime.enable")

    def tail(self):
        try:
            with open(os.path.join(self.profile, "chromium.log")) as f:
                return f.read()[-800:]
        except OSError:
            return ""

    def call(self, method, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})

    def goto(self, url, seconds=20):
        self.call("Page.navigate", url=url)
        here = url.split("#")[0]
        self.wait("document.readyState === 'complete' && location.href.split('#')[0] === %s" % json.dumps(here), seconds)

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError("%s: %s" % (expr, r["exceptionDetails"].get("text")))
        return r.get("result", {}).get("value")

    def wait(self, expr, seconds, every=0.1):
        """Poll expr until it is truthy; its value, or None after seconds."""
        deadline = time.monotonic() + seconds
        while True:
            v = self.js(expr)
            if v:
                return v
            if time.monotonic() >= deadline:
                return None
            time.sleep(every)

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            if self.ws:
                self.ws.close()
        except OSError:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)
