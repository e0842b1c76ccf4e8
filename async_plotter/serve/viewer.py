"""The viewer's assembly: a worker fed from Redis, for ``async-plotter view`` (and any program
that shows experiments published by trainers elsewhere).

It waits for the experiment's structure (it may start before the trainer), checks its signature,
and runs the same worker a local ``Plotter`` runs (``WorkerSupervisor``: rollout and render
processes, restarted after crashes), fed from Redis instead of shared memory, with the viewer's
own outputs (sink specs) and CPU settings. A trainer restarted with another policy publishes a
new structure; the worker is then restarted with it.
"""
import collections
import dataclasses
import logging
import pickle
import threading
import time
from typing import Any, Callable, Deque, Dict, Optional, Set, Tuple

from async_plotter.channel.redis.returns import ReturnRow
from async_plotter.channel.redis.urls import redact
from async_plotter.channel.redis.reader import RedisAddress
from async_plotter.channel.redis.signing import PayloadRejected, Verifier
from async_plotter.channel.redis.wire import MetricsEntry, Structure, resumed_after
from async_plotter.display import offscreen_gl_backend
from async_plotter.learning_curve import MAX_POINTS
from async_plotter.render.history import HistoryPoint
from async_plotter.serve.run_chain import METRICS, RETURNS, on_chain
from async_plotter.until_stopped import until_interrupted
from async_plotter.worker.config import WorkerConfig
from async_plotter.sinks.specs import SinkSpec
from async_plotter.supervision.budget import DEFAULT_BUDGET
from async_plotter.supervision.stats import WorkerStats
from async_plotter.supervision.supervisor import WorkerSupervisor

logger = logging.getLogger("async_plotter")

_WAITING_HINT_AFTER = 15.0  # seconds without the experiment before suggesting `list`
_STATES_FPS = 30.0  # a states viewer's frame cap without --fps: the Plotter's default


@dataclasses.dataclass(frozen=True)
class ViewOptions:
    """What to watch and how: checked by the caller (the command line checks its arguments)."""

    url: str
    experiment: str
    secret: Optional[bytes]
    trust_unsigned: bool
    #: the viewer's own outputs; the trainer's never travel
    sinks: Tuple[SinkSpec, ...]
    fps: Optional[float] = None
    priority: Optional[str] = None
    max_restarts: int = 3
    budget: Optional[float] = None
    #: draw the trainer's live episode from its published states (``worker/states_source.py``:
    #: no TensorFlow, no policy code, nothing unpickled) instead of running rollouts here,
    #: whatever the trainer says; ``rollouts``: rebuild the policy and run rollouts here,
    #: whatever it says; neither: states where the trainer sends them, else rollouts
    states: bool = False
    rollouts: bool = False


def viewer_config(trainer_config: WorkerConfig, options: ViewOptions) -> WorkerConfig:
    """The trainer's published configuration with this viewer's outputs, frame rate, CPU
    settings and GL backend."""
    return dataclasses.replace(trainer_config,
                               fps=options.fps or trainer_config.fps,
                               mujoco_gl=offscreen_gl_backend(),
                               **_cpu_settings(options)).with_sinks(options.sinks)


def states_config(options: ViewOptions) -> WorkerConfig:
    """The worker of a viewer that draws the trainer's live states, with this viewer's outputs,
    frame rate and CPU settings (else the default budget)."""
    from async_plotter.worker.states_source import source_config

    config = source_config(options.experiment, options.fps or _STATES_FPS)
    cpu = _cpu_settings(options) or {"budget": DEFAULT_BUDGET}
    return dataclasses.replace(config, **cpu).with_sinks(options.sinks)


def _cpu_settings(options: ViewOptions) -> Dict[str, Any]:
    """The viewer's own --budget or --priority, replacing the trainer's choice; neither: the
    trainer's (a fixed priority, else its budget: every trainer publishes one of the two)."""
    if options.budget is not None:
        return {"budget": options.budget, "priority": None}
    if options.priority is not None:
        return {"budget": None, "priority": options.priority}
    return {}


class ExperimentViewer:
    """Runs one worker at a time for the newest structure of an experiment on a Redis server.

    ``start()`` follows the experiment; ``poll()`` (called in a loop by its owner) starts,
    switches or restarts the worker as the trainer publishes; ``stop()`` ends both. ``run()`` is
    the command line's loop around them, until Ctrl-C or SIGTERM.
    """

    def __init__(self,
                 options: ViewOptions,
                 listener: Optional[Callable[[str, Dict[str, Any]], None]] = None) -> None:
        self._options = options
        self._listener = listener or _log_event
        self._watcher: Optional[Any] = None
        self._verifier = Verifier(options.secret, options.trust_unsigned)
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._newest: Optional[Structure] = None
        self._metrics: Deque[MetricsEntry] = collections.deque(maxlen=MAX_POINTS)
        #: the history's points ``(run id, point)``: the curve of what was shown
        self._shown: Deque[Tuple[int, HistoryPoint]] = collections.deque(maxlen=MAX_POINTS)
        self._supervisor: Optional[Any] = None
        self._worker_stats: Optional[WorkerStats] = None
        self._current: Optional[Structure] = None
        #: the streams (``METRICS``, ``RETURNS``) the current run has points in
        self._current_started: Set[str] = set()
        self._failed_structure: Optional[bytes] = None
        #: the worker draws the trainer's live states (``--states``, or the trainer sends them)
        self._drawing_states = False
        #: why the server refuses this viewer (ACL role, password, TLS certificate), once it does
        self.refused: Optional[str] = None

    @property
    def stats(self) -> Dict[str, Any]:
        """The running worker's counters (``Plotter.stats``'s keys); empty before the first."""
        stats = self._worker_stats
        return {} if stats is None else stats.snapshot()

    @property
    def current(self) -> Optional[Structure]:
        """The structure the worker runs (None before the trainer published one)."""
        return self._current

    def start(self) -> None:
        """Follow the experiment (in a thread); the worker starts at the next ``poll``."""
        from async_plotter.channel.redis.watcher import ExperimentWatcher

        options = self._options
        self._watcher = ExperimentWatcher(options.url,
                                          options.experiment,
                                          self._verifier,
                                          self._on_structure,
                                          self._on_metrics,
                                          self._on_refused,
                                          on_returns=self._on_returns)
        self._watcher.start()
        if options.states:
            self._start_states_worker()

    def poll(self, timeout: float = 0.5) -> None:
        """Wait up to ``timeout`` s for news of the experiment and act on it."""
        if self._changed.wait(timeout):
            self._changed.clear()
            self._switch()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the worker (within ``timeout`` s) and the watcher."""
        self._stop_worker(timeout)
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None

    def run(self) -> int:
        """Show the experiment until Ctrl-C or SIGTERM; returns the exit code: 0, or 1 once the
        server refuses this viewer's settings (its ACL role, password or TLS certificate)."""
        options = self._options
        logger.info("waiting for experiment %r on %s (Ctrl-C to stop)", options.experiment,
                    redact(options.url))
        disabled_logged = False
        hint_at = time.monotonic() + _WAITING_HINT_AFTER
        with until_interrupted(self.stop) as stop:
            self.start()
            while self.refused is None and not stop.is_set():
                before = self._current
                self.poll(0.5)
                if self._current is not before:
                    disabled_logged = False
                if time.monotonic() > hint_at:
                    hint_at = float("inf")
                    self._hint_while_waiting()
                if self._worker_disabled() and not disabled_logged:
                    disabled_logged = True
                    logger.error("the worker keeps failing; waiting for the trainer to publish "
                                 "a new structure (or press Ctrl-C)")
        if self.refused is not None:
            logger.error("%s", self.refused)
            return 1
        return 0

    def _hint_while_waiting(self) -> None:
        """Nothing shown after a while: say what the viewer waits for, and what else there is."""
        options, url = self._options, redact(self._options.url)
        shown = self.stats.get("last_applied_update") is not None
        if self._current is None and not shown:
            logger.info(
                "still waiting for experiment %r; `async-plotter list %s` shows the "
                "experiments that server holds", options.experiment, url)
        elif self._drawing_states and not shown:
            logger.info(
                "experiment %r publishes, but no live episode came yet: a trainer plays one for "
                "viewers of a MuJoCo env, with a worker of its own (not a Plotter with channel= "
                "and history=False alone); `async-plotter replay %s -e %s` shows the run's "
                "history", options.experiment, url, options.experiment)

    # Called from the watcher's thread.
    def _on_structure(self, structure: Structure) -> None:
        with self._lock:
            self._newest = structure
        self._changed.set()

    def _on_refused(self, message: str) -> None:
        self.refused = message
        self._changed.set()

    def _on_metrics(self, entry: MetricsEntry) -> None:
        with self._lock:
            self._metrics.append(entry)
            first = self._first_of_current(entry.run_id, METRICS)
            if first:
                self._replay_metrics(self._current)  # the runs it resumes, up to its own
            elif self._supervisor is not None and self._is_current(entry.run_id):
                self._supervisor.post_metrics(entry.iteration, entry.metrics)

    def _on_returns(self, run_id: int, row: ReturnRow) -> None:
        point = row.as_point()
        if point is None:
            return
        with self._lock:
            self._shown.append((run_id, point))
            first = self._first_of_current(run_id, RETURNS)
            if first:
                self._replay_metrics(self._current)
            elif self._supervisor is not None and self._is_current(run_id):
                self._supervisor.post_history(point)

    def _is_current(self, run_id: int) -> bool:
        return self._current is not None and run_id == self._current.run_id

    def _first_of_current(self, run_id: int, stream: str) -> bool:
        """Whether a point of ``run_id`` is the first in ``stream`` of a current run that
        resumes another: its curve is drawn again then, with the points of the runs before it
        that arrived meanwhile (``serve/run_chain.py``). Called with the lock held."""
        if (self._supervisor is None or not self._is_current(run_id)
                or stream in self._current_started):
            return False
        self._current_started.add(stream)
        return resumed_after(self._current.meta) is not None

    def _switch(self) -> None:
        with self._lock:
            structure = self._newest
        if structure is None:
            return
        if self._draws_states(structure):
            if not self._drawing_states:
                self._stop_worker()
                self._start_states_worker()
            self._follow_run(structure)
            return
        if self._drawing_states:  # the trainer restarted and sends no live episode any more
            self._stop_worker()
            with self._lock:
                self._current = None
        current = self._current
        if current is not None and current.structure_id == structure.structure_id:
            if current.run_id == structure.run_id:
                return
            logger.info("the trainer restarted with the same policy structure")
            if not self._worker_disabled():
                with self._lock:
                    self._current = structure  # the running worker follows the new run
                    self._replay_metrics(structure)
                return
            # A worker that gave up gets another chance with the new run.
        if structure.structure_id == self._failed_structure:
            return
        config = self._load(structure)
        if config is None:
            self._failed_structure = structure.structure_id
            return
        self._stop_worker()
        self._start_worker(structure, config)

    def _draws_states(self, structure: Structure) -> bool:
        """``--states``; else, unless ``--rollouts``, whether the trainer says its worker plays
        the live episode for viewers (its verified description, never its pickle)."""
        options = self._options
        return options.states or (not options.rollouts
                                  and structure.meta.get("live_states") is True)

    def _load(self, structure: Structure) -> Optional[Any]:
        """Unpickle the verified structure into the worker configuration for this viewer."""
        try:
            trainer_config = pickle.loads(structure.body)
            if not isinstance(trainer_config, WorkerConfig):
                raise PayloadRejected(f"it holds a {type(trainer_config).__name__}, not a "
                                      "WorkerConfig")
        except Exception as error:  # noqa: BLE001 - a missing module, a version mismatch, ...
            logger.error(
                "cannot load the structure of experiment %r: %s: %s. The viewer needs the "
                "packages that define the trainer's env and policy, or --states to draw the "
                "states the trainer sends instead.", self._options.experiment,
                type(error).__name__, error)
            return None
        return viewer_config(trainer_config, self._options)

    def _start_worker(self, structure: Structure, config: Any) -> None:
        options = self._options
        meta = structure.meta
        logger.info("experiment %r: %s with %s, %s %s parameters, from %s", options.experiment,
                    meta.get("env"), meta.get("policy"), meta.get("size"), meta.get("dtype"),
                    meta.get("host"))
        address = RedisAddress(options.url, options.experiment, options.secret,
                               options.trust_unsigned, structure.expected())
        self._worker_stats = WorkerStats()
        supervisor = WorkerSupervisor(config,
                                      lambda: address,
                                      self._worker_stats,
                                      max_restarts=options.max_restarts,
                                      listener=self._listener)
        with self._lock:
            self._supervisor, self._current = supervisor, structure
            self._replay_metrics(structure)
        supervisor.start()

    def _start_states_worker(self) -> None:
        """The worker that draws the trainer's live states; it runs from the start, whatever
        the trainer does (its source process waits for the first episode)."""
        from async_plotter.worker import states_source

        options = self._options
        address = states_source.LiveAddress(options.url, options.experiment, options.secret,
                                            options.trust_unsigned)
        self._worker_stats = WorkerStats()
        supervisor = WorkerSupervisor(states_config(options),
                                      lambda: address,
                                      self._worker_stats,
                                      max_restarts=options.max_restarts,
                                      listener=self._listener,
                                      source=states_source.main)
        with self._lock:
            self._supervisor, self._current, self._drawing_states = supervisor, None, True
        supervisor.start()

    def _follow_run(self, structure: Structure) -> None:
        """States: the trainer's structure names its run (for the curve) and is never loaded."""
        with self._lock:
            if self._current is not None and self._current.run_id == structure.run_id:
                return
            self._current = structure
            if self._supervisor is not None:
                self._replay_metrics(structure)
        meta = structure.meta
        logger.info("experiment %r: %s with %s, from %s; drawing its live states",
                    self._options.experiment, meta.get("env"), meta.get("policy"), meta.get("host"))

    def _replay_metrics(self, structure: Structure) -> None:
        """Hand the worker the run's curve so far, from the start: its points, after those of the
        runs it resumes (``serve/run_chain.py``); later entries come through _on_metrics.

        Called with the lock held, as _on_metrics stores and checks under it: each entry then
        reaches the worker exactly once."""
        after = resumed_after(structure.meta)
        self._supervisor.restart_curve()  # a worker that drew another run's curve drops it
        self._current_started = {
            stream
            for stream, runs in ((METRICS, (entry.run_id for entry in self._metrics)),
                                 (RETURNS, (run for run, _ in self._shown)))
            if structure.run_id in set(runs)
        }
        metrics = list(self._metrics)
        keep = on_chain([(entry.run_id, entry.iteration) for entry in metrics], structure.run_id,
                        after)
        for entry, kept in zip(metrics, keep):
            if kept:
                self._supervisor.post_metrics(entry.iteration, entry.metrics)
        shown = list(self._shown)
        for (run_id, point), kept in zip(
                shown, on_chain([(run, p.x) for run, p in shown], structure.run_id, after)):
            if kept:
                self._supervisor.post_history(point)

    def _worker_disabled(self) -> bool:
        return self._worker_stats is not None and self._worker_stats.disabled

    def _stop_worker(self, timeout: float = 5.0) -> None:
        with self._lock:
            supervisor, self._supervisor = self._supervisor, None
            self._drawing_states = False
        if supervisor is not None:
            supervisor.stop(timeout)


def _log_event(kind: str, payload: Dict[str, Any]) -> None:
    if kind == "applied":
        iteration = payload.get("iteration")
        logger.info("applied update %s%s", payload.get("update"),
                    "" if iteration is None else f" (iteration {iteration})")
    elif kind == "video":
        logger.info("wrote %s", payload.get("path"))
    elif kind == "episode":
        logger.debug("episode of update %s: %s steps, return %.3g", payload.get("update"),
                     payload.get("steps"), payload.get("reward", float("nan")))
