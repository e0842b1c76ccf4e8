"""End to end in a real browser: headless Chromium, driven over the DevTools protocol, watches the
live page of a real plot worker; the screenshot must show the env and the training curve.

Set ``ASYNC_PLOTTER_SCREENSHOT_DIR`` to keep the screenshot for a look.
"""
import base64
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

import numpy as np
import pytest
from PIL import Image

from async_plotter import Plotter
from tests.conftest import wait_for
from tests.policies import LinearPolicy

pytestmark = pytest.mark.slow

WIDTH, HEIGHT = 1280, 800


class DevTools:
    """The few DevTools-protocol calls this test needs, over one page's WebSocket."""

    def __init__(self, websocket_url):
        from websockets.sync.client import connect

        self._socket = connect(websocket_url, max_size=None, open_timeout=10)
        self._next_id = 0
        self.events = []

    def call(self, method, timeout=20.0, **params):
        self._next_id += 1
        self._socket.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self._socket.recv(timeout=max(deadline - time.monotonic(), 0.01)))
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate",
                           expression=expression,
                           returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self):
        self._socket.close()


@contextlib.contextmanager
def headless_chromium(flags, width=WIDTH, height=HEIGHT):
    """A headless Chromium started with ``flags``, remote debugging on a free port and a fresh
    profile; yields a DevTools session on its page (Runtime, Log and Page enabled, the viewport
    ``width`` x ``height``), and stops it whatever happens."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.fail("Chromium is not installed; `make test` installs it (Debian package chromium)")
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    process = subprocess.Popen([
        binary, *flags, "--no-sandbox", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--remote-debugging-port=0",
        f"--window-size={width},{height}", "about:blank"
    ],
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE,
                               text=True)
    session = None
    try:
        port = None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line and process.poll() is not None:
                break
            found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            port = int(found[1]) if found else None
        assert port, "Chromium did not start its DevTools server"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            pages = [t for t in json.load(answer) if t["type"] == "page"]
        session = DevTools(pages[0]["webSocketDebuggerUrl"])
        for domain in ("Runtime", "Log", "Page"):
            session.call(f"{domain}.enable")
        session.call("Emulation.setDeviceMetricsOverride",
                     width=width,
                     height=height,
                     deviceScaleFactor=1,
                     mobile=False)
        yield session
    finally:
        if session is not None:
            session.close()
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def chromium(tmp_path):
    """A headless Chromium without GPU; yields a DevTools page session."""
    with headless_chromium(("--headless", "--disable-gpu")) as session:
        yield session


def screenshot(session):
    data = session.call("Page.captureScreenshot", format="png")["data"]
    return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


def region(image, rect):
    left, top = int(rect["x"]), int(rect["y"])
    return np.asarray(image.crop((left, top, left + int(rect["width"]), top + int(rect["height"]))),
                      np.float32)


def test_the_page_plays_the_newest_policy_and_draws_the_curve(chromium, tmp_path):
    policy = LinearPolicy(8, 2)
    rng = np.random.default_rng(0)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=1000,
                 fps=20,
                 frame_size=(320, 240),
                 http=0,
                 window=False,
                 seed=0,
                 priority="low") as plotter:
        for iteration in range(6):
            policy.set_param_values(rng.normal(0, 2, size=16).astype(np.float32))
            plotter.update_plot(policy,
                                iteration=iteration,
                                metrics={"AverageReturn": 5.0 * iteration + rng.normal()})
        url = wait_for(lambda: plotter.stats.get("http_url"), 60, message="the page's URL")
        chromium.call("Page.navigate", url=url)

        def page_state():
            # Empty until the page has loaded (navigation returns before that, and the page is
            # parsed in pieces: 'view' may be there before the elements after it).
            return chromium.evaluate("""(() => {
                const text = (id) => document.getElementById(id).textContent;
                const view = document.getElementById('view');
                return view === null || document.readyState === 'loading' ? {} : {
                    width: view.naturalWidth, update: text('update'),
                    iteration: text('iteration'), fps: parseFloat(text('fps')) || 0,
                    latest: text('latest'), connection: text('conn'),
                    step: parseInt(text('episode').split('\u00b7')[1]) || 0,
                };
            })()""")

        state = wait_for(lambda: (lambda s: s.get("width") == 320 and s["latest"] and s)
                         (page_state()),
                         30,
                         message="the first frame and the curve on the page")
        assert state["connection"] == "live"
        assert state["latest"].startswith("AverageReturn")

        # A newer policy: the page says so (update and iteration) within a moment.
        sent = plotter.stats["updates_sent"] + 1
        plotter.update_plot(policy, iteration=42, metrics={"AverageReturn": 33.0})
        wait_for(lambda: page_state().get("update") == str(sent), 10, message="the new update")
        state = wait_for(lambda: (lambda s: s["fps"] > 0 and s)(page_state()),
                         10,
                         message="frames/s on the page")
        assert state["iteration"] == "42"

        # The picture really plays in the browser: sample it twice from a canvas.
        sample = """(() => {
            const img = document.getElementById('view');
            const c = document.createElement('canvas');
            c.width = img.naturalWidth; c.height = img.naturalHeight;
            const g = c.getContext('2d'); g.drawImage(img, 0, 0);
            return Array.from(g.getImageData(0, 0, c.width, c.height).data
                              .filter((_, i) => i % 97 === 0));
        })()"""
        first = np.array(chromium.evaluate(sample), np.float32)
        wait_for(lambda: np.abs(np.array(chromium.evaluate(sample)) - first).max() > 30,
                 10,
                 message="the picture in the browser to change")

        # The status keeps flowing while the episode plays.
        wait_for(lambda: page_state().get("step", 0) >= 5, 10, message="the step count to advance")
        image = screenshot(chromium)
        view = chromium.evaluate("document.getElementById('view').getBoundingClientRect().toJSON()")
        curve = chromium.evaluate(
            "document.getElementById('curve').getBoundingClientRect().toJSON()")
    assert not plotter.stats["alive"]

    path = tmp_path / "web_view.png"
    image.save(path)
    keep = os.environ.get("ASYNC_PLOTTER_SCREENSHOT_DIR")
    if keep:
        os.makedirs(keep, exist_ok=True)
        image.save(os.path.join(keep, "web_view.png"))
    assert image.size == (WIDTH, HEIGHT)
    picture = region(image, view)
    assert picture.shape[0] > 100 and picture.shape[1] > 100
    assert picture.std() > 15, "the live picture is blank in the screenshot"
    plot = region(image, curve)
    # The curve is drawn in the page's accent colour (#4fc3f7).
    accent = (np.abs(plot - np.array([0x4f, 0xc3, 0xf7], np.float32)).max(axis=2) < 40).sum()
    assert accent > 200, f"the training curve is missing ({accent} curve pixels)"
    # Nothing went wrong in the page: no script errors, nothing blocked or missing.
    problems = [
        e["params"] for e in chromium.events if e.get("method") == "Runtime.exceptionThrown" or (
            e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error"
            and "stream.mjpg" not in e["params"]["entry"].get("url", ""))
    ]
    assert not problems, problems
