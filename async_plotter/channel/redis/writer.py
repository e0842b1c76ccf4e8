"""The trainer's end of the Redis channel: ``RedisWriter``.

``publish`` copies the parameters into a newest-wins slot and wakes a sender thread, so Redis can
never slow training. The sender signs the newest update in place and writes it with a ``SET`` and a
``PUBLISH`` in one round trip; after a lost connection it warns once, reconnects with backoff and
publishes the structure and newest update again. Every ``REASSERT_INTERVAL`` it reads back the
first bytes of both keys and rewrites them if another writer's are there. The byte layout is
``wire``'s; the viewer's side ``reader`` and ``watcher``.
"""
import collections
import dataclasses
import logging
import os
import pickle
import secrets
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Deque, Dict, Optional, Tuple, Union

import numpy as np

from async_plotter.channel.redis.refusals import AccessDenied
from async_plotter.channel.redis.link import (REFUSED_RETRY, Backoff, OutageLog, close_quietly,
                                              connect, connection_errors)
from async_plotter.channel.redis.urls import redact, url_problem
from async_plotter.channel.base import Update, copy_update, metrics_fit
from async_plotter.channel.redis.reader import RedisAddress, RedisReader
from async_plotter.channel.redis.wire import (MAX_METRICS_BYTES, MAX_VALUE_BYTES, RESUMES_AFTER,
                                              STRUCTURE_HEADER, UPDATE_HEADER, Expected,
                                              ExperimentKeys, PayloadRejected, RunKey, dtype_code,
                                              metrics_payload, parse_structure_head, run_hex,
                                              seal_metrics, seal_structure, seal_update,
                                              update_bytes, valid_experiment, withheld_bytes)
from async_plotter.channel.redis.signing import SECRET_ENV, resolve_secret, warn_if_weak
from async_plotter.errors import InvalidArgumentError
from async_plotter.learning_curve import MAX_POINTS

if TYPE_CHECKING:
    from async_plotter.channel.redis.sealed import RunTarget

__all__ = ["check_channel_arguments", "RedisWriter", "RedisReader", "TTL_ENV"]

logger = logging.getLogger("async_plotter")

#: environment variable overriding how long (seconds) an abandoned experiment stays in Redis
TTL_ENV = "ASYNC_PLOTTER_REDIS_TTL"
DEFAULT_TTL = 3600.0
#: seconds between checks that the structure and newest update in Redis are still this trainer's
REASSERT_INTERVAL = 2.0
#: seconds an update may wait for the server's answer before ``publish`` warns that publishing is
#: stuck (a server that accepts connections and never answers fails no socket call for
#: ``link._SOCKET_TIMEOUT`` s, and a trainer wants to know while it trains)
STALL_WARNING_SECONDS = 5.0
#: seconds between two counts of the parameter readers (``ExperimentKeys.readers``): with none,
#: an update goes as its header alone, and whole once one comes
READERS_COUNT_INTERVAL = 1.0
#: seconds ``close()`` waits for the last update to reach the server by default, whatever the
#: server does (``Plotter.close`` of a publish-only trainer waits no longer either)
CLOSE_SECONDS = 2.0
# A previous run's start this far ahead of our clock is not trusted to bump ours (it may be
# forged: headers are read here without verifying them).
_MAX_CLOCK_SKEW_NS = 24 * 3600 * 10**9


def check_channel_arguments(channel: Any, experiment: Any, secret: Any) -> None:
    """Validate ``Plotter(channel=..., experiment=..., secret=...)`` in the trainer, at once.

    Raises ``InvalidArgumentError`` naming the problem. Without any secret (argument or
    ``$ASYNC_PLOTTER_SECRET``) it logs one warning: viewers will need ``--trust-unsigned``.
    """
    problem = url_problem(channel)
    if problem is not None:
        raise InvalidArgumentError(f"channel {problem}")
    if experiment is None:
        raise InvalidArgumentError("experiment is required with channel=...: name the run, e.g. "
                                   "experiment='swimmer-7', and watch it with "
                                   "async-plotter view <url> --experiment swimmer-7")
    if not isinstance(experiment, str):
        raise InvalidArgumentError(f"experiment must be a str, got {type(experiment).__name__}")
    if not valid_experiment(experiment):
        raise InvalidArgumentError(
            f"experiment {experiment!r} is not a valid name: use letters, digits, '.', '_' and "
            "'-', starting with a letter or digit, at most 128 characters")
    try:
        key = resolve_secret(secret)
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(str(error)) from None
    if key is None:
        logger.warning(
            "publishing experiment %r to Redis without a secret: its updates are unsigned, and "
            "viewers will need --trust-unsigned, which lets anyone who can write to that Redis "
            "server run code on the viewing machine. Set %s (the same on both ends) to sign.",
            experiment, SECRET_ENV)
    else:
        warn_if_weak(key)
    ttl_from_environment()


def ttl_from_environment() -> float:
    """The expiry of an experiment's keys: ``$ASYNC_PLOTTER_REDIS_TTL`` seconds, default 1 h."""
    text = os.environ.get(TTL_ENV)
    if not text:
        return DEFAULT_TTL
    try:
        ttl = float(text)
    except ValueError:
        ttl = -1.0
    if not ttl >= 1.0:
        raise InvalidArgumentError(f"{TTL_ENV} must be a number of seconds >= 1, got {text!r}")
    return ttl


@dataclasses.dataclass(frozen=True)
class _Meta:
    number: int
    iteration: Optional[int]
    max_path_length: int
    published_at: float


class _NewestSlot:
    """Two wire-format buffers: the trainer copies into the pending one; the sender takes it.

    The trainer only ever writes the buffer the sender is not reading, and the buffer last sent
    stays intact until something newer is pending, so it can be sent again after a reconnect.
    """

    def __init__(self, size: int, dtype: np.dtype) -> None:
        nbytes = update_bytes(size, dtype)
        self.buffers = [bytearray(nbytes), bytearray(nbytes)]
        wire_dtype = np.dtype(dtype).newbyteorder("<")
        self._views = [
            np.frombuffer(buffer, wire_dtype, size, UPDATE_HEADER.size) for buffer in self.buffers
        ]
        self._lock = threading.Lock()
        self._pending = 0
        self._meta: Optional[_Meta] = None
        self._dirty = False
        self._last_sent: Optional[Tuple[int, _Meta]] = None
        self.replaced = 0  # updates overwritten before the sender got to them

    @property
    def dirty(self) -> bool:
        return self._dirty

    def put(self, params: Update, meta: _Meta) -> None:
        with self._lock:
            copy_update(self._views[self._pending], params)
            if self._dirty:
                self.replaced += 1
            self._meta = meta
            self._dirty = True

    def take(self) -> Optional[Tuple[int, _Meta]]:
        with self._lock:
            if not self._dirty:
                return None
            index = self._pending
            self._pending = 1 - index
            self._dirty = False
            return index, self._meta

    def sent(self, index: int, meta: _Meta) -> None:
        with self._lock:
            self._last_sent = (index, meta)

    def failed(self, index: int, meta: _Meta) -> None:
        """Sending failed: keep it pending, unless something newer already is."""
        with self._lock:
            if not self._dirty:
                self._pending, self._meta, self._dirty = index, meta, True

    def resend_last(self) -> None:
        """Make the last update sent pending again (after a reconnect), unless a newer one is."""
        with self._lock:
            if not self._dirty and self._last_sent is not None:
                self._pending, self._meta = self._last_sent
                self._dirty = True


class RedisWriter:
    """Trainer side of the Redis channel. ``publish`` and ``post_metrics`` never block on Redis.

    Args:
        url: ``redis://[:password@]host:port/db``, ``rediss://...`` or ``unix:///path``.
        experiment: the experiment's name (its keys' middle part).
        config: the worker configuration; published once as the experiment's structure, without
            the trainer's own outputs (video directory, window, live page, ``on_frame``).
        size: number of parameters; dtype: their dtype (float32 or float64).
        secret: signing key; None means ``$ASYNC_PLOTTER_SECRET``; none at all publishes unsigned.
        stats: where the counters go (the plotter's ``WorkerStats``, or any dict): this sets
            ``published``, ``published_withheld`` (of those, sent as their header alone: no
            parameter reader was subscribed), ``publish_errors``, ``publish_replaced``
            (newest-wins skips), ``redis_connected`` and ``publish_cpu_seconds`` (sender thread
            CPU time).
        ttl: expiry of the experiment's keys in seconds, refreshed while the trainer lives
            (default ``$ASYNC_PLOTTER_REDIS_TTL`` or one hour).
        live_states: the trainer's worker plays the live episode for viewers (``live.py``);
            said in the structure's description, so that ``view`` draws it by default.
        history_states: the trainer's worker publishes every policy's recording
            (``states.py``); said there too, so that ``serve`` offers the run's history in 3D.
        resumes_after: this run resumes one from its snapshot of this iteration; said there
            too, so that ``serve`` shows both runs as one curve (``serve/run_chain.py``).
    """

    def __init__(self,
                 url: str,
                 experiment: str,
                 config: Any,
                 size: int,
                 dtype: np.dtype,
                 secret: Optional[Union[str, bytes]],
                 stats: Any,
                 ttl: Optional[float] = None,
                 live_states: bool = False,
                 history_states: bool = False,
                 resumes_after: Optional[int] = None) -> None:
        dtype = np.dtype(dtype)
        if dtype_code(dtype) is None:
            raise InvalidArgumentError(
                f"parameters of dtype {dtype} cannot be published; use float32 or float64")
        if update_bytes(size, dtype) > MAX_VALUE_BYTES:
            raise InvalidArgumentError(
                f"{size} parameters of dtype {dtype} exceed Redis's 512 MiB value limit")
        self._url = url
        self._experiment = experiment
        self._keys = ExperimentKeys(experiment)
        self._key = resolve_secret(secret)
        self._size = int(size)
        self._dtype = dtype
        self._ttl_ms = int(1000 * (ttl if ttl is not None else ttl_from_environment()))
        self._run_id = secrets.randbits(64)
        self._run_started_ns = time.time_ns()
        self._config = config
        self._live_states = live_states
        self._history_states = history_states
        self._resumes_after = resumes_after
        self._structure, self._structure_id = self._seal_structure(config)
        self._sent_update_head: Optional[bytes] = None  # header of the newest update sent
        self._reasserted = False
        self._slot = _NewestSlot(self._size, dtype)
        self._number = -1
        self._metrics_seq = 0
        self._metrics_pending: Deque[bytes] = collections.deque()
        # This run's whole curve (capped), to restore it on a server that lost it.
        self._metrics_history: Deque[bytes] = collections.deque(maxlen=MAX_POINTS)
        self._stats = stats
        stats.update(published=0,
                     published_withheld=0,
                     publish_errors=0,
                     publish_replaced=0,
                     redis_connected=False,
                     publish_cpu_seconds=0.0)
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._closed = False
        self._outage = OutageLog(f"publishing experiment {self._experiment!r}", self._url,
                                 f"the trainer role of experiment {self._experiment!r}")
        # When the oldest update Redis has not acknowledged yet was published (None: all were).
        self._undelivered_since: Optional[float] = None
        self._stall_warned = False
        # The parameter readers at the last count, when it was, and whether the newest update
        # went out withheld (sent whole as soon as a count finds a reader).
        self._readers = False
        self._readers_counted_at = -float("inf")
        self._withheld_last = False
        self._thread = threading.Thread(target=self._run,
                                        name="async_plotter-redis-sender",
                                        daemon=True)
        self._thread.start()

    @property
    def run_id(self) -> int:
        """The random id of this trainer session, as written in every header."""
        return self._run_id

    @property
    def run_started_ns(self) -> int:
        """This session's start as written in every header (orders runs for viewers)."""
        return self._run_started_ns

    def run_target(self) -> "RunTarget":
        """Where this run's states go (its history, ``states.py``, and its live episode,
        ``live.py``): this writer's server, experiment, secret, run and expiry."""
        from async_plotter.channel.redis.sealed import RunTarget

        return RunTarget(self._url, self._experiment, self._key,
                         (self._run_id, self._run_started_ns), self._ttl_ms / 1000.0,
                         self._resumes_after)

    @property
    def expected(self) -> Expected:
        """What a reader must hold each update of this writer against."""
        return Expected(self._structure_id, self._size, self._dtype.name,
                        RunKey(self._run_started_ns, self._run_id))

    def publish(self,
                params: Update,
                iteration: Optional[int],
                max_path_length: int,
                number: Optional[int] = None) -> int:
        """Copy ``params`` into the newest-wins slot and wake the sender; returns the update's
        number. Costs one copy of the vector; never waits for Redis."""
        number = self._number + 1 if number is None else number
        self._number = number
        if self._closed:
            return number
        self._slot.put(params, _Meta(number, iteration, max_path_length, time.time()))
        self._wake.set()
        self._check_stalled()
        return number

    def _check_stalled(self) -> None:
        """One warning (in the trainer, at its next publish) once an update has waited more than
        ``STALL_WARNING_SECONDS`` for the server, unless an outage was already reported."""
        now = time.monotonic()
        since = self._undelivered_since
        if since is None:
            self._undelivered_since = now
        elif (now - since > STALL_WARNING_SECONDS and not self._stall_warned
              and not self._outage.down):
            self._stall_warned = True
            logger.warning(
                "publishing experiment %r: Redis at %s has not taken an update for %.0f s (a "
                "server that accepts connections but does not answer?); training goes on, and "
                "close() will wait at most %.0f s for it", self._experiment, redact(self._url),
                now - since, CLOSE_SECONDS)

    @property
    def published(self) -> int:
        """The number of the newest update published (-1 before the first)."""
        return self._number

    def request_final(self) -> None:
        """Nothing to do: the viewer's worker records at its own pace (its own budget)."""

    def address(self) -> RedisAddress:
        """Where a worker reads this experiment, trusting this writer's own secret."""
        return RedisAddress(self._url, self._experiment, self._key, self._key is None,
                            self.expected)

    def post_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> bool:
        """Queue training metrics for viewers' live pages; never blocks. False if too large."""
        if not metrics_fit(iteration, metrics):  # what the viewer's worker will take
            return False
        payload = metrics_payload(self._run_id, self._metrics_seq, iteration, metrics, time.time())
        if len(payload) > MAX_METRICS_BYTES:
            return False
        self._metrics_seq += 1
        if not self._closed:
            self._metrics_pending.append(payload)
            self._wake.set()
        return True

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Send what is pending (the last update) within ``timeout`` seconds, then stop.

        Never hangs: a sender stuck on an unreachable server is abandoned (it is a daemon thread),
        and the keys expire on their own."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("the last update could not be sent to Redis within %.1f s; giving up",
                           timeout)

    # ----------------------------------------------------------------------- sender thread

    def _seal_structure(self, config: Any) -> Tuple[bytes, bytes]:
        # The trainer's own outputs mean nothing on a viewer's machine, and the live page's token
        # must not leave this machine.
        published = dataclasses.replace(config.with_sinks(()), history_dir=None, live_target=None)
        body = pickle.dumps(published, protocol=pickle.HIGHEST_PROTOCOL)
        created = self._run_started_ns / 1e9
        meta = {
            "experiment": self._experiment,
            "run": run_hex(self._run_id),
            "size": self._size,
            "dtype": self._dtype.name,
            "env": config.env.label,
            "policy": config.policy.description,
            "max_path_length": config.max_path_length,
            "fps": config.fps,
            "host": socket.gethostname(),
            "created": created,
            # its worker plays the live episode while watched (``live.py``): a viewer may draw
            # it without rebuilding the policy
            "live_states": self._live_states,
            # it publishes every policy's history recording (``states.py``)
            "history_states": self._history_states,
            # the run this one resumes goes on in it: one curve (``serve/run_chain.py``)
            RESUMES_AFTER: self._resumes_after,
        }
        return seal_structure(self._key, self._experiment, self._run_id, self._run_started_ns, meta,
                              body)

    def _run(self) -> None:
        import redis

        # Refusals (AccessDenied, a refused password or TLS certificate) are failures too: the
        # trainer warns once and goes on, as with the server down, and retries slowly.
        failures = connection_errors() + (redis.exceptions.RedisError, AccessDenied)
        outage = self._outage
        backoff = Backoff()
        client = None
        announced_once = False
        retry_at = 0.0
        refresh_every = self._ttl_ms / 3000.0
        refresh_at = 0.0
        reassert_at = 0.0
        while True:
            if not self._closing.is_set():
                # Sleep until woken by a publish, or until a reconnect or expiry refresh is due.
                due = retry_at if client is None else min(refresh_at, reassert_at,
                                                          self._next_readers_count())
                self._wake.wait(max(due - time.monotonic(), 0.0))
                self._wake.clear()
            closing = self._closing.is_set()
            if client is None and not closing and time.monotonic() < retry_at:
                continue  # woken by a publish while waiting to reconnect: it stays pending
            if client is None and closing and outage.down:
                break  # do not make a closing trainer wait for a server that is down
            started = time.thread_time()
            try:
                if client is None:
                    client = connect(self._url)
                    self._announce(client, first=not announced_once)
                    announced_once = True
                    self._stats["redis_connected"] = True
                    refresh_at = time.monotonic() + refresh_every
                    reassert_at = time.monotonic() + REASSERT_INTERVAL
                self._send_update(client)
                self._send_whole_when_read(client)
                self._send_metrics(client)
                if time.monotonic() >= refresh_at:
                    self._refresh(client)
                    refresh_at = time.monotonic() + refresh_every
                if time.monotonic() >= reassert_at and not closing:
                    self._reassert(client)
                    reassert_at = time.monotonic() + REASSERT_INTERVAL
                # Only a whole round counts: a role refusing one command must not make every
                # reconnect look like a recovery.
                outage.recovered()
                backoff.reset()
            except failures as error:
                close_quietly(client)
                client = None
                self._stats["redis_connected"] = False
                self._stats["publish_errors"] += 1
                refused = outage.refusal(error) is not None
                outage.failed(
                    error, "training goes on; publishing resumes once the server accepts it"
                    if refused else "training goes on; publishing resumes when it is back")
                delay = backoff.next_delay()
                retry_at = time.monotonic() + (max(delay, REFUSED_RETRY) if refused else delay)
                if closing:
                    break
            except Exception:  # noqa: BLE001 - never let a bug here end publishing silently
                logger.exception("publishing to Redis failed unexpectedly; retrying")
                close_quietly(client)
                client = None
                self._stats["publish_errors"] += 1
                retry_at = time.monotonic() + backoff.next_delay()
                if closing:
                    break
            finally:
                self._stats["publish_cpu_seconds"] += time.thread_time() - started
                self._stats["publish_replaced"] = self._slot.replaced
            if closing and not self._slot.dirty and not self._metrics_pending:
                break
        close_quietly(client)
        self._stats["redis_connected"] = False

    def _announce(self, client: Any, first: bool) -> None:
        """Publish the structure; on a reconnect also restore what a restarted server lost."""
        keys, ttl = self._keys, self._ttl_ms
        if first:
            self._start_after_previous_run(client)
        pipe = client.pipeline(transaction=False)
        pipe.set(keys.structure, self._structure, px=ttl)
        if first and self._resumes_after is None:
            # An earlier run's curve (one this run resumes goes on in it: serve/run_chain.py).
            pipe.delete(keys.metrics)
        pipe.exists(keys.metrics)
        results = pipe.execute()
        if not first and not results[-1] and self._metrics_history:
            self._metrics_pending.extendleft(reversed(self._metrics_history))
            self._metrics_history.clear()
        client.publish(keys.events, f"structure {run_hex(self._run_id)}")
        self._slot.resend_last()

    def _start_after_previous_run(self, client: Any) -> None:
        """Make this run's start later than the previous run's in Redis, if this machine's clock
        is behind it: viewers refuse runs older than one they accepted."""
        try:
            previous = parse_structure_head(
                client.getrange(self._keys.structure, 0, STRUCTURE_HEADER.size - 1))
        except PayloadRejected:
            return  # none, or not ours
        now = time.time_ns()
        if self._run_started_ns <= previous.run_started_ns <= now + _MAX_CLOCK_SKEW_NS:
            logger.info(
                "the previous run of experiment %r started %.1f s after this one's clock says "
                "now; numbering this run after it so that viewers accept it", self._experiment,
                (previous.run_started_ns - self._run_started_ns) / 1e9)
            self._run_started_ns = previous.run_started_ns + 1
            self._structure, self._structure_id = self._seal_structure(self._config)

    def _reassert(self, client: Any) -> None:
        """Write our structure and newest update back if someone else's are in their keys."""
        keys = self._keys
        pipe = client.pipeline(transaction=False)
        pipe.getrange(keys.structure, 0, STRUCTURE_HEADER.size - 1)
        pipe.getrange(keys.params, 0, UPDATE_HEADER.size - 1)
        structure_head, update_head = pipe.execute()
        if structure_head != self._structure[:STRUCTURE_HEADER.size]:
            # Once per trainer: under a lasting attack this repeats every few seconds.
            log = logger.debug if self._reasserted else logger.warning
            self._reasserted = True
            log(
                "the structure of experiment %r in Redis is not this trainer's (another writer, or "
                "a key deleted); publishing it again", self._experiment)
            pipe = client.pipeline(transaction=False)
            pipe.set(keys.structure, self._structure, px=self._ttl_ms)
            pipe.publish(keys.events, f"structure {run_hex(self._run_id)}")
            pipe.execute()
        if self._sent_update_head is not None and update_head != self._sent_update_head:
            self._slot.resend_last()  # sent by the caller's next round, as after a reconnect
            self._wake.set()

    def _next_readers_count(self) -> float:
        """When the readers are to be counted again: only while the newest update is withheld."""
        if not self._withheld_last:
            return float("inf")
        return self._readers_counted_at + READERS_COUNT_INTERVAL

    def _readers_present(self, client: Any) -> bool:
        """Whether somebody reads the parameters (counted at most once per interval)."""
        now = time.monotonic()
        if now >= self._readers_counted_at + READERS_COUNT_INTERVAL:
            self._readers_counted_at = now
            self._readers = client.pubsub_numsub(self._keys.readers)[0][1] > 0
        return self._readers

    def _send_whole_when_read(self, client: Any) -> None:
        """A reader came since the newest update went out withheld: send it whole now (the
        count itself waits for its interval)."""
        if self._withheld_last and self._readers_present(client):
            self._slot.resend_last()
            self._send_update(client)

    def _send_update(self, client: Any) -> None:
        taken = self._slot.take()
        if taken is None:
            return
        index, meta = taken
        # Nobody reads the parameters: the header alone says what the newest update is (for
        # the lists and the curve), without the vector (4 MB for 1e6 float32).
        whole = self._readers_present(client)
        buffer = self._slot.buffers[index] if whole else bytearray(withheld_bytes())
        seal_update(buffer,
                    self._key,
                    self._experiment,
                    run_id=self._run_id,
                    number=meta.number,
                    iteration=meta.iteration,
                    max_path_length=meta.max_path_length,
                    count=self._size,
                    dtype=self._dtype,
                    published_at=meta.published_at,
                    structure_id=self._structure_id,
                    run_started_ns=self._run_started_ns,
                    withheld=not whole)
        keys = self._keys
        pipe = client.pipeline(transaction=False)
        pipe.set(keys.params, memoryview(buffer), px=self._ttl_ms)  # no copy of the vector
        pipe.pexpire(keys.structure, self._ttl_ms)
        pipe.publish(keys.events, f"update {run_hex(self._run_id)} {meta.number}")
        try:
            pipe.execute()
        except BaseException:
            self._slot.failed(index, meta)
            raise
        self._slot.sent(index, meta)
        self._withheld_last = not whole
        self._sent_update_head = bytes(buffer[:UPDATE_HEADER.size])
        self._stats["published"] += 1
        if not whole:
            self._stats["published_withheld"] += 1
        self._undelivered_since = time.monotonic() if self._slot.dirty else None
        if self._stall_warned:
            self._stall_warned = False
            logger.info("publishing experiment %r: Redis takes updates again", self._experiment)

    def _send_metrics(self, client: Any) -> None:
        if not self._metrics_pending:
            return
        batch = []
        while self._metrics_pending:
            batch.append(self._metrics_pending.popleft())
        keys = self._keys
        pipe = client.pipeline(transaction=False)
        for payload in batch:
            pipe.xadd(keys.metrics,
                      seal_metrics(self._key, self._experiment, payload),
                      maxlen=MAX_POINTS,
                      approximate=True)
        pipe.pexpire(keys.metrics, self._ttl_ms)
        pipe.publish(keys.events, f"metrics {run_hex(self._run_id)} {self._metrics_seq}")
        try:
            pipe.execute()
        except BaseException:
            self._metrics_pending.extendleft(reversed(batch))
            raise
        self._metrics_history.extend(batch)

    def _refresh(self, client: Any) -> None:
        """Keep a live trainer's keys from expiring between rare updates."""
        keys = self._keys
        pipe = client.pipeline(transaction=False)
        for key in (keys.structure, keys.params, keys.metrics):
            pipe.pexpire(key, self._ttl_ms)
        pipe.execute()
