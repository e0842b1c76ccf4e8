"""The worker's end of the Redis channel: ``RedisReader``, with ``SharedMemoryReader``'s interface.

A daemon thread holds the pub/sub subscription. On each burst of notifications (and after every
reconnect) it reads the newest update, verifies it (size, signature, structure) and keeps it if it
is newer than what it has. So:

* ``wait`` sleeps on a condition the thread signals: no polling sleep, and the update is already
  fetched and verified when the worker wakes;
* ``newer_available`` reads two integers (no network round trip): it is called every env step;
* a garbage or forged value costs one log line and is dropped; the worker never sees it.

"Newer" means a higher update number in the same trainer session, or any update of another
session (the trainer restarted and counts from 0 again).

There is no lifeline pipe to the trainer here, so the reader watches its own parent process: when
the viewer that started the worker dies, ``wait`` and ``newer_available`` raise ``ParentGone``
within about a second.
"""
import logging
import os
import threading
import time
from typing import Any, Optional, Set, Tuple, Union

from async_plotter.channel.base import ParamUpdate, ParentGone
from async_plotter.channel.redis_link import read_capped, redact, run_subscription
from async_plotter.channel.redis_wire import (MAX_VALUE_BYTES, Expected, ExperimentKeys,
                                              StructureMismatch, open_update, update_bytes)
from async_plotter.channel.signing import PayloadRejected, Verifier, resolve_secret

logger = logging.getLogger("async_plotter")

_PARENT_CHECK_INTERVAL = 0.5


class RedisReader:
    """Worker side: follows one experiment's newest update on a Redis server.

    Args:
        url: the Redis server (``redis://``, ``rediss://`` or ``unix://``).
        experiment: the experiment's name.
        secret: the shared signing key (bytes or str); None accepts only what ``trust_unsigned``
            allows (see ``signing.Verifier``). Unlike the trainer, the reader never reads
            ``$ASYNC_PLOTTER_SECRET`` itself: the viewer decides and passes it.
        trust_unsigned: accept payloads whose signature cannot be checked.
        expected: the structure the worker was built from (its id, size and dtype); updates made
            for another structure are skipped. None accepts any size up to Redis's limit.
    """

    def __init__(self,
                 url: str,
                 experiment: str,
                 secret: Optional[Union[str, bytes]] = None,
                 trust_unsigned: bool = False,
                 expected: Optional[Expected] = None) -> None:
        self._url = url
        self._experiment = experiment
        self._keys = ExperimentKeys(experiment)
        key = None if secret is None else resolve_secret(secret)
        self._verifier = Verifier(key, trust_unsigned)
        self._expected = expected
        self._max_bytes = (MAX_VALUE_BYTES if expected is None else update_bytes(
            expected.size, expected.dtype))
        self._parent = os.getppid()
        self._parent_gone = False
        self._condition = threading.Condition()
        self._newest: Optional[ParamUpdate] = None
        self._newest_seq = 0  # bumped by the thread for every accepted update
        self._taken_seq = 0  # the seq of the update last returned to the worker
        self._identity: Optional[Tuple[int, int]] = None  # (run id, number) of the newest
        self._last_rejection = ""
        self._mismatch_logged: Set[bytes] = set()
        #: number of the last update returned (-1 before the first), as ``SharedMemoryReader``
        self.last_number = -1
        #: the trainer's clock when it published the last update returned (for lag reports)
        self.last_published_at: Optional[float] = None
        #: payloads rejected so far
        self.rejected = 0
        self._published_at: Optional[float] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen,
                                        name="async_plotter-redis-reader",
                                        daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------------------- worker API

    def newer_available(self) -> bool:
        """Cheap check (no system call) for a verified update newer than the last one read."""
        if self._parent_gone:
            raise ParentGone("the viewer that started this worker is gone")
        return self._newest_seq != self._taken_seq

    def wait(self, timeout: Optional[float]) -> Optional[ParamUpdate]:
        """Sleep until an update newer than the last one read is here; return the newest.

        Returns None on timeout. Raises ``ParentGone`` once the viewer process has died.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while True:
                self._check_parent()
                if self._parent_gone:
                    raise ParentGone("the viewer that started this worker is gone")
                if self._newest_seq != self._taken_seq:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                # Woken at once by the thread; the cap only bounds how late a dead parent is seen.
                pause = _PARENT_CHECK_INTERVAL
                if remaining is not None:
                    pause = min(remaining, pause)
                self._condition.wait(pause)
        return self.read_newest()

    def read_newest(self) -> Optional[ParamUpdate]:
        """The newest verified update if it is newer than the last one read, else None."""
        with self._condition:
            if self._newest_seq == self._taken_seq:
                return None
            self._taken_seq = self._newest_seq
            update = self._newest
            self.last_published_at = self._published_at
        self.last_number = update.number
        return update

    def close(self) -> None:
        """Stop the listening thread (within about half a second) and drop its connection."""
        self._stop.set()
        self._thread.join(2.0)

    # -------------------------------------------------------------------------- the thread

    def _check_parent(self) -> None:
        if not self._parent_gone and os.getppid() != self._parent:
            self._parent_gone = True
            self._stop.set()
            with self._condition:
                self._condition.notify_all()

    def _listen(self) -> None:
        run_subscription(self._url,
                         self._keys.events,
                         f"parameter reader for experiment {self._experiment!r}",
                         self._stop,
                         on_connect=self._fetch,
                         on_events=self._on_events,
                         on_idle=self._check_parent,
                         idle_interval=_PARENT_CHECK_INTERVAL)

    def _on_events(self, client: Any, kinds: Set[str]) -> None:
        if "update" in kinds:
            self._fetch(client)

    def _fetch(self, client: Any) -> None:
        """Read, verify and keep the newest update; a bad one costs a log line, nothing more."""
        import redis

        key = self._keys.params
        try:
            value = read_capped(client, key, self._max_bytes, "update")
            if value is None:
                return  # nothing published yet (or expired)
            head, update = open_update(value, self._verifier, self._experiment, self._expected)
        except redis.exceptions.ResponseError as error:
            self._reject(key, f"the key holds something else than an update ({error})")
            return
        except PayloadRejected as error:
            self._reject(key, str(error))
            return
        except StructureMismatch as mismatch:
            if mismatch.structure_id not in self._mismatch_logged:
                self._mismatch_logged.add(mismatch.structure_id)
                logger.info(
                    "skipping updates in %s made for another policy structure (the trainer "
                    "restarted with a different policy); the viewer reloads the new one", key)
            return
        identity = (head.run_id, head.number)
        with self._condition:
            current = self._identity
            if current is not None and identity[0] == current[0] and identity[1] <= current[1]:
                return  # the one we have, or an older one (a notification raced our read)
            self._identity = identity
            self._newest = update
            self._published_at = head.published_at
            self._newest_seq += 1
            self._condition.notify_all()
        self._last_rejection = ""

    def _reject(self, key: str, reason: str) -> None:
        self.rejected += 1
        # A reconnect re-reads the same bad value: say it once, not after every reconnect.
        if reason != self._last_rejection:
            logger.warning("async_plotter viewer: rejected the value of %s on %s: %s", key,
                           redact(self._url), reason)
        self._last_rejection = reason
