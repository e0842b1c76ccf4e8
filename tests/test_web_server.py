"""The live page's server in this process, fed synthetic frames the way the render process feeds it.

Fast and deterministic: no worker processes, no GL. ``test_web_plotter.py`` covers the real worker.
"""
import http.client
import io
import re
import socket
import threading
import time

import numpy as np
import pytest
from PIL import Image

from async_plotter.web.address import parse_http_address
from async_plotter.web.client import StreamError, open_stream, read_events, read_mjpeg
from async_plotter.sinks.http import HttpSink
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo
from tests.conftest import wait_for


class RecordingStatus:
    """Records the addresses a sink reports."""

    def __init__(self):
        self.urls = []

    def on_url(self, url):
        self.urls.append(url)


class FakeRenderLoop:
    """Feeds a sink like the render process: frame-capped, pixels only when a sink wants them."""

    def __init__(self, sink, fps=40, size=(96, 64), noise=False):
        self.sink = sink
        self.noise = noise  # incompressible frames: large JPEGs that fill socket buffers fast
        self.fps = fps
        self.size = size
        self.update = 0
        self.rendered = 0  # frames that were turned into pixels
        self.steps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def new_policy(self, iteration):
        self.update += 1
        self.iteration = iteration

    def _run(self):
        episode = EpisodeInfo(0, None, 0)
        self.sink.begin_episode(episode)
        index = 0
        while not self._stop.is_set():
            if episode.update != self.update:
                self.sink.end_episode(episode, EpisodeEnd(index, float(index), False))
                episode = EpisodeInfo(self.update, self.iteration, episode.episode + 1)
                self.sink.begin_episode(episode)
            frame = None
            if self.sink.wants_pixels():
                width, height = self.size
                frame = np.zeros((height, width, 3), np.uint8)
                frame[:, :, 0] = (index * 9) % 256  # every frame differs
                frame[:, :, 1] = 40 * (episode.update % 6)  # every policy looks different
                frame[height // 4:height // 2, width // 4:width // 2, 2] = 255
                if self.noise:
                    frame[:, :, 2] = np.random.randint(0, 256, (height, width), np.uint8)
                self.rendered += 1
            self.sink.add_frame(frame, episode)
            index += 1
            self.steps += 1
            time.sleep(1 / self.fps)

    def stop(self):
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def live():
    """A serving HttpSink on a free loopback port, fed at 40 frames/s; closed after the test."""
    made = []

    def make(http=0, token=None, fps=40, **frames):
        status = RecordingStatus()
        sink = HttpSink(parse_http_address(http, token), status.on_url, title="Fake-v0")
        loop = FakeRenderLoop(sink, fps=fps, **frames)
        made.append((sink, loop))
        return sink, loop, status

    yield make
    for sink, loop in made:
        loop.stop()
        sink.close()


def local_url(sink, path=""):
    return f"http://127.0.0.1:{sink.port}/{path}"


def get(url, headers=None):
    parts = re.match(r"http://([^:/]+):(\d+)(/.*)", url)
    connection = http.client.HTTPConnection(parts[1], int(parts[2]), timeout=5)
    try:
        connection.request("GET", parts[3], headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read(200000)
    finally:
        connection.close()


def frames_for(url, seconds, token=None):
    """Frames one client receives in ``seconds`` after its first one."""
    frames = []
    deadline = None
    for frame in read_mjpeg(url, token):
        frames.append(frame)
        deadline = deadline or time.monotonic() + seconds
        if time.monotonic() > deadline:
            break
    return frames


def test_reports_the_real_url_and_serves_a_self_contained_page(live):
    sink, _, status = live()
    assert status.urls == [f"http://127.0.0.1:{sink.port}/"]
    assert sink.port > 0
    code, headers, body = get(local_url(sink))
    assert code == 200 and headers["Content-Type"].startswith("text/html")
    page = body.decode()
    assert "<img" in page and "<canvas" in page and "EventSource" in page
    # Nothing from the internet: no external URLs, and the browser is told so.
    assert not re.search(r"(src|href)=[\"']?(https?:)?//", page)
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert headers["Referrer-Policy"] == "no-referrer"
    assert get(local_url(sink, "nothing-here"))[0] == 404


def test_streams_real_jpeg_frames_with_their_policy(live):
    sink, loop, _ = live()
    frames = frames_for(local_url(sink, "stream.mjpg"), 0.5)
    assert len(frames) >= 3
    image = Image.open(io.BytesIO(frames[-1].jpeg))
    assert image.format == "JPEG" and image.size == (96, 64)
    assert len({f.jpeg for f in frames}) > len(frames) // 2  # frames change
    assert {f.update for f in frames} == {0}
    loop.new_policy(iteration=7)
    for frame in read_mjpeg(local_url(sink, "stream.mjpg")):
        if frame.update == 1:
            break
    assert frame.iteration == 7 and int(frame.headers["x-step"]) <= 2


def test_the_pages_own_address_reads_its_stream_and_events(live):
    """read_mjpeg needed the stream's address, which only the page's HTML says; the address a
    user has is the page's (stats["http_url"], the log line)."""
    sink, _, status = live()
    page = status.urls[0]
    assert len(frames_for(page, 0.2)) >= 2
    assert len(frames_for(page + "index.html", 0.2)) >= 2
    events = read_events(page)
    try:
        assert next(events)[0] in ("status", "metrics")
    finally:
        events.close()


def test_nothing_is_rendered_or_encoded_without_a_stream(live):
    sink, loop, _ = live()
    time.sleep(0.3)
    assert not sink.wants_pixels() and loop.rendered == 0 and loop.steps > 5
    assert next(read_events(local_url(sink, "events")))  # the events stream is no viewer
    assert loop.rendered == 0
    frames = frames_for(local_url(sink, "stream.mjpg"), 0.3)
    assert frames and loop.rendered > 0
    wait_for(lambda: not sink.wants_pixels(), 5, message="the closed stream to be noticed")
    rendered = loop.rendered
    time.sleep(0.3)
    assert loop.rendered == rendered


def test_two_clients_watch_at_once(live):
    sink, loop, _ = live()
    results = {}

    def watch(name):
        results[name] = frames_for(local_url(sink, f"stream.mjpg?client={name}"), 1.0)

    threads = [threading.Thread(target=watch, args=(name, )) for name in ("a", "b")]
    steps = loop.steps
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    steps = loop.steps - steps  # frames rendered meanwhile (fewer than 40/s on a busy machine)
    for name in ("a", "b"):
        got = len(results[name])
        assert got >= 5 and got >= 0.6 * steps, f"client {name}: {got} of {steps} frames"
    # Encoded once, shared: both got the very same bytes for the frames they both saw.
    common = {f.jpeg for f in results["a"]} & {f.jpeg for f in results["b"]}
    assert len(common) >= 0.5 * min(len(results["a"]), len(results["b"]))


def test_a_client_that_stops_reading_does_not_slow_the_others(live):
    sink, loop, _ = live(fps=40, size=(320, 240), noise=True)
    # A browser that connects, then never reads: its socket buffers fill and its thread blocks.
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", sink.port))
    stalled.sendall(b"GET /stream.mjpg?client=stalled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    try:
        viewers = sink._feed._viewers  # pylint: disable=protected-access
        viewer = wait_for(lambda: next(iter(viewers.values()), None), 5, message="the viewer")
        sent = []

        def stuck():  # its thread stopped sending: blocked on the full socket
            sent.append(viewer.sent)
            return len(sent) > 5 and sent[-1] == sent[-6] > 0

        wait_for(stuck, 15, message="the stalled client's buffers to fill")
        steps = loop.steps
        frames = frames_for(local_url(sink, "stream.mjpg"), 1.0)
        steps = loop.steps - steps
        assert steps >= 10, f"the render loop was held up: {steps} frames in 1 s"
        assert len(frames) >= 0.6 * steps, f"the live client got {len(frames)} of {steps} frames"
        assert viewer.sent == sent[-1], "the stalled client took frames after all"
    finally:
        stalled.close()


def test_status_and_curve_arrive_as_events(live):
    sink, loop, _ = live()
    sink.on_metrics(0, {"AverageReturn": -5.0})
    sink.on_metrics(1, {"AverageReturn": 3.5, "KL": float("nan")})
    events = read_events(local_url(sink, "events"))
    name, data = next(events)
    assert name == "metrics" and not data["reset"]
    first, second = data["points"]
    assert first == {"iteration": 0, "values": {"AverageReturn": -5.0}}
    # NaN is not JSON: it travels as null, which the page skips.
    assert second == {"iteration": 1, "values": {"AverageReturn": 3.5, "KL": None}}
    name, status = next(events)
    assert name == "status" and status["title"] == "Fake-v0" and status["update"] == 0
    loop.new_policy(iteration=1)
    sink.on_metrics(2, {"AverageReturn": 9.0})
    seen_metrics = seen_update = False
    deadline = time.monotonic() + 10
    for name, data in events:
        if name == "metrics":
            seen_metrics = data["points"] == [{"iteration": 2, "values": {"AverageReturn": 9.0}}]
        elif data["update"] == 1:
            seen_update = data["iteration"] == 1 and data["render_fps"] > 0
        if (seen_metrics and seen_update) or time.monotonic() > deadline:
            break
    events.close()
    assert seen_metrics and seen_update


def test_the_server_names_the_column_the_page_draws(live):
    """The page draws the column the server chose (the rule every curve follows): the first
    one the trainer passed, and AverageReturn once it comes."""
    sink, _, _ = live()
    sink.on_metrics(0, {"loss": 1.0, "KL": 0.1})
    events = read_events(local_url(sink, "events"))
    name, data = next(events)
    assert name == "metrics" and data["shown"] == "loss"
    sink.on_metrics(1, {"KL": 0.2, "AverageReturn": 3.0})
    deadline = time.monotonic() + 10
    for name, data in events:
        if name == "metrics" or time.monotonic() > deadline:
            break
    events.close()
    assert name == "metrics" and data["shown"] == "AverageReturn"


@pytest.mark.parametrize("how", ["query", "bearer", "header"])
def test_token_is_required_off_loopback(live, how):
    token = "correct horse battery staple"
    sink, _, _ = live(http="0.0.0.0:0", token=token)
    url = local_url(sink)
    assert get(url)[0] == 401
    assert get(local_url(sink, "stream.mjpg"))[0] == 401
    assert get(local_url(sink, "events"))[0] == 401
    quoted = token.replace(" ", "+")
    wrong = {
        "query": (url + "?token=wrong", {}),
        "bearer": (url, {
            "Authorization": "Bearer wrong"
        }),
        "header": (url, {
            "X-Async-Plotter-Token": "wrong"
        }),
    }[how]
    right = {
        "query": (url + f"?token={quoted}", {}),
        "bearer": (url, {
            "Authorization": f"Bearer {token}"
        }),
        "header": (url, {
            "X-Async-Plotter-Token": token
        }),
    }[how]
    assert get(*wrong)[0] == 403
    assert get(*right)[0] == 200
    frames = []
    for frame in read_mjpeg(local_url(sink, "stream.mjpg"), token=token):
        frames.append(frame)
        if len(frames) == 3:
            break
    with pytest.raises(StreamError) as refused:
        open_stream(local_url(sink, "stream.mjpg?token=" + quoted[:-1]))
    assert refused.value.status == 403


def test_loopback_refuses_foreign_host_names(live):
    """A page elsewhere whose name resolves to 127.0.0.1 (DNS rebinding) cannot read the stream."""
    sink, _, _ = live()
    assert get(local_url(sink), {"Host": f"evil.example:{sink.port}"})[0] == 403
    assert get(local_url(sink), {"Host": f"localhost:{sink.port}"})[0] == 200
    assert get(local_url(sink), {"Host": "[::1]"})[0] == 200


def test_a_taken_port_is_a_clear_error(live):
    sink, _, _ = live()
    with pytest.raises(OSError, match=f"cannot serve the live page on 127.0.0.1:{sink.port}"):
        HttpSink(parse_http_address(sink.port, None))


def test_close_ends_streams_promptly(live):
    sink, loop, _ = live()
    stream = read_mjpeg(local_url(sink, "stream.mjpg"))
    next(stream)
    events = read_events(local_url(sink, "events"))
    next(events)
    started = time.monotonic()
    loop.stop()
    sink.close()
    assert time.monotonic() - started < 2.0
    assert sum(1 for _ in stream) < 100  # the generator ends: the server closed the stream
    assert sum(1 for _ in events) < 100
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", sink.port), timeout=1).close()


def test_a_server_closed_as_its_thread_starts_ends_it_without_an_error():
    """``replay`` logs its address, starts the server's thread and may be stopped (Ctrl-C) at
    once: close() before the thread's loop runs used to close the listener under it, and the
    thread died with ``Invalid file descriptor: -1``. Whatever the timing, the thread ends
    without an error, close() returns, and the port is free."""
    from async_plotter.view3d.replay import ReplayServer

    errors = []
    hook, threading.excepthook = threading.excepthook, lambda crash: errors.append(crash)
    try:
        for attempt in range(60):
            server = ReplayServer(parse_http_address(0, None), replay=None)
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            time.sleep((attempt % 3) * 0.002)  # at once, as the loop starts, once it runs
            server.close()
            thread.join(10)
            assert not thread.is_alive(), f"attempt {attempt}: the server's thread still runs"
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    finally:
        threading.excepthook = hook
    assert not errors, [repr(crash.exc_value) for crash in errors]
