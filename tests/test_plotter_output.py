"""What a user sees: valid mp4 videos of the env, one per rendered update, for several env kinds."""
import os
import re
import subprocess
import sys
import textwrap

import imageio.v2 as imageio
import numpy as np
import pytest

from async_plotter import Plotter
from async_plotter.supervision.budget import DEFAULT_BUDGET
from tests.conftest import wait_for
from tests.policies import LinearPolicy, OldGymPendulum

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    # each video with its state recording beside it, and the run's history in its folder
    assert sorted(os.listdir(videos)) == [
        "history", "iter_0007.mp4", "iter_0007.npz", "update_0000.mp4", "update_0000.npz"
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


def test_video_log_counts_the_frames_the_file_holds(tmp_path, no_leftovers):
    """A young CartPole falls in ~10 steps: its video chains ~15 episodes with a still between
    each. video_log said 96 frames (the episodes' only) for an mp4 of 201."""
    policy = LinearPolicy(4, 2)  # always action 0: the pole falls at once
    with Plotter("CartPole-v1", policy, max_path_length=200, video_dir=str(tmp_path),
                 seed=0) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 60, message="a CartPole video")
        entry = plotter.stats["video_log"][0]
    assert entry["episodes"] >= 2, "a chained video"
    frames, _ = read_video(entry["path"])
    assert entry["frames"] == len(frames), entry
    assert entry["whole"] is True


def test_a_video_is_reported_after_its_frames_are_counted(tmp_path, no_leftovers):
    """When the worker says a video is written, ``stats["frames"]`` already holds its frames.
    The render process reports its frame count every half second; the first video, drawn
    without the cap, took less than that, and the video's report came before its frames': a
    budget test then saw its 101 frames land in the next 8 s and read 22.7 frames/s under a 15
    frames/s cap."""
    seen, plotter = [], {}

    def on_event(kind, payload):
        if kind == "video":
            seen.append((payload["frames"], plotter["it"].stats["frames"]))

    policy = LinearPolicy(8, 2)
    policy.fill(0.3)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=200,
                 video_dir=str(tmp_path),
                 final_video_timeout=0,
                 on_event=on_event) as plotter["it"]:
        wait_for(lambda: seen, 90, message="the first video")
    in_video, counted = seen[0]
    assert in_video > 50 and counted >= in_video, seen


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


# ------------------------------------------------------- what reaches a script's terminal

TRAINER = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    print("TRAINER", os.getpid(), file=sys.stderr, flush=True)
    # The trainer's own MuJoCo warnings are the script's business: whatever reaches stderr
    # comes from the processes the library starts.
    import mujoco
    mujoco.set_mju_user_warning(lambda message: None)
    from async_plotter import Plotter
    from tests.tf_policies import TF2Policy
    policy = TF2Policy(17, 6)  # TensorFlow in the rollout process too
    with Plotter("HalfCheetah-v5", policy, max_path_length=20, video_dir={videos!r}, http=0,
                 priority="normal", verbose={verbose}) as plotter:
        assert plotter.wait_for_http_url(timeout=120)
        for iteration in range(2):
            policy.set_param_values(policy.get_param_values() + 0.01)
            plotter.update_plot(policy, iteration=iteration)
    print("DONE", flush=True)
    """)

#: TensorFlow's C++ log lines: severity, date, time, pid, file:line
_TF_LOG_LINE = re.compile(r"^[IWEF]\d{4} \S+\s+(\d+) \S+:\d+\]")


def _children_banners(stderr):
    """TensorFlow log lines and MuJoCo notices on ``stderr`` that a process other than the
    trainer (whose pid the script prints first) wrote."""
    trainer = re.search(r"^TRAINER (\d+)$", stderr, re.M)[1]
    return [
        line for line in stderr.splitlines()
        if "settotalmass" in line or (lambda m: m and m[1] != trainer)(_TF_LOG_LINE.match(line))
    ]


@pytest.mark.parametrize("verbose", [1, 0])
def test_a_script_without_logging_sees_the_live_address_and_the_summary(tmp_path, verbose):
    """Neither "live view at http://..." nor close()'s summary appeared unless the script
    configured logging; and the processes the library starts printed TensorFlow's absl/oneDNN
    banners and MuJoCo's "settotalmass is deprecated" (HalfCheetah's XML)."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    script = TRAINER.format(root=ROOT, videos=str(tmp_path / "videos"), verbose=verbose)
    run = subprocess.run([sys.executable, "-c", script],
                         capture_output=True,
                         text=True,
                         env=env,
                         timeout=300)
    assert run.returncode == 0 and "DONE" in run.stdout, run.stderr[-3000:]
    lines = run.stderr.splitlines()
    live = [line for line in lines if line.startswith("live view at http://127.0.0.1:")]
    summary = [line for line in lines if line.startswith("plotter: ")]
    if verbose:
        assert len(live) == 1 and len(summary) == 1, run.stderr[-3000:]
        assert "iter_0001.mp4" in summary[0] and "shows the final policy" in summary[0]
    else:
        assert not live and not summary, run.stderr[-3000:]
    assert not _children_banners(run.stderr), run.stderr[-3000:]


def test_configured_logging_shows_each_line_once(tmp_path):
    script = TRAINER.format(root=ROOT, videos=str(tmp_path / "videos"), verbose=1).replace(
        "    from async_plotter import Plotter\n",
        "    import logging\n    logging.basicConfig(level=logging.INFO)\n"
        "    from async_plotter import Plotter\n")
    run = subprocess.run([sys.executable, "-c", script],
                         capture_output=True,
                         text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.count("live view at http://") == 1, run.stderr[-3000:]
    assert run.stderr.count("the newest, iter_0001.mp4, shows the final policy") == 1


WARNS_WHEN_MADE = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import gymnasium
    from gymnasium.wrappers import RescaleAction
    from async_plotter import Plotter
    from tests.policies import LinearPolicy
    env = RescaleAction(gymnasium.make("HalfCheetah-v5"), -2.0, 2.0)  # float64 bounds: it warns
    print("MADE", file=sys.stderr, flush=True)
    policy = LinearPolicy(17, 6)
    with Plotter(env, policy, max_path_length=20, video_dir={videos!r}, verbose=0) as plotter:
        plotter.update_plot(policy, iteration=0)
    print("DONE", plotter.stats["final_video"], flush=True)
    """)


def test_what_making_the_env_warns_of_is_said_once_by_the_script_not_again_by_its_copies(tmp_path):
    """Gymnasium's warnings when the env is made (``RescaleAction`` lowering a box's precision)
    reached the terminal again from every copy the plotter built: in the trainer's checks, the
    rollout process and its history thread."""
    script = WARNS_WHEN_MADE.format(root=ROOT, videos=str(tmp_path / "videos"))
    run = subprocess.run([sys.executable, "-c", script],
                         capture_output=True,
                         text=True,
                         timeout=300)
    assert run.returncode == 0 and "DONE" in run.stdout, run.stderr[-3000:]
    assert run.stdout.strip().endswith("iter_0000.mp4")
    made, _, after = run.stderr.partition("MADE")
    assert made.count("precision lowered") == 2, run.stderr[-3000:]  # low's and high's
    assert "precision lowered" not in after, run.stderr[-3000:]
