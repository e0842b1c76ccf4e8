"""Every run shows its final policy, and videos are worth watching."""
import functools
import logging
import os
import signal
import threading
import time

import imageio.v2 as imageio
import numpy as np
import psutil
import pytest

from async_plotter import Plotter
from tests.conftest import shm_segments, wait_for
from tests.policies import LinearPolicy
from tests.test_tensorboard import decode_gif, shown_images

pytestmark = pytest.mark.slow


def frame_count(path):
    reader = imageio.get_reader(path)
    try:
        return sum(1 for _ in reader)
    finally:
        reader.close()


def rendered(recording):
    """The video ``async-plotter render`` draws of ``recording`` (what a close line tells users to
    run), at the cheap preset; it is written to ``rendered/`` beside the recording."""
    import subprocess
    import sys

    drawn = subprocess.run(
        [sys.executable, "-m", "async_plotter.cli", "render", recording, "--quality", "cheap"],
        capture_output=True,
        text=True,
        timeout=300)
    assert drawn.returncode == 0, drawn.stderr
    name = os.path.splitext(os.path.basename(recording))[0] + ".mp4"
    video = os.path.join(os.path.dirname(recording), "rendered", name)
    assert os.path.exists(video), (video, drawn.stderr)
    return video


def videos_in(directory):
    return sorted(name for name in os.listdir(directory) if name.endswith(".mp4"))


def test_close_records_the_final_policy_and_counts_it(tmp_path, caplog, no_leftovers):
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5", policy, max_path_length=60, video_dir=str(tmp_path), seed=0)
    plotter.start()
    for iteration in range(12):  # faster than the worker records: most updates are skipped
        policy.fill(0.05 * iteration)
        plotter.update_plot(policy, iteration=iteration)
        if iteration == 7:  # an earlier iteration's policy sent again keeps its number
            policy.fill(0.05 * 3)
            plotter.update_plot(policy, iteration=3)
    plotter.update_plot(policy, iteration=11)  # the last one again, as a script may at its end
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        plotter.close()
    stats = plotter.stats
    assert stats["final_video"] == str(tmp_path / "iter_0011.mp4")
    assert "iter_0011.mp4" in videos_in(tmp_path)
    assert frame_count(stats["final_video"]) == 61  # the reset pose and 60 steps
    # stats counts every video that exists, the one finished during close() included.
    assert stats["videos"] == len(videos_in(tmp_path)) == len(stats["video_log"])
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plotter: ")]
    assert summary and "shows the final policy" in summary[-1], summary
    # The close line says how many of the 12 iterations the history kept (the skipped ones not).
    recorded = {entry["iteration"] for entry in stats["history"]} - {None}
    assert 11 in recorded and len(recorded) < 12, recorded
    assert f"; {len(recorded)} of the 12 iterations, a newer policy replacing" in summary[-1]


def _after_a_30_step_clip(video_dir, **options):
    """A Swimmer plotter of 90-step rollouts and 30-step videos, once iteration 0's video (a
    clip) is written; and its policy."""
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=90,
                      video_length=30,
                      video_dir=str(video_dir),
                      seed=0,
                      **options).start()
    policy.fill(0.1)
    plotter.update_plot(policy, iteration=0)
    wait_for(lambda: any(v["iteration"] == 0 for v in plotter.stats["video_log"]),
             90,
             message="iteration 0's video")
    return policy, plotter


def test_videos_while_training_stop_at_video_length_and_the_final_one_is_whole(
        tmp_path, no_leftovers):
    policy, plotter = _after_a_30_step_clip(tmp_path)
    policy.fill(0.2)
    plotter.update_plot(policy, iteration=1)
    plotter.close()
    assert frame_count(str(tmp_path / "iter_0000.mp4")) == 31  # the reset pose and 30 steps
    assert plotter.stats["final_video"] == str(tmp_path / "iter_0001.mp4")
    assert frame_count(plotter.stats["final_video"]) == 91, "the final video is a whole rollout"
    clipped = {entry["iteration"]: entry["clipped"] for entry in plotter.stats["video_log"]}
    assert clipped[0] is True and clipped[1] is False, plotter.stats["video_log"]


def test_a_clip_of_the_final_policy_still_being_drawn_at_close_is_made_again_whole(
        tmp_path, caplog, no_leftovers):
    """close() right after the last update while the worker was idle: the rollout process has
    sent the final policy's clip (its steps are simulated ahead of the drawing) before close()
    asks for the final video. That video is still the whole episode, and the clip is dropped
    undrawn: TensorBoard, which shows the first image written at a step, shows the whole
    episode too."""
    logdir = tmp_path / "tensorboard"
    policy, plotter = _after_a_30_step_clip(tmp_path, tensorboard_dir=str(logdir))
    render = plotter.stats["worker_pids"]["render"]
    episodes = plotter.stats["episodes"]
    wait_for(lambda: plotter.stats["tensorboard_images"] >= 1, 30, message="iteration 0's image")
    frames_before = plotter.stats["frames"]
    os.kill(render, signal.SIGSTOP)  # the clip's steps wait in the pipe, undrawn
    resume = threading.Timer(1.0, os.kill, (render, signal.SIGCONT))
    try:
        policy.fill(0.2)
        plotter.update_plot(policy, iteration=1)
        wait_for(lambda: plotter.stats["episodes"] > episodes, 30, message="iteration 1's clip")
        resume.start()  # once close() has looked: no video of the final policy is finished
        with caplog.at_level(logging.INFO, logger="async_plotter"):
            plotter.close()
    finally:
        resume.cancel()
        os.kill(render, signal.SIGCONT) if psutil.pid_exists(render) else None
    stats = plotter.stats
    assert stats["final_video"] == str(tmp_path / "iter_0001.mp4")
    assert frame_count(stats["final_video"]) == 91, "the final video is a whole rollout"
    final = [entry for entry in stats["video_log"] if entry["iteration"] == 1]
    assert len(final) == 1 and final[0]["clipped"] is False and final[0]["whole"], final
    assert frame_count(str(tmp_path / "iter_0000.mp4")) == 31  # videos while training: clips
    assert stats["videos"] == len(videos_in(tmp_path)) == len(stats["video_log"])
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plotter: ")]
    assert summary and "shows the final policy" in summary[-1], summary
    assert "-frame clip" not in summary[-1], summary[-1]
    # The 91 frames of the whole episode, and at most a frame of the clip before it was dropped
    # (both drawn: 31 more).
    assert 91 <= stats["frames"] - frames_before <= 93, stats["frames"] - frames_before
    shown = dict(shown_images(logdir, "rollout/Swimmer-v5"))
    assert sorted(shown) == [0, 1], sorted(shown)
    # A GIF merges equal frames; its durations still add up to the episode's 91 frames at 25 fps.
    assert sum(decode_gif(shown[1])[3]) >= 91 * 40 - 40, "TensorBoard shows the whole episode"


def _real_speed_plotter(policy, steps, video_dir):
    """A started Swimmer plotter whose videos (after the initial policy's, which is drawn
    without the cap and waited for here) play ``steps`` steps at real speed, 25 a second. A
    fixed priority: on a loaded machine the budget would hold both processes for a while,
    which the tests using it are not about."""
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=steps,
                      video_length=steps,
                      min_video_seconds=0.4,
                      frame_size=(64, 64),
                      priority="normal",
                      video_dir=str(video_dir),
                      seed=0).start()
    wait_for(lambda: plotter.stats["videos"] >= 1, 120, message="the initial policy's video")
    return plotter


def test_close_cuts_the_video_being_drawn_and_shows_the_final_policy_next(tmp_path, no_leftovers):
    """When training ends, the video being drawn (played at real speed) is cut there: kept, cut
    short (it holds min_video_seconds), and the final policy's video is drawn at once. Before,
    close() waited for the rest of it (all 301 frames); the run's history keeps that policy
    whole. Iteration 1 is never drawn: the next video waits for the drawing
    (``test_the_next_video_shows_the_policy_newest_when_the_previous_one_is_drawn``), and the
    final policy is newer by then."""
    policy = LinearPolicy(8, 2)
    plotter = _real_speed_plotter(policy, 300, tmp_path)
    policy.fill(0.1)
    plotter.update_plot(policy, iteration=0)  # update 1: its video plays 12 s at real speed
    wait_for(lambda: plotter.stats["last_applied_update"] == 1, 60, message="update 1 applied")
    policy.fill(0.2)
    plotter.update_plot(policy, iteration=1)
    time.sleep(1.5)  # iteration 0's video is being drawn
    policy.fill(0.3)
    plotter.update_plot(policy, iteration=2)
    plotter.close()
    assert videos_in(tmp_path) == ["iter_0000.mp4", "iter_0002.mp4", "update_0000.mp4"]
    log = {entry["iteration"]: entry for entry in plotter.stats["video_log"]}
    assert 10 <= log[0]["frames"] < 301 and not log[0]["whole"], log[0]  # 0.4 s at 25 frames/s
    assert frame_count(str(tmp_path / "iter_0000.mp4")) == log[0]["frames"]
    assert log[2]["frames"] == 301 and log[2]["whole"], log[2]
    assert plotter.stats["final_video"] == str(tmp_path / "iter_0002.mp4")


def test_the_next_video_shows_the_policy_newest_when_the_previous_one_is_drawn(
        tmp_path, no_leftovers):
    """A video recorded while training plays at real speed (or as fast as the budget allows)
    and its steps wait in the pipe whole; the rollout process took the next video's policy as
    soon as they were sent, so each video showed the policy of when the previous one *began*
    to be drawn (the demo's iteration-35 video was half drawn 24 iterations later). It now
    takes the policy newest when the previous video has been drawn."""
    policy = LinearPolicy(8, 2)
    plotter = _real_speed_plotter(policy, 100, tmp_path)
    newest_when_drawn = None  # the iteration published when iteration 0's video was written
    iteration = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        policy.fill(0.001 * iteration)
        plotter.update_plot(policy, iteration=iteration)
        drawn = {entry["iteration"] for entry in plotter.stats["video_log"]}
        if newest_when_drawn is None and 0 in drawn:
            newest_when_drawn = iteration
        if len(drawn - {None, 0}) >= 1:
            break  # the video after iteration 0's is written
        iteration += 1
        time.sleep(0.1)
    plotter.close()
    log = [entry for entry in plotter.stats["video_log"] if entry["iteration"] is not None]
    assert newest_when_drawn is not None and len(log) >= 2, log
    # Iteration 0's video plays 4 s: some 40 iterations are published meanwhile. The next video
    # shows one of the last of them, not iteration 1 (the slack: the wait looks every 0.1 s,
    # and the video's report takes a moment to reach the trainer).
    assert newest_when_drawn >= 15, f"iteration 0's video written at iteration {newest_when_drawn}"
    assert log[1]["iteration"] >= newest_when_drawn - 10, (newest_when_drawn, log)


def test_close_with_a_final_video_already_there_does_not_wait(tmp_path, no_leftovers):
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5", policy, max_path_length=20, video_dir=str(tmp_path)) as plotter:
        plotter.update_plot(policy, iteration=0)
        wait_for(lambda: any(v["iteration"] == 0 for v in plotter.stats["video_log"]),
                 60,
                 message="iteration 0's video")
        started = time.monotonic()
    assert time.monotonic() - started < 5
    assert "iter_0000.mp4" in videos_in(tmp_path)


def test_a_policy_that_falls_at_once_still_makes_a_video_of_the_minimum_length(
        tmp_path, no_leftovers):
    policy = LinearPolicy(11, 3)
    policy.fill(1.0)  # full torque on every joint: the hopper falls within a few steps
    min_seconds = 2.0
    with Plotter("Hopper-v5",
                 policy,
                 max_path_length=1000,
                 video_dir=str(tmp_path),
                 fps=30,
                 min_video_seconds=min_seconds,
                 seed=0) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 90, message="a Hopper video")
        entry = plotter.stats["video_log"][0]
        fps = plotter.stats["video_fps"]
    assert fps == 31.25, "Hopper's 125 steps/s, every 4th step drawn"
    assert entry["episodes"] > 1, "short episodes are chained into one video"
    frames = frame_count(entry["path"])
    assert frames >= fps * min_seconds, f"{frames} frames: shorter than {min_seconds} s"


def _built_slowly_in_the_worker(trainer_pid):
    """A policy whose rebuild takes 8 s in the worker (not in the trainer's own check): a
    start-up longer than the default final-video limit of a 40-step rollout (6.2 s)."""
    if os.getpid() != trainer_pid:
        time.sleep(8.0)
    return LinearPolicy(8, 2)


def test_a_run_shorter_than_the_workers_start_up_still_shows_its_final_policy(
        tmp_path, caplog, no_leftovers):
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=40,
                      video_dir=str(tmp_path),
                      policy_factory=functools.partial(_built_slowly_in_the_worker, os.getpid()))
    policy.fill(0.1)
    plotter.update_plot(policy, iteration=0)  # and at once the run is over
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        plotter.close()
    assert plotter.stats["final_video"] == str(tmp_path / "iter_0000.mp4")
    assert frame_count(plotter.stats["final_video"]) == 41
    assert any("still starting" in r.getMessage() for r in caplog.records)


def test_close_returns_within_its_timeout_when_the_final_video_is_long(
        tmp_path, caplog, saturated_machine, no_leftovers):
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=20000,
                      video_dir=str(tmp_path),
                      final_video_timeout=3.0).start()
    wait_for(lambda: plotter.stats["boot_seconds"] is not None, 60, message="the boot")
    policy.fill(0.2)
    plotter.update_plot(policy, iteration=5)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        plotter.close(timeout=8.0)
    assert time.monotonic() - started < 8.0 + 3.0
    assert any("was not finished within 3 s" in r.getMessage() for r in caplog.records)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".partial")]


def test_ctrl_c_while_close_waits_for_the_final_video_leaves_nothing(tmp_path, no_leftovers,
                                                                     sigint_raises):
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=20000,
                      video_dir=str(tmp_path),
                      final_video_timeout=60.0).start()
    try:
        wait_for(lambda: plotter.stats["boot_seconds"] is not None, 60, message="the boot")
        workers = [psutil.Process(pid) for pid in plotter.stats["worker_pids"].values()]
        segment = plotter._route.writer.name.lstrip("/")
        policy.fill(0.2)
        plotter.update_plot(policy, iteration=1)
        ctrl_c = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        ctrl_c.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            plotter.close()
        ctrl_c.join()
        assert time.monotonic() - started < 5, "close() did not give up waiting at Ctrl-C"
    finally:
        plotter.close(timeout=5)
    assert segment not in shm_segments()
    wait_for(lambda: not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE
                             for w in workers),
             10,
             message="the workers to exit")


def test_final_video_at_zero_timeout_is_skipped(tmp_path, no_leftovers):
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=20000,
                      video_dir=str(tmp_path),
                      final_video_timeout=0).start()
    wait_for(lambda: plotter.stats["boot_seconds"] is not None, 60, message="the boot")
    plotter.update_plot(policy, iteration=3)
    started = time.monotonic()
    plotter.close()
    assert time.monotonic() - started < 12
    assert plotter.stats["final_video"] is None


def test_summary_explains_a_starved_run(tmp_path, caplog):
    from async_plotter.trainer.summary import summarize_videos

    live = {"frames": 300, "frames_drawn": 40, "updates_applied": 3, "updates_sent": 5}
    assert summarize_videos(
        live, 5, 10.0, 0.05,
        None) == ("plotter: 300 frames shown live (40 drawn for a viewer), 3 of 5 updates")

    stats = {"video_log": [], "boot_seconds": None, "frames": 0}
    text = summarize_videos(stats, 8, 10.0, 0.05, str(tmp_path))
    assert text.startswith(f"plotter: no video in {tmp_path}")
    assert "still starting" in text
    stats = {
        "video_log": [{
            "path": str(tmp_path / "iter_0000.mp4"),
            "update": 1,
            "iteration": 0
        }],
        "boot_seconds": 3.0,
        # Frames a live view played undrawn cost nothing: the cost is per frame drawn.
        "frames": 800,
        "frames_drawn": 500,
        "worker_cpu_seconds": 8.0,
        "boot_cpu_seconds": 3.0,
        "updates_sent": 40,
    }
    text = summarize_videos(stats, 40, 60.0, 0.05, str(tmp_path))
    assert "1 video in" in text and "does not show the final policy" in text
    assert "~10 ms of CPU a frame" in text and "Raise budget=" in text
    np.testing.assert_equal("Fewer than one per 10 iterations" in text, True)
    assert "history" not in text
    # The history's CPU is no frame's: it is named apart, with the knob that gives it to videos.
    stats["history"] = [{
        "iteration": i,
        "return": 1.0,
        "length": 500,
        "cpu_seconds": 0.05
    } for i in range(40)]
    text = summarize_videos(stats, 40, 60.0, 0.05, str(tmp_path))
    assert "~6 ms of CPU a frame" in text
    assert "recording 40 policies in the history took another 2.0 CPU-s" in text
    assert "history=False" in text
    assert "the returns of 40 policies in" in text and "of the 40 iterations" not in text
    # Some iterations' policies replaced while waiting: the summary says how many are kept.
    del stats["history"][5:15]
    text = summarize_videos(stats, 40, 60.0, 0.05, str(tmp_path))
    assert "the returns of 30 policies in" in text
    assert "30 of the 40 iterations, a newer policy replacing one that waited" in text
    # A history that hung: where the recordings end is said, not blamed on newer policies.
    stats["history_stopped"] = "the history thread hung: ..."
    text = summarize_videos(stats, 40, 60.0, 0.05, str(tmp_path))
    assert "30 of the 40 iterations: the history stopped there, its thread hung" in text
    assert "a newer policy replacing" not in text
    stats["history"] = []
    text = summarize_videos(stats, 40, 60.0, 0.05, str(tmp_path))
    assert "The whole run: no policy recorded: its thread hung" in text


def test_the_policy_is_reset_before_every_episode(tmp_path, no_leftovers):
    """rllab's and garage's rollout() call policy.reset() first; the worker never did."""
    from tests.policies import ResettingPolicy

    log = tmp_path / "resets.log"
    policy = ResettingPolicy(11, 3, str(log))
    policy.fill(1.0)  # the hopper falls within a few steps: several episodes per video
    with Plotter("Hopper-v5",
                 policy,
                 max_path_length=1000,
                 video_dir=str(tmp_path / "videos"),
                 min_video_seconds=1.0,
                 seed=0) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 90, message="a video")
        episodes = plotter.stats["video_log"][0]["episodes"]
    assert episodes >= 2
    assert log.read_text().count("reset") >= episodes


def test_a_calm_end_names_the_final_video(tmp_path, no_leftovers):
    """Training ended calmly: the newest update's video was recorded before close(), which then
    had nothing to wait for, and left stats["final_video"] at None."""
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=20,
                      video_dir=str(tmp_path),
                      priority="normal").start()
    try:
        for iteration in range(3):
            policy.fill(0.05 * iteration)
            plotter.update_plot(policy, iteration=iteration)
        newest = str(tmp_path / "iter_0002.mp4")
        wait_for(lambda: plotter.stats["last_video"] == newest, 120, message="iter_0002.mp4")
    finally:
        plotter.close()
    assert plotter.stats["final_video"] == newest
    assert plotter.stats["video_log"][-1]["clipped"] is False  # 20 steps: within the video's 8 s


def test_a_calm_end_whose_final_video_is_a_clip_says_so_and_where_the_whole_episode_is(
        tmp_path, caplog, no_leftovers):
    """After a calm end the final video is the clip made during training, not the whole rollout
    that close() records otherwise. The clip is marked in video_log, and the close line says so
    and gives the command that draws the policy's whole episode from the history."""
    policy = LinearPolicy(8, 2)
    policy.fill(0.1)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=60,
                      video_length=20,
                      video_dir=str(tmp_path),
                      priority="normal",
                      seed=0).start()
    try:
        plotter.update_plot(policy, iteration=2)
        newest = str(tmp_path / "iter_0002.mp4")
        wait_for(lambda: plotter.stats["last_video"] == newest, 120, message="iter_0002.mp4")
        wait_for(lambda: any(item["update"] == plotter.stats["video_log"][-1]["update"]
                             for item in plotter.stats["history"]),
                 120,
                 message="its history recording")
    finally:
        with caplog.at_level(logging.INFO, logger="async_plotter"):
            plotter.close()
    stats = plotter.stats
    entry = stats["video_log"][-1]
    assert stats["final_video"] == entry["path"] == newest
    assert entry["clipped"] is True and entry["whole"] is True, entry
    assert entry["frames"] == frame_count(newest) == 21, entry  # the reset pose and 20 steps
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plotter: ")]
    assert len(summary) == 1, summary
    assert "iter_0002.mp4, shows the final policy, a 21-frame clip; the history holds a whole " \
        "episode of that policy: async-plotter render " in summary[0], summary
    command = summary[0].split("async-plotter render ")[1].split(" draws it")[0]
    assert command == str(tmp_path / "history" / "iter_0002.npz"), summary
    assert frame_count(rendered(command)) == 61  # the whole episode


def test_a_final_video_cut_by_its_timeout_leaves_a_whole_recording_and_says_how_to_draw_it(
        tmp_path, caplog, no_leftovers):
    """HalfCheetah's final video was cut after final_video_timeout, against the README's "always
    a whole rollout". The drawing is still cut there, but the rollout is simulated to its end
    (5-20x cheaper than drawing it): the state recording beside the video holds all of it, and
    the close line says so with the command that draws the whole video from it."""
    from async_plotter.render.recording import read_recording

    steps = 200
    policy = LinearPolicy(17, 6)
    policy.fill(0.3)
    plotter = Plotter("HalfCheetah-v5",
                      policy,
                      max_path_length=steps,
                      video_length=None,
                      video_dir=str(tmp_path),
                      seed=0,
                      final_video_timeout=0.2).start()
    wait_for(lambda: plotter.stats["videos"] >= 1, 120, message="the initial policy's video")
    policy.fill(-0.3)
    plotter.update_plot(policy, iteration=5)  # 201 frames to draw: far more than 0.2 s
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        plotter.close()
    stats = plotter.stats
    video = str(tmp_path / "iter_0005.mp4")
    recording = str(tmp_path / "iter_0005.npz")
    entry = stats["video_log"][-1]
    assert stats["final_video"] == entry["path"] == video
    assert entry["whole"] is False and entry["frames"] == frame_count(video) < steps + 1, entry
    assert stats["final_state_recording"] == recording
    assert len(read_recording(recording).states) == steps + 1, "the whole rollout"
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".partial")]
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plotter: ")]
    assert len(summary) == 1, summary
    assert ("the newest, iter_0005.mp4, shows the final policy, cut short at "
            "final_video_timeout" in summary[0]), summary
    command = summary[0].split("async-plotter render ")[1].split(" draws all of it")[0]
    assert command == recording, summary
    video = rendered(command)
    assert video == str(tmp_path / "rendered" / "iter_0005.mp4")
    assert frame_count(video) == steps + 1


def test_a_video_cut_by_close_without_the_final_video_is_said_to_be(tmp_path, caplog, no_leftovers):
    """``close(final_video=False)`` cuts the newest policy's video being drawn. The close line
    said it was cut at final_video_timeout and advised raising it, a knob that had no part."""
    policy = LinearPolicy(17, 6)
    policy.fill(0.3)
    plotter = Plotter("HalfCheetah-v5",
                      policy,
                      max_path_length=200,
                      video_length=None,
                      min_video_seconds=0,
                      video_dir=str(tmp_path),
                      seed=0).start()
    wait_for(lambda: plotter.stats["videos"] >= 1, 120, message="the initial policy's video")
    policy.fill(-0.3)
    plotter.update_plot(policy, iteration=5)  # 201 frames at the frame cap: ~7 s to draw
    drawn = plotter.stats["frames"]
    wait_for(lambda: plotter.stats["frames"] > drawn + 5, 120, message="its video begun")
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        plotter.close(final_video=False)
    entry = plotter.stats["video_log"][-1]
    assert entry["path"] == str(tmp_path / "iter_0005.mp4") and entry["whole"] is False, entry
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plotter: ")]
    assert len(summary) == 1, summary
    assert "iter_0005.mp4, shows the final policy, cut short by close()" in summary[0], summary
    assert "final_video_timeout" not in summary[0], summary


def test_the_close_line_says_why_the_initial_policy_has_no_video(tmp_path, caplog, no_leftovers):
    """Updates sent while the worker starts win over the initial policy: its update_0000.mp4
    never exists, and the close line listed "iterations 4, ..." without saying why."""
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5", policy, max_path_length=20, video_dir=str(tmp_path)).start()
    policy.fill(0.1)
    plotter.update_plot(policy, iteration=4)  # the worker is still starting (seconds)
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        plotter.close()
    assert videos_in(tmp_path) == ["iter_0004.mp4"]
    assert plotter.stats["first_applied_update"] == 1
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plotter: ")]
    assert len(summary) == 1 and summary[0].startswith(
        f"plotter: 1 video in {tmp_path} of iteration 4; the newest, iter_0004.mp4, shows the "
        "final policy. The initial policy has no video: update_plot() had sent newer "
        "parameters before the worker was ready, and the newest always wins"), summary
