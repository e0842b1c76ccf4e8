"""Faults stay in the worker: crashes, kills, aborts and hangs never reach training, restarts are
bounded, closing is bounded, and a dead trainer or Ctrl-C leaves no process or segment behind."""
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from async_plotter import Plotter
from tests.conftest import default_sigint, shm_segments, wait_for
from tests.policies import FlakyEnvFactory, LinearPolicy
from tests.small_device import fill, small_device

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pids(plotter):
    return wait_for(lambda: plotter.stats["worker_pids"], 30, message="worker pids")


@pytest.mark.parametrize("role, sig", [("rollout", signal.SIGKILL), ("render", signal.SIGABRT),
                                       ("render", signal.SIGSEGV)])
def test_killed_worker_is_restarted_and_training_goes_on(tmp_path, role, sig, no_leftovers, caplog):
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5", policy, max_path_length=5, video_dir=str(tmp_path),
                 fps=500) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 60, message="first video")
        os.kill(_pids(plotter)[role], sig)
        wait_for(lambda: plotter.stats["restarts"] == 1 and plotter.stats["alive"],
                 30,
                 message="a restart")
        for iteration in range(3):  # training never noticed
            policy.fill(0.1 * iteration)
            plotter.update_plot(policy, iteration=iteration)
        wait_for(lambda: plotter.stats["last_applied_iteration"] == 2,
                 60,
                 message="the restarted worker to apply the newest update")
        wait_for(lambda: os.path.exists(tmp_path / "iter_0002.mp4"), 30, message="its video")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"its {role} process was killed by {sig.name}" in m for m in warnings), warnings


def test_worker_that_keeps_raising_is_disabled_with_one_error(caplog, no_leftovers):
    policy = LinearPolicy(8, 2)
    caplog.set_level(logging.INFO, logger="async_plotter")
    plotter = Plotter(FlakyEnvFactory(fail_after=3),
                      policy,
                      max_path_length=50,
                      on_frame=lambda f, i: None,
                      fps=500,
                      max_restarts=2).start()
    try:
        wait_for(lambda: plotter.stats["disabled"], 60, message="plotting to be disabled")
        for iteration in range(5):
            plotter.update_plot(policy, iteration=iteration)  # no exception reaches training
        stats = plotter.stats
        assert stats["restarts"] == 2 and not stats["alive"]
        assert stats["updates_sent"] == 5
        assert "env.step exploded (test)" in stats["last_error"]
    finally:
        started = time.monotonic()
        plotter.close(timeout=5)
        assert time.monotonic() - started < 5
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(warnings) == 2 and all("env.step exploded (test)" in w for w in warnings)
    assert len(errors) == 1 and "plotting disabled" in errors[0]
    # One concise line per failure; the whole traceback is in stats (and at DEBUG).
    assert all("\n" not in m and "Traceback" not in m for m in warnings + errors), warnings
    assert "Traceback (most recent call last)" in stats["last_error"]


def _slow_first_frames(frame, info):
    time.sleep(1.0)  # the rollout fails and the supervisor closes the lifeline meanwhile


@pytest.mark.parametrize("fail_after, slow", [(3, False), (0, True), (1, True)])
def test_an_episode_that_raised_is_not_written_as_a_video(tmp_path, no_leftovers, fail_after, slow):
    """Also when the render process, busy with a frame, finds the trainer's lifeline closed
    before it reads the end of the failed rollout's stream (issue 20: a 1-frame mp4)."""
    policy = LinearPolicy(8, 2)
    # Slow: the rollout process fails after the render process has begun drawing its episode.
    plotter = Plotter(FlakyEnvFactory(fail_after=fail_after, first_reset_delay=4.0 if slow else 0),
                      policy,
                      max_path_length=50,
                      video_dir=str(tmp_path),
                      on_frame=_slow_first_frames if slow else None,
                      fps=500,
                      max_restarts=1).start()
    try:
        wait_for(lambda: plotter.stats["disabled"], 60, message="plotting to be disabled")
    finally:
        plotter.close(timeout=5)
    assert "env.step exploded (test)" in plotter.stats["last_error"]  # its episodes failed...
    assert os.listdir(tmp_path) == []  # ...and no 1-frame mp4 pretends to be a video


def _hang(frame, info):
    time.sleep(3600)


def test_hung_render_is_detected_and_restarted(no_leftovers, caplog):
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=5,
                 on_frame=_hang,
                 fps=500,
                 hang_timeout=2.0,
                 max_restarts=1) as plotter:
        wait_for(lambda: plotter.stats["disabled"], 60, message="the hung worker to be given up")
        assert plotter.stats["restarts"] == 1
    hung = [r.getMessage() for r in caplog.records if "made no progress" in r.getMessage()]
    # Where it hung, asked of the process itself: the callback that never returns.
    assert hung and all("(hung), at test_faults.py:" in m and " _hang <- " in m for m in hung), hung


def test_a_worker_spinning_in_the_policy_is_restarted_and_says_where(no_leftovers, caplog):
    """A policy (or env, or callback) that never returns and burns CPU: the worker's CPU time
    moved, so the hang rule took it for a slow worker and never restarted it; the videos just
    stopped. It is now caught, with where it spins; a restart meets the same policy, so
    plotting ends after max_restarts with one error, and training goes on."""
    from tests.policies import SpinsWhenMarked

    policy = SpinsWhenMarked(8, 2)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=50,
                 fps=500,
                 hang_timeout=2.0,
                 max_restarts=1,
                 history=False,
                 on_frame=lambda frame, info: None) as plotter:
        wait_for(lambda: plotter.stats["episodes"] > 0, 120, message="a first episode")
        policy.fill(SpinsWhenMarked.MARKER)
        plotter.update_plot(policy, iteration=0)
        wait_for(lambda: plotter.stats["disabled"], 120, message="the spinning worker given up")
        stats = plotter.stats
    assert stats["restarts"] == 1
    spun = [r.getMessage() for r in caplog.records if "spinning" in r.getMessage()]
    assert len(spun) == 2 and all("its rollout process made no progress" in m
                                  and "at policies.py:" in m and " get_action <- " in m
                                  for m in spun), spun
    assert "Its threads:" in stats["last_error"] and "get_action" in stats["last_error"]


def _busy_frame(frame, info):
    time.sleep(0.5)


@pytest.mark.alone  # times close(): 4.3 s, bound 4 s, beside other tests and 2 busy processes
def test_close_with_a_busy_worker_is_bounded(tmp_path, no_leftovers):
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=500,
                      video_dir=str(tmp_path),
                      on_frame=_busy_frame,
                      fps=500).start()
    wait_for(lambda: plotter.stats["frames"] >= 1, 60, message="the worker to be busy")
    started = time.monotonic()
    plotter.close(timeout=2.0)
    elapsed = time.monotonic() - started
    assert elapsed < 4.0, f"close took {elapsed:.1f} s"
    plotter.close()  # idempotent
    # The video being written was finished, not left half-written (the run's history beside it).
    names = sorted(os.listdir(tmp_path))
    assert [name for name in names if name != "history"] == ["update_0000.mp4",
                                                             "update_0000.npz"], names


TRAINER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    import numpy as np
    from async_plotter import Plotter
    from tests.policies import LinearPolicy
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5", policy, max_path_length=1000, video_dir={videos!r}, fps=60)
    plotter.start()
    while not plotter.stats["worker_pids"] or plotter.stats["frames"] < 1:
        time.sleep(0.05)
    print("PIDS", plotter.stats["worker_pids"]["rollout"], plotter.stats["worker_pids"]["render"],
          plotter._route.writer.name.lstrip("/"), flush=True)
    iteration = 0
    while True:
        policy.fill(iteration * 1e-3)
        plotter.update_plot(policy, iteration=iteration)
        iteration += 1
        time.sleep(0.01)
    """)


def _start_trainer(tmp_path):
    trainer = subprocess.Popen(
        [sys.executable, "-c",
         TRAINER.format(root=ROOT, videos=str(tmp_path / "videos"))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint)  # the test may send it SIGINT
    line = trainer.stdout.readline()
    assert line.startswith("PIDS"), line + trainer.stderr.read()[-3000:]
    *pids, segment = line.split()[1:]
    pids = [int(pid) for pid in pids]
    assert all(psutil.pid_exists(pid) for pid in pids)
    assert segment in shm_segments()
    return trainer, pids, segment


def _kill_all(trainer, pids):
    if trainer.poll() is None:
        trainer.kill()
        trainer.wait(10)
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


def _gone(pids):
    return not any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        for pid in pids)


def test_killed_trainer_takes_its_workers_along(tmp_path):
    trainer, pids, segment = _start_trainer(tmp_path)
    trainer.kill()
    trainer.wait(10)
    wait_for(lambda: _gone(pids), 5, message="the workers of a SIGKILLed trainer to exit")
    # The resource tracker unlinks the dead trainer's segment once the last user is gone.
    wait_for(lambda: segment not in shm_segments(),
             10,
             message="the shared memory segment to be released")


EARLY_TRAINER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from async_plotter import Plotter
    from tests.policies import LinearPolicy
    plotter = Plotter("Swimmer-v5", LinearPolicy(8, 2), video_dir={videos!r}).start()
    while not plotter.stats["worker_pids"]:
        time.sleep(0.01)
    print("PIDS", *plotter.stats["worker_pids"].values(), flush=True)
    time.sleep(3600)
    """)


@pytest.mark.alone
def test_a_trainer_killed_while_its_workers_import_takes_them_along(tmp_path, saturated_machine):
    """Before, a worker still importing TensorFlow (seconds of CPU on a loaded machine) noticed
    its dead trainer only after its imports; the kernel now kills it with the trainer."""
    trainer = subprocess.Popen(
        [sys.executable, "-c",
         EARLY_TRAINER.format(root=ROOT, videos=str(tmp_path / "videos"))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True)
    line = trainer.stdout.readline()
    assert line.startswith("PIDS"), line + trainer.stderr.read()[-3000:]
    pids = [int(pid) for pid in line.split()[1:]]
    time.sleep(0.5)  # in the middle of the imports: the machine is saturated
    trainer.kill()
    trainer.wait(10)
    wait_for(lambda: _gone(pids), 5, message="the workers of a SIGKILLed trainer to exit")


def test_ctrl_c_in_the_trainer_ends_everything(tmp_path):
    trainer, pids, segment = _start_trainer(tmp_path)
    try:
        trainer.send_signal(signal.SIGINT)
        trainer.wait(10)
        assert trainer.returncode != 0  # KeyboardInterrupt
        wait_for(lambda: _gone(pids), 5, message="the workers to exit after Ctrl-C")
    finally:  # a failure must not leave a trainer streaming for the tests after this one
        _kill_all(trainer, pids)
    assert segment not in shm_segments()
    for name in os.listdir(tmp_path / "videos"):
        assert not name.startswith(".partial"), "a video was left half-written"


# ------------------------------------------------------------------- the output folder's faults


def _train(plotter, policy, iterations):
    for iteration in iterations:
        policy.fill(0.02 * iteration)  # new parameters each time: each is a new video
        plotter.update_plot(policy, iteration=iteration)


def test_a_video_folder_removed_while_training_is_made_again(tmp_path, caplog, no_leftovers):
    """``rm -rf runs/`` while training: the render process raised FileNotFoundError, was restarted
    three times, then plotting was disabled and the run ended without its final video."""
    caplog.set_level(logging.INFO, logger="async_plotter")
    folder = tmp_path / "runs" / "videos"
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5", policy, max_path_length=20, video_dir=str(folder),
                 priority="normal") as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 120, message="a first video")
        # As rm -rf: a file the worker renames meanwhile (a recording made whole) is no error
        # (shutil.rmtree raised FileNotFoundError on it), and one it writes meanwhile goes too.
        runs = tmp_path / "runs"
        wait_for(lambda: not (shutil.rmtree(runs, ignore_errors=True) or runs.exists()),
                 30,
                 message="runs/ removed")
        _train(plotter, policy, range(1, 4))
        wait_for(lambda: plotter.stats["videos"] >= 2 or plotter.stats["restarts"],
                 120,
                 message="a video after the folder was removed")
    stats = plotter.stats
    assert stats["restarts"] == 0 and not stats["disabled"], stats["last_error"]
    assert stats["final_video"] == str(folder / "iter_0003.mp4")
    assert os.path.exists(stats["final_video"])
    made_again = [r for r in caplog.records if "made it again" in r.getMessage()]
    assert len(made_again) == 1, [r.getMessage() for r in caplog.records]
    # The close line counts the videos written, and says which of them the removal took (it
    # counted them as if they were there).
    closing = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plotter: ")]
    assert len(closing) == 1 and "gone: removed since" in closing[0], closing
    assert "iteration 3 is gone" not in closing[0] and "3 are gone" not in closing[0], closing


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A real 150 KB tmpfs: a device that fills up after a video or two. Needs root."""
    with small_device(tmp_path / "videos", "150k") as folder:
        yield folder


#: long enough that a close() waiting for the unwritable video is told apart from one that stops
FINAL_VIDEO_TIMEOUT = 40.0


def test_a_full_disk_stops_videos_with_one_warning_until_space_comes_back(
        tiny_tmpfs, caplog, capfd, no_leftovers):
    """``video_dir`` on a full device: ffmpeg's own lines reached the trainer's terminal (8 of
    them), no warning named the cause, and close() waited 8-11 s for a video that could never be
    written, then advised raising final_video_timeout."""
    caplog.set_level(logging.INFO, logger="async_plotter")
    folder = tiny_tmpfs
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=200,
                      video_dir=str(folder),
                      tensorboard_dir=str(folder.parent / "tensorboard"),
                      final_video_timeout=FINAL_VIDEO_TIMEOUT,
                      priority="normal").start()
    try:
        iteration = 0
        deadline = time.monotonic() + 120
        while not plotter.stats["video_dir_full"] and time.monotonic() < deadline:
            _train(plotter, policy, [iteration])
            iteration += 1
            time.sleep(1.0)
        stats = plotter.stats
        assert stats["video_dir_full"], "the device never filled up"
        assert stats["restarts"] == 0 and not stats["disabled"], stats["last_error"]
        full = [r for r in caplog.records if "no space left on the device" in r.getMessage()]
        assert len(full) == 1 and full[0].levelno == logging.WARNING
        assert str(folder) in full[0].getMessage()
        # The other outputs go on meanwhile (TensorBoard, on another device).
        images = stats["tensorboard_images"]
        _train(plotter, policy, [iteration])
        iteration += 1
        wait_for(lambda: plotter.stats["tensorboard_images"] > images,
                 120,
                 message="TensorBoard to go on")

        # Space comes back (the device grows): recording resumes by itself.
        subprocess.run(["mount", "-o", "remount,size=20m", str(folder)], check=True)
        videos = stats["videos"]
        _train(plotter, policy, [iteration])
        wait_for(lambda: plotter.stats["videos"] > videos, 120, message="videos to resume")
        assert not plotter.stats["video_dir_full"]

        # Full again at the end: close() does not wait for a video that cannot be written.
        fill(folder)
        _train(plotter, policy, [iteration + 1])
        wait_for(lambda: plotter.stats["video_dir_full"], 120, message="the second full device")
        _train(plotter, policy, [iteration + 2])
        started = time.monotonic()
        plotter.close()
        closing = time.monotonic() - started
    finally:
        plotter.close()
    # Waiting for the video would take the whole timeout; stopping the worker takes seconds, more
    # on a loaded machine (7.5 s seen at load 17), so the bound is half the timeout.
    assert closing < FINAL_VIDEO_TIMEOUT / 2, f"close() took {closing:.1f} s"
    assert plotter.stats["restarts"] == 0
    messages = [r.getMessage() for r in caplog.records]
    assert not any("final_video_timeout" in m for m in messages), messages
    assert any("No space is left on the device" in m for m in messages if "plotter:" in m)
    err = capfd.readouterr().err
    assert "[out#" not in err and "Error writing" not in err, err[-2000:]
    assert "No space left on device" not in err, err[-2000:]


NO_ROOM = textwrap.dedent("""\
    import logging, os, resource, sys, time
    sys.path.insert(0, {root!r})
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    policy = LinearPolicy(8, 2, extra={extra})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for spare in {spares}:
        plotter = Plotter("Swimmer-v5", policy, max_path_length=30, max_restarts=1,
                          video_dir={videos!r} + str(spare))
        if spare is not None:  # what the trainer has open, and this many more
            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (len(os.listdir("/proc/self/fd")) + spare, hard))
        plotter.start()
        for iteration in range(10):
            policy.fill(0.01 * iteration)
            plotter.update_plot(policy, iteration=iteration)
            time.sleep(0.2)
        started = time.monotonic()
        plotter.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        stats = plotter.stats
        print("TRAINED", spare, stats["disabled"], round(time.monotonic() - started, 1),
              repr(stats["last_error"]), flush=True)
    """)


def _run_starved(tmp_path, extra, spares, prefix=()):
    script = tmp_path / "starved.py"
    script.write_text(
        NO_ROOM.format(root=ROOT, extra=extra, spares=spares, videos=str(tmp_path / "videos")))
    return subprocess.run([*prefix, sys.executable, str(script)],
                          capture_output=True,
                          text=True,
                          timeout=240,
                          cwd=tmp_path)


def test_no_room_in_dev_shm_turns_plotting_off_not_the_trainer(tmp_path):
    """A 16 MB parameter segment where /dev/shm is a 4 MB tmpfs (Docker gives 64 MB): the
    trainer died of SIGBUS ("Bus error") at its first write into the segment. Now plotting is
    off with one error naming the fix, and training goes on. Needs root (a private mount
    namespace, with its own /dev/shm)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a private /dev/shm needs root and unshare")
    mount = "mount -t tmpfs -o size=4m tmpfs /dev/shm && exec \"$@\""
    result = _run_starved(tmp_path, 2_000_000, (None, ), ("unshare", "-m", "sh", "-c", mount, "-"))
    assert result.returncode == 0 and "Bus error" not in result.stderr, result.stderr[-3000:]
    trained = [line.split(" ", 4) for line in result.stdout.splitlines()]
    assert [line[:3] for line in trained] == [["TRAINED", "None", "True"]], result.stderr[-3000:]
    assert "/dev/shm has no room" in trained[0][4] and "--shm-size" in trained[0][4]
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "plotting is off" in errors[0], result.stderr[-3000:]


def test_out_of_file_descriptors_turns_plotting_off_not_the_trainer(tmp_path):
    """A trainer out of file descriptors at start(), at each of the points the plotter opens
    some (its segment, the pipes, the processes, the worker's own imports): the supervisor
    thread died with a traceback, or start() raised. Now training goes on, plotting is off,
    and close() does not wait for a worker that never came."""
    spares = (1, 4, 8, 12, 16, 40)  # 1: the segment; 4, 8: the pipes; 12, 16: the processes
    result = _run_starved(tmp_path, 0, spares)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "Exception in thread" not in result.stderr, (
        result.stderr[-3000:])
    trained = [line.split(" ", 4) for line in result.stdout.splitlines()]
    assert [int(line[1]) for line in trained] == list(spares), result.stderr[-3000:]
    for _, spare, disabled, close_seconds, error in trained:
        # Off, saying why; or, with enough to spare, plotting as usual.
        assert (disabled == "True" and "Too many open files" in error) or (disabled == "False"
                                                                           and error == "None")
        assert float(close_seconds) < 10, (spare, close_seconds)
    assert [line[2] for line in trained].count("True") >= 4, trained  # the faults were met
    assert trained[-1][2] == "False", trained  # with room, it plots: the limit was the cause


def test_a_worker_whose_python_cannot_be_run_is_named(tmp_path):
    """multiprocessing told to start children with a Python that is not there (an embedding
    host, a venv removed): each process exits with code 127, and stats["last_error"] was None
    while the error line pointed at it for a traceback."""
    script = tmp_path / "elsewhere.py"
    script.write_text(
        textwrap.dedent(f"""\
        import multiprocessing, sys, time
        from multiprocessing import resource_tracker
        sys.path.insert(0, {ROOT!r})
        from async_plotter import Plotter
        from tests.policies import LinearPolicy

        resource_tracker.ensure_running()  # the segment's tracker, started as usual
        multiprocessing.set_executable("/nonexistent/python3")
        policy = LinearPolicy(8, 2)
        plotter = Plotter("Swimmer-v5", policy, max_path_length=30, max_restarts=1,
                          video_dir={str(tmp_path / "videos")!r}).start()
        deadline = time.monotonic() + 60
        iteration = 0
        while not plotter.stats["disabled"] and time.monotonic() < deadline:
            policy.fill(0.01 * iteration)
            plotter.update_plot(policy, iteration=iteration)
            iteration += 1
            time.sleep(0.1)
        plotter.close()
        print("TRAINED", plotter.stats["disabled"], repr(plotter.stats["last_error"]))
        """))
    result = subprocess.run([sys.executable, str(script)],
                            capture_output=True,
                            text=True,
                            timeout=120,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("TRAINED True "), (result.stdout, result.stderr[-3000:])
    assert "/nonexistent/python3, could not be started" in result.stdout
