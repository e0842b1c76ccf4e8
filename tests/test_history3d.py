"""A run's history in one 3D page: ``async-plotter replay DIR``, a Plotter's ``/history/`` and
``async-plotter serve``'s 3D links show every state recording of the run, with an iteration
scrubber, the returns' curve with a marker per recording, and ghosts.

Headless Chromium with SwiftShader's WebGL reads what the page shows from viser's scene in it:
the sled's position (``SHOWN_X``) and the ghosts' instances. The recordings are a sled pushed
harder each iteration from one start (``tests/history_recordings.py``), so each iteration's
sled is elsewhere at a given step.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("viser")
pytest.importorskip("mjviser")

from websockets.exceptions import InvalidStatus  # noqa: E402 - after the skip

from async_plotter.web.address import parse_http_address  # noqa: E402
from tests.clients import start_replay, stop_with_ctrl_c, view3d_socket  # noqa: E402
from tests.conftest import default_sigint, wait_for  # noqa: E402
from tests.history_recordings import STEPS, sled_x, write_history  # noqa: E402
from tests.test_replay import press  # noqa: E402
from tests.test_view3d_browser import shown_x, webgl_chromium  # noqa: E402,F401 - a fixture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
LAST = STEPS - 1
#: the ghosts' positions along x, as the page's instanced meshes hold them
GHOSTS_X = """(() => {
    const group = window.__viserMutable.nodeRefFromName['/fixed_bodies/ghosts/body1'];
    let mesh = null;
    if (group) group.traverse(o => { if (o.isInstancedMesh && !mesh) mesh = o; });
    if (!mesh || !group.visible) return null;
    const m = new mesh.matrix.constructor();
    const found = [];
    // InstancedMesh2's count is what the camera saw last: its instancesCount is all of them.
    const total = mesh.instancesCount !== undefined ? mesh.instancesCount : mesh.count;
    for (let i = 0; i < total; i++) {
        mesh.getMatrixAt(i, m);
        if (m.elements[0] > 0) found.push(m.elements[12]);  // scaled to nothing: unused
    }
    return {x: found, opacity: mesh.material.opacity, transparent: mesh.material.transparent};
})()"""


def text(session):
    return session.evaluate("document.body.innerText")


def markers(session):
    return session.evaluate("document.querySelectorAll('.history-curve .marker').length")


def slider(session, maximum):
    """Focus the slider whose range ends at ``maximum``."""
    session.evaluate(f"""[...document.querySelectorAll('[role=slider]')]
        .find(s => s.getAttribute('aria-valuemax') === '{maximum}').focus()""")


def click(session, selector):
    """A real click (mouse pressed and released) at the middle of ``selector``'s element."""
    box = session.evaluate(f"""(() => {{
        const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();
        return [r.x + r.width / 2, r.y + r.height / 2];
    }})()""")
    for kind in ("mousePressed", "mouseReleased"):
        session.call("Input.dispatchMouseEvent",
                     type=kind,
                     x=box[0],
                     y=box[1],
                     button="left",
                     clickCount=1)


def button(session, label):
    session.evaluate(f"""[...document.querySelectorAll('button')]
        .find(b => b.textContent.trim() === {json.dumps(label)}).click()""")


def pause(session):
    """Click Pause, and wait until the page says Play: the server has taken the click (its
    callbacks may run out of order with a slider moved right after)."""
    button(session, "Pause")
    wait_for(lambda: session.evaluate("""[...document.querySelectorAll('button')]
        .some(b => b.textContent.trim() === 'Play')"""),
             30,
             message="the pause taken")


def shows(session, x, message):
    wait_for(lambda: abs(shown_x(session) - x) < 1e-3, 30, message=f"{message} (x = {x:.3f})")


def test_the_history_scrubs_through_the_run_and_follows_it_as_it_grows(tmp_path, webgl_chromium):
    """By the fast path for the poses (the public one is covered by the ghosts' test below and
    tests/test_replay.py): one browser run fewer."""
    session = webgl_chromium
    folder = write_history(str(tmp_path / "run"), range(6))
    process, url = start_replay(folder)
    try:
        assert url, "no URL logged"
        session.call("Page.navigate", url=url)
        wait_for(lambda: shown_x(session) is not None, 120, message="the scene in the page")
        # Every recording, on the curve and the scrubber, starting at the newest.
        wait_for(lambda: markers(session) == 6, 30, message="a marker per recording")
        assert "6 recordings" in text(session) and "shown: iteration 5" in text(session)
        # A recording written now appears, and is shown: the newest is followed.
        write_history(str(tmp_path / "run"), [6])
        wait_for(lambda: markers(session) == 7, 30, message="the new recording on the curve")
        wait_for(lambda: "shown: iteration 6" in text(session), 30, message="the newest shown")

        # Paused at the last step, the scrubber takes the iteration back: the body is where
        # that older iteration had it at the same step.
        pause(session)
        slider(session, LAST)
        press(session, "End", "End", 35)
        wait_for(lambda: f"t = {LAST * 0.02:.2f} s" in text(session), 30, message="the last step")
        newest = sled_x(os.path.join(folder, "iter_0006.npz"), LAST)
        shows(session, newest, "the newest iteration's pose")
        slider(session, 6)
        press(session, "Home", "Home", 36)
        wait_for(lambda: "shown: iteration 0" in text(session), 30, message="iteration 0 shown")
        oldest = sled_x(os.path.join(folder, "iter_0000.npz"), LAST)
        assert newest - oldest > 0.5  # the sled went less far then
        shows(session, oldest, "the oldest iteration's pose")

        # A click on a marker of the curve shows its recording.
        click(session, '.history-curve .marker[data-x="3"] circle')
        wait_for(lambda: "shown: iteration 3" in text(session), 30, message="the clicked one")
        shows(session, sled_x(os.path.join(folder, "iter_0003.npz"), LAST),
              "the clicked iteration's pose")
        problems = [
            e["params"]["entry"] for e in session.events
            if e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error"
        ]
        assert not problems, problems  # nothing blocked (CSP) or failed to load
    finally:
        stop_with_ctrl_c(process, 20)
    assert process.returncode == 0


def test_ghosts_play_three_other_iterations_beside_the_one_shown(tmp_path, webgl_chromium,
                                                                 view3d_poses):
    from async_plotter.view3d.replay import open_replay

    session = webgl_chromium
    folder = write_history(str(tmp_path / "run"), range(6))
    replay = open_replay(folder, parse_http_address(0, None))
    assert (replay.scene.fast is None) == (view3d_poses == "public")
    try:
        session.call("Page.navigate", url=replay.url)
        wait_for(lambda: shown_x(session) is not None, 120, message="the scene in the page")
        button(session, "Pause")
        wait_for(lambda: not replay.playing, 30, message="the pause")
        # Typed into the ghosts' field, as a user does.
        session.evaluate("""(() => {
            let row = [...document.querySelectorAll('*')]
                .find(e => e.children.length === 0 && e.textContent.trim() === 'iterations');
            while (row && !row.querySelector('input')) row = row.parentElement;
            row.querySelector('input').focus();
        })()""")
        session.call("Input.insertText", text="0, 2, 4")
        wait_for(lambda: [ghost.x for ghost in replay.ghosts] == [0, 2, 4],
                 30,
                 message="the ghosts chosen")
        slider(session, LAST)
        press(session, "End", "End", 35)
        wait_for(lambda: replay.index == LAST, 30, message="the last step")
        expected = [sled_x(os.path.join(folder, f"iter_{k:04d}.npz"), LAST) for k in (0, 2, 4)]

        def ghosts_shown():
            found = session.evaluate(GHOSTS_X)
            return found and len(found["x"]) == 3 and all(
                abs(x - want) < 1e-3 for x, want in zip(found["x"], expected)) and found

        shown = wait_for(ghosts_shown, 30, message=f"three ghosts at x = {expected}")
        assert shown["transparent"] and shown["opacity"] < 0.5  # translucent
        # The one shown, iteration 5, opaque in its own place: four iterations at once.
        shows(session, sled_x(os.path.join(folder, "iter_0005.npz"), LAST), "iteration 5")
        assert len({round(x, 2) for x in expected + [shown_x(session)]}) == 4
        labels = [label.text for label in replay.scene.ghosts.labels if label.visible]
        assert [label.split(":")[0] for label in labels
                ] == ["iteration 5", "iteration 0", "iteration 2", "iteration 4"], labels
        assert all(": return " in label for label in labels), labels
        # Cleared, they are gone from the page.
        button(session, "clear")
        wait_for(lambda: session.evaluate(GHOSTS_X) is None, 30, message="the ghosts gone")
    finally:
        replay.close()


@pytest.fixture
def redis_url():
    from tests.redis_server import MISSING_MESSAGE, RedisServer, find_redis_server

    executable = find_redis_server()
    if executable is None:
        pytest.fail(MISSING_MESSAGE)
    server = RedisServer(executable).start()
    try:
        yield server.url
    finally:
        server.stop()


def _refused(url, origin, method=None, **headers):
    """The status a request gets (GET, or POST for ``.../pick``) with ``origin``."""
    method = method or ("POST" if "/pick" in url else "GET")
    request = urllib.request.Request(url,
                                     method=method,
                                     headers=dict(headers, Origin=origin),
                                     data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def _checked(page, pick):
    """Every route of a history page: from its own origin it serves (page, viser's socket, a
    click on the curve); from another, or named by another Host, nothing."""
    own = page.split("/", 3)[:3]
    own_origin = "/".join(own)
    foreign = "http://evil.example"
    assert _refused(page, foreign) == 403
    assert _refused(pick, foreign) == 403
    assert _refused(pick, own_origin, **{"Sec-Fetch-Site": "cross-site"}) == 403
    assert _refused(page, own_origin, Host="evil.example") == 403
    with pytest.raises(InvalidStatus) as caught:
        view3d_socket(page, origin=foreign).close()
    assert caught.value.response.status_code == 403
    # From its own origin: the page, its socket, a click.
    with urllib.request.urlopen(urllib.request.Request(page, headers={"Origin": own_origin}),
                                timeout=60) as answer:
        assert b'<div id="root">' in answer.read()
    with view3d_socket(page, origin=own_origin, timeout=30) as socket:
        assert socket.recv(timeout=30)
    assert _refused(pick, own_origin) == 204
    assert _refused(page, own_origin, "POST") == 405  # POST reaches the clicks alone


def test_every_history_refuses_another_origin_on_every_route(tmp_path, redis_url):
    # async-plotter replay DIR
    folder = write_history(str(tmp_path / "run"), range(3))
    process, url = start_replay(folder)
    try:
        assert url, "no URL logged"
        _checked(url, url + "pick?x=1")
    finally:
        stop_with_ctrl_c(process, 20)
    assert process.returncode == 0

    # A Plotter's live page: /history/, its video folder's recordings (history/ too)
    with sled_plotter_with_history(tmp_path / "videos", range(3)) as plotter:
        page = plotter.wait_for_http_url(60) + "history/"
        _checked(page, page + "pick?x=2")

    # async-plotter serve --record-dir: an experiment's 3D link
    record = tmp_path / "record"
    write_history(str(record / "pend"), range(3), in_history=False)
    serve = subprocess.Popen([
        sys.executable, "-m", "async_plotter.cli", "serve", redis_url, "--http", "0",
        "--record-dir",
        str(record)
    ],
                             stderr=subprocess.PIPE,
                             text=True,
                             env=dict(os.environ,
                                      PYTHONUNBUFFERED="1",
                                      ASYNC_PLOTTER_SECRET="history test"),
                             preexec_fn=default_sigint)  # stopped with SIGINT
    try:
        base = None
        deadline = time.monotonic() + 60
        while base is None and time.monotonic() < deadline:
            line = serve.stderr.readline()
            if not line and serve.poll() is not None:
                break
            base = line.split(" at ")[-1].strip() if "serving the experiments" in line else None
        assert base, "serve named no address"
        _checked(base + "x/pend/replay/iter_0001.npz", base + "x/pend/replay/pick?x=0")
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(30)


def test_nothing_is_posed_listed_or_sent_while_nobody_watches(tmp_path, view3d_poses):
    from async_plotter.view3d.replay import RELIST_SECONDS, open_replay

    run = str(tmp_path / "run")
    folder = write_history(run, range(3))
    replay = open_replay(folder, parse_http_address(0, None))
    try:
        replay.set_ghosts(replay.history.entries[:2])
        server = replay.scene.server
        time.sleep(0.5)
        scene = len(server.get_scene_serializer().serialize())
        meanwhile = server.get_scene_serializer()
        write_history(run, [3])  # a new recording nobody looks at
        time.sleep(RELIST_SECONDS + 1.5)
        assert len(meanwhile.serialize()) == scene  # nothing posed
        assert replay.front.bytes_sent == 0  # nothing sent
        assert len(replay.history.entries) == 3  # the folder not even listed
        with view3d_socket(replay.url, origin=replay.url.rstrip("/")) as socket:
            assert socket.recv(timeout=30)
            wait_for(lambda: len(replay.history.entries) == 4,
                     RELIST_SECONDS + 10,
                     message="the new recording listed once watched")
            sent = replay.front.bytes_sent
            time.sleep(1.0)
            assert replay.front.bytes_sent - sent > 1_000  # poses, ~50 a second
    finally:
        replay.close()


def test_the_curve_draws_every_return_in_returns_csv_and_marks_the_recordings_kept(tmp_path):
    """A long run's folder keeps some recordings (the others thinned away); the curve's line
    goes through every policy's return in ``returns.csv``, a marker on each recording kept."""
    import re

    from async_plotter.view3d.curve import curve_svg
    from async_plotter.view3d.history import RunHistory

    run = str(tmp_path / "run")
    write_history(run, [0, 4, 8])
    history = RunHistory(run)
    history.refresh()

    def drawn():
        points = [(entry.x, entry.episode_return, entry.describe()) for entry in history.entries]
        svg = curve_svg(points, history.entries[-1].x, {}, history.returns_line())
        line = re.search(r'<polyline points="([^"]*)"', svg).group(1).split()
        return len(line), svg.count('class="marker"')

    assert history.returns_line() == [] and drawn() == (3, 3)  # no file: the markers joined
    _returns_rows(os.path.join(run, "history"), 10)
    line = history.returns_line()
    assert line == [(x, 0.5 * (x + 1)) for x in range(-1, 9)]
    assert drawn() == (10, 3)


def _returns_rows(folder, count):
    """``returns.csv`` in ``folder`` with ``count`` rows (updates 0 to ``count - 1``), as the
    supervisor writes it, without recordings."""
    from async_plotter.render.history_returns import ReturnsFile

    returns = ReturnsFile(folder)
    for update in range(count):
        returns.append({
            "update": update,
            "iteration": None if update == 0 else update - 1,
            "return": 0.5 * update,
            "length": STEPS,
            "path": None,
            "time": 0.0,
            "cpu_seconds": 0.01
        })


def test_returns_that_come_without_a_new_recording_are_drawn_on_the_open_page(tmp_path):
    """A viewer's folder gets returns between recordings (over Redis, those of thinned
    recordings): a watched page's curve draws them at its next listing, no new file needed."""
    import re

    from async_plotter.view3d.replay import RELIST_SECONDS, open_replay

    run = str(tmp_path / "run")
    folder = write_history(run, [0, 4, 8])
    replay = open_replay(folder, parse_http_address(0, None))

    def points():
        line = re.search(r'<polyline points="([^"]*)"', replay._curve.content)
        return len(line.group(1).split()) if line else 0

    try:
        with view3d_socket(replay.url, origin=replay.url.rstrip("/")) as socket:
            assert socket.recv(timeout=30)
            assert points() == 3
            _returns_rows(folder, 10)
            wait_for(lambda: points() == 10,
                     RELIST_SECONDS + 10,
                     message="the returns on the curve")
    finally:
        replay.close()


def sled_plotter_with_history(videos, iterations):
    """A sled Plotter with a 3D live page whose video folder holds the history recordings of
    ``iterations``, written once Plotter() claimed the folder (this run's, not an earlier one's)."""
    from async_plotter import Plotter
    from tests.policies import LinearPolicy, make_sled

    policy = LinearPolicy(1, 1)
    policy.fill(1.0)
    plotter = Plotter(make_sled,
                      policy,
                      max_path_length=100,
                      http=0,
                      view="3d",
                      video_dir=str(videos))
    write_history(str(videos), iterations)
    return plotter


def test_a_plotter_opens_no_history_until_asked(tmp_path):
    """The live page's /history/ costs the render process nothing until a browser asks for it:
    no viser server is started for it before."""
    import psutil

    def listening(pid):
        return sorted(c.laddr.port for c in psutil.Process(pid).net_connections("tcp")
                      if c.status == psutil.CONN_LISTEN)

    with sled_plotter_with_history(tmp_path / "videos", range(2)) as plotter:
        url = plotter.wait_for_http_url(60)
        render = wait_for(lambda: plotter.stats.get("worker_pids", {}).get("render"),
                          60,
                          message="the render process")
        wait_for(lambda: len(listening(render)) >= 2, 60, message="the page and the 3D view")
        time.sleep(1.0)
        before = listening(render)  # the page's socket and the live 3D view's viser
        assert len(before) == 2, before
        with urllib.request.urlopen(url + "history/", timeout=60) as answer:
            assert b'<div id="root">' in answer.read()
        assert len(listening(render)) == 3  # the history's own viser server, now


def test_without_the_extra_the_command_and_the_page_name_what_to_install(tmp_path):
    videos = tmp_path / "videos"
    folder = write_history(str(videos), range(2))
    blocked = "import sys; sys.modules['viser'] = None  # as if the extra were not installed\n"
    command = subprocess.run([
        sys.executable, "-c",
        blocked + "from async_plotter.cli import main; sys.exit(main(sys.argv[1:]))", "replay",
        folder, "--http", "0"
    ],
                             capture_output=True,
                             text=True,
                             timeout=120)
    assert command.returncode != 0
    assert "pip install -e .[view3d]" in command.stderr and "viser" in command.stderr
    page = subprocess.run([
        sys.executable, "-c", blocked + textwrap.dedent(f"""
            import urllib.error, urllib.request
            from async_plotter.sinks.http import HttpSink
            from async_plotter.web.address import parse_http_address
            sink = HttpSink(parse_http_address(0, None), video_dir={str(videos)!r})
            try:
                urllib.request.urlopen(sink.url + "history/", timeout=30)
            except urllib.error.HTTPError as error:
                print("PAGE", error.code, error.read().decode())
            sink.close()
        """)
    ],
                          capture_output=True,
                          text=True,
                          timeout=120)
    assert "PAGE 404" in page.stdout, page.stderr
    assert "needs viser" in page.stdout and "pip install -e .[view3d]" in page.stdout
