"""What a user sees: valid mp4 videos of the env, one per rendered update, for several env kinds."""
import os

import imageio.v2 as imageio
import numpy as np
import pytest

from async_plotter import Plotter
from async_plotter.trainer_side.plotter import DEFAULT_BUDGET
from tests.conftest import wait_for
from tests.policies import LinearPolicy, OldGymPendulum

pytestmark = pytest.mark.slow


def read_video(path):
    reader = imageio.get_reader(path)
    try:
        return [frame for frame in reader], reader.get_meta_data()
    finally:
        reader.close()


def test_mujoco_videos_decode_and_show_the_env(tmp_path, no_leftovers):
    policy = LinearPolicy(8, 2)
    videos = tmp_path / "videos"
    with Plotter("Swimmer-v5", policy, max_path_length=40, video_dir=str(videos), fps=200,
                 seed=0) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 60, message="the initial policy's video")
        policy.set_param_values(np.random.default_rng(0).normal(size=16).astype(np.float32))
        plotter.update_plot(policy, iteration=7)
        wait_for(lambda: plotter.stats["videos"] >= 2, 60, message="iteration 7's video")
        stats = plotter.stats
    # each video with its state recording beside it
    assert sorted(os.listdir(videos)) == [
        "iter_0007.mp4", "iter_0007.npz", "update_0000.mp4", "update_0000.npz"
    ]
    frames, meta = read_video(str(videos / "iter_0007.mp4"))
    assert len(frames) == 41  # the reset pose and 40 steps
    assert frames[0].shape == (320, 320, 3)  # the cheap preset: 2/3 of the env's 480x480
    assert meta["fps"] == 25  # Swimmer's own rate: fps=200 is only the cap
    # A picture of the scene, not a blank buffer: a checkered floor and an orange body.
    assert frames[0].std() > 20
    orange = (frames[0][..., 0] > 150) & (frames[0][..., 2] < 100)
    assert orange.sum() > 50, "the swimmer's body should be visible"
    assert stats["updates_applied"] == 1 and stats["restarts"] == 0
    assert stats["visual_preset"] == "cheap" and "llvmpipe" in stats["gl_renderer"]


def test_self_drawing_env_cartpole(tmp_path, no_leftovers):
    policy = LinearPolicy(4, 2)  # two outputs -> argmax over CartPole's two actions
    # min_video_seconds=0: one episode per video, however short (no chaining).
    with Plotter("CartPole-v1",
                 policy,
                 max_path_length=20,
                 video_dir=str(tmp_path),
                 fps=200,
                 min_video_seconds=0) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 60, message="a CartPole video")
    frames, _ = read_video(str(tmp_path / "update_0000.mp4"))
    assert frames[0].shape == (400, 600, 3)
    assert 2 <= len(frames) <= 21


def test_old_gym_style_env_through_the_adapter(tmp_path, no_leftovers):
    policy = LinearPolicy(2, 1)
    policy.set_param_values(np.array([0.5, -0.5], np.float32))
    with Plotter(OldGymPendulum(), policy, max_path_length=15, video_dir=str(tmp_path),
                 fps=200) as plotter:
        plotter.update_plot(policy, iteration=3)
        wait_for(lambda: plotter.stats["videos"] >= 1, 60, message="a video of the gym-style env")
    frames, _ = read_video(str(tmp_path / "iter_0003.mp4"))
    assert len(frames) == 16 and frames[0].shape == (64, 96, 3)
    assert any(not np.array_equal(frames[0], frame) for frame in frames[1:]), "the pole moves"


def test_on_frame_callback_and_env_factory(tmp_path, no_leftovers):
    import gymnasium

    seen = tmp_path / "frames.txt"

    def record(frame, info, path=str(seen)):
        with open(path, "a") as out:
            out.write(f"{info['update']} {frame.shape}\n")

    policy = LinearPolicy(4, 1)
    with Plotter(lambda: gymnasium.make("InvertedPendulum-v5"),
                 policy,
                 max_path_length=5,
                 on_frame=record,
                 fps=200,
                 frame_size=(64, 48)) as plotter:
        wait_for(lambda: plotter.stats["episodes"] >= 1 and seen.exists(),
                 60,
                 message="frames handed to on_frame")
    lines = seen.read_text().splitlines()
    assert lines and lines[0] == "0 (48, 64, 3)"


def test_a_budget_by_default_and_an_explicit_priority_wins(tmp_path, no_leftovers):
    """Videos and live pages alike are held to the default CPU budget; ``priority=`` replaces
    it with a fixed priority, applied once the worker has started."""
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5", policy, video_dir=str(tmp_path)) as videos, \
            Plotter("Swimmer-v5", policy, http=0) as live, \
            Plotter("Swimmer-v5", policy, http=0, priority="idle") as chosen:
        for plotter in (videos, live, chosen):
            wait_for(lambda: plotter.stats["boot_seconds"] is not None,
                     60,
                     message="the workers to start")
        for plotter in (videos, live):
            assert plotter.stats["budget"] == DEFAULT_BUDGET
            assert plotter.stats["budget_mechanism"] == "sched"  # root may raise priorities
        assert chosen.stats["budget"] is None
        wait_for(lambda: all(
            os.sched_getscheduler(pid) == os.SCHED_IDLE
            for pid in chosen.stats["worker_pids"].values()),
                 30,
                 message="an explicit priority to win")
