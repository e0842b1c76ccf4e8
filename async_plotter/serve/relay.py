"""One experiment's frames, from its render process to every browser watching it, newest wins.

A ``FrameRelay`` holds one connection to the render process's loopback MJPEG stream (behind a
token only this process knows) while anybody watches, so each frame is encoded once, and hands
the newest part to each browser through ``web.feed.NewestSlots``, as on the live page: a slow
browser only slows itself. Nobody watching: the connection closes and the render process stops
drawing for it. The connection is aiohttp's client, a task on the serve server's loop
(``pull_on``); the relay itself is thread-safe.
"""
import asyncio
import logging
import time
from typing import Callable, Dict, Optional, Tuple

import aiohttp

from async_plotter.web.client import StreamError, iter_parts
from async_plotter.web.feed import FeedClosed, FrameMeta, NewestSlots, RateMeter, Viewer

logger = logging.getLogger("async_plotter")

#: browsers per experiment
MAX_VIEWERS = 16
# Seconds between attempts to reach a render process that is not serving (yet, or any more).
_RETRY = 0.3
# Seconds a read from the render process may wait (a worker that restarts or hangs).
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
        #: the newest part (as the render process sent it) and what it shows
        self.parts: NewestSlots[Tuple[bytes, FrameMeta]] = NewestSlots(max_viewers)
        self._task: Optional["asyncio.Task[None]"] = None
        self._received = RateMeter()
        self._meta: Optional[FrameMeta] = None
        self._closed = False
        #: frames received from the render process so far
        self.frames = 0
        #: when the newest frame arrived (``time.time()``), or None
        self.last_frame_at: Optional[float] = None

    # ----------------------------------------------------------------------------- viewers

    def add_viewer(self,
                   client_id: str = "",
                   on_evict: Optional[Callable[[], None]] = None,
                   unsent: Optional[Callable[[], Optional[int]]] = None) -> Viewer:
        """Register a browser (``NewestSlots.add_viewer``); ``pull_on`` then starts the
        connection to the render process if none is open."""
        if self._closed:
            raise FeedClosed()
        return self.parts.add_viewer(client_id, on_evict, unsent)

    def remove_viewer(self, viewer: Viewer) -> None:
        """The browser went away (the connection upstream closes with the last one)."""
        self.parts.remove_viewer(viewer)

    def viewer_count(self) -> int:
        """Browsers watching now."""
        return len(self.parts)

    def pull_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make sure the connection upstream runs, as a task of ``loop`` (call it in the loop,
        after ``add_viewer``)."""
        self.parts.pulse.bind(loop)
        if self._task is None and not self._closed:
            self._task = loop.create_task(self._pull())

    def status(self) -> Dict[str, object]:
        """What the page shows beside the picture."""
        meta = self._meta
        return {
            "viewers": len(self.parts),
            "update": None if meta is None else meta.update,
            "iteration": None if meta is None else meta.iteration,
            "episode": None if meta is None else meta.episode,
            "fps": round(self._received.rate(), 1),
            "frames": self.frames,
        }

    def close(self) -> None:
        """Every viewer leaves (``FeedClosed``); the connection upstream closes."""
        self._closed = True
        self.parts.close()

    # ----------------------------------------------------------------------------- upstream

    def _wanted(self) -> bool:
        if self._closed or not len(self.parts):
            self._task = None  # the next viewer starts a new one
            return False
        return True

    async def _pull(self) -> None:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        timeout = aiohttp.ClientTimeout(sock_connect=_UPSTREAM_TIMEOUT, sock_read=_UPSTREAM_TIMEOUT)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                while self._wanted():
                    url = self._source()
                    if url is not None:
                        try:
                            async with session.get(url, headers=headers) as response:
                                if response.status != 200:
                                    raise StreamError(f"{url} answered {response.status}",
                                                      response.status)
                                async for part, part_headers in iter_parts(response.content):
                                    self._publish(part, part_headers)
                                    if not self._wanted():
                                        return
                        except (StreamError, aiohttp.ClientError, asyncio.TimeoutError, OSError,
                                ValueError) as error:
                            # The worker is starting, restarting or stopping: try again soon.
                            logger.debug("relay: %s: %s", type(error).__name__, error)
                    await asyncio.sleep(_RETRY)
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    def _publish(self, part: bytes, headers: Dict[str, str]) -> None:
        received = time.time()
        meta = FrameMeta.from_headers(headers, received)
        self._meta = meta
        self.frames += 1
        self.last_frame_at = received
        self._received.tick()
        self.parts.publish((part, meta))
