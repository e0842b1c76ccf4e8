"""Reports a worker process sends back to the trainer's supervisor: events, progress beats and
errors. Every report is ``(StatusKind, payload_dict)``, the member itself on the wire as the
render process's ``(StreamKind, body)`` messages are (``render/stream.py``); the payload always
has ``role`` and ``time``."""
import enum
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any


class StatusKind(str, enum.Enum):
    """The reports a worker sends. A ``str`` enum: ``on_event`` listeners get ``kind.value``."""

    READY = "ready"  # a process finished starting (render: gl_renderer, preset)
    BEAT = "beat"  # the main loop makes progress (hang detection)
    APPLIED = "applied"  # rollout: new parameters applied (update, iteration)
    EPISODE = "episode"  # rollout: an episode ended (update, steps, reward, completed, part)
    FRAMES = "frames"  # render: frames shown since the last report (count; drawn: with pixels)
    VIDEO = "video"  # render: a video file is complete (path, update, iteration, ...)
    TENSORBOARD = "tensorboard"  # render: a rollout written to TensorBoard (path, tag, step, ...)
    STATES = "states"  # render: a state recording is complete (path, update, iteration, ...)
    HISTORY = "history"  # rollout: a policy's history recording is complete (update,
    # iteration, episode_return, length, path: None where the env has no state to keep, ...)
    ENCODER = "encoder"  # render: the video encoder's pid, to hold it to the budget
    HTTP = "http"  # render: the live page's URL
    STORAGE = "storage"  # render: the video folder's device is full, has space again, or the
    # folder was made again (state, directory, free)
    ERROR = "error"  # an exception (where, traceback, offscreen_gl); the process exits after it
    STACKS = "stacks"  # the file its stacks go to when asked (``stacks.py``: fd), sent first


class UnknownReport(Exception):
    """A report whose kind is not a ``StatusKind``: worker and trainer disagree (a bug)."""


def report_kind(kind: Any) -> StatusKind:
    """``kind`` as a ``StatusKind``; ``UnknownReport`` for anything else."""
    try:
        return StatusKind(kind)
    except ValueError:
        raise UnknownReport(f"unknown report {kind!r} from the plot worker") from None


class StatusSender:
    """Child side. Sending never raises for a gone trainer; an unknown kind is a ``TypeError``.
    Threads may share one (the rollout process's history thread does): a report is one whole
    message."""

    def __init__(self, connection: Connection, role: str) -> None:
        self._connection = connection
        self.role = role
        self._last_beat = 0.0
        self._lock = threading.Lock()

    def send(self, kind: StatusKind, **payload: Any) -> None:
        if not isinstance(kind, StatusKind):
            raise TypeError(f"report kinds are StatusKind members, got {kind!r}")
        payload["role"] = self.role
        payload["time"] = time.time()
        try:
            with self._lock:
                self._connection.send((kind, payload))
        except (OSError, ValueError):
            pass  # the trainer is gone; the lifeline will end this process

    def offer_stacks(self) -> None:
        """First thing in a worker process: have ``stacks.ASK`` write every thread's stack,
        and tell the supervisor where it can read them (where this platform allows)."""
        from async_plotter.stacks import answer_when_asked

        descriptor = answer_when_asked()
        if descriptor is not None:
            self.send(StatusKind.STACKS, fd=descriptor)

    def beat(self, interval: float = 1.0) -> None:
        """Tell the supervisor the main loop is making progress (rate-limited)."""
        now = time.monotonic()
        if now - self._last_beat >= interval:
            self._last_beat = now
            self.send(StatusKind.BEAT)

    def error(self, where: str, **details: Any) -> None:
        """Report the exception being handled, with its traceback (and ``details`` the
        supervisor acts on, e.g. ``offscreen_gl``: why the GL backend made no context)."""
        self.send(StatusKind.ERROR, where=where, traceback=traceback.format_exc(), **details)
