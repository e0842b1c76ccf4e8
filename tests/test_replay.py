"""``async-plotter replay``: a state recording in the 3D viewer. Headless Chromium drags the time
slider (keyboard on the slider, as a user can) and the body the page shows is where the recording
has it at that step."""
import os
import re
import subprocess
import sys
import time
import urllib.request

import mujoco
import numpy as np
import pytest

pytest.importorskip("viser")
pytest.importorskip("mjviser")

from async_plotter.render.recording import read_recording  # noqa: E402 - after the skip
from async_plotter.web.address import parse_http_address  # noqa: E402
from async_plotter.view3d.replay import ReplayBusy, ReplayPool, open_replay  # noqa: E402
from tests.conftest import default_sigint, wait_for  # noqa: E402
from tests.recordings import sled_run  # noqa: E402
from tests.clients import start_replay, stop_with_ctrl_c  # noqa: E402
from tests.test_view3d_browser import shown_x, webgl_chromium  # noqa: E402,F401 - a fixture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def sled_recording(tmp_path_factory):
    return str(sled_run(tmp_path_factory)["folder"] / "update_0000.npz")


def body_x(recording, index):
    """The sled's x at a recorded step, posed from the recording alone."""
    model = recording.load_model()
    data = mujoco.MjData(model)
    mujoco.mj_setState(model, data, recording.states[index], mujoco.mjtState.mjSTATE_FULLPHYSICS)
    mujoco.mj_forward(model, data)
    return float(data.xpos[1][0])


def press(session, key, code, key_code):
    for kind in ("keyDown", "keyUp"):
        session.call("Input.dispatchKeyEvent",
                     type=kind,
                     key=key,
                     code=code,
                     windowsVirtualKeyCode=key_code)


def test_the_slider_moves_the_body_to_the_recorded_pose(sled_recording, webgl_chromium,
                                                        view3d_poses):
    session = webgl_chromium
    recording = read_recording(sled_recording)
    replay = open_replay(sled_recording, parse_http_address(0, None))
    assert (replay.scene.fast is None) == (view3d_poses == "public")
    try:
        # Waits of 30 s: SwiftShader took over 10 s for one pose at a load of 10-17.
        session.call("Page.navigate", url=replay.url)
        wait_for(lambda: shown_x(session) is not None, 120, message="the scene in the page")
        # It plays: the body moves.
        first = shown_x(session)
        wait_for(lambda: abs(shown_x(session) - first) > 0.05, 20, message="the replay to play")
        # Pause (the button's label says what a click does), then take the slider to the end.
        session.evaluate("""[...document.querySelectorAll('button')]
            .find(b => b.textContent.trim() === 'Pause').click()""")
        wait_for(lambda: not replay.playing, 30, message="the pause")
        session.evaluate("document.querySelector('[role=slider]').focus()")
        press(session, "End", "End", 35)
        last = replay.steps - 1
        wait_for(lambda: replay.index == last, 30, message="the slider at the end")
        expected = body_x(recording, last)
        assert expected > 0.5  # the sled went somewhere
        wait_for(lambda: abs(shown_x(session) - expected) < 1e-3,
                 30,
                 message=f"the page to show x = {expected:.3f}")
        press(session, "Home", "Home", 36)
        wait_for(lambda: replay.index == 0, 30, message="the slider at the start")
        wait_for(lambda: abs(shown_x(session) - body_x(recording, 0)) < 1e-3,
                 30,
                 message="the page to show the first pose")
        # The time label is a control of its own, updated after the pose: wait for it too.
        wait_for(lambda: "t = 0.00 s" in session.evaluate("document.body.innerText"),
                 30,
                 message="the time label at the start")
        assert "speed" in session.evaluate("document.body.innerText")
    finally:
        replay.close()


def test_the_command_serves_the_replay_and_refuses_what_is_not_a_recording(
        sled_recording, tmp_path):
    plain = tmp_path / "plain.npz"
    np.savez(plain, x=np.zeros(2))
    refused = subprocess.run(
        [sys.executable, "-m", "async_plotter.cli", "replay",
         str(plain), "--http", "0"],
        capture_output=True,
        text=True,
        timeout=60)
    assert refused.returncode == 2 and "not an async_plotter state recording" in refused.stderr
    process, url = start_replay(sled_recording)
    try:
        assert url, "no URL logged"
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert b"<div id=\"root\">" in answer.read()
    finally:
        stop_with_ctrl_c(process)
    assert process.returncode == 0


def test_the_command_names_one_address_the_pages(sled_recording):
    """It logged websockets' "server listening on 127.0.0.1:46139" (viser's internal port,
    which is not the page) before the page's address."""
    process = subprocess.Popen(
        [sys.executable, "-m", "async_plotter.cli", "replay", sled_recording, "--http", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1"),
        preexec_fn=default_sigint)  # stopped with SIGINT
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if "replay of " in line:
                break
        time.sleep(1.0)  # anything logged just after the address
    finally:
        rest = stop_with_ctrl_c(process)
    lines += rest.splitlines()
    assert process.returncode == 0, lines
    addresses = [line for line in lines if re.search(r"\d+\.\d+\.\d+\.\d+:\d+", line)]
    assert len(addresses) == 1 and re.search(r"replay of .* at http://127\.0\.0\.1:\d+/",
                                             addresses[0]), lines
    assert not [line for line in lines if "listening" in line], lines


def test_a_pool_holds_few_replays_and_closes_those_nobody_watches(sled_recording, tmp_path):
    """serve's replays: one per file, at most ``limit``; a watched one is never closed to make
    room (``ReplayBusy``), an unwatched one is, and one unwatched for ``linger`` s closes."""
    import shutil

    import viser
    from websockets.sync.client import connect

    other = tmp_path / "iter_0001.npz"
    shutil.copy(sled_recording, other)
    pool = ReplayPool(limit=1, linger=1.0)
    try:
        first = pool.open(sled_recording)
        assert pool.open(sled_recording) is first and len(pool) == 1
        first.serve(parse_http_address(0, None))
        with connect(first.url.replace("http://", "ws://"),
                     subprotocols=[f"viser-v{viser.__version__}"],
                     open_timeout=20) as socket:
            assert socket.recv(timeout=20)
            wait_for(lambda: first.front.viewers == 1, 10, message="the viewer counted")
            with pytest.raises(ReplayBusy):
                pool.open(str(other))
        # The client has closed its socket; the server hears of it a moment later.
        wait_for(lambda: first.front.viewers == 0, 10, message="the viewer gone")
        second = pool.open(str(other))  # the first, unwatched now, makes room
        assert second is not first and len(pool) == 1
        wait_for(lambda: len(pool) == 0, 10, message="the unwatched replay closed")
    finally:
        pool.close()
