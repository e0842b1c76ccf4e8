"""The worker's counters: one record, kept in the trainer, read as ``Plotter.stats``.

Every key is declared here, with its meaning, and present from the start. The writers: the
trainer's thread (``updates_sent``; ``alive`` at ``close()``), the supervisor's thread (the
worker's reports, its ``VideoLedger`` the videos) and, for a publish-only trainer, the Redis
sender's thread (``published`` ...). Each key has one writing thread at a time; keys that belong
together (a video's, the processes' ids and ``alive``) are written by one ``update`` under the
record's lock, which ``snapshot()`` takes too, so a reader never sees half of them. Lists and
dicts (``video_log``, ``worker_pids``) are replaced, never changed in place: a snapshot's stay
as they were.
"""
import dataclasses
import threading
from typing import Any, Dict, List, Optional


@dataclasses.dataclass
class WorkerStats:
    """What ``Plotter.stats`` (and the viewer's ``stats``) returns a copy of: ``snapshot()``."""

    #: updates passed to ``update_plot`` (a rejected one is not counted)
    updates_sent: int = 0
    #: updates the worker rendered (newest-wins skips the others; the initial policy not counted)
    updates_applied: int = 0
    #: episodes the worker ran
    episodes: int = 0
    #: frames shown (every ``frame_stride``-th step): on video, or played to a live view
    frames: int = 0
    #: of those, the frames drawn as pixels: a live page or window that nobody watches plays
    #: its frames without drawing them
    frames_drawn: int = 0
    #: videos written
    videos: int = 0
    #: restarts after worker failures
    restarts: int = 0
    #: whether the worker's processes are running
    alive: bool = False
    #: plotting is off: nowhere to show anything, or the worker failed too often
    disabled: bool = False
    #: the number (1, 2, ...; 0: the initial policy) of the newest update the worker rendered
    last_applied_update: Optional[int] = None
    #: the iteration given with it
    last_applied_iteration: Optional[int] = None
    #: the first update the worker rendered: 0 (the initial policy), or a later one when
    #: ``update_plot`` had sent newer parameters before the worker was ready (the newest wins)
    first_applied_update: Optional[int] = None
    #: the newest video's path
    last_video: Optional[str] = None
    #: the video of the newest parameters made at ``close()``
    final_video: Optional[str] = None
    #: the video folder's device is full: no video is written until space is free again
    video_dir_full: bool = False
    #: path, update, iteration, episodes, frames (what the file holds: the stills between
    #: chained episodes included), whole (False: cut short by ``close()`` before its rollout
    #: ended), clipped (True: its last episode stopped at the video's length, or for newer
    #: parameters, while the episode went on; the history keeps a whole episode of the policy)
    #: and time of each video (the newest 1000)
    video_log: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    #: rollouts written into TensorBoard as images
    tensorboard_images: int = 0
    #: state recordings written beside the videos (``iter_NNNN.npz``), and the newest's path
    state_recordings: int = 0
    last_state_recording: Optional[str] = None
    #: the final policy's state recording, holding its whole rollout even where ``close()`` cut
    #: its video short (``async-plotter render`` on it draws the whole video)
    final_state_recording: Optional[str] = None
    #: live episodes written as state recordings (``record_states=True``, ``<video_dir>/live/``)
    live_state_recordings: int = 0
    #: the run's history (``Plotter(history=...)``), one entry per policy recorded, oldest
    #: first (the newest 1000): ``iteration``, ``update``, ``return`` and ``length`` of one
    #: whole, deterministic episode from the run's start state (not the training average),
    #: ``path`` of its state recording (None where the env has no state to keep; a trainer that
    #: only publishes keeps them in a private folder, removed at close) and ``time``
    history: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    #: why the history stopped before the run's end: its thread hung (where, and how), after
    #: which the worker went on without it; None while it records
    history_stopped: Optional[str] = None
    #: the policy's actions were not finite (NaN or inf: NaN parameters, an overflow): the
    #: first update and iteration whose actions were, and how many steps in all so far
    #: (``{"update": 4, "iteration": 3, "steps": 1200}``); the worker gave the env 0 in place
    #: of each such value. None while every action was finite
    nonfinite_actions: Optional[Dict[str, Any]] = None
    #: the worker's last failure (a traceback), or a bug it reported
    last_error: Optional[str] = None
    #: reports of a kind the supervisor does not know (a bug)
    unknown_reports: int = 0
    #: the render process's GL renderer and its visual preset (``"cheap"`` or ``"full"``)
    gl_renderer: Optional[str] = None
    visual_preset: Optional[str] = None
    #: how the worker calls the policy each step: ``"xla"`` or ``"graph"`` (one traced
    #: TensorFlow function), ``"eager"`` where it cannot be traced, ``"numpy"`` for the RL
    #: host's MLP policies (their ``numpy_copy``) and Keras models whose layers numpy computes
    #: (``policy/numpy_copy.py``), ``"get_action"`` for other rllab-protocol policies
    policy_call: Optional[str] = None
    #: the env's steps per second of simulated time
    env_rate: Optional[float] = None
    #: every how many steps a frame is drawn
    frame_stride: Optional[int] = None
    #: the videos' frame rate
    video_fps: Optional[float] = None
    #: ``{"rollout": pid, "render": pid}`` of the running worker
    worker_pids: Optional[Dict[str, int]] = None
    #: seconds from start to both processes ready
    boot_seconds: Optional[float] = None
    #: the worker's CPU-seconds: in all, while starting, and counted against the budget
    worker_cpu_seconds: float = 0.0
    boot_cpu_seconds: float = 0.0
    budget_charged_seconds: float = 0.0
    #: the CPU budget in force (None with a fixed priority)
    budget: Optional[float] = None
    #: ``"sched"`` (``SCHED_IDLE`` when over budget) or ``"stop"`` (stopped when over budget,
    #: where priorities cannot be raised); None without a budget
    budget_mechanism: Optional[str] = None
    #: the live page's address (``Plotter(http=...)``); None until it serves
    http_url: Optional[str] = None
    #: a publish-only trainer's (``channel=...``; None otherwise, 0 from its start): updates
    #: written to Redis, failed attempts, updates skipped by newest-wins, whether it is
    #: connected, the sender thread's CPU-seconds
    published: Optional[int] = None
    #: of those, updates sent as their header alone: nobody read the parameters then
    published_withheld: Optional[int] = None
    publish_errors: Optional[int] = None
    publish_replaced: Optional[int] = None
    redis_connected: Optional[bool] = None
    publish_cpu_seconds: Optional[float] = None
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock,
                                              repr=False,
                                              compare=False)

    def snapshot(self) -> Dict[str, Any]:
        """Every key and its value now, as a new dict; never blocks for long."""
        with self._lock:
            return {name: getattr(self, name) for name in STATS_KEYS}

    def update(self, **values: Any) -> None:
        """Set keys that belong together at once (a snapshot sees all of them or none)."""
        _check_keys(values)
        with self._lock:
            for name, value in values.items():
                setattr(self, name, value)

    # Item access, for writers that also take a plain dict (``RedisWriter``); only the keys
    # declared above exist.
    def __getitem__(self, name: str) -> Any:
        _check_keys((name, ))
        return getattr(self, name)

    def __setitem__(self, name: str, value: Any) -> None:
        _check_keys((name, ))
        setattr(self, name, value)


#: every key of ``Plotter.stats``, in the order above
STATS_KEYS = tuple(field.name for field in dataclasses.fields(WorkerStats)
                   if not field.name.startswith("_"))
_KEYS = frozenset(STATS_KEYS)


def _check_keys(names: Any) -> None:
    unknown = set(names) - _KEYS
    if unknown:
        raise KeyError(f"not a stats key: {', '.join(sorted(unknown))}")
