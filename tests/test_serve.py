"""``async-plotter serve`` against a real redis-server and real trainer processes, watched in
headless Chromium (or plain HTTP where a browser adds nothing).

The trainers (``tests.redis_helpers``) publish a LinearPolicy's update every 0.5 s with an
``AverageReturn`` curve point; the server runs as its own process, as a user starts it.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import psutil
import pytest
import redis

from async_plotter.channel.redis.wire import (STRUCTURE_HEADER, STRUCTURE_MAGIC, WIRE_VERSION,
                                              ExperimentKeys, parse_update_head, seal_structure)
from async_plotter.cli import main
from async_plotter.serve.history import History
from async_plotter.web.client import StreamError, open_stream
from tests.clients import view3d_socket
from tests.conftest import hold, wait_for
from tests.redis_helpers import (ROOT, child_env, default_sigint, read_log, start_trainer,
                                 viewer_command)
from tests.recordings import sled_run
from tests.redis_server import MISSING_MESSAGE, RedisServer, find_redis_server, free_port
from tests.test_web_browser import chromium  # noqa: F401 - the fixture

SECRET = "a shared secret of decent length"
GRACE = 3.0
TRAINERS = {"seed-0": "CartPole-v1", "seed-1": "CartPole-v1", "pend": "Pendulum-v1"}

# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def server_and_trainers(tmp_path_factory):
    """One redis-server and three trainers publishing for the whole module; ``add`` starts
    more."""
    executable = find_redis_server()
    if executable is None:
        pytest.fail(MISSING_MESSAGE)
    server = RedisServer(executable).start()
    logs = tmp_path_factory.mktemp("trainers")
    trainers = []

    def add(name, env):
        trainers.append(
            start_trainer(server.url,
                          name,
                          str(logs / f"{name}.log"),
                          "--env",
                          env,
                          "--count",
                          "100000",
                          "--interval",
                          "0.5",
                          ASYNC_PLOTTER_SECRET=SECRET))

    hold("server_and_trainers", lambda: [trainer.pid for trainer in trainers])
    for name, env in TRAINERS.items():
        add(name, env)
    try:
        client = redis.Redis.from_url(server.url)
        wait_for(lambda: all(_newest_update(client, name) for name in TRAINERS),
                 60,
                 message="three trainers publishing")
        client.close()
        yield server, add
    finally:
        for trainer in trainers:
            trainer.send_signal(signal.SIGINT)
        for trainer in trainers:
            try:
                trainer.wait(10)
            except subprocess.TimeoutExpired:
                trainer.kill()
                trainer.wait(5)
        server.stop()


class Serve:
    """``async-plotter serve`` in its own process."""

    def __init__(self, url, log_path, *args, secret=SECRET):
        self.port = free_port()
        self.log_path = str(log_path)
        self.process = subprocess.Popen(
            viewer_command() +
            ["serve", url, "--http", str(self.port), *args],
            cwd=ROOT,
            env=child_env(ASYNC_PLOTTER_SECRET=secret),
            stdin=subprocess.DEVNULL,
            stdout=open(self.log_path, "ab"),
            stderr=subprocess.STDOUT,
            preexec_fn=default_sigint)  # stopped with SIGINT
        self.url = f"http://127.0.0.1:{self.port}/"
        wait_for(lambda: "serving the experiments" in self.log() or self.process.poll() is not None,
                 30,
                 message="the server to start")
        assert self.process.poll() is None, self.log()

    def log(self):
        return read_log(self.log_path)

    def workers(self):
        """The server's worker processes (rollout and render), not the resource tracker."""
        found = []
        for child in psutil.Process(self.process.pid).children(recursive=True):
            try:
                if "spawn_main" in " ".join(child.cmdline()) and child.status() != "zombie":
                    found.append(child)
            except psutil.Error:
                pass
        return found

    def get(self, path, **headers):
        request = urllib.request.Request(self.url + path.lstrip("/"), headers=headers)
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()

    def json(self, path):
        import json

        return json.loads(self.get(path)[1])

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode


@pytest.fixture
def serving(server_and_trainers, tmp_path):
    started = []

    def start(*args, **kwargs):
        serve = Serve(server_and_trainers[0].url, tmp_path / f"serve{len(started)}.log", *args,
                      **kwargs)
        started.append(serve)
        return serve

    yield start
    for serve in started:
        code = serve.stop()
        assert code == 0, serve.log()[-3000:]
        assert "Traceback" not in serve.log(), serve.log()[-3000:]


def _newest_update(client, name):
    """The update number the trainer published last (from its header in Redis)."""
    head = client.getrange(ExperimentKeys(name).params, 0, 127)
    return parse_update_head(head).number if head else None


# -------------------------------------------------------------------------- page helpers


def _page(session):
    """What the page shows: the cards and the watched tiles (empty before it has loaded)."""
    return session.evaluate("""(() => {
        const text = (root, sel) => { const e = root.querySelector(sel); return e ? e.textContent : null; };
        const cards = {};
        for (const card of document.querySelectorAll('[data-name]')) {
            cards[card.dataset.name] = {
                env: text(card, '.env'), iteration: text(card, '.iteration'),
                update: text(card, '.update'), age: text(card, '.age'), state: text(card, '.state'),
                problem: card.querySelector('.problem').hidden ? null : text(card, '.problem'),
                disabled: card.querySelector('.watch').disabled,
                curve: text(card, '.latest') };
        }
        const tiles = {};
        for (const tile of document.querySelectorAll('[data-tile]')) {
            const view = tile.querySelector('.view');
            tiles[tile.dataset.tile] = {
                width: view.naturalWidth, height: view.naturalHeight,
                shown: !view.classList.contains('empty'), env: text(tile, '.env'),
                update: text(tile, '.t-update'), iteration: text(tile, '.t-iteration'),
                state: text(tile, '.live-state'), placeholder: text(tile, '.placeholder'),
                history: tile.querySelector('.tab-history').hidden ? null : text(tile, '.tab-history') };
        }
        return { cards, tiles, marker: window.__marker || null,
                 images: document.querySelectorAll('img').length };
    })()""")


def _sample(session, name):
    """A few thousand pixels of the tile's picture, read back from a canvas."""
    return np.array(
        session.evaluate(f"""(() => {{
        const img = document.querySelector('[data-tile="{name}"] .view');
        const c = document.createElement('canvas');
        c.width = img.naturalWidth; c.height = img.naturalHeight;
        const g = c.getContext('2d'); g.drawImage(img, 0, 0);
        return Array.from(g.getImageData(0, 0, c.width, c.height).data.filter((_, i) => i % 97 === 0));
    }})()"""), np.float32)


def _click(session, selector):
    assert session.evaluate(f"""(() => {{
        const e = document.querySelector('{selector}'); if (!e) return false; e.click(); return true;
    }})()"""), f"nothing to click at {selector}"


def _page_errors(session):
    return [
        e["params"] for e in session.events if e.get("method") == "Runtime.exceptionThrown" or (
            e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error"
            and "stream.mjpg" not in e["params"]["entry"].get("url", ""))
    ]


def _plant_hostile_experiments(url):
    """What someone who can write to the server but has no secret can put there."""
    client = redis.Redis.from_url(url)
    # Unsigned (this server has a secret), with markup in its description.
    value, _ = seal_structure(None, "evil-unsigned", 7, time.time_ns(), {
        "env": "<img src=x onerror=window.__pwned=1>",
        "policy": "x",
        "size": 4,
        "dtype": "float32"
    }, b"not a pickle")
    client.set(ExperimentKeys("evil-unsigned").structure, value)
    # Claims to be signed, and is 70 MiB: never downloaded.
    value, _ = seal_structure(b"not the secret", "evil-huge", 7, time.time_ns(), {
        "env": "Huge-v0",
        "size": 4,
        "dtype": "float32"
    }, b"\0" * (70 * 2**20))
    client.set(ExperimentKeys("evil-huge").structure, value)
    # Garbage, and a description nested 100,000 levels deep.
    client.set(ExperimentKeys("evil-garbage").structure, b"\xff" * 200)
    meta = b"[" * 100000
    header = STRUCTURE_HEADER.pack(STRUCTURE_MAGIC, WIRE_VERSION, 1, STRUCTURE_HEADER.size, 0,
                                   len(meta), 4, 7, 1, b"\0" * 16)
    client.set(ExperimentKeys("evil-deep").structure, header + meta + b"body" + b"\0" * 32)
    client.close()
    return {"evil-unsigned", "evil-huge", "evil-garbage", "evil-deep"}


# --------------------------------------------------------------------------------- tests


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_page_lists_watches_side_by_side_stops_workers_and_survives_hostile_data(
        server_and_trainers, serving, chromium):
    redis_server, add_trainer = server_and_trainers
    client = redis.Redis.from_url(redis_server.url)
    serve = serving("--max-live", "2", "--grace", str(GRACE))
    assert not serve.workers(), "nothing renders before anybody watches"
    chromium.call("Page.navigate", url=serve.url)
    page = wait_for(lambda: (lambda p: len(p.get("cards", {})) == 3 and p)(_page(chromium)),
                    30,
                    message="the three experiments on the page")
    chromium.evaluate("window.__marker = 'loaded once'")
    assert page["cards"]["pend"]["env"].startswith("Pendulum-v1")
    assert page["cards"]["seed-0"]["env"].startswith("CartPole-v1")
    wait_for(lambda: all(card["curve"].startswith("AverageReturn")
                         for card in _page(chromium)["cards"].values()),
             20,
             message="learning curves")
    assert not serve.workers()

    # Watch two side by side: each shows its own env's frames, moving, of the newest update.
    _click(chromium, '[data-name="pend"] .watch')
    _click(chromium, '[data-name="seed-0"] .watch')
    tiles = wait_for(lambda: (lambda t: len(t) == 2 and all(x["shown"] for x in t.values()) and t)
                     (_page(chromium)["tiles"]),
                     60,
                     message=f"two live pictures; server log:\n{serve.log()[-3000:]}")
    assert (tiles["pend"]["width"], tiles["pend"]["height"]) == (500, 500)  # Pendulum's frames
    assert (tiles["seed-0"]["width"], tiles["seed-0"]["height"]) == (600, 400)  # CartPole's
    assert tiles["pend"]["env"] == "Pendulum-v1"
    first = _sample(chromium, "pend")
    wait_for(lambda: np.abs(_sample(chromium, "pend") - first).max() > 30,
             15,
             message="the pendulum's picture to move")

    def shows_newest():
        shown = _page(chromium)["tiles"]["pend"]["update"]
        return shown.isdigit() and int(shown) >= _newest_update(client, "pend") - 2

    wait_for(shows_newest, 15, message="the tile to show the newest update")
    assert len(serve.workers()) == 4  # two experiments, rollout and render each

    # A third over --max-live 2: the browser is told so, nobody's stream degrades.
    _click(chromium, '[data-name="seed-1"] .watch')
    wait_for(lambda: "cannot watch now" in
             (_page(chromium)["tiles"].get("seed-1", {}).get("placeholder") or ""),
             20,
             message="the refusal on the page")
    with pytest.raises(StreamError) as refused:
        open_stream(serve.url + "x/seed-1/stream.mjpg")
    assert refused.value.status == 503 and "live views are in use" in str(refused.value)
    assert len(serve.workers()) == 4
    state = serve.json("x/pend/status")["live"]
    assert state["state"] == "live" and state["fps"] > 1, state
    _click(chromium, '[data-tile="seed-1"] .close')

    # A fourth trainer appears without a reload; hostile experiments are rows, not failures.
    sent_before = client.info("stats")["total_net_output_bytes"]
    hostile = _plant_hostile_experiments(redis_server.url)
    add_trainer("seed-2", "CartPole-v1")
    page = wait_for(lambda: (lambda p: len(p["cards"]) == 8 and p)(_page(chromium)),
                    60,
                    message="the fourth trainer and the hostile rows")
    assert page["marker"] == "loaded once", "the page was reloaded"
    assert page["cards"]["seed-2"]["env"].startswith("CartPole-v1")
    for name in hostile:
        assert page["cards"][name]["disabled"], (name, page["cards"][name])
        assert page["cards"][name]["state"] in ("refused", "unreadable"), page["cards"][name]
    assert "unsigned" in page["cards"]["evil-unsigned"]["problem"]
    assert "MiB" in page["cards"]["evil-huge"]["problem"]
    assert page["cards"]["evil-unsigned"]["env"].startswith("<img src=x")  # text, not markup
    assert page["images"] == 2 and not chromium.evaluate("window.__pwned || null")
    before = int(page["cards"]["seed-1"]["iteration"])
    wait_for(lambda: int(_page(chromium)["cards"]["seed-1"]["iteration"]) > before + 2,
             15,
             message="the good rows to keep updating")
    # The 70 MiB structure was never downloaded (by anybody: the trainers read a few bytes).
    assert client.info("stats")["total_net_output_bytes"] - sent_before < 8 * 2**20

    # Closing a tile stops its worker within the grace time (plus the worker's own stop).
    workers = serve.workers()
    closed = time.monotonic()
    _click(chromium, '[data-tile="pend"] .close')
    _click(chromium, '[data-tile="seed-0"] .close')

    def running():
        alive = []
        for process in workers:
            try:
                if process.is_running() and process.status() != "zombie":
                    alive.append(process)
            except psutil.NoSuchProcess:
                pass
        return alive

    # Gone from serve's list, and exited (a moment after it leaves the list).
    wait_for(lambda: not serve.workers() and not running(),
             GRACE + 10,
             message="the workers to stop")
    elapsed = time.monotonic() - closed
    assert elapsed > GRACE - 0.5, f"stopped after {elapsed:.1f} s, before the grace time"
    assert not running()
    assert serve.json("x/pend/status")["live"] is None
    assert not _page_errors(chromium), _page_errors(chromium)
    client.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_history_strip_plays_recorded_videos(server_and_trainers, serving, chromium, tmp_path,
                                                 tmp_path_factory):
    record_dir = tmp_path / "history"
    serve = serving("--record-dir", str(record_dir), "--record-every", "4", "--record-budget",
                    "0.4", "--grace", "1")

    def videos(name):
        return serve.json("x/" + name + "/status")["videos"]

    listed = _Listed(serve, "pend")
    try:
        _watch_the_history_strip(serve, chromium, record_dir, tmp_path_factory, videos)
    finally:
        names = listed.stop()
    # A video, once listed, stays (until pruned, beyond 200): none the page was offered 404s.
    # (The recorder's worker finishes a last, unwanted video as it stops; it was listed, then
    # deleted, and a page that picked it as the newest got a 404.)
    assert len(names) >= 2
    gone = [name for name in sorted(names) if _status_of(serve, "x/pend/video/" + name) != 200]
    assert not gone, f"listed, then not served: {gone} of {sorted(names)}"


class _Listed:
    """Every video name serve's listing of an experiment shows, polled ten times a second."""

    def __init__(self, serve, name):
        self.names = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(serve, name), daemon=True)
        self._thread.start()

    def _poll(self, serve, name):
        while not self._stop.wait(0.1):
            try:
                self.names |= {v["file"] for v in serve.json(f"x/{name}/status")["videos"]}
            except OSError:
                pass  # serve is busy: the next poll

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        return self.names


def _status_of(serve, path):
    try:
        return serve.get(path)[0]
    except urllib.error.HTTPError as error:
        return error.code


def _watch_the_history_strip(serve, chromium, record_dir, tmp_path_factory, videos):
    wait_for(lambda: len(videos("pend")) >= 2,
             120,
             message=f"two recorded videos of pend; log:\n{serve.log()[-3000:]}")
    # Whole videos only; the one being recorded has a hidden temporary name until it is whole.
    files = [name for name in os.listdir(record_dir / "pend") if not name.startswith(".")]
    assert all(re.fullmatch(r"iter_\d{4}\.mp4", name) for name in files), files
    chromium.call("Page.navigate", url=serve.url + "#watch=pend")
    wait_for(lambda: (_page(chromium)["tiles"].get("pend") or {}).get("history"),
             30,
             message="the history tab")
    _click(chromium, '[data-tile="pend"] .tab-history')

    def playing():
        return chromium.evaluate("""(() => {
            const v = document.querySelector('[data-tile="pend"] .replay');
            return v.readyState >= 2 && v.videoWidth > 0 && !v.error
                ? {src: v.src, width: v.videoWidth, label: document.querySelector(
                   '[data-tile="pend"] .video-label').textContent} : null;
        })()""")

    newest = wait_for(playing, 20, message="the newest video to play")
    assert newest["width"] == 500 and newest["label"].startswith("iteration ")
    # The page follows newer recordings while it shows the newest: read what is on screen and
    # press "prev" in one step, so that the video compared with is the one "prev" starts from.
    # Once the page lists an older video than the one it shows ("(k of n)" with k > 1).
    on_screen = wait_for(lambda: chromium.evaluate("""(() => {
        const label = document.querySelector('[data-tile="pend"] .video-label').textContent;
        const shown = /\\((\\d+) of \\d+\\)/.exec(label);
        if (!shown || Number(shown[1]) < 2) return null;
        document.querySelector('[data-tile="pend"] .prev').click();
        return label;
    })()"""),
                         30,
                         interval=0.5,
                         message="an older video in the page's list")
    earlier = wait_for(lambda: (lambda s: s and s["label"] != on_screen and s)(playing()),
                       20,
                       message="an earlier video to play")
    number = lambda state: int(re.search(r"iteration (\d+)", state["label"])[1])  # noqa: E731
    assert number(earlier) < number({"label": on_screen})
    assert not _page_errors(chromium), _page_errors(chromium)
    # Watching the history needs no live worker: the one the page opened with stops.
    wait_for(lambda: serve.json("x/pend/status")["live"] is None, 15, message="no live worker")

    # Issue 28: "prev" stepped to a newer video while videos were being added. Back on the
    # newest, following it: two newer videos arrive and the page picks the newest for the user,
    # which is not showing yet (here never: they are cut short), and "prev" is pressed. It goes
    # to the one before the video on screen, not to the one before the pick.
    label = '[data-tile="pend"] .video-label'

    def at_newest():
        shown = re.search(r"\((\d+) of (\d+)\)",
                          chromium.evaluate(f"document.querySelector('{label}').textContent"))
        if shown and shown[1] == shown[2]:
            return True
        _click(chromium, '[data-tile="pend"] .next')
        return False

    wait_for(at_newest, 30, interval=0.5, message="the newest video again")
    for number_ in (9001, 9002):  # the head of an mp4, cut short
        (record_dir / "pend" / f"iter_{number_}.mp4").write_bytes(b"\0\0\0\x18ftypisom" + bytes(52))
    wait_for(lambda: "9002" in chromium.evaluate(f"document.querySelector('{label}').textContent"),
             30,
             message="the page to follow the newest")
    _click(chromium, '[data-tile="pend"] .prev')
    stepped = chromium.evaluate(f"document.querySelector('{label}').textContent")
    assert number({"label": stepped}) < 9000, stepped

    # Issue 27: a video with its state recording beside it offers a 3D replay (a real one: the
    # sled's, as a MuJoCo env writes it), and the page's own origin opens it, page and socket,
    # through serve's checks. The page stays on the video "prev" went to.
    import viser

    anchor = "document.querySelector('[data-tile=\"pend\"] .replay3d')"
    assert chromium.evaluate(f"{anchor}.hidden && !{anchor}.href")  # no recording, no link
    shown = f"iter_{number({'label': stepped}):04d}"
    shutil.copy(
        sled_run(tmp_path_factory)["folder"] / "update_0000.npz",
        record_dir / "pend" / f"{shown}.npz")
    link = wait_for(lambda: chromium.evaluate(f"{anchor}.hidden ? null : {anchor}.href"),
                    30,
                    message="the 3D replay link")
    assert link.startswith(f"{serve.url}x/pend/replay/{shown}.npz?"), link
    page = chromium.evaluate(f"fetch({json.dumps(link)}).then(r => r.text())")
    assert '<div id="root">' in page  # viser's page
    socket_url = "ws" + link.split("?")[0][len("http"):]
    outcome = chromium.evaluate(f"""new Promise(resolve => {{
        const ws = new WebSocket({json.dumps(socket_url)}, ["viser-v{viser.__version__}"]);
        ws.onmessage = () => {{ resolve('message'); ws.close(); }};
        ws.onerror = () => resolve('refused');
        setTimeout(() => resolve('timeout'), 20000);
    }})""")
    assert outcome == "message"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_token_origin_and_bounded_answers(server_and_trainers, tmp_path, tmp_path_factory,
                                          monkeypatch):
    """In-process: a token guards every route, the 3D replay's page and socket included, a
    cross-site request is refused on loopback, and nothing outside the record folder can be
    named."""
    from websockets.exceptions import InvalidStatus

    from async_plotter.serve.app import ServeApp
    from async_plotter.serve.options import ServeOptions
    from async_plotter.serve.recorder import Recorder
    from async_plotter.web.address import HttpConfig

    # Only the routes of a record folder are under test here, not recording.
    monkeypatch.setattr(Recorder, "start", lambda self: None)
    monkeypatch.setattr(Recorder, "close", lambda self: None)

    url = server_and_trainers[0].url
    (tmp_path / "pend").mkdir()
    (tmp_path / "pend" / "iter_0001.mp4").write_bytes(b"0123456789")
    # A real state recording beside it (the sled's: a MuJoCo env's), replayed in 3D.
    shutil.copy(
        sled_run(tmp_path_factory)["folder"] / "update_0000.npz",
        tmp_path / "pend" / "iter_0001.npz")
    (tmp_path / "secret.txt").write_text("nope")

    def started(token=None):
        return ServeApp(
            ServeOptions(url,
                         HttpConfig("127.0.0.1", 0, token),
                         SECRET.encode(),
                         False,
                         record_dir=str(tmp_path))).start()

    guarded, loopback = started("the-token"), started()
    try:
        base = guarded.url
        for path in ("", "events", "x/pend/stream.mjpg", "x/pend/video/iter_0001.mp4",
                     "x/pend/replay/iter_0001.npz"):
            with pytest.raises(urllib.error.HTTPError) as error:
                urllib.request.urlopen(base + path, timeout=10)
            assert error.value.code == 401, path
        assert not guarded.replays, "a refused request opened a replay"
        with urllib.request.urlopen(base + "x/pend/video/iter_0001.mp4?token=the-token",
                                    timeout=10) as answer:
            assert answer.read() == b"0123456789"
        request = urllib.request.Request(base + "x/pend/video/iter_0001.mp4?token=the-token",
                                         headers={"Range": "bytes=2-4"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 206 and answer.read() == b"234"
        for asked, part in (("bytes=-3", b"789"), ("bytes=5-", b"56789")):
            request = urllib.request.Request(base + "x/pend/video/iter_0001.mp4?token=the-token",
                                             headers={"Range": asked})
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 206 and answer.read() == part, asked
        for path in ("x/pend/video/..%2Fsecret.txt", "x/..%2F/video/secret.txt",
                     "x/pend/video/.partial_iter_0002.mp4", "x/a%20b/status",
                     "x/pend/replay/..%2Fsecret.txt", "x/pend/replay/iter_0002.npz",
                     "x/pend/replay/iter_0001.mp4"):
            with pytest.raises(urllib.error.HTTPError) as error:
                urllib.request.urlopen(base + path + "?token=the-token", timeout=10)
            assert error.value.code == 404, path
        with urllib.request.urlopen(base + "?token=the-token", timeout=10) as answer:
            assert "media-src 'self'" in answer.headers["Content-Security-Policy"]
            assert b"async_plotter experiments" in answer.read()
        # Loopback without a token: a page on another site cannot read or hold anything.
        for headers in ({
                "Sec-Fetch-Site": "cross-site"
        }, {
                "Origin": "http://evil.example"
        }, {
                "Host": "evil.example"
        }):
            request = urllib.request.Request(loopback.url + "x/pend/stream.mjpg", headers=headers)
            with pytest.raises(urllib.error.HTTPError) as error:
                urllib.request.urlopen(request, timeout=10)
            assert error.value.code == 403, headers
        assert not loopback.live.status()["sessions"], "a refused request started a worker"

        # The 3D replay of the video's recording: listed with the video, its page and socket at
        # one address, behind the same checks as every route.
        status = json.loads(
            urllib.request.urlopen(base + "x/pend/status?token=the-token", timeout=10).read())
        assert status["videos"][0]["recording"] == "iter_0001.npz"
        assert guarded._info()["replay3d"] is True
        replay = base + "x/pend/replay/iter_0001.npz"
        with urllib.request.urlopen(replay + "?token=the-token", timeout=30) as answer:
            assert b'<div id="root">' in answer.read()
            cookie = answer.headers["Set-Cookie"].split(";")[0]
        assert len(guarded.replays) == 1

        def socket(url, **headers):
            return view3d_socket(url, headers.pop("Origin", None), headers, 30)

        def refused(url, **headers):
            with pytest.raises(InvalidStatus) as caught:
                socket(url, **headers).close()
            return caught.value.response.status_code

        with socket(replay + "?token=the-token") as opened:
            assert opened.recv(timeout=20)  # viser's scene, from the replay's server
        assert refused(replay) == 401
        assert refused(replay + "?token=wrong") == 403
        with socket(replay, Cookie=cookie, Origin=base.rstrip("/")) as opened:
            assert opened.recv(timeout=20)
        # The browser sends the cookie whatever page asks: from another origin it is refused.
        assert refused(replay, Cookie=cookie, Origin="http://evil.example") == 403
        assert refused(replay, Cookie=cookie, **{"Sec-Fetch-Site": "same-site"}) == 403
        on_loopback = loopback.url + "x/pend/replay/iter_0001.npz"
        assert refused(on_loopback, Origin="http://evil.example") == 403
        assert refused(on_loopback, **{"Sec-Fetch-Site": "cross-site"}) == 403
        with socket(on_loopback, Origin=loopback.url.rstrip("/")) as opened:
            assert opened.recv(timeout=20)
        assert len(loopback.replays) == 1
    finally:
        guarded.close()
        loopback.close()

    # Without the 3D extra, the history is what it was: the video plays, no replay is offered.
    monkeypatch.setitem(sys.modules, "viser", None)
    plain = started()
    try:
        assert plain.replays is None and plain._info()["replay3d"] is False
        with urllib.request.urlopen(plain.url + "x/pend/video/iter_0001.mp4", timeout=10) as answer:
            assert answer.read() == b"0123456789"
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(plain.url + "x/pend/replay/iter_0001.npz", timeout=10)
        assert error.value.code == 404
    finally:
        plain.close()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_key_of_the_wrong_type_costs_one_row(server_and_trainers):
    from async_plotter.channel.redis.signing import Verifier
    from async_plotter.serve.catalog import Catalog

    url = server_and_trainers[0].url
    client = redis.Redis.from_url(url)
    value, _ = seal_structure(None, "typed", 1, time.time_ns(), {
        "env": "Typed-v0",
        "size": 4,
        "dtype": "float32"
    }, b"body")
    client.set(ExperimentKeys("typed").structure, value)
    client.hset(ExperimentKeys("typed").params, "not", "a string")
    catalog = Catalog(url, Verifier(None, trust_unsigned=True))
    catalog.acquire()
    try:

        def rows():
            found = {row["name"]: row for row in catalog.rows()}
            typed, good = found.get("typed", {}), found.get("seed-0", {})
            return (typed.get("problem") and good.get("update") and catalog.problem is None
                    and found)

        found = wait_for(rows, 20, message="the typed row's problem beside good rows")
        assert "unreadable key" in found["typed"]["problem"]
        assert found["typed"]["env"] == "Typed-v0"  # verified (trust-unsigned), then refused
        assert found["seed-1"]["curve"]["points"]
    finally:
        catalog.close()
        client.delete(ExperimentKeys("typed").structure, ExperimentKeys("typed").params)
        client.close()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_catalog_reads_nothing_once_nobody_needs_it(server_and_trainers, monkeypatch):
    from async_plotter.channel.redis.signing import Verifier
    from async_plotter.serve import catalog as catalog_module

    monkeypatch.setattr(catalog_module, "LINGER", 0.5)
    catalog = catalog_module.Catalog(server_and_trainers[0].url, Verifier(SECRET.encode()))
    assert not catalog.running
    catalog.acquire()
    try:
        wait_for(lambda: len(catalog.names()) >= 3, 20, message="the experiments")
        catalog.release()
        wait_for(lambda: not catalog.running, 10, message="the catalog to stop")
        assert not catalog.names()
        wait_for(lambda:
                 not [t for t in threading.enumerate() if t.name == "async_plotter-redis-watcher"],
                 5,
                 message="the watchers to stop")
        catalog.acquire()  # and it comes back for the next user
        wait_for(lambda: len(catalog.names()) >= 3, 20, message="the experiments again")
    finally:
        catalog.close()


def test_a_non_loopback_address_without_a_token_is_refused(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("ASYNC_PLOTTER_SECRET", SECRET)
    monkeypatch.delenv("ASYNC_PLOTTER_HTTP_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "redis://127.0.0.1:1/0", "--http", "0.0.0.0:8080"])
    assert exit_info.value.code == 2
    assert "needs a token" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--max-live", "0"], "--max-live"),
    (["--grace", "-1"], "--grace"),
    (["--record-every", "0"], "--record-every"),
    (["--record-budget", "2"], "--record-budget"),
    (["--budget", "0.1", "--priority", "idle"], "not both"),
    (["--trust-unsigned"], "conflicts with the secret"),
])
def test_bad_serve_arguments_exit_2(args, message, capsys, monkeypatch):
    monkeypatch.setenv("ASYNC_PLOTTER_SECRET", SECRET)
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "redis://127.0.0.1:1/0", "--http", "0", *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_no_secret_needs_trust_unsigned(capsys, monkeypatch):
    monkeypatch.delenv("ASYNC_PLOTTER_SECRET", raising=False)
    with pytest.raises(SystemExit):
        main(["serve", "redis://127.0.0.1:1/0", "--http", "0"])
    assert "no secret" in capsys.readouterr().err


def test_history_serves_only_the_sinks_names(tmp_path):
    history = History(str(tmp_path), max_videos=3)
    folder = tmp_path / "exp"
    folder.mkdir()
    for number in (3, 1, 2, 10):
        (folder / f"iter_{number:04d}.mp4").write_bytes(b"x")
        os.utime(folder / f"iter_{number:04d}.mp4", (number, number))
    (folder / ".partial_iter_0011.mp4").write_bytes(b"x")
    (folder / "notes.txt").write_bytes(b"x")
    assert [v.number for v in history.videos("exp")] == [1, 2, 3, 10]
    assert history.path("exp", "notes.txt") is None
    assert history.path("exp", ".partial_iter_0011.mp4") is None
    assert history.path("../exp", "iter_0001.mp4") is None
    assert history.path("exp", "iter_0001.mp4") == str(folder / "iter_0001.mp4")
    assert history.prune("exp") == 1  # the oldest after the first
    assert [v.number for v in history.videos("exp")] == [1, 3, 10]
