"""Ctrl-C at every stage of a plotted, parallel TRPO run, and a trainer killed outright.

Each test runs tests/interrupt_trainer.py (``run_experiment_lite`` with ``n_parallel=2`` and
``plot=True``) in its own session and signals its whole process group, as a terminal does. The
script announces the stage it is in; the signal lands inside the library code of that stage.
"""
import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from async_plotter import Plotter
from async_plotter.rl import load_snapshot
from tests.conftest import default_sigint, shm_segments, wait_for
from tests.policies import LinearPolicy

pytestmark = pytest.mark.slow

TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "interrupt_trainer.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = [
    "startup", "sampling", "processing", "optimisation", "snapshot", "update_plot", "shutdown"
]
# Seconds a run may take, from the signal, until it and every process it started are gone.
EXIT_BOUND = 10.0
KILLED_BOUND = 5.0
SETTLE = 0.3  # seconds from reading a stage's marker to signalling (see start_at_stage)


class Trainer:
    """tests/interrupt_trainer.py in a new session (its pid is its process group's and session's
    id), with its stdout read line by line in a thread so that the test can wait for a marker."""

    def __init__(self, stage, tmp_path):
        self.log_dir = tmp_path / "run"
        self.stderr_path = tmp_path / "stderr.txt"
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, TRAINER, stage, str(self.log_dir)],
                cwd=str(tmp_path),
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                start_new_session=True,
                preexec_fn=default_sigint)  # also when the tests run with SIGINT ignored
        self.session = self.process.pid
        self.segments = set()
        self.lines = []
        self.timeline = []  # (arrival time, line), to tell where a slow shutdown spent its time
        self.signalled = None
        self._lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
            self.timeline.append((time.monotonic(), line.rstrip("\n")[:120]))
        self._lines.put(None)

    def _take(self, line):
        self.lines.append(line)
        if line.startswith("SEGMENT "):
            self.segments.add(line.split()[1])

    def wait_for_line(self, wanted, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
                break
            if line is None:
                break
            self._take(line)
            if line == wanted:
                return
        self.process.poll()
        raise AssertionError(f"no {wanted!r} within {timeout} s (exit code "
                             f"{self.process.returncode}):\n{self.stderr()[-3000:]}")

    def drain_stdout(self):
        """Collect what the trainer printed until it exited (segments created after the marker)."""
        while True:
            try:
                line = self._lines.get(timeout=5)
            except queue.Empty:
                return
            if line is None:
                return
            self._take(line)

    def report(self):
        """The trainer's last words (timed from the signal) and its stderr, for failures."""
        since = self.signalled or 0.0
        lines = [f"{t - since:+7.2f} s  {line}" for t, line in self.timeline[-12:]]
        return "\n".join(lines) + "\n--- stderr ---\n" + self.stderr()[-2500:]

    def stderr(self):
        return self.stderr_path.read_text(errors="replace")

    def members(self):
        """Live processes of the trainer's session: the trainer and everything it started
        (sampler workers, plot workers, multiprocessing's resource tracker). Zombies, whose exit
        status nobody has collected yet, count as gone."""
        found = []
        for process in psutil.process_iter():
            try:
                if (os.getsid(process.pid) == self.session
                        and process.status() != psutil.STATUS_ZOMBIE):
                    found.append(process)
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
        return found

    def kill_leftovers(self):
        """However a test fails, leave no process and no segment behind for the next one. The
        resource tracker is spared at first: once the others are gone it unlinks the segments
        and exits by itself."""

        def kill(processes):
            for process in processes:
                try:
                    process.kill()
                except psutil.Error:
                    pass

        kill(p for p in self.members() if not _is_tracker(p))
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        try:
            wait_for(lambda: not self.members(), 10, message="the resource tracker to exit")
        except AssertionError:
            kill(self.members())
            for name in self.segments & shm_segments():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join("/dev/shm", name))
        self.process.stdout.close()


def _is_tracker(process):
    try:
        return "resource_tracker" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def alive(process):
    """Running and not a zombie (an exited child nobody has reaped yet); psutil checks that the
    pid was not reused by another process meanwhile."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def describe(processes):
    """pid, state, CPU time and command line of each process, for failure messages."""
    described = []
    for process in processes:
        try:
            with process.oneshot():
                described.append(f"{process.pid} {process.status()} "
                                 f"cpu={sum(process.cpu_times()[:2]):.1f}s "
                                 f"{' '.join(process.cmdline())[-90:]}")
        except psutil.Error:
            described.append(f"{process.pid} (gone)")
    return described


def raised_in(traceback_text, path, function):
    """Whether a traceback has a frame of ``function`` in the library file ``path``."""
    pattern = rf'File "[^"]*async_plotter/{re.escape(path)}", line \d+, in {function}\n'
    return re.search(pattern, traceback_text) is not None


# Where each stage's KeyboardInterrupt must come from: proof that the signal landed in the library
# code of that stage, not before or after it.
RAISED_IN = {
    "startup": ("rl/samplers.py", "start"),
    "sampling": ("rl/samplers.py", "obtain_samples"),
    "processing": ("rl/sample_processing.py", "process_samples"),
    "optimisation": ("rl/trpo.py", "optimize_policy"),
    "snapshot": ("rl/recorder.py", "save_snapshot"),
    "update_plot": ("trainer/plotter_handle.py", "update_plot"),
    "shutdown": ("trainer/plotter_handle.py", "close"),
}


def start_at_stage(stage, tmp_path):
    """The trainer, once it is inside ``stage`` with all its processes up (the resource tracker,
    two sampler workers, the plot worker's two processes; at start-up they are still booting)."""
    trainer = Trainer(stage, tmp_path)
    try:
        trainer.wait_for_line(f"STAGE {stage}", timeout=240)
        assert "NOT RENDERING" not in trainer.lines, trainer.report()

        def all_up():
            found = trainer.members()
            return found if len(found) >= 6 else None

        members = wait_for(all_up, 60, interval=0.02, message="the run's processes")
        helpers = [p for p in members if p.pid != trainer.session]
        # The marker reaches us while the trainer is still returning from printing it; a moment
        # later it is inside the stage's library code (each stage lasts seconds).
        time.sleep(SETTLE)
    except BaseException:
        trainer.kill_leftovers()
        raise
    return trainer, helpers


@pytest.mark.parametrize("stage", STAGES)
def test_ctrl_c_at_every_stage_ends_everything_within_10_s(stage, tmp_path):
    trainer, helpers = start_at_stage(stage, tmp_path)
    try:
        os.killpg(trainer.session, signal.SIGINT)  # what a terminal's Ctrl-C does
        signalled = trainer.signalled = time.monotonic()
        try:
            trainer.process.wait(EXIT_BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run was still running {EXIT_BOUND} s after Ctrl-C:\n"
                        f"{trainer.report()}")
        # Helpers may outlive the trainer by moments, but not past the bound.
        remaining = max(0.5, EXIT_BOUND - (time.monotonic() - signalled))
        try:
            wait_for(lambda: not trainer.members(), remaining, message="its processes to exit")
        except AssertionError:
            pytest.fail(f"left running after Ctrl-C: {describe(trainer.members())}\n"
                        f"{trainer.report()}")
        elapsed = time.monotonic() - signalled
        print(f"{stage}: everything gone {elapsed:.1f} s after Ctrl-C")
        trainer.drain_stdout()
    finally:
        trainer.kill_leftovers()

    stderr = trainer.stderr()
    # The interrupt reached the script (nothing swallowed it) and ended it as Ctrl-C ends Python.
    assert trainer.process.returncode == -signal.SIGINT, trainer.report()
    assert raised_in(stderr, *RAISED_IN[stage]), trainer.report()
    # Only the trainer's traceback: no worker died of the Ctrl-C, not even one still booting (they
    # ignore SIGINT from their first instruction on; the trainer decides when they stop). A worker's
    # traceback starts with "Process async_plotter-...:", or passes spawn_main while it boots.
    assert "Process async_plotter-" not in stderr, trainer.report()
    assert "in spawn_main" not in stderr, trainer.report()
    # Nor a sink's: the render process stopped mid-video drops what its encoder could not finish.
    assert "closing VideoSink failed" not in stderr, trainer.report()
    assert elapsed < EXIT_BOUND
    # The segment was removed by close(), not left for the resource tracker to find at exit.
    assert "leaked shared_memory" not in stderr, trainer.report()
    assert trainer.segments, "the plotter's segment was never reported"
    assert not trainer.segments & shm_segments(), "shared memory left in /dev/shm"
    if stage == "startup":  # the signal came before the sampler workers were all ready
        assert not any(" on Swimmer-v5: 2 iterations" in line for line in trainer.lines)
    names = os.listdir(trainer.log_dir)
    assert not [n for n in names if n.endswith(".tmp")], names
    if stage == "startup":
        assert "params.pkl" not in names
    else:
        # Written by iteration 0 at least (iteration 1 when Ctrl-C came after its snapshot).
        assert load_snapshot(trainer.log_dir / "params.pkl")["itr"] in (0, 1)
    videos = trainer.log_dir / "videos"
    partial = [n for n in os.listdir(videos) if n.startswith(".partial")] if videos.exists() else []
    assert not partial, f"half-written videos left: {partial}\n{trainer.report()}"


@pytest.mark.parametrize("stage", ["sampling", "update_plot"])
def test_sigkilled_trainer_takes_samplers_and_plot_worker_along(stage, tmp_path):
    """No chance to clean up: sampling (the sampler workers are in the middle of paths) or handing
    parameters to a rendering plot worker (the sampler workers wait for commands)."""
    trainer, helpers = start_at_stage(stage, tmp_path)
    try:
        tracker = [p for p in helpers if _is_tracker(p)]
        # Two sampler workers, the plot worker's rollout and render processes (and the render
        # process's ffmpeg while it writes a video).
        workers = [p for p in helpers if p not in tracker]
        assert len(workers) >= 4 and len(tracker) == 1, describe(helpers)
        trainer.process.kill()
        trainer.process.wait(10)
        try:
            wait_for(lambda: not any(alive(w) for w in workers),
                     KILLED_BOUND,
                     message="the workers to exit")
        except AssertionError:
            pytest.fail(f"workers outlived their SIGKILLed trainer by {KILLED_BOUND} s: "
                        f"{describe(w for w in workers if alive(w))}\n{trainer.report()}")
        # The resource tracker outlives them by moments: it unlinks the dead trainer's segment
        # once the last process that could use it is gone, then exits too.
        wait_for(lambda: not trainer.members(), 10, message="the resource tracker to finish")
        trainer.drain_stdout()
    finally:
        trainer.kill_leftovers()
    assert trainer.segments and not trainer.segments & shm_segments()


def _stuck_frame(frame, info):
    time.sleep(5.0)  # keeps close() waiting for the render process long enough to press Ctrl-C


def test_ctrl_c_inside_plotter_close_still_releases_everything(tmp_path, no_leftovers,
                                                               sigint_raises):
    """A KeyboardInterrupt while close() waits for the worker must not leave the segment or the
    processes to the interpreter's exit: in a notebook the kernel lives on after Ctrl-C."""
    policy = LinearPolicy(8, 2)
    # Normal priority: on a machine busy with other work an idle-priority worker may get no CPU
    # for a minute, and how fast it is is not what this test is about.
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=500,
                      video_dir=str(tmp_path),
                      on_frame=_stuck_frame,
                      fps=500,
                      priority="normal").start()
    try:
        wait_for(lambda: plotter.stats["frames"] >= 1, 60, message="the worker to be busy")
        workers = [psutil.Process(pid) for pid in plotter.stats["worker_pids"].values()]
        segment = plotter._route.writer.name.lstrip("/")
        ctrl_c = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        ctrl_c.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            plotter.close(timeout=30)
        ctrl_c.join()
        assert time.monotonic() - started < 3, "close() did not give up waiting at Ctrl-C"
    finally:
        plotter.close(timeout=5)  # a no-op once closed; cleans up if the test failed earlier
    assert segment not in shm_segments()
    wait_for(lambda: not any(alive(w) for w in workers), 5, message="the workers to exit")
    # SIGTERM let the render process finish the video it was writing.
    names = os.listdir(tmp_path)
    assert names and not [n for n in names if n.startswith(".partial")], names


# A script that stops cleanly on SIGTERM (a preempted job's handler): it closes its Plotter.
_CLOSES_ON_SIGTERM = """
import signal, sys, time
from async_plotter import Plotter
from tests.policies import LinearPolicy

plotter = Plotter("Swimmer-v5", LinearPolicy(8, 2), max_path_length=50, video_dir=sys.argv[1],
                  fps=500, priority="normal").start()


def stop(signum, frame):
    plotter.close(timeout=20)
    print("closed", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
while plotter.stats["frames"] == 0:
    time.sleep(0.05)
print("showing", flush=True)
while True:
    time.sleep(0.1)
"""


def test_a_sigterm_to_the_whole_group_is_a_stop_not_a_worker_failure(tmp_path):
    """``timeout``, ``kill -- -PGID`` or a job scheduler's stop sends SIGTERM to every process of
    the group: the worker's processes stop as their supervisor stops them, and the script's
    handler closes its Plotter. Before, the supervisor saw its worker exit first and called it a
    failure ("plot worker failed: its render process exited with code 0; restarting it"), and
    started a new one while the script was closing."""
    script = subprocess.Popen([sys.executable, "-c", _CLOSES_ON_SIGTERM,
                               str(tmp_path)],
                              stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE,
                              text=True,
                              cwd=ROOT,
                              start_new_session=True)
    try:
        assert script.stdout.readline() == "showing\n", script.stderr.read()[-3000:]
        workers = psutil.Process(script.pid).children(recursive=True)
        os.killpg(script.pid, signal.SIGTERM)
        out, err = script.communicate(timeout=60)
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
    assert script.returncode == 0 and out == "closed\n", err[-3000:]
    assert "plot worker failed" not in err and "restarting" not in err, err[-3000:]
    wait_for(lambda: not any(alive(w) for w in workers), 10, message="the workers to exit")
