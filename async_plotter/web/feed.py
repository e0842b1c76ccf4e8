"""The live feed: what the render loop hands to the web server, newest wins everywhere.

Three kinds of thread meet here, and none of them may wait for another:

* the render loop (``add_frame``, ``begin_episode``, ...) only swaps a reference under a lock;
* one encoder thread turns the newest raw frame into JPEG bytes, once per frame however many
  browsers watch, and skips frames that were replaced while it was busy;
* the HTTP server's event loop sends each browser the newest JPEG and skips those it had no time
  for, so a slow or vanished browser only ever slows itself.

Stream slots are few (each costs kernel buffers and writes), so they are not first come, first
served. A newcomer cannot be judged before it has streamed for a while (a client that reads
nothing looks like a reader until the kernel's buffers for it are full), so up to
``JUDGED_FACTOR`` times ``max_viewers`` may stream while newcomers are judged. Whenever more than
``max_viewers`` stream, viewers that do not keep up are evicted at once, and once no newcomer
is left to judge, the newest of the others go until ``max_viewers`` are left. Past
``JUDGED_FACTOR`` times the limit, a new viewer takes the slot of, in this order (see
``Viewer.eviction_order``):

1. an established viewer that does not keep up: it took fewer than half the frames published
   over the last seconds, has a second's worth of frames written and not taken, or is stuck in
   a write; the slowest first. A client that reads nothing or trickles bytes to hold a slot is
   one of these within seconds;
2. a viewer still being judged (connected under ``JUDGE_SECONDS`` ago), the newest first: a
   burst of newcomers takes each other's slots rather than the readers';
3. only then an established viewer that keeps up, the newest first.

"Taken" is what the client has taken off its socket, not what was written to it: the kernel
accepts a few hundred KB for a client that reads nothing, so by bytes written a stuck client
looks fast at first. Where the socket's unsent queue can be read (Linux ``SIOCOUTQ``,
``unsent_bytes``), a frame counts once the client has acknowledged its last byte.

Nothing is encoded while no stream is open (``has_viewers()`` is False), and the render process
then does not even render pixels for this sink.
"""
import asyncio
import collections
import dataclasses
import io
import itertools
import struct
import sys
import threading
import time
from typing import Any, Callable, Deque, Dict, Generic, List, Mapping, Optional, Tuple, TypeVar

import numpy as np

from async_plotter.learning_curve import LearningCurve
from async_plotter.newest import Newest
from async_plotter.render.stream import EpisodeInfo

#: the MJPEG stream's part boundary
BOUNDARY = "async-plotter-frame"
#: seconds during which a new viewer has not had the time to show its frame rate
EVICTION_GRACE = 1.0
#: seconds during which a viewer that seems to keep up is still being judged: a client that
#: reads nothing seems to for as long as the kernel's buffers take its frames (a second or two
#: of the live page's)
JUDGE_SECONDS = 5.0
#: an established viewer that takes less than this fraction of the frames published does not
#: keep up
KEEP_UP_FRACTION = 0.5
#: seconds in one write after which a viewer does not keep up
STUCK_WRITE_SECONDS = 1.0
#: while newcomers are judged, up to this many times ``max_viewers`` may stream (each costs a
#: small kernel send buffer and a write per frame, not an encoding)
JUDGED_FACTOR = 3


class FeedClosed(Exception):
    """The feed was closed: the worker is stopping."""


class TooManyViewers(Exception):
    """The limit on simultaneous streams is reached (only with ``add_viewer(evict=False)``)."""


class ViewerEvicted(Exception):
    """This viewer's slot was given to a newer one (it was the slowest)."""


@dataclasses.dataclass(frozen=True)
class FrameMeta:
    """Which policy a frame shows; sent with every streamed frame (``X-Update`` etc.)."""

    update: int
    iteration: Optional[int]
    episode: int
    step: int  # frame index within the episode (0 = the reset state)
    time: float  # wall-clock time the frame reached the sink

    @classmethod
    def from_headers(cls, headers: Mapping[str, str], received: float) -> "FrameMeta":
        """Read back from a streamed part's headers (lower-case names); ``received`` stands in
        for a missing or unreadable ``X-Frame-Time``."""

        def number(name: str) -> Optional[int]:
            value = headers.get(name, "")
            return int(value) if value.lstrip("-").isdigit() else None

        try:
            made = float(headers.get("x-frame-time", ""))
        except ValueError:
            made = received
        return cls(update=number("x-update") or 0,
                   iteration=number("x-iteration"),
                   episode=number("x-episode") or 0,
                   step=number("x-step") or 0,
                   time=made)


class RateMeter:
    """Events per second over a sliding window (frames rendered, encoded, sent)."""

    def __init__(self, window: float = 2.0) -> None:
        self._window = window
        self._times: Deque[float] = collections.deque()
        self._created = time.monotonic()

    def tick(self, now: Optional[float] = None) -> None:
        """Count one event."""
        now = time.monotonic() if now is None else now
        self._times.append(now)
        self._trim(now)

    def rate(self, now: Optional[float] = None) -> float:
        """Events per second in the window ending now (0 once events stop)."""
        now = time.monotonic() if now is None else now
        self._trim(now)
        # Over the whole window (not first-to-last event), so that the rate falls to 0 within one
        # window once events stop; a young meter divides by its age instead.
        span = min(self._window, now - self._created)
        return len(self._times) / span if span > 0 else 0.0

    def _trim(self, now: float) -> None:
        while self._times and now - self._times[0] > self._window:
            self._times.popleft()


def unsent_bytes(sock: Any) -> Optional[int]:
    """Bytes written to the TCP socket ``sock`` that its peer has not acknowledged yet (Linux's
    ``SIOCOUTQ``, the same request number as ``TIOCOUTQ``); None where that cannot be read
    (another system, a closed socket). A client that stops reading stops acknowledging once its
    receive buffer is full, so this grows by everything written to it from then on."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import fcntl
        import termios

        fd = sock.fileno()
        if fd < 0:
            return None
        return struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except (OSError, ValueError, ImportError, AttributeError):
        return None


class Viewer:
    """One open stream connection and what it has received (changed under the feed's lock).

    ``unsent``: returns the bytes written to the viewer's socket that it has not taken yet
    (``unsent_bytes``), or None; with it, frames count as received once the client took them,
    not once they were written.
    """

    def __init__(self,
                 key: int,
                 client_id: str,
                 on_evict: Optional[Callable[[], None]] = None,
                 unsent: Optional[Callable[[], Optional[int]]] = None) -> None:
        self.key = key
        self.client_id = client_id  # chosen by the page, to find its own rates in the status
        self.sent = 0
        self.skipped = 0  # frames encoded while this viewer was still busy with an older one
        self.meter = RateMeter()  # frames written to the socket
        self.unsent = unsent
        self.written = 0  # bytes written to the socket
        self.received = 0  # frames the client has taken off its socket (with ``unsent``)
        self._received_meter = RateMeter()
        self._frame_ends: Deque[int] = collections.deque()  # ``written`` after each frame
        self.last_seq = 0
        self.created = time.monotonic()
        self.sending_since: Optional[float] = None  # a frame handed out and not yet sent
        self.evicted = False
        #: called (outside the feed's lock) when the slot is taken away, e.g. to close the socket
        #: a thread may be blocked writing to
        self.on_evict = on_evict

    def eviction_order(self, now: float, published_rate: float) -> Tuple[int, float, float]:
        """Smallest first (the module's docstring says why): viewers that do not keep up with
        ``published_rate`` frames/s, slowest first (then the one stuck in a write the longest);
        then the ones still being judged, newest first; then the others, newest first."""
        age = now - self.created
        if age >= EVICTION_GRACE:
            stuck = 0.0 if self.sending_since is None else now - self.sending_since
            rate = self.rate(now)
            if (stuck > STUCK_WRITE_SECONDS or rate < KEEP_UP_FRACTION * published_rate
                    or self.pending > max(published_rate, 3.0)):
                return (0, rate, -stuck)
        # Viewers that keep up are alike: the ones that came first keep their slots, so that a
        # client the kernel's buffers still make look like a reader cannot take a reader's.
        return (1 if age < JUDGE_SECONDS else 2, -self.created, 0.0)

    @property
    def pending(self) -> int:
        """Frames written to the socket that the client has not taken yet (0 where unknown)."""
        return len(self._frame_ends) if self.unsent is not None else 0

    def wrote(self, nbytes: int, now: float) -> None:
        """A frame of ``nbytes`` bytes was written to the socket."""
        self.sent += 1
        self.sending_since = None
        self.meter.tick(now)
        self.written += nbytes
        self._frame_ends.append(self.written)
        self._count_received(now)

    def rate(self, now: float) -> float:
        """Frames per second the client has taken (written, where that cannot be known)."""
        if self._count_received(now):
            return self._received_meter.rate(now)
        return self.meter.rate(now)

    def _count_received(self, now: float) -> bool:
        if self.unsent is None:
            return False
        queued = self.unsent()
        if queued is None:
            return False
        taken = self.written - queued
        while self._frame_ends and self._frame_ends[0] <= taken:
            self._frame_ends.popleft()
            self.received += 1
            self._received_meter.tick(now)
        return True


class Pulse:
    """Wakes the coroutines of one event loop that wait on it; ``fire()`` from any thread.

    Each wake bumps ``generation`` (in the loop), so that a coroutine that read it before looking
    at the state misses no wake that came meanwhile: ``await pulse.wait(seen)``."""

    def __init__(self) -> None:
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._future: Optional["asyncio.Future[None]"] = None
        self.generation = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop whose coroutines wait (set before any of them does)."""
        self._loop = loop

    def fire(self) -> None:
        """Wake every waiter (soon, in the loop); a no-op before ``bind`` or once it closed."""
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._wake)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

    def _wake(self) -> None:
        self.generation += 1
        future, self._future = self._future, None
        if future is not None and not future.done():
            future.set_result(None)

    async def wait(self, seen: int, timeout: Optional[float] = None) -> None:
        """Return once ``generation`` differs from ``seen``, or after ``timeout`` seconds."""
        if self.generation != seen:
            return
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
        try:
            # Shielded: the future is shared, a waiter that leaves must not cancel it.
            await asyncio.wait_for(asyncio.shield(self._future), timeout)
        except asyncio.TimeoutError:
            pass


Item = TypeVar("Item")


class NewestSlots(Generic[Item]):
    """The newest item (a frame) and the viewers it goes to, newest wins: a viewer busy sending
    skips the items it had no time for. At most ``max_viewers``; a new one beyond takes the slot
    of the slowest (``Viewer.eviction_order``). Thread-safe; viewers wait in an event loop
    (``next``), items may come from any thread (``publish``).

    Used by the live page (``LiveFeed``: encoded frames) and by ``serve``'s relay (parts
    received from a render process).
    """

    def __init__(self, max_viewers: int) -> None:
        self.max_viewers = max_viewers
        self._lock = threading.Lock()
        self.viewers: Dict[int, Viewer] = {}
        self._keys = itertools.count(1)
        self._item: Optional[Item] = None
        self._seq = 0
        self._published = RateMeter()
        self._closed = False
        #: fired for every new item, eviction and the close
        self.pulse = Pulse()

    def __len__(self) -> int:
        return len(self.viewers)

    def add_viewer(self,
                   client_id: str = "",
                   on_evict: Optional[Callable[[], None]] = None,
                   unsent: Optional[Callable[[], Optional[int]]] = None,
                   evict: bool = True) -> Viewer:
        """Register a viewer; when the slots are full, one is evicted (``Viewer.eviction_order``:
        its ``next`` raises ``ViewerEvicted``, its ``on_evict`` is called here), or with
        ``evict=False`` ``TooManyViewers`` is raised."""
        victim = None
        with self._lock:
            if self._closed:
                raise FeedClosed()
            if not evict and len(self.viewers) >= max(self.max_viewers, 1):
                raise TooManyViewers()
            if len(self.viewers) >= JUDGED_FACTOR * max(self.max_viewers, 1):
                now = time.monotonic()
                published = self._published.rate(now)
                victim = min(self.viewers.values(), key=lambda v: v.eviction_order(now, published))
                victim.evicted = True
                del self.viewers[victim.key]
            viewer = Viewer(next(self._keys), client_id, on_evict, unsent)
            # Start at the current item, so a new viewer gets the next one, not an old one that
            # may show a previous policy.
            viewer.last_seq = self._seq
            self.viewers[viewer.key] = viewer
        if victim is not None:
            self.pulse.fire()
            if victim.on_evict is not None:
                victim.on_evict()
        return viewer

    def remove_viewer(self, viewer: Viewer) -> None:
        """The viewer's connection closed."""
        with self._lock:
            self.viewers.pop(viewer.key, None)

    def publish(self, item: Item) -> None:
        """A new newest item; viewers beyond ``max_viewers`` that have been judged go."""
        with self._lock:
            self._item = item
            self._seq += 1
            self._published.tick()
            victims = self._over_limit() if len(self.viewers) > self.max_viewers else []
        self.pulse.fire()
        for victim in victims:
            if victim.on_evict is not None:
                victim.on_evict()

    def _over_limit(self) -> List[Viewer]:
        """Evict (under the lock) while more than ``max_viewers`` stream: viewers that do not
        keep up at once; the newest of the others once none is being judged."""
        now = time.monotonic()
        published = self._published.rate(now)
        victims = []
        while len(self.viewers) > max(self.max_viewers, 1):
            orders = {key: v.eviction_order(now, published) for key, v in self.viewers.items()}
            key = min(orders, key=orders.__getitem__)
            if orders[key][0] == 1:
                break  # the rest are newcomers, still to be judged
            victim = self.viewers.pop(key)
            victim.evicted = True
            victims.append(victim)
        return victims

    def take(self, viewer: Viewer) -> Optional[Item]:
        """The newest item this viewer has not had, or None (never waits). Raises ``FeedClosed``
        once closed, ``ViewerEvicted`` once the viewer lost its slot."""
        with self._lock:
            if self._closed:
                raise FeedClosed()
            if viewer.evicted:
                raise ViewerEvicted()
            if self._seq <= viewer.last_seq:
                return None
            if viewer.sent:
                viewer.skipped += self._seq - viewer.last_seq - 1
            viewer.last_seq = self._seq
            viewer.sending_since = time.monotonic()
            return self._item

    async def next(self, viewer: Viewer) -> Item:
        """Wait (in the pulse's loop) for an item this viewer has not had."""
        while True:
            seen = self.pulse.generation
            item = self.take(viewer)
            if item is not None:
                return item
            await self.pulse.wait(seen)

    def frame_sent(self, viewer: Viewer, nbytes: int = 0) -> None:
        """The viewer's item of ``nbytes`` bytes was written (counted for its frames/s)."""
        with self._lock:
            viewer.wrote(nbytes, time.monotonic())

    def figures(self, client_id: str) -> Optional[Dict[str, Any]]:
        """Frames/s, frames and skipped frames of the viewer the page named ``client_id``."""
        with self._lock:
            mine = [v for v in self.viewers.values() if client_id and v.client_id == client_id]
            if not mine:
                return None
            return {
                "client_fps": round(mine[0].rate(time.monotonic()), 1),
                "client_frames": mine[0].sent,
                "client_skipped": mine[0].skipped,
            }

    def close(self) -> None:
        """Every viewer's ``next`` raises ``FeedClosed`` from now on."""
        with self._lock:
            self._closed = True
            self._item = None
        self.pulse.fire()


class LiveFeed:
    """Thread-safe exchange between the render loop, the JPEG encoder and the HTTP server.

    Args:
        title: shown on the page (the env's name).
        quality: JPEG quality, 1-95.
        max_viewers: simultaneous streams; a new one beyond this takes the slot of the slowest.
    """

    def __init__(self, title: str = "", quality: int = 80, max_viewers: int = 16) -> None:
        self.title = title
        self.quality = quality
        self._lock = threading.Lock()
        self._closed = False
        # Frames: the newest raw one waiting for the encoder; encoded, as MJPEG parts, to the slots.
        self._raw: Newest[Tuple[np.ndarray, FrameMeta]] = Newest()
        self.frames: NewestSlots[Tuple[bytes, FrameMeta]] = NewestSlots(max_viewers)
        #: fired when a new episode starts, a curve point arrives, or the feed closes
        self.changes = Pulse()
        # What the page shows beside the picture.
        self._episode: Optional[EpisodeInfo] = None
        self._step = 0
        self._last_return: Optional[float] = None
        self._rendered = RateMeter()
        self._encoded = RateMeter()
        self._curve = LearningCurve()
        self._encoder = threading.Thread(target=self._encode_forever,
                                         name="async_plotter-jpeg",
                                         daemon=True)
        self._encoder.start()

    @property
    def max_viewers(self) -> int:
        """Simultaneous streams."""
        return self.frames.max_viewers

    @property
    def _viewers(self) -> Dict[int, Viewer]:
        return self.frames.viewers

    # --------------------------------------------------------------------- render loop side

    def has_viewers(self) -> bool:
        """Whether any stream is open (a plain read; no lock needed for a dict's truthiness)."""
        return bool(self.frames.viewers)

    def begin_episode(self, episode: EpisodeInfo) -> None:
        """A new episode (possibly of a newer policy) starts."""
        with self._lock:
            self._episode = episode
            self._step = -1  # the reset frame, next, is step 0
        self.changes.fire()  # pages hear of a new policy at once

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        """One step of the episode; ``frame`` (RGB uint8, not modified afterwards) is encoded
        only if someone watches."""
        if self._episode != episode:
            self.begin_episode(episode)
        now = time.time()
        with self._lock:
            self._step += 1
            self._rendered.tick()
            if frame is not None and self.frames.viewers:
                meta = FrameMeta(episode.update, episode.iteration, episode.episode, self._step,
                                 now)
                # Only a reference changes hands; a frame the encoder has not taken yet is
                # simply replaced (newest wins).
                self._raw.put((frame, meta))

    def end_episode(self, total_reward: float) -> None:
        """The episode ended with this return."""
        with self._lock:
            self._last_return = float(total_reward)

    def add_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> None:
        """One point of the training curve."""
        with self._lock:
            self._curve.add(iteration, metrics)
        self.changes.fire()

    def restart_curve(self) -> None:
        """The curve starts again (another trainer run's); open pages drop what they drew."""
        with self._lock:
            self._curve.clear()
        self.changes.fire()

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    def close(self) -> None:
        """Stop the encoder; every stream's ``next`` raises ``FeedClosed``."""
        self._closed = True
        self._raw.close()
        self.frames.close()
        self.changes.fire()
        self._encoder.join(timeout=2.0)

    # ---------------------------------------------------------------------- encoder thread

    def _encode_forever(self) -> None:
        # Load the JPEG codec now (an import, no encoding), not when the first browser waits.
        from PIL import Image, JpegImagePlugin  # noqa: F401 pylint: disable=unused-import

        while True:
            taken = self._raw.take()
            if taken is None:
                return  # closed
            frame, meta = taken
            jpeg = encode_jpeg(frame, self.quality)  # Pillow releases the GIL while encoding
            with self._lock:
                self._encoded.tick()
            # One part for every viewer (built once, sent as one write to each).
            self.frames.publish((mjpeg_part(jpeg, meta), meta))

    # ------------------------------------------------------------------------- HTTP side

    def add_viewer(self,
                   client_id: str = "",
                   on_evict: Optional[Callable[[], None]] = None,
                   evict: bool = True,
                   unsent: Optional[Callable[[], Optional[int]]] = None) -> Viewer:
        """Register a stream connection (from now on, frames are rendered and encoded); see
        ``NewestSlots.add_viewer``."""
        return self.frames.add_viewer(client_id, on_evict, unsent, evict)

    def remove_viewer(self, viewer: Viewer) -> None:
        """The connection closed."""
        self.frames.remove_viewer(viewer)

    def metrics_since(self, count: int) -> Tuple[List[Dict[str, Any]], int, bool, Optional[str]]:
        """Curve points after the first ``count``: ``(points, new_count, reset, shown)``
        (``LearningCurve.since``; ``shown``: the column the page shows first)."""
        with self._lock:
            points, reset = self._curve.since(count)
            return points, self._curve.total, reset, self._curve.shown

    def status(self, viewer_id: str = "") -> Dict[str, Any]:
        """What the page shows beside the picture; the rates of the viewer ``viewer_id``."""
        with self._lock:
            episode = self._episode
            status: Dict[str, Any] = {
                "title": self.title,
                "update": None if episode is None else episode.update,
                "iteration": None if episode is None else episode.iteration,
                "episode": None if episode is None else episode.episode,
                "step": max(self._step, 0),
                "last_return": self._last_return,
                "render_fps": round(self._rendered.rate(), 1),
                "encode_fps": round(self._encoded.rate(), 1),
                "viewers": len(self.frames),
            }
        status.update(self.frames.figures(viewer_id) or {})
        return status


def mjpeg_part(jpeg: bytes, meta: FrameMeta) -> bytes:
    """One frame of ``/stream.mjpg``: its headers, the JPEG and the boundary after it (one write
    per frame: a browser never sees half a part from us waiting on the next)."""
    iteration = "" if meta.iteration is None else str(meta.iteration)
    head = (f"Content-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n"
            f"X-Update: {meta.update}\r\nX-Iteration: {iteration}\r\nX-Episode: {meta.episode}\r\n"
            f"X-Step: {meta.step}\r\nX-Frame-Time: {meta.time:.6f}\r\n\r\n")
    return head.encode() + jpeg + f"\r\n--{BOUNDARY}\r\n".encode()


def encode_jpeg(frame: np.ndarray, quality: int) -> bytes:
    """RGB (or grey) ``uint8`` pixels as JPEG bytes."""
    from PIL import Image

    pixels = np.ascontiguousarray(frame, dtype=np.uint8)
    if pixels.ndim == 3 and pixels.shape[2] == 4:
        pixels = np.ascontiguousarray(pixels[:, :, :3])  # JPEG has no alpha
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()
