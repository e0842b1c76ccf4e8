"""The live episode over Redis (``channel/redis/live.py``): a publishing trainer's worker plays
its newest policy for viewers elsewhere only while one is subscribed, and ``async-plotter view``
draws it (the default where the trainer sends states; ``--states`` forces them): mp4s, the MJPEG
and 3D pages, with TensorFlow unimportable. Against a real redis-server, real processes."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest
import redis

from async_plotter import Plotter
from async_plotter.channel.redis.live import decode, encode, live_channel, open_live
from async_plotter.channel.redis.signing import PayloadRejected, Verifier
from async_plotter.channel.redis.sealed import seal
from async_plotter.render.recording import read_recording
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo, StateChunk, StreamKind
from tests.clients import view3d_shows, view3d_socket
from tests.conftest import default_sigint, wait_for
from tests.policies import LinearPolicy
from tests.redis_server import redis_server  # noqa: F401
from tests.test_state_recordings import frames_of
from tests.test_web_browser import chromium  # noqa: F401 - the fixture

SECRET = b"the live states travel signed 01"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.timeout(300)


def _check_published_history(url, plotter, lines):
    """serve's 3D history of experiment "served": offered on its row, its page and socket
    served, and every iteration the trainer recorded on its curve (a click on it lands)."""
    origin = url.rstrip("/")

    def offered():  # by /experiments.json, with no page open: a script's call starts the list
        with urllib.request.urlopen(url + "experiments.json", timeout=30) as answer:
            rows = {row["name"]: row for row in json.load(answer)["experiments"]}
        return "served" in rows and rows["served"]["history"] is True

    wait_for(offered, 30, message="the history offered on the experiment's row")
    wait_for(lambda: plotter.stats["history"], 60, message="a history recording")
    page = url + "x/served/history/"
    with urllib.request.urlopen(urllib.request.Request(page, headers={"Origin": origin}),
                                timeout=60) as answer:
        assert b'<div id="root">' in answer.read(), "".join(lines)
    with view3d_socket(page, origin=origin, timeout=30) as socket:
        assert socket.recv(timeout=30)

    def click(x):
        request = urllib.request.Request(f"{page}pick?x={x}",
                                         method="POST",
                                         headers={"Origin": origin})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status
        except urllib.error.HTTPError as error:
            return error.code

    recorded = [
        entry["iteration"] for entry in plotter.stats["history"] if entry["iteration"] is not None
    ]
    for x in recorded:  # fetched within the fetcher's poll of their publication
        wait_for(lambda: click(x) == 204, 30, message=f"iteration {x} on the history's curve")
    assert click(10_000) == 404

    # The experiment's card: the training metric, and every recorded policy's return dashed
    # beside it (the returns the trainer publishes).
    def card():
        with urllib.request.urlopen(url + "experiments.json", timeout=30) as answer:
            curve = {
                row["name"]: row
                for row in json.load(answer)["experiments"]
            }["served"]["curve"]
        expected = sorted([-1 if e["iteration"] is None else e["iteration"], e["return"]]
                          for e in plotter.stats["history"])
        return curve["metric"] == "AverageReturn" and curve["shown"] == expected and curve

    assert wait_for(card, 30, message="the recorded returns on the card")["shown"]
    request = urllib.request.Request(page, headers={"Origin": "http://evil.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403


def _interrupt(process, lines):
    """Ctrl-C a command: it ends within a minute with code 0."""
    process.send_signal(signal.SIGINT)
    assert process.wait(60) == 0, "".join(lines)


def _end(process, plotter):
    """Whatever happened: the command killed if it still runs, the trainer closed."""
    if process.poll() is None:
        process.kill()
        process.wait()
    plotter.close()


def _trainer(url, experiment, policy, **outputs):
    """A publishing InvertedPendulum trainer (episodes of 50 steps: 2 s), started."""
    return Plotter("InvertedPendulum-v5",
                   policy,
                   max_path_length=50,
                   window=False,
                   channel=url,
                   experiment=experiment,
                   secret=SECRET,
                   priority="normal",
                   **outputs).start()


def _fill(iteration):
    return 0.1 * (iteration % 5) - 0.2


def _blocked_imports(folder):
    """A folder that, first on ``PYTHONPATH``, makes TensorFlow and Keras unimportable."""
    for name in ("tensorflow", "keras"):
        package = folder / name
        package.mkdir(parents=True)
        (package /
         "__init__.py").write_text(f"raise ImportError('{name} is not installed on this viewer')\n")
    return str(folder)


def _command_without_tensorflow(tmp_path, *arguments):
    """``async-plotter ARGUMENTS`` with the secret, TensorFlow and Keras unimportable, stopped
    with SIGINT; and the list its output lines go into as they come."""
    environment = dict(os.environ,
                       ASYNC_PLOTTER_SECRET=SECRET.decode(),
                       PYTHONPATH=_blocked_imports(tmp_path / "blocked") + os.pathsep + ROOT)
    process = subprocess.Popen([sys.executable, "-m", "async_plotter.cli", *arguments],
                               env=environment,
                               cwd=str(tmp_path),
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT,
                               text=True,
                               start_new_session=True,
                               preexec_fn=default_sigint)
    lines = []
    threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True).start()
    return process, lines


def _live_publishes(client, experiment, seconds):
    """The ``PUBLISH`` commands to ``experiment``'s live channel the server ran in ``seconds``."""
    seen = []
    channel = live_channel(experiment)

    def watch():
        with client.monitor() as monitor:
            deadline = time.monotonic() + seconds
            for command in monitor.listen():
                if channel in command["command"] and command["command"].startswith("PUBLISH"):
                    seen.append(command["time"])
                if time.monotonic() > deadline:
                    return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, seen


def test_a_publishing_trainer_plays_live_only_while_watched_and_a_viewer_without_tensorflow_draws_it(
        redis_server, tmp_path):  # noqa: F811
    policy = LinearPolicy(4, 1)
    plotter = _trainer(redis_server.url, "live", policy)
    client = redis.Redis.from_url(redis_server.url)
    viewer = None
    iteration = 0

    def train(seconds):
        nonlocal iteration
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            policy.fill(_fill(iteration))
            plotter.update_plot(policy, iteration=iteration)
            iteration += 1
            time.sleep(0.5)

    videos = tmp_path / "videos"
    try:
        # Nobody watches: no episode is run, nothing is published live (the history still is).
        monitor, published = _live_publishes(client, "live", 4.0)
        train(5.0)
        monitor.join(10)
        assert published == [] and plotter.stats["episodes"] == 0, plotter.stats
        assert plotter.stats["history"], "the history records while nobody watches"

        # No --states: the trainer says it sends them, and that is what view draws.
        viewer, lines = _command_without_tensorflow(tmp_path, "view",
                                                    redis_server.url, "-e", "live", "--video-dir",
                                                    str(videos), "--http", "0", "--view", "3d",
                                                    "--tensorboard-dir", str(tmp_path / "tb"))

        def drawn():
            return sorted(name for name in os.listdir(videos)
                          if name.endswith(".mp4")) if videos.exists() else []

        deadline = time.monotonic() + 120
        while len(drawn()) < 3 and time.monotonic() < deadline and viewer.poll() is None:
            train(1.0)
        assert len(drawn()) >= 3, "".join(lines)
        assert plotter.stats["episodes"] > 0
        url = next(line.split(" at ")[-1].strip() for line in lines if "live view at" in line)
        with urllib.request.urlopen(urllib.parse.urljoin(url, "stream.mjpg"), timeout=30) as stream:
            assert b"\xff\xd8" in stream.read(65536)  # a JPEG frame of the live episode
        # The 3D page: the browser is sent the poses, and the panel names the update shown.
        shown = []
        with view3d_socket(url, origin=url.rstrip("/"), timeout=30) as socket:
            deadline = time.monotonic() + 60
            while not shown and time.monotonic() < deadline:
                train(0.5)
                try:
                    while not shown:
                        shown += [u for u in [view3d_shows(socket.recv(timeout=1))[1]] if u]
                except TimeoutError:
                    pass
        assert shown and 0 < shown[0] <= iteration, shown
        # The viewer's processes map no TensorFlow library (it could not import it anyway).
        for pid in [viewer.pid] + _children(viewer.pid):
            with open(f"/proc/{pid}/maps") as maps:
                assert "tensorflow" not in maps.read(), pid
        viewer.send_signal(signal.SIGINT)
        assert viewer.wait(60) == 0, "".join(lines)
        # TensorBoard's rollouts too, drawn from the states (read back by TensorBoard's reader).
        from tests.test_tensorboard import accumulate

        board = accumulate(tmp_path / "tb")
        # tagged with the env the trainer's scene names, not the experiment's name
        assert "rollout/InvertedPendulum-v5" in board.Tags()["images"], board.Tags()
        rollouts = board.Images("rollout/InvertedPendulum-v5")
        assert rollouts and {image.step for image in rollouts} <= set(range(iteration)), rollouts

        # What was shown is what trained: every recorded action is the policy of its iteration
        # applied to the state before it.
        name = drawn()[-1]
        recording = read_recording(str(videos / name.replace(".mp4", ".npz")))
        weight = _fill(recording.meta["iteration"])
        observations = recording.states[:-1, 1:5]  # qpos and qvel: InvertedPendulum's observation
        expected = np.tanh(observations.sum(axis=1, keepdims=True) * weight)
        assert np.allclose(recording.actions[1:], expected, atol=1e-5), name
        # The mp4 is what async-plotter render draws of that recording.
        out = tmp_path / "rendered"
        result = subprocess.run([
            sys.executable, "-m", "async_plotter.cli", "render",
            str(videos / name.replace(".mp4", ".npz")), "--out",
            str(out)
        ],
                                capture_output=True,
                                text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr
        shown, again = frames_of(str(videos / name)), frames_of(str(out / name))
        assert len(shown) == len(again) and len(shown) > 1
        assert max(np.abs(a.astype(int) - b.astype(int)).mean() for a, b in zip(shown, again)) < 2

        # Unwatched again: nothing more is published from the trainer's next count of the
        # watchers (once a second), not even the rest of the episode under way, which ends
        # (at most 50 steps at 25 a second); no other begins.
        wait_for(lambda: client.pubsub_numsub(live_channel("live"))[0][1] == 0, 10)
        time.sleep(1.5)
        monitor, published = _live_publishes(client, "live", 5.0)
        time.sleep(1.5)
        episodes = plotter.stats["episodes"]
        train(3.5)
        monitor.join(10)
        assert published == [] and plotter.stats["episodes"] == episodes
    finally:
        if viewer is not None and viewer.poll() is None:
            viewer.kill()
            viewer.wait()
        plotter.close()
        client.close()


def _children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return found + [grandchild for child in found for grandchild in _children(child)]


def test_a_live_message_that_fails_its_check_is_refused_by_name_and_nothing_is_run(
        redis_server):  # noqa: F811
    chunk = StateChunk(
        np.arange(12.0).reshape(3, 4), np.zeros((3, 1), np.float32), np.ones(3), True)
    run = (5, 1000)
    value = seal(SECRET, b"live", "checked", run, 2, 1, encode(StreamKind.STATES, chunk))
    sealed, kind, body = open_live(value, Verifier(SECRET), "checked")
    assert (sealed.number, sealed.iteration, kind) == (2, 1, StreamKind.STATES)
    assert np.array_equal(body.states, chunk.states) and body.starts_episode
    for message in ((StreamKind.BEGIN, EpisodeInfo(2, 1,
                                                   7)), (StreamKind.END, EpisodeEnd(3, 1.5, True))):
        assert decode(encode(*message)) == message
    # Another experiment's, another secret's, an altered and an unsigned value: refused.
    with pytest.raises(PayloadRejected):
        open_live(value, Verifier(SECRET), "other")
    with pytest.raises(PayloadRejected):
        open_live(value, Verifier(b"another secret altogether 012345"), "checked")
    altered = bytearray(value)
    altered[60] ^= 1
    with pytest.raises(PayloadRejected):
        open_live(bytes(altered), Verifier(SECRET), "checked")
    unsigned = seal(None, b"live", "checked", run, 2, 1, encode(StreamKind.STATES, chunk))
    with pytest.raises(PayloadRejected):
        open_live(unsigned, Verifier(SECRET), "checked")
    # A recording sealed by the same secret cannot pass for a live message.
    with pytest.raises(PayloadRejected):
        open_live(seal(SECRET, b"recording", "checked", run, 2, 1, b"x"), Verifier(SECRET),
                  "checked")
    # Forged heads and lengths are named, not read past.
    for forged in (b"\xff\xff\xff\x7f{}", encode(StreamKind.STATES,
                                                 chunk)[:-8], b"\x0b\x00\x00\x00{\"kind\":1}"):
        with pytest.raises(PayloadRejected, match="malformed"):
            decode(forged)


def test_a_trainer_with_videos_here_keeps_them_and_plays_live_for_a_viewer_elsewhere(
        redis_server, tmp_path):  # noqa: F811
    """``channel=`` with a ``video_dir``: every update's video is made here as before, nothing
    goes out live while nobody watches, and a subscriber gets whole live episodes of the newest
    policies meanwhile, verified."""
    policy = LinearPolicy(4, 1)
    videos = tmp_path / "videos"
    plotter = _trainer(redis_server.url, "both", policy, video_dir=str(videos), min_video_seconds=0)
    client = redis.Redis.from_url(redis_server.url)
    iteration = 0

    def train_until_video():
        nonlocal iteration
        policy.fill(_fill(iteration))
        plotter.update_plot(policy, iteration=iteration)
        name = f"iter_{iteration:04d}.mp4"
        wait_for(lambda: (videos / name).exists(), 60, message=name)
        iteration += 1

    try:
        monitor, published = _live_publishes(client, "both", 3.0)
        for _ in range(3):
            train_until_video()
        monitor.join(10)
        assert published == [], "nothing live while nobody watches"

        pubsub = client.pubsub()
        pubsub.subscribe(live_channel("both"))
        kinds, updates = [], set()
        deadline = time.monotonic() + 60
        while ((kinds.count(StreamKind.END) < 3 or len(updates) < 2)
               and time.monotonic() < deadline):
            train_until_video()  # videos here go on while a viewer watches
            for _ in range(40):
                message = pubsub.get_message(timeout=0.05)
                if message and message["type"] == "message":
                    sealed, kind, body = open_live(message["data"], Verifier(SECRET), "both")
                    kinds.append(kind)
                    if kind is StreamKind.BEGIN:
                        updates.add(body.update)
        assert kinds.count(StreamKind.END) >= 3 and StreamKind.STATES in kinds, kinds
        assert kinds[0] is StreamKind.SCENE and len(updates) >= 2, (kinds[:5], updates)
        pubsub.close()
        wait_for(lambda: client.pubsub_numsub(live_channel("both"))[0][1] == 0, 10)
        time.sleep(3.0)  # the live episode under way ends (at most 50 steps at 25 a second)
        monitor, published = _live_publishes(client, "both", 3.0)
        train_until_video()
        monitor.join(10)
        assert published == []
    finally:
        plotter.close()
        client.close()
    assert plotter.stats["videos"] >= iteration


@pytest.mark.slow
def test_view_draws_a_trainers_live_states_in_a_window_without_tensorflow(
        redis_server, tmp_path, xvfb):  # noqa: F811
    """``view --window`` from states: MuJoCo's viewer on a real X server (Xvfb), TensorFlow and
    Keras unimportable in the viewer."""
    from tests.test_window import window_names

    policy = LinearPolicy(4, 1)
    plotter = _trainer(redis_server.url, "windowed", policy)
    viewer, lines = _command_without_tensorflow(tmp_path, "view", redis_server.url, "-e",
                                                "windowed", "--window")
    try:
        deadline = time.monotonic() + 90
        iteration = 0
        while ("MuJoCo" not in window_names() and time.monotonic() < deadline
               and viewer.poll() is None):
            policy.fill(_fill(iteration))
            plotter.update_plot(policy, iteration=iteration)
            iteration += 1
            time.sleep(0.5)
        assert "MuJoCo" in window_names(), "".join(lines)
        assert any("drawing its live states" in line for line in lines), "".join(lines)
        _interrupt(viewer, lines)
    finally:
        _end(viewer, plotter)


def test_serve_draws_a_trainers_live_states_and_history_without_tensorflow(
        redis_server, tmp_path, chromium):  # noqa: F811
    """``async-plotter serve``'s live view of a trainer that sends states is a pure renderer of
    them: with TensorFlow unimportable in serve, an experiment's stream shows the episodes, and
    its card's "history 3D" opens every policy the trainer recorded, fetched from Redis."""
    policy = LinearPolicy(4, 1)
    plotter = _trainer(redis_server.url, "served", policy)
    serve, lines = _command_without_tensorflow(tmp_path, "serve", redis_server.url, "--http", "0")
    try:
        wait_for(lambda: any(" at http://" in line for line in lines), 60, message="serve's page")
        url = next(line.split(" at ")[-1].strip() for line in lines if " at http://" in line)
        frames = b""
        deadline = time.monotonic() + 90
        iteration = 0
        while frames.count(b"\xff\xd9") < 10 and time.monotonic() < deadline:
            policy.fill(0.1 * iteration)
            plotter.update_plot(policy, iteration=iteration, metrics={"AverageReturn": 1.0})
            iteration += 1
            try:
                with urllib.request.urlopen(url + "x/served/stream.mjpg", timeout=10) as stream:
                    frames += stream.read(200_000)
            except OSError:
                time.sleep(1.0)  # the live worker is starting
        assert frames.count(b"\xff\xd9") >= 10, "".join(lines)
        assert any("drawing its live states" in line for line in lines), "".join(lines)
        for _ in range(3):  # a few policies more, each recorded: the card's curves have lines
            policy.fill(0.1 * iteration)
            plotter.update_plot(policy, iteration=iteration, metrics={"AverageReturn": 1.0})
            wait_for(lambda: any(e["iteration"] == iteration for e in plotter.stats["history"]),
                     60,
                     message=f"iteration {iteration}'s history")
            iteration += 1
        _check_published_history(url, plotter, lines)
        # In a browser, the experiment's card links to it.
        chromium.call("Page.navigate", url=url)
        anchor = "document.querySelector('[data-name=\"served\"] .history3d')"
        link = wait_for(
            lambda: chromium.evaluate(f"{anchor} && !{anchor}.hidden ? {anchor}.href : null"),
            30,
            message="the card's history 3D link")
        assert link.startswith(url + "x/served/history/?"), link
        # Its sparkline draws the recorded returns dashed, in the page's "good" green.
        green = ("(() => { const c = document.querySelector('[data-name=\"served\"] .spark');"
                 " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                 " let n = 0; for (let i = 0; i < d.length; i += 4) {"
                 " if (d[i + 3] > 100 && d[i + 1] > 150 && d[i] < 170 && d[i + 2] < 170) n++; }"
                 " return n; })()")
        wait_for(lambda: chromium.evaluate(green) > 20, 30, message="the card's dashed line")
        _interrupt(serve, lines)
    finally:
        _end(serve, plotter)


@pytest.mark.slow
def test_a_live_view_resumes_after_redis_goes_away_and_comes_back_empty(redis_server,
                                                                        tmp_path):  # noqa: F811
    """redis-server SIGKILLed and started again with nothing: the trainer publishes again, the
    viewer subscribes again, and new episodes are drawn; neither side ends nor needs a hand."""
    policy = LinearPolicy(4, 1)
    plotter = _trainer(redis_server.url, "outage", policy)
    videos = tmp_path / "videos"
    viewer, lines = _command_without_tensorflow(tmp_path, "view", redis_server.url, "-e", "outage",
                                                "--video-dir", str(videos))
    iteration = 0

    def drawn():
        return sorted(name for name in os.listdir(videos)
                      if name.endswith(".mp4")) if videos.exists() else []

    def newest():  # the newest iteration drawn (iter_NNNN.mp4)
        return max((int(name[5:9]) for name in drawn() if name.startswith("iter_")), default=-1)

    def train_until(done, seconds):
        nonlocal iteration
        deadline = time.monotonic() + seconds
        while not done() and time.monotonic() < deadline and viewer.poll() is None:
            policy.fill(_fill(iteration))
            plotter.update_plot(policy, iteration=iteration)
            iteration += 1
            time.sleep(0.5)
        assert done(), "".join(lines)

    try:
        train_until(lambda: len(drawn()) >= 2, 120)
        redis_server.kill()
        away = iteration
        train_until(lambda: iteration >= away + 6, 30)  # trained on while the server was away
        redis_server.start()
        back = iteration
        # Drawn: policies the trainer sent after the server came back.
        train_until(lambda: newest() >= back, 120)
        assert plotter.stats["last_error"] is None, plotter.stats
        _interrupt(viewer, lines)
        assert "Traceback" not in "".join(lines), "".join(lines)
    finally:
        _end(viewer, plotter)
