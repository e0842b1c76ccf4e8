"""Videos play at their env's own rate: every k-th step is drawn where the rate is above the cap."""
import os
import signal
import threading
import time
import types

import gymnasium
import imageio.v2 as imageio
import numpy as np
import pytest

from async_plotter import Plotter
from async_plotter.sinks.encoder import Encoder
from async_plotter.worker.playback import plan_playback
from tests.conftest import wait_for
from tests.policies import LinearPolicy

# Gymnasium's own figures (metadata["render_fps"] = 1 / dt): steps per second of simulated time
# and the stride at the default cap of 30 frames/s.
ENV_RATES = [
    ("Hopper-v5", 125, 4),
    ("Walker2d-v5", 125, 4),
    ("Humanoid-v5", 67, 3),
    ("Reacher-v5", 50, 2),
    ("Swimmer-v5", 25, 1),
    ("InvertedPendulum-v5", 25, 1),
    ("HalfCheetah-v5", 20, 1),
    ("CartPole-v1", 50, 2),
]


@pytest.mark.parametrize("env_id,rate,stride", ENV_RATES)
def test_the_stride_keeps_each_env_under_the_cap_at_real_speed(env_id, rate, stride):
    env = gymnasium.make(env_id)
    try:
        playback = plan_playback(env, cap=30)
    finally:
        env.close()
    assert (playback.rate, playback.stride) == (rate, stride)
    assert playback.fps == pytest.approx(rate / stride) and playback.fps <= 30 * 1.05


def test_an_env_without_a_rate_plays_at_the_cap():

    class NoRate:
        metadata = {}

    playback = plan_playback(NoRate(), cap=30)
    assert (playback.rate, playback.stride, playback.fps, playback.source) == (30, 1, 30, "fps")


def test_a_higher_cap_draws_every_step():
    env = gymnasium.make("Hopper-v5")
    try:
        assert plan_playback(env, cap=200).stride == 1
    finally:
        env.close()


def read_video(path):
    reader = imageio.get_reader(path)
    try:
        return reader.get_meta_data()["fps"], reader.count_frames()
    finally:
        reader.close()


def shown_frames(steps, stride):
    """The reset pose, every stride-th step, and the last step if it is not one of them."""
    return 1 + steps // stride + (1 if steps % stride else 0)


def record_one_video(env_id, obs_dim, act_dim, tmp_path, max_path_length, **kwargs):
    episodes = []
    with Plotter(env_id,
                 LinearPolicy(obs_dim, act_dim),
                 max_path_length=max_path_length,
                 video_dir=str(tmp_path),
                 min_video_seconds=0,
                 seed=0,
                 on_event=lambda kind, payload: kind == "episode" and episodes.append(payload),
                 **kwargs) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 90, message=f"a {env_id} video")
        stats = plotter.stats
    fps, frames = read_video(stats["video_log"][0]["path"])
    return stats, episodes[0]["steps"], fps, frames


@pytest.mark.slow
def test_a_hopper_video_plays_at_its_env_rate(tmp_path, no_leftovers):
    stats, steps, fps, frames = record_one_video("Hopper-v5", 11, 3, tmp_path, 61)
    assert (stats["env_rate"], stats["frame_stride"], stats["video_fps"]) == (125, 4, 31.25)
    assert fps == pytest.approx(31.25)
    # 61 steps (or fewer, if it falls): frames at steps 0, 4, ..., 60 and the last one.
    assert frames == shown_frames(steps, 4) == stats["video_log"][0]["frames"]
    if steps == 61:
        assert frames == 17


@pytest.mark.slow
def test_a_swimmer_video_plays_at_25_frames_per_second(tmp_path, no_leftovers):
    stats, steps, fps, frames = record_one_video("Swimmer-v5", 8, 2, tmp_path, 30)
    assert fps == pytest.approx(25) and stats["frame_stride"] == 1
    assert steps == 30 and frames == 31


@pytest.mark.slow
def test_a_self_drawing_cartpole_video_plays_at_25_frames_per_second(tmp_path, no_leftovers):
    stats, steps, fps, frames = record_one_video("CartPole-v1", 4, 2, tmp_path, 40)
    assert fps == pytest.approx(25) and stats["frame_stride"] == 2
    assert frames == shown_frames(steps, 2)


@pytest.mark.parametrize("env_id,steps", [("Hopper-v5", 1000), ("Swimmer-v5", 200),
                                          ("HalfCheetah-v5", 160), ("CartPole-v1", 400)])
def test_videos_while_training_show_the_same_simulated_time_on_every_env(env_id, steps):
    """The default ``video_length="auto"``: ``DEFAULT_VIDEO_SECONDS`` (8 s) of simulated time in
    each env's own steps; steps given by the user stay steps; None and live views: whole."""
    from async_plotter.trainer.config import DEFAULT_VIDEO_SECONDS, _video_span
    from async_plotter.worker.rollout_process import _clip_steps

    env = gymnasium.make(env_id)
    try:
        playback = plan_playback(env, cap=30)
    finally:
        env.close()
    update = types.SimpleNamespace(max_path_length=5000)

    def clip(video_length, live=False, first=False, min_video_seconds=3.0):
        length, seconds = _video_span(video_length)
        config = types.SimpleNamespace(live=live,
                                       video_length=length,
                                       video_seconds=seconds,
                                       min_video_seconds=min_video_seconds)
        return _clip_steps(update, config, playback, first)

    assert DEFAULT_VIDEO_SECONDS == 8
    assert clip("auto") == steps
    assert clip(30) == 30
    assert clip(None) == clip("auto", live=True) == 5000
    # The run's first video, drawn at start-up: 3 s (min_video_seconds if longer, up to 8 s);
    # a length the user gave stays what they gave.
    assert clip("auto", first=True) == clip("auto", first=True,
                                            min_video_seconds=0) == steps * 3 // 8
    assert clip("auto", first=True, min_video_seconds=5) == steps * 5 // 8
    assert clip("auto", first=True, min_video_seconds=60) == steps
    assert clip(30, first=True) == 30 and clip(None, first=True) == 5000
    assert clip("auto", live=True, first=True) == 5000


@pytest.mark.slow
def test_the_first_video_shows_3_s_of_the_untrained_policy_and_the_next_ones_8(
        tmp_path, no_leftovers):
    """The first video is drawn while the worker starts, at the trainer's priority: at the
    default length it shows 3 s of the policy it started with, then videos show 8 s."""
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=1000,
                 video_dir=str(tmp_path),
                 frame_size=(64, 64),
                 priority="normal",
                 history=False,
                 final_video_timeout=0) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 120, message="the first video")
        policy.fill(0.3)
        plotter.update_plot(policy)
        wait_for(lambda: plotter.stats["videos"] >= 2, 120, message="the second video")
        log = plotter.stats["video_log"]
    assert [entry["frames"] for entry in log[:2]] == [1 + 75, 1 + 200]
    assert [read_video(entry["path"]) for entry in log[:2]] == [(25, 76), (25, 201)]


@pytest.mark.slow
def test_the_first_video_written_to_files_alone_is_drawn_without_the_cap(tmp_path, no_leftovers):
    """Start-up runs at the trainer's priority, uncharged: where only files are written, its
    first video is drawn as fast as the machine goes, not spread over its playing time by the
    frame cap. A whole 1000-step Swimmer rollout (its TimeLimit) plays 40 s; at the cap,
    drawing it would take as long. (With a user sink or a live view, the cap holds from the first frame:
    tests/test_shape.py checks the due times a sink gets.)"""
    policy = LinearPolicy(8, 2)
    policy.fill(0.3)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=1000,
                 video_dir=str(tmp_path),
                 video_length=None,
                 frame_size=(64, 64),
                 final_video_timeout=0) as plotter:
        wait_for(lambda: plotter.stats["boot_seconds"] is not None, 120, message="the boot")
        booted = time.monotonic()
        wait_for(lambda: plotter.stats["videos"] >= 1, 120, message="the first video")
        took = time.monotonic() - booted
        stats = plotter.stats
    fps, frames = read_video(stats["video_log"][0]["path"])
    assert fps == pytest.approx(25) and frames == 1001 == stats["video_log"][0]["frames"]
    assert took < 25, f"the first video took {took:.0f} s after the boot: drawn at the cap"


def test_a_frame_goes_to_the_encoder_while_ffmpeg_is_still_busy(tmp_path):
    """The render process hands a whole frame to ffmpeg without waiting for ffmpeg to read it,
    so drawing the next frame overlaps encoding this one: through Linux's default 64 KiB pipe a
    320x320 frame (300 KiB) waited on ffmpeg several times, ~15% of each frame's wall time
    (``benchmarks/frame_cost.py --compare pipe``). Here ffmpeg is stopped outright: the write
    must still return."""
    encoder = Encoder(str(tmp_path / "busy.mp4"), 320, 320, 25.0)
    frame = np.full((320, 320, 3), 128, np.uint8)
    written = threading.Event()

    def write() -> None:
        encoder.write(frame)
        written.set()

    os.kill(encoder.pid, signal.SIGSTOP)
    try:
        threading.Thread(target=write, daemon=True).start()
        assert written.wait(30), "the frame waited for a stopped ffmpeg to read it"
    finally:
        os.kill(encoder.pid, signal.SIGCONT)
    encoder.finish()
    assert imageio.get_reader(str(tmp_path / "busy.mp4")).count_frames() == 1
