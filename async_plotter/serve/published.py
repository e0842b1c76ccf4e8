"""The run histories trainers publish over Redis (``channel/redis/states.py``), as ``serve``'s
3D history pages (``x/NAME/history/``) show them, with neither TensorFlow nor the policy's code.

The first request for an experiment's history starts a ``RecordingFetcher`` that keeps a folder
of its recordings current, in a private folder of this server's (removed at close); the page's
scrubber follows the folder. At most ``limit`` experiments are followed at once (asking for
another stops the one asked for least recently); one whose history nobody has asked for, nor
watched, for ``linger`` seconds stops, and its files go.
"""
import logging
import shutil
import tempfile
import threading
import time
from typing import Callable, Dict, Optional

from async_plotter.channel.redis.signing import Verifier
from async_plotter.channel.redis.states_fetch import RecordingFetcher

logger = logging.getLogger("async_plotter")

#: experiments whose history is followed at once (a thread and a connection each)
MAX_FOLLOWED = 8
#: seconds a history nobody asks for nor watches is still followed
LINGER = 60.0


class _Followed:
    """One experiment's fetcher, its folder, and when its history was last asked for."""

    def __init__(self, fetcher: RecordingFetcher, folder: str) -> None:
        self.fetcher = fetcher
        self.folder = folder
        self.asked_at = time.monotonic()


class PublishedHistories:
    """The experiments' published histories, each fetched into a folder while somebody looks.

    Args:
        url: the Redis server.
        verifier: what a value must pass (``serve``'s secret, or trust of unsigned ones).
        watched: whether a folder's history is open and watched (the replay pool's answer):
            such a history is followed however long ago it was asked for.
    """

    def __init__(self,
                 url: str,
                 verifier: Verifier,
                 watched: Callable[[str], bool],
                 limit: int = MAX_FOLLOWED,
                 linger: float = LINGER) -> None:
        self._url = url
        self._verifier = verifier
        self._watched = watched
        self._limit = max(int(limit), 1)
        self._linger = linger
        self._root: Optional[str] = None
        self._followed: Dict[str, _Followed] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._sweeper: Optional[threading.Thread] = None

    def folder(self, name: str, wait: float) -> Optional[str]:
        """The folder holding ``name``'s published recordings, kept current from now on; None
        if none came within ``wait`` seconds (nothing published yet, or all refused: the
        fetcher's log says which), or at once where the server refuses serve's settings (its
        role, its password: the fetcher has stopped, and said why). Blocks: call it off the
        event loop."""
        with self._lock:
            if self._closed.is_set():
                return None
            followed = self._followed.get(name)
            if followed is None:
                followed = self._follow(name)
            followed.asked_at = time.monotonic()
        return followed.folder if followed.fetcher.wait_for_first(wait) else None

    def close(self) -> None:
        """Stop every fetcher and remove the folders."""
        with self._lock:
            self._closed.set()
            followed, self._followed = list(self._followed.values()), {}
        for item in followed:
            item.fetcher.close()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)

    def _follow(self, name: str) -> _Followed:
        """Called with the lock held."""
        if len(self._followed) >= self._limit:
            oldest = min(self._followed, key=lambda key: self._followed[key].asked_at)
            self._stop(oldest)
        if self._root is None:
            self._root = tempfile.mkdtemp(prefix="async_plotter_serve_history_")
        # A folder of its own each time: one being removed behind a stopped fetcher is not this.
        folder = tempfile.mkdtemp(prefix=f"{name}-", dir=self._root)
        followed = self._followed[name] = _Followed(
            RecordingFetcher(self._url, name, self._verifier, folder), folder)
        if self._sweeper is None:
            self._sweeper = threading.Thread(target=self._sweep,
                                             name="async_plotter-serve-histories",
                                             daemon=True)
            self._sweeper.start()
        logger.info("serve: following %r's published history", name)
        return followed

    def _stop(self, name: str) -> None:
        """Called with the lock held: the fetcher stops within its poll (a second)."""
        followed = self._followed.pop(name)
        threading.Thread(target=self._stop_fetcher, args=(followed, ), daemon=True).start()

    @staticmethod
    def _stop_fetcher(followed: _Followed) -> None:
        followed.fetcher.close()
        shutil.rmtree(followed.folder, ignore_errors=True)

    def _sweep(self) -> None:
        while not self._closed.wait(min(self._linger / 4, 5.0)):
            with self._lock:
                for name, followed in list(self._followed.items()):
                    if self._watched(followed.folder):
                        followed.asked_at = time.monotonic()
                    elif time.monotonic() - followed.asked_at > self._linger:
                        self._stop(name)
