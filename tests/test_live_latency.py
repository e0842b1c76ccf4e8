"""A live view keeps up with training when its render process is starved: each new policy is on
screen within seconds, on the MJPEG page and on the 3D page, though the render process stalled
for 4 s and then gets only about a quarter of a core; with videos and state recordings on too,
those still get every step.

The starvation is done here, from the outside, with signals: all the render process's threads
pinned to one CPU, and the process stopped (``SIGSTOP``) for the rest of every 100 ms once it has
used 25 ms of CPU in it: a CPU quota, as cgroup v2's ``cpu.max`` sets one. That works as the
user who owns the process, on any Linux, whatever else the machine runs. cgroup v2's
``cpu.max`` needs root and the cpu controller on a cgroup v2 hierarchy: this project's machines
mount it on cgroup v1 (a hybrid layout), and a CI runner need not be root. The share is checked:
the test fails if the process got more than about a third of a core.

A quota rather than a fixed 25 ms of every 100: with both cores kept busy from outside, a
process allowed to run 25 ms a period got about half of them, and at ``priority="low"`` (nice
10 against the burners' 0) a tenth, 0.025 of a core: no renderer keeps up with that, and it is
not the condition these tests are about. The Plotters here run at the trainer's priority, so
that the quota, not the neighbours, is what holds them.
"""
import glob
import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest

from async_plotter import Plotter
from async_plotter.render.recording import read_recording
from async_plotter.web.client import read_mjpeg
from tests.clients import view3d_shows, view3d_socket
from tests.conftest import wait_for
from tests.policies import LinearPolicy, make_sled

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: What a user relies on: a new policy on screen within seconds, even on a starved core. Measured
#: at load 6-14 (other work on the machine), the render process held to 0.1-0.24 of a core after
#: a 5 s stall (4 s now). Frames that cost it several times their real time (full visuals):
#: 0.4-1.1 s; before the render process skipped stale chunks, 20-24 s.
SLOW_FRAMES_BOUND = 4.0
#: A render process that keeps up at a quarter of a core: the 3D page (poses, no pixels)
#: 0.03-0.3 s; cheap frames with videos and state recordings on 0.55-0.7 s. Before, these lagged
#: by the chunks the stall left in the pipe, which the render process never worked off: 5.2-5.5
#: and 3.0-3.4 s.
KEEPS_UP_BOUND = 2.0


class QuarterCore:
    """Holds process ``pid`` to about ``share`` of one core while in use: its threads pinned to
    one CPU, and the process stopped for the rest of every ``period`` seconds once it has used
    ``share * period`` CPU-seconds in it."""

    def __init__(self, pid: int, share: float = 0.25, period: float = 0.1) -> None:
        self.pid, self.share, self.period = pid, share, period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._cycle, daemon=True)
        self._cpus = sorted(os.sched_getaffinity(0))
        self._started = (0.0, 0.0)

    def __enter__(self) -> "QuarterCore":
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                os.sched_setaffinity(int(tid), {self._cpus[-1]})
            except OSError:  # a thread that has just ended
                pass
        self._started = (self.cpu_seconds(), time.monotonic())
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()  # it leaves the process running
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:  # the process is gone
            tids = []
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), self._cpus)
            except OSError:
                pass

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.pid).cpu_times()
        return times.user + times.system

    def cores_used(self) -> float:
        """The process's CPU-seconds per second since the hold began."""
        cpu, started = self._started
        return (self.cpu_seconds() - cpu) / (time.monotonic() - started)

    def _cycle(self) -> None:
        quota = self.period * self.share
        try:
            while not self._stop.is_set():
                began, cpu = time.monotonic(), self.cpu_seconds()
                os.kill(self.pid, signal.SIGCONT)
                while (time.monotonic() - began < self.period and self.cpu_seconds() - cpu < quota):
                    time.sleep(0.002)
                os.kill(self.pid, signal.SIGSTOP)
                self._stop.wait(max(0.0, began + self.period - time.monotonic()))
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
        finally:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


class MjpegUpdates:
    """Reads the live page's MJPEG stream in a thread, as a browser does: ``(received, update)``
    of every part."""

    def __init__(self, url: str) -> None:
        self.frames = []
        self._stream = read_mjpeg(url + "stream.mjpg", timeout=60)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for frame in self._stream:
                self.frames.append((frame.received, frame.update))
        except Exception:  # noqa: BLE001 - the stream closes with the plotter
            pass

    def shown(self, update: int, since: float):
        """When the first part showing ``update`` or a newer one came, or None."""
        return next((t for t, number in list(self.frames)
                     if t >= since and number is not None and number >= update), None)


class SledOn3DPage:
    """Reads a 3D page's socket in a thread, as viser's page does, while ``make_sled``'s policy
    pushes the sled one way and each new policy the other way: ``(received, sled's x)`` of
    every pose."""

    def __init__(self, url: str) -> None:
        self.poses = []
        self._socket = view3d_socket(url, origin=url.rstrip("/"), timeout=60)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while True:
                message = self._socket.recv()
                received = time.time()
                offset, _ = view3d_shows(message)
                if offset is not None:
                    self.poses.append((received, -offset[0]))  # the view moves the world
        except Exception:  # noqa: BLE001 - the socket closes with the plotter
            pass

    def shown(self, update: int, since: float):
        """When the first pose of update ``update``'s episode came: the sled back at its start
        (x = 0) or on the new side of it, where the previous policy had pushed it away."""
        side = push(update)
        return next((t for t, x in list(self.poses) if t >= since and x * side >= -1e-9), None)

    def close(self) -> None:
        self._socket.close()


def push(update: int) -> float:
    """How hard, and which way, the sled policy of update ``update`` pushes."""
    return 2.0 if update % 2 == 0 else -2.0


def latencies_when_starved(plotter, policy, shown, updates=4, new_parameters=None):
    """Seconds from ``update_plot`` to ``shown(update, since)`` for ``updates`` new policies
    (``new_parameters(update)``; random by default) after the render process stalled for 4 s
    (a load spike, a debugger's breakpoint), then held to a quarter of a core all along; and
    the cores it used meanwhile."""
    rng = np.random.default_rng(1)
    found = []
    render = plotter.stats["worker_pids"]["render"]
    os.kill(render, signal.SIGSTOP)
    try:
        time.sleep(4.0)  # the rollout process sends on: 4 s of chunks wait in the pipe
    finally:
        os.kill(render, signal.SIGCONT)
    with QuarterCore(render) as hold:
        time.sleep(2.0)
        for number in range(1, updates + 1):
            update = plotter.stats["updates_sent"] + 1
            if new_parameters is None:
                policy.set_param_values(rng.normal(0, 0.5, policy.w.size).astype(np.float32))
            else:
                policy.set_param_values(new_parameters(update))
            sent = time.time()
            plotter.update_plot(policy, iteration=number)
            when = wait_for(lambda: shown(update, sent), 30, message=f"update {update} on screen")
            found.append(when - sent)
            time.sleep(1.0 + rng.random())
        cores = hold.cores_used()
    return found, cores


@pytest.mark.alone  # it times what a user sees, and holds a process to a quarter of a core
def test_a_starved_render_process_shows_each_new_policy_within_seconds():
    # HalfCheetah's full visuals at 320x320 cost the render process ~70 ms of CPU a frame on
    # llvmpipe, 20 frames a second of motion: at a quarter of a core it draws one in five.
    policy = LinearPolicy(17, 6)
    with Plotter("HalfCheetah-v5",
                 policy,
                 max_path_length=1000,
                 http=0,
                 window=False,
                 seed=0,
                 priority="normal",
                 quality="full",
                 frame_size=(320, 320)) as plotter:
        url = plotter.wait_for_http_url(60)
        reader = MjpegUpdates(url)
        wait_for(lambda: reader.frames, 60, message="the first frame")
        latencies, cores = latencies_when_starved(plotter, policy, reader.shown)
        stats = plotter.stats
    assert cores < 0.35, f"the render process was not starved: {cores:.2f} cores"
    slowest = max(latencies)
    assert slowest < SLOW_FRAMES_BOUND, f"a new policy took {slowest:.1f} s: {np.round(latencies, 2)}"
    assert stats["restarts"] == 0, stats["last_error"]


@pytest.mark.alone  # it times what a user sees, and holds a process to a quarter of a core
def test_a_starved_render_process_poses_each_new_policy_within_seconds_in_3d():
    # The 3D page costs the render process a few ms a frame (poses, not pixels): it keeps up at
    # a quarter of a core, but what waits in the pipe after the stall must not be shown, nor
    # poses the 3D front holds for later. Poses name no policy: the sled's position tells.
    pytest.importorskip("viser")
    pytest.importorskip("mjviser")
    policy = LinearPolicy(1, 1)
    policy.fill(push(0))
    with Plotter(make_sled,
                 policy,
                 max_path_length=5000,
                 http=0,
                 view="3d",
                 window=False,
                 seed=0,
                 priority="normal") as plotter:
        url = plotter.wait_for_http_url(60)
        reader = SledOn3DPage(url)
        try:
            wait_for(lambda: reader.poses, 60, message="the first pose")
            latencies, cores = latencies_when_starved(
                plotter,
                policy,
                reader.shown,
                new_parameters=lambda update: np.full(1, push(update), np.float32))
        finally:
            reader.close()
        stats = plotter.stats
    assert cores < 0.35, f"the render process was not starved: {cores:.2f} cores"
    slowest = max(latencies)
    assert slowest < KEEPS_UP_BOUND, f"a new policy took {slowest:.1f} s: {np.round(latencies, 2)}"
    assert stats["restarts"] == 0, stats["last_error"]


@pytest.mark.alone  # it times what a user sees, and holds a process to a quarter of a core
def test_with_videos_on_the_page_catches_up_and_every_recording_keeps_every_step(tmp_path):
    # Videos and state recordings keep every step the live page skips: the render process draws
    # a video's steps as fast as it can rather than at their time, so a renderer faster than
    # real time (HalfCheetah's cheap visuals at a quarter of a core) works off the stall and
    # the page shows the present again.
    import imageio.v2 as imageio

    policy = LinearPolicy(17, 6)
    with Plotter("HalfCheetah-v5",
                 policy,
                 max_path_length=200,
                 http=0,
                 video_dir=str(tmp_path),
                 record_states=True,
                 min_video_seconds=0,
                 window=False,
                 seed=0,
                 priority="normal") as plotter:
        url = plotter.wait_for_http_url(60)
        reader = MjpegUpdates(url)
        wait_for(lambda: reader.frames, 60, message="the first frame")
        latencies, cores = latencies_when_starved(plotter, policy, reader.shown)
        plotter.close(final_video=False)
        stats = plotter.stats
    assert cores < 0.35, f"the render process was not starved: {cores:.2f} cores"
    slowest = max(latencies)
    assert slowest < KEEPS_UP_BOUND, f"a new policy took {slowest:.1f} s: {np.round(latencies, 2)}"
    assert stats["restarts"] == 0, stats["last_error"]
    videos = [entry["path"] for entry in stats["video_log"]]
    assert len(videos) >= 4, videos
    for path in videos:
        recording = read_recording(path[:-len(".mp4")] + ".npz")
        video = imageio.get_reader(path)
        try:
            frames = video.count_frames()
        finally:
            video.close()
        assert frames == len(recording.states), f"{path}: {frames} frames"
        assert_every_step(recording, path)
    live = sorted(glob.glob(str(tmp_path / "live" / "*.npz")))
    assert len(live) >= 4, live
    for path in live:
        assert_every_step(read_recording(path), path)


def assert_every_step(recording, path):
    """The recording holds its episode's shown steps from the first on, with no gap."""
    step = recording.meta["stride"] / recording.meta["env_rate"]
    gaps = np.diff(recording.times)
    assert recording.times[0] == pytest.approx(0.0), f"{path} starts at {recording.times[0]}"
    assert np.allclose(gaps, step), f"{path} skips steps: gaps {sorted(set(np.round(gaps, 3)))}"
