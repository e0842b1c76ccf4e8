"""The live page served by a real plot worker: ``Plotter(..., http=0)``, read with HTTP clients."""
import io
import re
import socket
import threading
import time

import numpy as np
import psutil
import pytest
from PIL import Image

from async_plotter import Plotter
from async_plotter.web.client import StreamError, open_stream, read_events, read_mjpeg
from tests.conftest import wait_for, worker_children
from tests.policies import LinearPolicy

pytestmark = pytest.mark.slow

FPS = 20
SIZE = (160, 120)


@pytest.fixture(scope="module")
def watched():
    """One worker for the module (each start costs seconds): Swimmer served on a free port.

    Nice 10 rather than the default SCHED_IDLE: these tests check behaviour, not cost, and must
    not depend on the machine having idle CPU (``benchmarks/web_view.py`` measures the default).
    """
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=1000,
                      fps=FPS,
                      frame_size=SIZE,
                      http=0,
                      window=False,
                      seed=0,
                      priority="low")
    plotter.start()
    try:
        url = wait_for(lambda: plotter.stats.get("http_url"), 60, message="the page's URL")
        yield plotter, policy, url
    finally:
        plotter.close()
        wait_for(lambda: not worker_children(), 10, message="worker processes to exit")


def new_policy(plotter, policy, seed, iteration):
    """Publish random parameters (a swimmer that moves) with a curve point; returns when sent."""
    policy.set_param_values(np.random.default_rng(seed).normal(0, 2, size=16).astype(np.float32))
    sent = time.time()
    plotter.update_plot(policy, iteration=iteration, metrics={"AverageReturn": 10.0 * seed})
    return sent


def frames_for(url, seconds, token=None):
    """Frames one client receives in ``seconds`` after its first one."""
    frames, deadline = [], None
    for frame in read_mjpeg(url, token):
        frames.append(frame)
        deadline = deadline or time.monotonic() + seconds
        if time.monotonic() > deadline:
            break
    return frames


def decode(frame):
    return np.asarray(Image.open(io.BytesIO(frame.jpeg)).convert("RGB"), np.float32)


def test_the_real_url_is_reported_and_the_page_served(watched):
    plotter, _, url = watched
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url)
    assert int(url.rsplit(":", 1)[1].strip("/")) != 0
    connection, response = open_stream(url)
    page = response.read().decode()
    connection.close()
    assert "stream.mjpg" in page and "EventSource" in page


def test_frames_show_the_env_and_switch_to_each_new_policy_at_once(watched):
    plotter, policy, url = watched
    stream = read_mjpeg(url + "stream.mjpg")
    first = next(stream)
    image = decode(first)
    assert image.shape == (SIZE[1], SIZE[0], 3)
    assert image.std() > 10, "a blank picture"
    for number in (1, 2, 3):
        sent = new_policy(plotter, policy, seed=number, iteration=10 * number)
        expected_update = plotter.stats["updates_sent"]
        shown = []
        for frame in stream:
            if frame.update >= expected_update:
                shown.append(frame)
                if len(shown) == 12:
                    break
        assert shown[0].received - sent < 3.0, "the page kept showing the old policy"
        assert shown[0].iteration == 10 * number
        assert int(shown[0].headers["x-step"]) <= 2, "the new policy's episode did not restart"
        # The new policy moves the swimmer: the picture changes from frame to frame.
        changed = (np.abs(decode(shown[-1]) - decode(shown[0])).max(axis=2) > 40).sum()
        assert changed > 20, f"only {changed} pixels changed in {len(shown)} frames"
    stream.close()


def test_status_and_curve_events(watched):
    plotter, policy, url = watched
    new_policy(plotter, policy, seed=4, iteration=40)
    points, status = {}, None
    events = read_events(url + "events")
    for name, data in events:
        if name == "metrics":
            points.update({p["iteration"]: p["values"]["AverageReturn"] for p in data["points"]})
        elif data["iteration"] == 40:
            status = data
        if status and 40 in points:
            break
    events.close()
    assert points[40] == 40.0
    assert status["title"] == "Swimmer-v5" and status["update"] == plotter.stats["updates_sent"]


def test_nothing_is_rendered_while_no_page_watches(watched):
    plotter, _, url = watched
    render = psutil.Process(plotter.stats["worker_pids"]["render"])

    def cpu_seconds(during):
        before = sum(render.cpu_times()[:2])
        during()
        return sum(render.cpu_times()[:2]) - before

    # Earlier tests' streams are closed; give the server a moment to notice.
    time.sleep(0.5)
    idle = cpu_seconds(lambda: time.sleep(1.5))
    watching = cpu_seconds(lambda: frames_for(url + "stream.mjpg", 1.5))
    assert idle < 0.1, f"the render process used {idle:.2f} s of CPU with nobody watching"
    assert watching > 2 * idle


def test_two_clients_at_once_and_a_stalled_one_slows_neither(watched):
    plotter, policy, url = watched
    new_policy(plotter, policy, seed=5, iteration=50)
    port = int(url.rsplit(":", 1)[1].strip("/"))
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", port))
    stalled.sendall(b"GET /stream.mjpg?client=stalled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    try:
        # The server reports what each client received; wait until the stalled one takes nothing.
        deadline = time.monotonic() + 15
        sent = []  # (time, frames the server sent to the stalled client)
        events = read_events(url + "events?client=stalled")
        for name, data in events:
            if name == "status" and data.get("client_frames"):
                sent.append((time.monotonic(), data["client_frames"]))
                if sent[-1][0] - sent[0][0] > 1.0 and sent[-1][1] == sent[0][1]:
                    break  # its socket is full and its thread blocked
                if sent[-1][1] != sent[0][1]:
                    sent = sent[-1:]
            assert time.monotonic() < deadline, "the stalled client never stopped receiving"
        events.close()
        results = {}

        def watch(name):
            results[name] = frames_for(url + f"stream.mjpg?client={name}", 2.0)

        threads = [threading.Thread(target=watch, args=(name, )) for name in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        # The renderer's own rate over the same 2 s (what a client can get at most).
        status = next(data for name, data in read_events(url + "events") if name == "status")
    finally:
        stalled.close()
    rendered = status["render_fps"]
    assert status["viewers"] >= 3  # the stalled client is still connected
    for name in ("a", "b"):
        frames = results[name]
        assert len(frames) >= 5, f"client {name} got {len(frames)} frames"
        fps = (len(frames) - 1) / (frames[-1].received - frames[0].received)
        assert fps > 0.7 * rendered, f"client {name}: {fps:.1f} frames/s of {rendered} rendered"


def test_token_required_and_enforced_off_loopback():
    token = "test-token-1234"
    with Plotter("Swimmer-v5",
                 LinearPolicy(8, 2),
                 max_path_length=100,
                 fps=FPS,
                 frame_size=SIZE,
                 http="0.0.0.0:0",
                 http_token=token,
                 window=False,
                 priority="low") as plotter:
        url = wait_for(lambda: plotter.stats.get("http_url"), 60, message="the page's URL")
        assert token not in url
        port = int(url.rsplit(":", 1)[1].strip("/"))
        assert port != 0
        # Bound on every interface: reach it through this machine's own address too.
        local = f"http://127.0.0.1:{port}/"
        for path in ("", "stream.mjpg", "events"):
            with pytest.raises(StreamError) as missing:
                open_stream(local + path)
            assert missing.value.status == 401
            with pytest.raises(StreamError) as wrong:
                open_stream(local + path + "?token=test-token-1235")
            assert wrong.value.status == 403
        connection, response = open_stream(local + "?token=" + token)
        assert response.status == 200
        connection.close()
        frame = next(read_mjpeg(local + "stream.mjpg", token=token))
        assert decode(frame).std() > 10
        address = socket.gethostbyname(socket.gethostname())
        with pytest.raises(StreamError) as outside:
            open_stream(f"http://{address}:{port}/")
        assert outside.value.status == 401
