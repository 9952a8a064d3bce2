"""Shared helpers of the web tests (Tests/Web/test_*.py): start the built pigeon-server binary on a free loopback
port, wait until it is ready, call its HTTP API, serve a folder from another origin, and launch the system's Chromium
through Playwright.

Each test file is a standalone script run by scripts/web-tests.sh (`python3 Tests/Web/test_x.py`); it exits non-zero
with a message when a check fails. The environment gives:
- PIGEON_SERVER_BINARY: the pigeon-server to start (default: .build/debug/pigeon-server);
- PIGEON_WEB_ARTEFACTS: the folder for screenshots and logs (default: .build/web-artefacts; not committed);
- PIGEON_CHROMIUM: the browser executable (default: /usr/bin/chromium).
"""

import contextlib
import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("PIGEON_SERVER_BINARY", os.path.join(ROOT, ".build", "debug", "pigeon-server"))
ARTEFACTS = os.environ.get("PIGEON_WEB_ARTEFACTS", os.path.join(ROOT, ".build", "web-artefacts"))
CHROMIUM = os.environ.get("PIGEON_CHROMIUM", "/usr/bin/chromium")


class Failure(Exception):
    """A check that did not hold."""


def check(condition, message):
    if not condition:
        raise Failure(message)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, condition, timeout=20.0, every=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - polled until the deadline
            pass
        time.sleep(every)
    if condition():
        return
    raise Failure(f"timed out after {timeout} s waiting until {what}")


class Answer:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body.decode("utf-8"))


def request(method, url, body=None, token=None, headers=None, timeout=10.0):
    """One HTTP request; answers of any status are returned, not raised."""
    data = None
    all_headers = dict(headers or {})
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        all_headers.setdefault("Content-Type", "application/json")
    if token:
        all_headers["Authorization"] = "Bearer " + token
    req = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return Answer(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, dict(error.headers), error.read())


class Server:
    """The pigeon-server binary on a free loopback port, embedded store, in a temporary data directory."""

    def __init__(self, *arguments, name="server"):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.directory = tempfile.mkdtemp(prefix="pigeon-web-")
        os.makedirs(ARTEFACTS, exist_ok=True)
        self.log_path = os.path.join(ARTEFACTS, f"{name}.log")
        self.log = open(self.log_path, "wb")
        self.command = [BINARY, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--data-dir", self.directory,
                        "--log-level", "warning", *arguments]
        self._start()

    def _start(self):
        self.process = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_until("pigeon-server is ready", lambda: self.process.poll() is None
                       and request("GET", self.base + "/readyz", timeout=2).status == 200, timeout=30)
        except Failure:
            self.stop()
            raise Failure("pigeon-server did not become ready: " + open(self.log_path, encoding="utf-8", errors="replace").read())

    def restart(self):
        """Stops the server gracefully (SIGTERM: its streams end) and starts it again on the same port with the same
        data directory: what a client sees as a dropped connection that it resumes by cursor."""
        self.halt()
        self.resume()

    def halt(self):
        """Stops the server gracefully and keeps its port and data directory for `resume()`: the server is down until then."""
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def resume(self):
        """Starts the halted server again on the same port with the same data directory."""
        self._start()

    def url(self, path):
        return self.base + path

    def register(self, user_id, device_name=None):
        """Registers a device of `user_id` (open registration); returns the answer's JSON (token, deviceId, ...)."""
        body = {"userId": user_id}
        if device_name:
            body["deviceName"] = device_name
        answer = request("POST", self.url("/v1/devices"), body)
        check(answer.status in (200, 201), f"register {user_id}: {answer.status} {answer.body!r}")
        return answer.json()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


@contextlib.contextmanager
def static_origin(directory):
    """Serves `directory` on another loopback port (another origin than the API); yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=directory)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def browser():
    """A headless Chromium (the system's, through Playwright); yields the Playwright browser."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield instance
        finally:
            instance.close()


def screenshot(page, name):
    """Keeps a screenshot of `page` as a test artefact (ARTEFACTS/name.png)."""
    os.makedirs(ARTEFACTS, exist_ok=True)
    path = os.path.join(ARTEFACTS, name + ".png")
    page.screenshot(path=path, full_page=True)
    print(f"screenshot: {path}")
    return path


def main(tests):
    """Runs `tests` (callables) in order, printing each outcome; exits 1 on the first failure."""
    for test in tests:
        started = time.monotonic()
        try:
            test()
        except Exception as error:  # noqa: BLE001 - reported, then the script fails
            print(f"FAIL {test.__name__} after {time.monotonic() - started:.1f} s: {error}", flush=True)
            sys.exit(1)
        print(f"ok   {test.__name__} ({time.monotonic() - started:.1f} s)", flush=True)
