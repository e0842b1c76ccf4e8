"""The live page served by a real plot worker: ``Plotter(..., http=0)``, read with HTTP clients
(and, for the strip of recorded videos, headless Chromium)."""
import http.client
import io
import json
import os
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
from tests.test_web_browser import chromium, screenshot  # noqa: F401 - the fixture

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
        # The page serves before the scene: the render process is started once it drew with GL.
        wait_for(lambda: plotter.stats["gl_renderer"], 60, message="the render process's scene")
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


def first_status(url, query=""):
    """The page's first status event."""
    events = read_events(url + "events" + query)
    try:
        return next(data for name, data in events if name == "status")
    finally:
        events.close()


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


# Not alone: beside three busy processes a newer policy showed in 0.2-1.8 s at load 20-24 (main:
# 1.4-2.0 s at load 9-11, and 4 s once in CI, before the render process skipped stale chunks:
# test_live_latency.py); beside six, at load 19-25, in 0.4-4.0 s (main: 5-20 s)
def test_frames_show_the_env_and_switch_to_each_new_policy_at_once(watched):
    plotter, policy, url = watched
    stream = read_mjpeg(url + "stream.mjpg")
    try:
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
    finally:
        stream.close()  # a failure must not leave a viewer for the next test


@pytest.mark.alone
def test_the_live_page_plays_at_the_envs_rate_evenly_not_in_bursts(watched):
    # The rollout process sends a quarter of a second of steps at once (worker/shown_steps.py);
    # the render process must still show each when it is due: Swimmer's 25 steps/s under a
    # cap of 20 frames/s is every 2nd step at 12.5 frames/s.
    plotter, _, url = watched
    assert plotter.stats["video_fps"] == pytest.approx(12.5)
    frames = frames_for(url + "stream.mjpg", 4.0)
    gaps = np.diff([frame.received for frame in frames])
    period = 1.0 / 12.5
    assert 0.6 * 4.0 / period < len(gaps) < 1.4 * 4.0 / period, f"{len(gaps)} frames in 4 s"
    off = np.median(np.abs(gaps - period)) / period
    assert off < 0.25, f"frames came unevenly, {off:.0%} off their period: {np.round(gaps, 3)}"


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

    # Earlier tests' streams are closed (conftest's leftover check sees to it): wait until the
    # server has heard of it, and for a frame already on its way to be drawn.
    wait_for(lambda: first_status(url)["viewers"] == 0, 10, message="no stream open")
    time.sleep(1.0)
    # The episodes play on either way (frames); what is drawn is counted, not only timed: a
    # 160x120 frame costs ~2 ms, so 1.5 s of watching read as 4 clock ticks of CPU against 2
    # idle ones in CI.
    played, drawn = plotter.stats["frames"], plotter.stats["frames_drawn"]
    idle = cpu_seconds(lambda: time.sleep(1.5))
    wait_for(lambda: plotter.stats["frames"] > played, 10, message="the episodes to play on")
    assert plotter.stats["frames_drawn"] == drawn, "frames were drawn with nobody watching"
    assert idle < 0.1, f"the render process used {idle:.2f} s of CPU with nobody watching"
    received = frames_for(url + "stream.mjpg", 1.5)
    # The render process reports its counts every half second of playing.
    wait_for(lambda: plotter.stats["frames_drawn"] >= drawn + len(received) // 2,
             10,
             message="the frames sent to be counted as drawn")


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
    assert status["viewers"] >= 1  # the stalled client is still connected (a and b have left)
    for name in ("a", "b"):
        frames = results[name]
        assert len(frames) >= 5, f"client {name} got {len(frames)} frames"
        fps = (len(frames) - 1) / (frames[-1].received - frames[0].received)
        assert fps > 0.7 * rendered, f"client {name}: {fps:.1f} frames/s of {rendered} rendered"


def test_without_a_video_dir_the_videos_are_404_and_the_page_is_told(watched):
    _, _, url = watched
    assert get(url + "videos.json")[0] == 404
    assert get(url + "videos/iter_0000.mp4")[0] == 404
    status = next(data for name, data in read_events(url + "events") if name == "status")
    assert status["videos"] is False


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


# ------------------------------------------------------------------- the recorded videos

TOKEN = "videos-token-5678"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One worker that records a video of each update into a folder and serves them on its
    page, behind a token (on loopback: the token is still required). Yields once iteration 3's
    video is complete."""
    folder = tmp_path_factory.mktemp("videos")
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=40,
                      fps=50,
                      frame_size=SIZE,
                      video_dir=str(folder),
                      min_video_seconds=0,
                      http=0,
                      http_token=TOKEN,
                      window=False,
                      seed=0,
                      priority="low")
    plotter.start()
    try:
        url = wait_for(lambda: plotter.stats.get("http_url"), 60, message="the page's URL")
        new_policy(plotter, policy, seed=7, iteration=3)
        # Generous: on a loaded 2-core machine the worker's start and the encoder take a while.
        wait_for(lambda: (folder / "iter_0003.mp4").exists(), 120, message="iteration 3's video")
        yield plotter, folder, url
    finally:
        # Only this worker's processes: the module's other worker (``watched``) may still run.
        mine = own_processes(plotter)
        plotter.close()
        wait_for(lambda: not any(map(alive, mine)), 10, message="this worker's processes to exit")


def own_processes(plotter):
    """The plotter's worker processes and theirs (the video encoder)."""
    found = []
    for pid in (plotter.stats.get("worker_pids") or {}).values():
        try:
            process = psutil.Process(pid)
            found += [process] + process.children(recursive=True)
        except (psutil.Error, TypeError):
            continue  # gone already, or not started
    return found


def alive(process):
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def get(url, headers=None):
    """``(status, headers with lower-case names, body)`` of a GET; the path is sent as written
    (``..`` included), which a browser would have normalised away."""
    parts = re.fullmatch(r"http://([^:/]+):(\d+)(/.*)", url)
    connection = http.client.HTTPConnection(parts[1], int(parts[2]), timeout=20)
    try:
        connection.request("GET", parts[3], headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_recorded_videos_are_listed_and_served_with_byte_ranges(recorded):
    plotter, folder, url = recorded
    # Files that are not the sink's finished videos are never listed or served.
    (folder / "notes.txt").write_text("not a video")
    (folder / ".partial_iter_0098.mp4").write_bytes(b"half a video")
    wait_for(lambda: (folder / "iter_0003.npz").exists(), 30, message="its state recording")
    status, headers, body = get(url + "videos.json?token=" + TOKEN)
    assert status == 200 and headers["content-type"] == "application/json"
    videos = json.loads(body)["videos"]
    files = [video["file"] for video in videos]
    assert "iter_0003.mp4" in files and "notes.txt" not in files, files
    assert all(re.fullmatch(r"(iter|update)_\d{4}\.mp4", name) for name in files), files
    numbers = [video["number"] for video in videos if video["kind"] == "iter"]
    assert numbers == sorted(numbers) and files[0].startswith("iter_")
    data = (folder / "iter_0003.mp4").read_bytes()
    assert {
        "file": "iter_0003.mp4",
        "kind": "iter",
        "number": 3,
        "size": len(data),
        "recording": "iter_0003.npz"  # beside it
    } in videos
    assert len(data) > 100

    status, headers, body = get(url + "videos/iter_0003.mp4?token=" + TOKEN)
    assert status == 200 and body == data
    assert headers["content-type"] == "video/mp4" and headers["accept-ranges"] == "bytes"
    assert "media-src 'self'" in get(url + "?token=" + TOKEN)[1]["content-security-policy"]
    # Browsers seek with ranges; the token may come as a header too.
    status, headers, body = get(url + "videos/iter_0003.mp4", {
        "Range": "bytes=0-99",
        "Authorization": "Bearer " + TOKEN
    })
    assert status == 206 and body == data[:100]
    assert headers["content-range"] == f"bytes 0-99/{len(data)}"

    for path in ("videos/../../etc/passwd", "videos/..%2F..%2Fetc%2Fpasswd", "videos/notes.txt",
                 "videos/.partial_iter_0098.mp4", "videos/iter_0099.mp4", "videos/iter_3.mp4",
                 "videos/iter_0003.mp4/x", "videos/", "../videos.json/.."):
        assert get(url + path + "?token=" + TOKEN)[0] == 404, path
    # Behind the same token as the rest of the page.
    for path in ("videos.json", "videos/iter_0003.mp4"):
        assert get(url + path)[0] == 401, path
        assert get(url + path + "?token=" + TOKEN + "x")[0] == 403, path
    assert plotter.stats["alive"]


def test_the_curve_gets_the_history_returns_as_a_second_line(recorded):
    """With a video folder the worker records every policy it takes once more (its history):
    each recording's return reaches the page's curve as ``ShownReturn`` beside the training
    metrics, at its policy's iteration, and the column drawn stays the trainer's."""
    plotter, _, url = recorded
    wait_for(lambda: any(entry["iteration"] == 3 for entry in plotter.stats["history"]),
             60,
             message="iteration 3's history")
    expected = next(e["return"] for e in plotter.stats["history"] if e["iteration"] == 3)
    shown, column = {}, None
    events = read_events(url + "events", TOKEN)
    try:
        for name, data in events:
            if name == "metrics":
                column = data.get("shown")
                shown.update({
                    p["iteration"]: p["values"]["ShownReturn"]
                    for p in data["points"] if "ShownReturn" in p["values"]
                })
                if 3 in shown:
                    break
    finally:
        events.close()
    assert shown[3] == pytest.approx(expected)
    assert column == "AverageReturn"


def test_the_page_strip_plays_a_video_and_goes_back_live(recorded, chromium):  # noqa: F811
    plotter, folder, url = recorded
    chromium.call("Page.navigate", url=url + "?token=" + TOKEN)
    button_selector = '#history-strip button[data-file="iter_0003.mp4"]'

    def strip():
        return chromium.evaluate(f"""(() => {{
            const history = document.getElementById('history');
            const button = document.querySelector('{button_selector}');
            return history && !history.hidden && button ? {{
                text: button.textContent, title: button.title,
                buttons: document.querySelectorAll('#history-strip button').length,
            }} : null;
        }})()""")

    shown = wait_for(strip, 30, message="the history strip with iteration 3's button")
    assert shown["text"] == "3" and shown["title"].startswith("iteration 3")
    chromium.evaluate(f"document.querySelector('{button_selector}').click()")

    def replaying():
        return chromium.evaluate(f"""(() => {{
            const video = document.getElementById('replay');
            const ready = !video.hidden && video.readyState >= 2 && video.videoWidth > 0
                && video.currentTime > 0 && !video.error;
            return ready ? {{
                width: video.videoWidth, src: video.src, controls: video.controls,
                label: document.getElementById('replay-label').textContent,
                live_hidden: document.getElementById('view').hidden,
                live_src: document.getElementById('view').getAttribute('src'),
                pressed: document.querySelector('{button_selector}').getAttribute('aria-pressed'),
                back: !document.getElementById('history-live').hidden,
            }} : null;
        }})()""")

    playing = wait_for(replaying, 30, message="iteration 3's video to play in the page")
    assert playing["width"] == SIZE[0] and playing["controls"]
    assert "/videos/iter_0003.mp4?" in playing["src"] and "token=" + TOKEN in playing["src"]
    assert playing["label"] == "recorded: iteration 3" and playing["pressed"] == "true"
    # Instead of the live picture, whose stream is closed meanwhile (nothing rendered for it).
    assert playing["live_hidden"] and playing["live_src"] is None and playing["back"]
    keep = os.environ.get("ASYNC_PLOTTER_SCREENSHOT_DIR")
    if keep:
        os.makedirs(keep, exist_ok=True)
        screenshot(chromium).save(os.path.join(keep, "web_history.png"))

    chromium.evaluate("document.getElementById('history-live').click()")
    wait_for(lambda: chromium.evaluate("""(() => {
        const view = document.getElementById('view');
        return !view.hidden && view.naturalWidth > 0 && !view.classList.contains('empty')
            && document.getElementById('replay').hidden;
    })()"""),
             30,
             message="the live picture back")
    # Nothing went wrong in the page: no script errors, nothing blocked or missing.
    problems = [
        e["params"] for e in chromium.events if e.get("method") == "Runtime.exceptionThrown" or (
            e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error"
            and "stream.mjpg" not in e["params"]["entry"].get("url", ""))
    ]
    assert not problems, problems
