"""The worker's end of the Redis channel: ``RedisReader``, with ``SharedMemoryReader``'s interface.

A daemon thread holds the pub/sub subscription, to the experiment's events and to its readers'
channel, whose subscribers the trainer counts: it sends the parameters only while there are
some, and its header alone otherwise (``wire.FLAG_WITHHELD``), which the reader skips until the
whole update comes (at most a second after it subscribed). On each burst of notifications (and
after every reconnect) it reads the newest update through ``probed.ProbedKey`` (bounded before
download, verified) and hands it over if it is newer (``wire.RunKey``, then the update number):
``wait`` wakes with it already verified, ``newer_available`` reads one flag (it runs every env
step), and a garbage, forged or replayed value costs one log line. With no lifeline to the
trainer, the reader watches its parent: once the viewer that started the worker dies, ``wait``
and ``newer_available`` raise ``ParentGone`` within about a second.
"""
import dataclasses
import logging
import os
import threading
import time
from typing import Any, Optional, Set, Tuple, Union

from async_plotter.channel.base import ParamUpdate, ParentGone
from async_plotter.channel.redis.link import run_subscription
from async_plotter.channel.redis.urls import redact
from async_plotter.channel.redis.probed import ProbedKey, Skip
from async_plotter.channel.redis.wire import (MAX_VALUE_BYTES, NO_RUN, UPDATE_HEADER, Expected,
                                              ExperimentKeys, RunKey, StructureMismatch, UpdateHead,
                                              open_update, parse_update_head, update_bytes)
from async_plotter.channel.redis.signing import PayloadRejected, Verifier, resolve_secret
from async_plotter.newest import Newest

logger = logging.getLogger("async_plotter")

_PARENT_CHECK_INTERVAL = 0.5


@dataclasses.dataclass(frozen=True)
class RedisAddress:
    """Where a viewer's worker reads an experiment: the server, the name, and how to trust it
    (see ``RedisReader``)."""

    url: str
    experiment: str
    secret: Optional[bytes]
    trust_unsigned: bool
    expected: Optional[Expected]

    def open_reader(self) -> "RedisReader":
        return RedisReader(self.url, self.experiment, self.secret, self.trust_unsigned,
                           self.expected)


class RedisReader:
    """Worker side: follows one experiment's newest update on a Redis server.

    Args:
        url: the Redis server (``redis://``, ``rediss://`` or ``unix://``).
        experiment: the experiment's name.
        secret: the shared signing key (bytes or str): updates must then be signed with it. None
            accepts nothing unless ``trust_unsigned`` (see ``signing.Verifier``). Unlike the
            trainer, the reader never reads ``$ASYNC_PLOTTER_SECRET`` itself: the viewer decides
            and passes it.
        trust_unsigned: without a secret, accept payloads whose signature cannot be checked.
            With a secret it is a ``ValueError``.
        expected: the structure the worker was built from (its id, size, dtype and run); updates
            made for another structure are skipped, those of earlier runs refused. None accepts
            any size up to Redis's limit.
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
        max_bytes, bound = ((MAX_VALUE_BYTES, "Redis holds") if expected is None else
                            (update_bytes(expected.size, expected.dtype), "its structure allows"))
        self._params: ProbedKey[UpdateHead,
                                Tuple[UpdateHead,
                                      ParamUpdate]] = ProbedKey(self._keys.params, "update",
                                                                UPDATE_HEADER.size,
                                                                parse_update_head, max_bytes, bound,
                                                                self._verifier, self._reject)
        self._parent = os.getppid()
        self._parent_gone = False
        #: the newest accepted update
        self._newest: Newest[ParamUpdate] = Newest()
        # (run, number) of the newest accepted: nothing at or below it is accepted again.
        self._identity: Tuple[RunKey, int] = (NO_RUN if expected is None else expected.run, -1)
        self._last_rejection = ""
        self._mismatch_logged: Set[bytes] = set()
        #: number of the last update returned (-1 before the first), as ``SharedMemoryReader``
        self.last_number = -1
        #: payloads rejected so far
        self.rejected = 0
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
        return self._newest.fresh

    def final_requested(self) -> bool:
        """Never: a viewer's trainer is elsewhere and makes its own final video, if any."""
        return False

    def wait(self, timeout: Optional[float]) -> Optional[ParamUpdate]:
        """Sleep until an update newer than the last one read is here; return the newest.

        Returns None on timeout. Raises ``ParentGone`` once the viewer process has died.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._check_parent()
            if self._parent_gone:
                raise ParentGone("the viewer that started this worker is gone")
            remaining = None if deadline is None else deadline - time.monotonic()
            # Woken at once by the thread; the cap only bounds how late a dead parent is seen.
            pause = _PARENT_CHECK_INTERVAL if remaining is None else min(
                max(remaining, 0.0), _PARENT_CHECK_INTERVAL)
            update = self._taken(self._newest.take(pause))
            if update is not None or (remaining is not None and remaining <= pause):
                return update

    def read_newest(self) -> Optional[ParamUpdate]:
        """The newest verified update if it is newer than the last one read, else None."""
        return self._taken(self._newest.take(0))

    def _taken(self, update: Optional[ParamUpdate]) -> Optional[ParamUpdate]:
        if update is not None:
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
            self._newest.close()  # wakes ``wait``, which raises ``ParentGone``

    def _listen(self) -> None:
        run_subscription(self._url, (self._keys.events, self._keys.readers),
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
        """Read, verify and keep the newest update; a bad one costs a log line, nothing more.

        Connection errors propagate (the subscription reconnects and calls this again)."""
        fetched = self._params.fetch(client, self._vet, self._open)
        if fetched is None:
            return
        head, update = fetched
        self._identity = (head.run, head.number)  # read by this thread only (``_check_fresh``)
        self._newest.put(update)
        self._last_rejection = ""

    def _vet(self, head: UpdateHead) -> None:
        """Refuse from the unverified header: an update of another structure, or not newer;
        skip one whose parameters are withheld (the whole one comes now that this reader is
        counted)."""
        expected = self._expected
        if expected is not None and head.structure_id != expected.structure_id:
            raise self._mismatch(head.structure_id)
        self._check_fresh(head.run, head.number)
        if head.withheld:
            raise Skip()

    def _open(self, value: bytes) -> Tuple[UpdateHead, ParamUpdate]:
        try:
            head, update = open_update(value, self._verifier, self._experiment, self._expected)
        except StructureMismatch as mismatch:
            raise self._mismatch(mismatch.structure_id) from None
        if update is None:
            raise Skip()  # withheld (its header changed between the probe and the download)
        self._check_fresh(head.run, head.number)  # again, from the verified header
        return head, update

    def _mismatch(self, structure_id: bytes) -> Skip:
        """The ``Skip`` of an update made for another structure, said once per structure."""
        if structure_id not in self._mismatch_logged and len(self._mismatch_logged) < 64:
            self._mismatch_logged.add(structure_id)
            logger.info(
                "skipping updates in %s made for another policy structure (the trainer "
                "restarted with a different policy); the viewer reloads the new one",
                self._params.key)
        return Skip()

    def _check_fresh(self, run: RunKey, number: int) -> None:
        """``PayloadRejected`` for an update at or below the newest accepted."""
        newest_run, newest_number = self._identity
        if run < newest_run:
            raise PayloadRejected(
                "the update belongs to an earlier trainer run than one already accepted (a "
                "replayed old value; or the trainer machine's clock is behind the previous "
                "run's, then restart the viewer)")
        if run == newest_run and number <= newest_number:
            if number == newest_number:
                raise Skip()  # the update we have, written again (a trainer re-asserting it)
            raise PayloadRejected(f"the update is number {number}, older than update "
                                  f"{newest_number} already applied (a replayed old value)")

    def _reject(self, reason: str) -> None:
        self.rejected += 1
        # A reconnect re-reads the same bad value: say it once, not after every reconnect.
        if reason != self._last_rejection:
            logger.warning("async_plotter viewer: rejected the value of %s on %s: %s",
                           self._params.key, redact(self._url), reason)
        self._last_rejection = reason
