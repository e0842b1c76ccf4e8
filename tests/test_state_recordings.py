"""State recordings beside the videos, and ``async-plotter render`` drawing them again."""
import json
import logging
import os
import subprocess
import sys

import imageio.v2 as imageio
import mujoco
import numpy as np
import pytest

from async_plotter import Plotter
from async_plotter.render.recording import (FORMAT, RecordingError, read_recording, recordings_in)
from tests.conftest import wait_for
from tests.policies import LinearPolicy

STEPS = 60


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One HalfCheetah video of a policy that moves, its recording and the episodes reported."""
    folder = tmp_path_factory.mktemp("videos")
    policy = LinearPolicy(17, 6)
    policy.fill(0.3)
    episodes = []
    with Plotter("HalfCheetah-v5",
                 policy,
                 max_path_length=STEPS,
                 video_dir=str(folder),
                 min_video_seconds=0,
                 seed=0,
                 on_event=lambda kind, payload: kind == "episode" and episodes.append(payload)
                 ) as plotter:
        wait_for(lambda: plotter.stats["state_recordings"] >= 1, 120, message="a recording")
        stats = plotter.stats
    return folder, stats, episodes


def frames_of(path):
    reader = imageio.get_reader(path)
    try:
        return [frame for frame in reader]
    finally:
        reader.close()


def render_command(*arguments, env=None):
    """``async-plotter render ARGUMENTS`` in a process of its own: what it printed and returned."""
    return subprocess.run([sys.executable, "-m", "async_plotter.cli", "render", *arguments],
                          capture_output=True,
                          text=True,
                          timeout=120,
                          env=env)


def test_each_video_has_a_recording_beside_it_that_holds_every_shown_step(recorded):
    folder, stats, episodes = recorded
    names = sorted(os.listdir(folder))
    assert "update_0000.npz" in names and "update_0000.mp4" in names
    assert not [name for name in names if name.startswith(".partial_")]
    assert stats["last_state_recording"] == str(folder / "update_0000.npz")
    recording = read_recording(str(folder / "update_0000.npz"))
    video = frames_of(str(folder / "update_0000.mp4"))
    # HalfCheetah shows every step: the reset pose and 60 steps, as many as the video's frames.
    assert len(recording.states) == len(video) == STEPS + 1
    assert recording.meta["update"] == 0 and recording.meta["fps"] == 20.0
    assert recording.meta["preset"] == stats["visual_preset"]
    assert np.isnan(recording.actions[0]).all() and recording.actions.shape == (STEPS + 1, 6)
    assert np.all(np.abs(recording.actions[1:]) <= 1.0)
    # time runs at the env's dt, and the rewards add up to the episode's return
    assert np.allclose(np.diff(recording.times), 0.05)
    assert recording.rewards.sum() == pytest.approx(episodes[0]["reward"], rel=1e-4)
    # A few KB per second of motion, the model (MJB) included.
    size = os.path.getsize(folder / "update_0000.npz")
    assert size / recording.seconds < 12_000, size


def test_a_recording_replays_without_the_env(recorded):
    folder, _, _ = recorded
    recording = read_recording(str(folder / "update_0000.npz"))
    model = recording.load_model()  # from the MJB bytes alone
    data = mujoco.MjData(model)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    mujoco.mj_setState(model, data, recording.states[-1], spec)
    mujoco.mj_forward(model, data)
    assert data.time == pytest.approx(recording.times[-1])
    # The policy moves the cheetah: its root's x at the end differs from the start.
    assert abs(recording.states[-1][1] - recording.states[0][1]) > 0.05


def test_render_draws_the_original_video_again_at_the_same_preset(recorded, tmp_path):
    folder, _, _ = recorded
    out = tmp_path / "again"
    result = render_command(str(folder), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "61/61 frames" in result.stderr  # the progress bar's last state
    original = frames_of(str(folder / "update_0000.mp4"))
    again = frames_of(str(out / "update_0000.mp4"))
    assert len(again) == len(original)
    differences = [np.abs(a.astype(int) - b.astype(int)).mean() for a, b in zip(original, again)]
    assert max(differences) < 2.0, differences


# Draws one recording's states three ways in a process of its own (GL beside a TensorFlow another
# test file imported in this worker could crash it): the cheap preset as it is, with round geoms at
# the model's own tessellation, and with MuJoCo's own trilinear texture filtering.
_DRAW_THREE_WAYS = """
import json, pickle, sys
from async_plotter.sinks.rerender import prepare_gl
prepare_gl()  # before MuJoCo is imported, as the render process
import numpy as np
from OpenGL import GL
from async_plotter.render import mujoco_scene
from async_plotter.render.recording import read_recording

recording = read_recording(sys.argv[1])
model = recording.load_model()
own = (int(model.vis.quality.numslices), int(model.vis.quality.numstacks))
cheap_tessellation, one_level = mujoco_scene.CHEAP_TESSELLATION, mujoco_scene._sample_one_mipmap_level
arms = {"cheap": (cheap_tessellation, one_level), "own tessellation": (own, one_level),
        "trilinear": (cheap_tessellation, lambda renderer: None)}
frames, drawn = {}, {}
for name, (tessellation, filtering) in arms.items():
    mujoco_scene.CHEAP_TESSELLATION, mujoco_scene._sample_one_mipmap_level = tessellation, filtering
    scene = mujoco_scene.MujocoScene(pickle.dumps(model), None, -1, 480, 480, "cheap")
    quality = scene.model.vis.quality
    pictures = []
    for state in recording.states:
        scene.set_state(state)
        pictures.append(scene.render().astype(np.int16))
    frames[name] = np.stack(pictures)
    context = scene._renderer._mjr_context
    floor = [int(context.texture[index]) for index in range(context.ntexture)
             if context.textureType[index] == 0]  # mjTEXTURE_2D: the checkered floor
    GL.glBindTexture(GL.GL_TEXTURE_2D, floor[0])
    drawn[name] = {"tessellation": [int(quality.numslices), int(quality.numstacks)],
                   "floor_filter": int(GL.glGetTexParameteriv(GL.GL_TEXTURE_2D,
                                                              GL.GL_TEXTURE_MIN_FILTER))}
    scene.close()
for name in ("own tessellation", "trilinear"):
    difference = np.abs(frames[name] - frames["cheap"])
    drawn[name].update(mean=float(difference.mean()),
                       far=float((difference.max(axis=-1) > 8).mean()))
print(json.dumps({"own": own, "drawn": drawn,
                  "one_level": GL.GL_LINEAR_MIPMAP_NEAREST, "two_levels": GL.GL_LINEAR_MIPMAP_LINEAR}))
"""


@pytest.fixture(scope="module")
def drawn_three_ways(recorded):
    folder, _, _ = recorded
    result = subprocess.run(
        [sys.executable, "-c", _DRAW_THREE_WAYS,
         str(folder / "update_0000.npz")],
        capture_output=True,
        text=True,
        timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_cheap_preset_draws_round_geoms_coarser_with_the_same_picture(drawn_three_ways):
    """Halving MuJoCo's slices and stacks cut 20-35% of the CPU a frame on llvmpipe
    (``benchmarks/frame_cost.py --compare detail``); at 320x320 the bodies look the same."""
    cheap, full = (drawn_three_ways["drawn"][arm]["tessellation"]
                   for arm in ("cheap", "own tessellation"))
    assert full == drawn_three_ways["own"] and cheap[0] < full[0] and cheap[1] < full[1]
    # Measured here: 0.21 of a colour level on average, 0.9% of pixels (outlines) over 8 levels.
    apart = drawn_three_ways["drawn"]["own tessellation"]
    assert apart["mean"] < 0.5 and apart["far"] < 0.02, apart


def test_the_cheap_preset_samples_one_mipmap_level_with_the_same_picture(drawn_three_ways):
    """Trilinear filtering of the checkered floor was 13-22% of a frame's CPU on llvmpipe
    (``benchmarks/frame_cost.py --compare texture``); one mipmap level changes only the far
    checker edges."""
    drawn = drawn_three_ways["drawn"]
    assert drawn["cheap"]["floor_filter"] == drawn_three_ways["one_level"], drawn
    assert drawn["trilinear"]["floor_filter"] == drawn_three_ways["two_levels"], drawn
    # Measured on HalfCheetah: 0.9 of a colour level on average, 4.4% of pixels (the far
    # checker edges, a little sharper) over 8 levels. Without mipmaps: 8.9 and 14%.
    apart = drawn["trilinear"]
    assert apart["mean"] < 2.0 and apart["far"] < 0.08, apart


def test_render_says_once_what_it_wrote_and_nothing_of_other_libraries(recorded, tmp_path):
    """It printed PyOpenGL's "INFO No OpenGL_accelerate module loaded" and its "wrote ..." line
    twice (the video sink's and its own)."""
    folder, _, _ = recorded
    result = render_command(str(folder / "update_0000.npz"), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    wrote = [line for line in lines if " wrote " in line]
    assert len(wrote) == 1 and str(tmp_path / "update_0000.mp4") in wrote[0], lines
    assert "(61 frames, 1 episode)" in wrote[0]
    assert not [line for line in lines if "OpenGL" in line], lines
    # What is left: the progress bar and that line.
    assert len(lines) == 2 and "61/61 frames" in lines[0], lines


def test_render_draws_with_osmesa_where_egl_makes_no_context(recorded, tmp_path):
    """As the plot worker does: EGL is only the default. glvnd (libEGL) reads its drivers from
    this list, and it names none, as on a machine without an EGL driver."""
    folder, _, _ = recorded
    environment = dict(os.environ,
                       __EGL_VENDOR_LIBRARY_FILENAMES=str(tmp_path / "no_egl_vendor.json"))
    environment.pop("MUJOCO_GL", None)
    result = render_command(str(folder / "update_0000.npz"),
                            "--out",
                            str(tmp_path),
                            env=environment)
    assert result.returncode == 0, result.stderr
    assert "no EGL context (ImportError: Cannot initialize a EGL" in result.stderr
    assert "drawing with OSMesa instead" in result.stderr
    assert len(frames_of(str(tmp_path / "update_0000.mp4"))) == STEPS + 1


def test_render_changes_the_size(recorded, tmp_path):
    folder, _, _ = recorded
    result = render_command(str(folder / "update_0000.npz"), "--size", "160", "--quality", "cheap",
                            "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    frames = frames_of(str(tmp_path / "update_0000.mp4"))
    assert frames[0].shape == (160, 160, 3) and len(frames) == STEPS + 1


def test_what_is_not_a_recording_is_refused_and_runs_no_code(tmp_path):
    plain = tmp_path / "plain.npz"
    np.savez(plain, state=np.zeros(3))
    with pytest.raises(RecordingError, match="not an async_plotter state recording"):
        read_recording(str(plain))
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, format=np.array(FORMAT), meta=np.array([{"a": 1}], dtype=object))
    with pytest.raises(RecordingError):
        read_recording(str(pickled))  # object arrays need pickle, which is never allowed
    assert recordings_in(str(tmp_path)) == [str(pickled), str(plain)]
    result = render_command(str(plain), "--out", str(tmp_path))
    assert result.returncode == 1 and "not an async_plotter state recording" in result.stderr
    # A file of the run given by mistake is named for what it is not, not as "pickled data".
    returns = tmp_path / "returns.csv"
    returns.write_text("iteration,update,return\n0,1,31.8\n")
    result = render_command(str(returns), "--out", str(tmp_path))
    assert result.returncode == 1, result.stderr
    assert f"{returns} is not a state recording: recordings are numpy zips (.npz)" in result.stderr
    assert "pickled" not in result.stderr


# ------------------------------------------------------------ record_states: live episodes


@pytest.mark.parametrize("env, policy", [("CartPole-v1", (4, 2)), ("Pendulum-v1", (3, 1)),
                                         ("Swimmer-v5", (8, 2))])
def test_record_states_on_an_env_that_draws_itself_says_it_records_nothing(
        env, policy, tmp_path, caplog):
    """CartPole and Pendulum draw their own frames: there is no physics state to record, and
    record_states=True silently wrote nothing. Plotter() now says so, once; a MuJoCo env is
    recorded and gets no such line."""
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        plotter = Plotter(env,
                          LinearPolicy(*policy),
                          video_dir=str(tmp_path),
                          http=0,
                          record_states=True)
    plotter.close()  # never started
    said = [r for r in caplog.records if "record_states" in r.getMessage()]
    if env == "Swimmer-v5":
        assert not said
        return
    assert len(said) == 1 and said[0].levelno == logging.WARNING, said
    assert said[0].getMessage() == (
        f"record_states=True records nothing: {env} draws its own frames (not MuJoCo), so "
        "there is no physics state to record; its live view and videos are unaffected")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_record_states_writes_every_live_episode_beside_the_videos(tmp_path_factory):
    """``Plotter(http=0, video_dir=..., record_states=True)``: each episode the live page shows
    is one recording in ``<video_dir>/live/``, numbered in order; the first is the same rollout
    as the video's recording."""
    from async_plotter.render.videos import LIVE_RECORDING_NAME
    from tests.recordings import STEPS, sled_run

    run = sled_run(tmp_path_factory)
    live = run["folder"] / "live"
    assert run["stats"]["live_state_recordings"] >= 2 and run["stats"]["state_recordings"] >= 1
    names = sorted(os.listdir(live))
    assert not [name for name in names if name.startswith(".partial_")], names
    assert all(LIVE_RECORDING_NAME.fullmatch(name) for name in names), names
    assert names[:2] == ["ep_000000_update_0000.npz", "ep_000001_update_0000.npz"]
    first, second = (read_recording(str(live / name)) for name in names[:2])
    video = read_recording(str(run["folder"] / "update_0000.npz"))
    for recording in (first, second):
        assert recording.meta["live"] and recording.meta["completed"]
        assert recording.meta["update"] == 0
        # The sled shows every 2nd of its 50 steps a second: the reset pose, then 50 steps.
        assert len(recording.states) == STEPS // 2 + 1
        assert recording.states[-1][1] > recording.states[0][1] + 0.5  # it went +x
        assert recording.rewards.sum() == pytest.approx(recording.meta["total_reward"], rel=1e-4)
    # The video recorded the first live episode: the same states, seeded the same.
    assert np.array_equal(first.states, video.states)
    assert np.array_equal(first.actions, video.actions, equal_nan=True)


def test_live_recordings_are_written_whole_bounded_and_numbered_on(tmp_path):
    """The newest ``keep`` live recordings stay; a render process started again (after a
    restart) numbers on after them; a failed rollout is
    not kept. A real sled scene, posed as the render process poses it."""
    import pickle

    from async_plotter.render.mujoco_scene import MujocoScene
    from async_plotter.sinks.states import LiveStateRecordingSink
    from async_plotter.render.stream import EpisodeEnd, EpisodeInfo, StepState
    from async_plotter.sinks.base import ShownStep
    from tests.policies import make_sled

    env = make_sled()
    model = env.unwrapped.model
    env.close()
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state = np.zeros(mujoco.mj_stateSize(model, spec))

    def play(sink, episode, steps, end=True, failed=False):
        info = EpisodeInfo(1, 7, episode)
        sink.begin_episode(info)
        for step in range(steps):
            state[1] = 0.01 * step
            shown = StepState(state.copy(), None if step == 0 else np.ones(1), 1.0)
            sink.add_step(None, ShownStep(info, shown, scene.data, 0.0))
        if end:
            sink.end_episode(info, EpisodeEnd(steps, float(steps), True, failed=failed))

    scene = MujocoScene(pickle.dumps(model), None, -1, 320, 240, "cheap", gl=False)
    written = []
    sink = LiveStateRecordingSink(str(tmp_path),
                                  25.0,
                                  on_written=lambda path, *_: written.append(path),
                                  keep=2)
    sink.attach(scene)
    assert not sink.wants_pixels()
    for episode in range(3):
        play(sink, episode, 5)
    play(sink, 3, 5, failed=True)  # its rollout failed: nothing of it is kept
    play(sink, 4, 1)  # one pose: nothing moved, nothing kept
    sink.close()
    live = tmp_path / "live"
    assert sorted(os.listdir(live)) == ["ep_000001_iter_0007.npz", "ep_000002_iter_0007.npz"]
    assert len(written) == 3
    recording = read_recording(str(live / "ep_000002_iter_0007.npz"))
    assert recording.meta["iteration"] == 7 and recording.meta["live"]
    assert np.allclose(recording.states[:, 1], 0.01 * np.arange(5))
    again = LiveStateRecordingSink(str(tmp_path), 25.0, keep=2)
    again.attach(scene)
    play(again, 0, 3, end=False)
    again.close()  # the episode open when it stops was shown as far as it went: kept
    assert sorted(os.listdir(live)) == ["ep_000002_iter_0007.npz", "ep_000003_iter_0007.npz"]
    assert not read_recording(str(live / "ep_000003_iter_0007.npz")).meta["completed"]
