"""Live views on demand: a render worker per watched experiment, only while somebody watches.

A ``LiveSession`` is what ``async-plotter view --http`` runs for one experiment (an
``ExperimentViewer``: verified structure, rollout and render processes, restarts), with its
live page on a free loopback port behind a random token, and a ``FrameRelay`` that carries its
frames to the browsers. The ``LiveManager`` starts a session when the first browser asks for an
experiment's stream, stops it ``grace`` seconds after the last one left (a reload or a flaky
connection does not pay the worker's start-up again), and runs at most ``max_live`` at once. A
browser over the limit is refused with the reason, unless a session nobody watches (in its
grace time) can make room: then that one stops early. A running stream is never taken away
for another experiment.
"""
import logging
import secrets
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from async_plotter.web.address import HttpConfig
from async_plotter.web.feed import Viewer
from async_plotter.serve.relay import FrameRelay
from async_plotter.sinks.specs import HttpSpec
from async_plotter.serve.viewer import ExperimentViewer, ViewOptions

logger = logging.getLogger("async_plotter")

#: seconds a browser over the limit waits for a session in its grace time to make room
MAKE_ROOM_TIMEOUT = 10.0
# Seconds without a frame after which a session that showed frames counts as starting again
# (its worker restarts, or waits for a new structure).
_STALE_FRAMES = 5.0
_REAP_INTERVAL = 0.25


class LiveLimit(Exception):
    """Every live slot is in use by experiments somebody watches; the message says which."""


class LiveSession:
    """The render worker and relay of one watched experiment."""

    def __init__(self, name: str, view: Callable[[Tuple[Any, ...]], ViewOptions]) -> None:
        self.name = name
        self.token = secrets.token_urlsafe(24)
        # The render process serves on loopback behind this token: only this process can read
        # its stream, not every local user who finds the port.
        spec = HttpSpec(HttpConfig("127.0.0.1", 0, self.token))
        self._viewer = ExperimentViewer(view((spec, )), listener=self._on_event)
        self.relay = FrameRelay(self._stream_url, self.token)
        self.created = time.monotonic()
        self.idle_since: Optional[float] = None
        self._stop = threading.Event()
        self.stopped = threading.Event()
        self._last_applied: Optional[int] = None
        self._thread = threading.Thread(target=self._run,
                                        name=f"async_plotter-serve-live-{name[:20]}",
                                        daemon=True)

    def start(self) -> None:
        """Follow the experiment and start its worker once its structure is verified."""
        self._thread.start()

    def stop(self) -> None:
        """Ask the session to stop (its thread stops the worker, within ~5 s)."""
        self._stop.set()

    @property
    def worker_pids(self) -> List[int]:
        """The worker's processes now (empty before it started)."""
        pids = self._viewer.stats.get("worker_pids") or {}
        return [pid for pid in pids.values() if isinstance(pid, int)]

    def status(self) -> Dict[str, Any]:
        """State and figures for the page: ``state`` is waiting (no verified structure yet),
        starting (the worker boots or restarts), live, failed (the worker keeps failing) or
        stopping."""
        stats = self._viewer.stats
        relay = self.relay.status()
        last = self.relay.last_frame_at
        if self._stop.is_set():
            state = "stopping"
        elif stats.get("disabled"):
            state = "failed"
        elif self._viewer.current is None:
            state = "waiting"
        elif last is not None and time.time() - last < _STALE_FRAMES:
            state = "live"
        else:
            state = "starting"
        return dict(relay,
                    state=state,
                    applied=self._last_applied,
                    restarts=stats.get("restarts", 0),
                    visual_preset=stats.get("visual_preset"))

    def _stream_url(self) -> Optional[str]:
        url = self._viewer.stats.get("http_url")
        return None if not url else url.rstrip("/") + "/stream.mjpg"

    def _on_event(self, kind: str, payload: Dict[str, Any]) -> None:
        # The worker's reports (in its supervisor's thread); the command-line viewer logs each
        # applied update, which here would be a line per update per watched experiment.
        if kind == "applied":
            self._last_applied = payload.get("update")
            logger.debug("%s: applied update %s", self.name, payload.get("update"))

    def _run(self) -> None:
        try:
            self._viewer.start()
            while not self._stop.is_set():
                self._viewer.poll(0.25)
        except Exception:  # noqa: BLE001 - one experiment's failure must not end the server
            logger.exception("serve: the live view of %r failed", self.name)
        finally:
            self.relay.close()
            try:
                self._viewer.stop(5.0)
            finally:
                self.stopped.set()


class LiveManager:
    """Starts and stops ``LiveSession``s as browsers come and go.

    Args:
        view: builds the ``ViewOptions`` of an experiment from its sink specs.
        max_live: sessions at once (stopping ones count until their processes are gone).
        grace: seconds a session outlives its last viewer.
        on_change: called when a session starts or stops (for the page).
    """

    def __init__(self,
                 view: Callable[[str, Tuple[Any, ...]], ViewOptions],
                 max_live: int,
                 grace: float,
                 on_change: Optional[Callable[[], None]] = None) -> None:
        self._view = view
        self.max_live = max_live
        self.grace = grace
        self._on_change = on_change or (lambda: None)
        self._lock = threading.Condition()
        self._sessions: Dict[str, LiveSession] = {}
        self._stopping: Set[LiveSession] = set()
        self._closed = False
        #: sessions started and stopped so far (tests, benchmarks)
        self.started = 0
        self.stopped = 0
        self._reaper = threading.Thread(target=self._reap,
                                        name="async_plotter-serve-reaper",
                                        daemon=True)
        self._reaper.start()

    def watch(self,
              name: str,
              client: str = "",
              on_evict: Optional[Callable[[], None]] = None,
              unsent: Optional[Callable[[], Optional[int]]] = None) -> Tuple[LiveSession, Viewer]:
        """A browser wants ``name``'s stream: its session (started if need be) and its slot
        (``unsent``: the bytes its socket holds unsent, see ``web.feed.Viewer``).

        Raises ``LiveLimit`` when ``max_live`` sessions run and all of them are watched.
        """
        deadline = time.monotonic() + MAKE_ROOM_TIMEOUT
        with self._lock:
            while True:
                if self._closed:
                    raise LiveLimit("the server is stopping")
                session = self._sessions.get(name)
                if session is not None:
                    break
                if len(self._sessions) + len(self._stopping) < self.max_live:
                    session = self._start(name)
                    break
                idle = [s for s in self._sessions.values() if s.relay.viewer_count() == 0]
                if idle:
                    # Nobody watches it (its grace time): it makes room now.
                    self._begin_stop(min(idle, key=lambda s: s.idle_since or 0.0))
                    continue
                remaining = deadline - time.monotonic()
                if not self._stopping or remaining <= 0:
                    raise LiveLimit(self._limit_message())
                self._lock.wait(min(remaining, 0.5))
            viewer = session.relay.add_viewer(client, on_evict, unsent)
            session.idle_since = None
            return session, viewer

    def leave(self, session: LiveSession, viewer: Viewer) -> None:
        """A browser's stream ended; the session's grace time starts with the last one."""
        session.relay.remove_viewer(viewer)
        with self._lock:
            if session.relay.viewer_count() == 0 and session.idle_since is None:
                session.idle_since = time.monotonic()

    def status(self) -> Dict[str, Any]:
        """Every session's status by experiment, and the limit."""
        with self._lock:
            sessions = dict(self._sessions)
            stopping = len(self._stopping)
        return {
            "max_live": self.max_live,
            "running": len(sessions) + stopping,
            "grace": self.grace,
            "sessions": {
                name: session.status()
                for name, session in sessions.items()
            },
        }

    def session(self, name: str) -> Optional[LiveSession]:
        """The running session of ``name``, or None."""
        with self._lock:
            return self._sessions.get(name)

    def worker_pids(self) -> List[int]:
        """Every live worker process now (benchmarks, tests)."""
        with self._lock:
            sessions = list(self._sessions.values()) + list(self._stopping)
        return [pid for session in sessions for pid in session.worker_pids]

    def limit_problem(self, name: str) -> Optional[str]:
        """Why a new stream of ``name`` would be refused now, or None."""
        with self._lock:
            if name in self._sessions or len(self._sessions) + len(self._stopping) < self.max_live:
                return None
            if any(s.relay.viewer_count() == 0 for s in self._sessions.values()):
                return None
            return self._limit_message()

    def close(self) -> None:
        """Stop every session and wait for them (about 5 s at most)."""
        with self._lock:
            self._closed = True
            for session in list(self._sessions.values()):
                self._begin_stop(session)
            stopping = list(self._stopping)
            self._lock.notify_all()
        for session in stopping:
            session.stopped.wait(8.0)
        self._reaper.join(2.0)

    # ----------------------------------------------------------------------------- inside

    def _start(self, name: str) -> LiveSession:
        session = LiveSession(name, lambda sinks: self._view(name, sinks))
        self._sessions[name] = session
        self.started += 1
        logger.info("serve: live view of %r started (%d of %d)", name, len(self._sessions),
                    self.max_live)
        session.start()
        self._notify()
        return session

    def _begin_stop(self, session: LiveSession) -> None:
        """Called with the lock held."""
        if self._sessions.get(session.name) is session:
            del self._sessions[session.name]
        self._stopping.add(session)
        session.stop()
        self._notify()

    def _limit_message(self) -> str:
        names = ", ".join(sorted(self._sessions))
        return (f"all {self.max_live} live views are in use, each watched by somebody ({names}); "
                "close one of them, or try again later (the server runs --max-live at once)")

    def _notify(self) -> None:
        try:
            self._on_change()
        except Exception:  # noqa: BLE001 - the page's bookkeeping must not break a stream
            logger.exception("serve: on_change failed")

    def _reap(self) -> None:
        while True:
            with self._lock:
                if self._closed and not self._stopping:
                    return
                now = time.monotonic()
                for session in list(self._sessions.values()):
                    idle = session.idle_since
                    if (idle is not None and session.relay.viewer_count() == 0
                            and now - idle >= self.grace):
                        logger.info("serve: nobody watches %r any more; stopping its worker",
                                    session.name)
                        self._begin_stop(session)
                for session in list(self._stopping):
                    if session.stopped.is_set():
                        self._stopping.discard(session)
                        self.stopped += 1
                        self._lock.notify_all()
                        self._notify()
                self._lock.wait(_REAP_INTERVAL)
