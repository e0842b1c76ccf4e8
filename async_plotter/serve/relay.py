"""One experiment's frames, from its render process to every browser watching it, newest wins.

The render process serves MJPEG on a loopback port, behind a random token only this process
knows. A ``FrameRelay`` holds one connection to it while anybody watches (whatever the number of
browsers, so the render process encodes each frame once), keeps the newest frame, and hands it
to each browser's thread: a browser busy sending skips the frames it had no time for, so a slow
one only slows itself. Nobody watching: the connection is closed, and the render process stops
drawing pixels for it.

Slots are few (a thread each); when they are all taken a new browser takes the slot of the
slowest established one, as on the live page (``web.feed.Viewer.eviction_order``: by the frames
it has taken off its socket, where the kernel's unsent queue can be read).
"""
import logging
import threading
import time
from typing import Callable, Dict, Optional

from async_plotter.web.client import StreamError, read_mjpeg
from async_plotter.web.feed import FeedClosed, FrameMeta, RateMeter, Viewer, ViewerEvicted
from async_plotter.web.server import _part

logger = logging.getLogger("async_plotter")

#: browsers per experiment
MAX_VIEWERS = 16
# Seconds between attempts to reach a render process that is not serving (yet, or any more).
_RETRY = 0.3
# Seconds a read from the render process may block (a worker that restarts or hangs).
_UPSTREAM_TIMEOUT = 5.0


class FrameRelay:
    """Relays the MJPEG stream at ``source()`` (None while there is none yet) to viewers.

    Args:
        source: returns the render process's stream URL, or None while it is not serving.
        token: the render process's token (sent as a bearer token).
        max_viewers: browsers at once; a new one beyond this takes the slowest one's slot.
    """

    def __init__(self,
                 source: Callable[[], Optional[str]],
                 token: Optional[str],
                 max_viewers: int = MAX_VIEWERS) -> None:
        self._source = source
        self._token = token
        self.max_viewers = max_viewers
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._viewers: Dict[int, Viewer] = {}
        self._next_key = 1
        self._part: Optional[bytes] = None
        self._meta: Optional[FrameMeta] = None
        self._seq = 0
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self._received = RateMeter()
        #: frames received from the render process so far
        self.frames = 0
        #: when the newest frame arrived (``time.time()``), or None
        self.last_frame_at: Optional[float] = None

    # ----------------------------------------------------------------------------- viewers

    def add_viewer(self,
                   client_id: str = "",
                   on_evict: Optional[Callable[[], None]] = None,
                   unsent: Optional[Callable[[], Optional[int]]] = None) -> Viewer:
        """Register a browser; the first one opens the connection to the render process."""
        victim = None
        with self._lock:
            if self._closed:
                raise FeedClosed()
            if len(self._viewers) >= max(self.max_viewers, 1):
                now = time.monotonic()
                victim = min(self._viewers.values(), key=lambda v: v.eviction_order(now))
                victim.evicted = True
                del self._viewers[victim.key]
                self._ready.notify_all()
            viewer = Viewer(self._next_key, client_id, on_evict, unsent)
            self._next_key += 1
            viewer.last_seq = self._seq  # the next frame, not one that may show an older policy
            self._viewers[viewer.key] = viewer
            if self._thread is None:
                self._thread = threading.Thread(target=self._pull,
                                                name="async_plotter-serve-relay",
                                                daemon=True)
                self._thread.start()
        if victim is not None and victim.on_evict is not None:
            victim.on_evict()
        return viewer

    def remove_viewer(self, viewer: Viewer) -> None:
        """The browser went away (the connection upstream closes with the last one)."""
        with self._lock:
            self._viewers.pop(viewer.key, None)

    def viewer_count(self) -> int:
        """Browsers watching now."""
        return len(self._viewers)

    def next_part(self, viewer: Viewer, timeout: float) -> Optional[bytes]:
        """The newest frame (a whole multipart part) this viewer has not had, waiting up to
        ``timeout`` s; None on timeout. ``FeedClosed`` once closed, ``ViewerEvicted`` once the
        slot was taken."""
        with self._lock:
            if not self._ready.wait_for(
                    lambda: self._closed or viewer.evicted or self._seq > viewer.last_seq, timeout):
                return None
            if self._closed:
                raise FeedClosed()
            if viewer.evicted:
                raise ViewerEvicted()
            if viewer.sent:
                viewer.skipped += self._seq - viewer.last_seq - 1
            viewer.last_seq = self._seq
            viewer.sending_since = time.monotonic()
            return self._part

    def frame_sent(self, viewer: Viewer, nbytes: int = 0) -> None:
        """The viewer's thread finished writing a frame of ``nbytes`` bytes."""
        with self._lock:
            viewer.wrote(nbytes, time.monotonic())

    def status(self) -> Dict[str, object]:
        """What the page shows beside the picture."""
        with self._lock:
            meta = self._meta
            return {
                "viewers": len(self._viewers),
                "update": None if meta is None else meta.update,
                "iteration": None if meta is None else meta.iteration,
                "episode": None if meta is None else meta.episode,
                "fps": round(self._received.rate(), 1),
                "frames": self.frames,
            }

    def close(self) -> None:
        """Wake every viewer's thread (they leave with ``FeedClosed``) and let go upstream."""
        with self._lock:
            self._closed = True
            self._ready.notify_all()

    # ----------------------------------------------------------------------------- upstream

    def _wanted(self) -> bool:
        with self._lock:
            if self._closed or not self._viewers:
                self._thread = None  # the next viewer starts a new puller
                return False
            return True

    def _pull(self) -> None:
        while self._wanted():
            url = self._source()
            if url is None:
                time.sleep(_RETRY)
                continue
            try:
                for frame in read_mjpeg(url, self._token, timeout=_UPSTREAM_TIMEOUT):
                    self._publish(frame.jpeg, frame.headers, frame.received)
                    if not self._wanted():
                        return
            except (StreamError, OSError, ValueError, KeyError) as error:
                # The worker is starting, restarting or stopping: try again shortly.
                logger.debug("relay: %s: %s", type(error).__name__, error)
            time.sleep(_RETRY)

    def _publish(self, jpeg: bytes, headers: Dict[str, str], received: float) -> None:
        meta = _meta(headers, received)
        part = _part(jpeg, meta)
        with self._lock:
            self._part, self._meta = part, meta
            self._seq += 1
            self.frames += 1
            self.last_frame_at = received
            self._received.tick()
            self._ready.notify_all()


def _meta(headers: Dict[str, str], received: float) -> FrameMeta:
    """The frame's description from its part headers (the render process's own)."""

    def number(name: str) -> Optional[int]:
        value = headers.get(name, "")
        return int(value) if value.lstrip("-").isdigit() else None

    frame_time = headers.get("x-frame-time", "")
    try:
        made = float(frame_time)
    except ValueError:
        made = received
    return FrameMeta(update=number("x-update") or 0,
                     iteration=number("x-iteration"),
                     episode=number("x-episode") or 0,
                     step=number("x-step") or 0,
                     time=made)
