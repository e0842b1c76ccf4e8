"""The history: one shared recorder that makes a video of each experiment every few updates, within
a hard CPU budget (docs/design.md, "async-plotter serve"). A recording worker per experiment would
be two processes each, recording every update it can; here at most one recording runs, for the
experiment whose newest video is the most updates behind (at least ``every``), and it pays for
everything: a token bucket fills at ``budget x cores`` CPU-seconds per second up to ``CAPACITY``,
a recording starts only out of debt, and is charged what its processes and their children
really used (psutil), start-up included. Its worker runs at nice 10 (at ``SCHED_IDLE`` it
starved). A recording is ``async-plotter view --video-dir``'s viewer, stopped once its first
video exists, writing into a hidden ``STAGING`` folder; only the video asked for (with its state
recording) is moved out, so a video the history listed is never deleted.
"""
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from async_plotter.cpu import tree_cpu_seconds, usable_cores
from async_plotter.serve.history import History
from async_plotter.serve.viewer import ExperimentViewer, ViewOptions
from async_plotter.sinks.specs import StatesSpec, VideoSpec
from async_plotter.supervision.token_bucket import TokenBucket

logger = logging.getLogger("async_plotter")

#: CPU-seconds the bucket holds at most (and at the start: the first video comes soon)
CAPACITY = 5.0
#: seconds a recording may take before it is abandoned
RECORD_TIMEOUT = 60.0
#: the hidden folder, inside an experiment's, that a recording is written into
STAGING = ".recording"
# Seconds before an experiment whose recording failed is tried again (doubling, capped).
_RETRY_FIRST, _RETRY_CAP = 30.0, 600.0
_IDLE_POLL = 1.0


class Recorder:
    """Records the experiments of ``catalog`` into ``history`` within ``budget``.

    Args:
        catalog: the experiments and their newest updates (``Catalog``).
        history: where videos go.
        view: builds the ``ViewOptions`` of an experiment from its sink specs.
        budget: fraction of the machine's CPU (all cores) recording may use on average.
        every: updates between two videos of one experiment.
        on_video: called with the experiment's name after each new video.
    """

    def __init__(self,
                 catalog: Any,
                 history: History,
                 view: Callable[[str, Tuple[Any, ...]], ViewOptions],
                 budget: float,
                 every: int,
                 on_video: Optional[Callable[[str], None]] = None) -> None:
        self._catalog = catalog
        self._history = history
        self._view = view
        self._bucket = TokenBucket(budget * usable_cores(), CAPACITY)
        self.every = every
        self._on_video = on_video or (lambda name: None)
        self._recorded: Dict[str, Tuple[int, int]] = {}  # name -> (run id, update) of its video
        self._retry_at: Dict[str, float] = {}
        self._failures: Dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run,
                                        name="async_plotter-serve-recorder",
                                        daemon=True)
        #: what the recorder did (tests, benchmarks, the page's footer)
        self.stats: Dict[str, Any] = {
            "recordings": 0,
            "videos": 0,
            "failures": 0,
            "cpu_seconds": 0.0,
            "recording": None,
        }

    def start(self) -> None:
        """Start recording in the background (the catalog is held while it runs)."""
        self._catalog.acquire()
        self._thread.start()

    def close(self) -> None:
        """Stop, finishing or abandoning the recording under way (within ~6 s)."""
        self._stop.set()
        self._thread.join(10.0)
        self._catalog.release()

    # ------------------------------------------------------------------------ the loop

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._bucket.refill() < 0:
                # In debt: wait until the budget has paid for the last recording.
                self._stop.wait(min(self._bucket.seconds_until(0.0), 5.0))
                continue
            name = self._due()
            if name is None:
                self._stop.wait(_IDLE_POLL)
                continue
            self._record(name)

    def _due(self) -> Optional[str]:
        """The experiment most behind its last video, if any is due."""
        now = time.monotonic()
        best, best_gap = None, -1.0
        for name in self._catalog.names():
            newest = self._catalog.newest_update(name)
            if newest is None or self._retry_at.get(name, 0.0) > now:
                continue
            last = self._recorded.get(name)
            if last is None or last[0] != newest[0]:
                gap = float("inf")  # none yet, or a new trainer run
            else:
                gap = float(newest[1] - last[1])
                if gap < self.every:
                    continue
            if gap > best_gap:
                best, best_gap = name, gap
        return best

    def _record(self, name: str) -> None:
        written: Dict[str, Any] = {}
        done = threading.Event()

        def listener(kind: str, payload: Dict[str, Any]) -> None:
            if kind == "video" and not written:
                written.update(payload)
                done.set()

        folder = self._history.folder(name)
        staging = os.path.join(folder, STAGING)
        _empty(staging)  # what a recording that was killed left
        os.makedirs(staging, exist_ok=True)
        newest = self._catalog.newest_update(name)
        viewer = ExperimentViewer(self._view(name, (VideoSpec(staging), StatesSpec(staging))),
                                  listener=listener)
        meter = _CpuMeter(
            lambda: [p for p in (viewer.stats.get("worker_pids") or {}).values() if p])
        self.stats["recording"] = name
        self.stats["recordings"] += 1
        started = time.monotonic()
        logger.debug("serve: recording %r (budget %.2f CPU-s in hand)", name, self._bucket.tokens)
        meter.start()
        try:
            viewer.start()
            while not done.is_set() and not self._stop.is_set():
                viewer.poll(0.25)
                if time.monotonic() - started > RECORD_TIMEOUT or viewer.stats.get("disabled"):
                    break
        finally:
            # The render process finishes the video it is writing (a newer update's, sometimes:
            # it stays in staging); the meter keeps counting until the processes are gone.
            viewer.stop(5.0)
            cost = meter.stop()
        self._bucket.charge(cost)
        self.stats["cpu_seconds"] = round(self.stats["cpu_seconds"] + cost, 3)
        self.stats["recording"] = None
        if written:
            written["path"] = _keep(written.get("path"), folder)
        _empty(staging)
        if written.get("path"):
            update = written.get("update")
            run = newest[0] if newest is not None else 0
            self._recorded[name] = (run, update if isinstance(update, int) else 0)
            self._failures.pop(name, None)
            self.stats["videos"] += 1
            logger.info("serve: recorded %s (%.1f CPU-s)", written.get("path"), cost)
            self._history.prune(name)
            self._on_video(name)
        elif not self._stop.is_set():
            failures = self._failures.get(name, 0) + 1
            self._failures[name] = failures
            self.stats["failures"] += 1
            delay = min(_RETRY_FIRST * 2**(failures - 1), _RETRY_CAP)
            self._retry_at[name] = time.monotonic() + delay
            logger.warning(
                "serve: no video of %r after %.0f s (%.1f CPU-s); trying again in "
                "%.0f s", name,
                time.monotonic() - started, cost, delay)


def _keep(path: Optional[str], folder: str) -> Optional[str]:
    """Move the video at ``path`` into ``folder``, its state recording first (the history
    lists a video with the recording beside it); where it is now, None if it cannot be moved."""
    if not path:
        return None
    stem = os.path.splitext(os.path.basename(path))[0]
    recording = os.path.splitext(path)[0] + ".npz"
    try:
        if os.path.exists(recording):
            os.replace(recording, os.path.join(folder, stem + ".npz"))
        kept = os.path.join(folder, os.path.basename(path))
        os.replace(path, kept)
        return kept
    except OSError as error:
        logger.warning("serve: cannot keep the video %s: %s", path, error)
        return None


def _empty(staging: str) -> None:
    """Delete what is in the staging folder (what the worker wrote after the video asked
    for, or a recording's partial files)."""
    try:
        names = os.listdir(staging)
    except OSError:
        return
    for name in names:
        try:
            os.remove(os.path.join(staging, name))
        except OSError as error:
            logger.debug("cannot remove %s: %s", name, error)


class _CpuMeter:
    """Samples the CPU time of a recording's processes (and their children) in a thread, from
    before they start until after they are gone: a process's time can only be read while it
    exists (once reaped, it is in this process's children total, mixed with the live views')."""

    def __init__(self, pids: Callable[[], List[int]], interval: float = 0.1) -> None:
        self._pids = pids
        self._interval = interval
        self._seen: Dict[int, float] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample,
                                        name="async_plotter-serve-meter",
                                        daemon=True)

    def start(self) -> None:
        """Start sampling."""
        self._thread.start()

    def stop(self) -> float:
        """Stop sampling; the CPU-seconds the processes used."""
        self._done.set()
        self._thread.join(2.0)
        self._sample_once()
        return sum(self._seen.values())

    def _sample(self) -> None:
        while not self._done.wait(self._interval):
            self._sample_once()

    def _sample_once(self) -> None:
        for pid in self._pids():
            used = tree_cpu_seconds(pid) or 0.0
            if used > self._seen.get(pid, 0.0):
                self._seen[pid] = used
