"""The run's history over Redis: state recordings a viewer draws with neither TensorFlow nor
the policy's code, and nothing unpickled.

A trainer that publishes (``Plotter(channel=..., video_dir=...)``) records every policy its
worker applies (``worker/history.py``); ``RecordingPublisher`` sends each recording as it is
written, and ``RecordingFetcher`` keeps a viewer's folder in step with them. Keys of experiment
``E``, all expiring with the experiment's other keys::

    async_plotter:E:model               header | MuJoCo model (MJB, zlib), once per run | tag
    async_plotter:E:recording:RUN:N     header | recording of update N, without model | tag
    async_plotter:E:recordings          sorted set of "RUN:N" by N (capped)

Each value is sealed as the parameters are (``wire``, ``signing``): a header naming the run,
the update and the iteration, the payload, and a tag over both (HMAC-SHA256 under the shared
secret, else a checksum the viewer must be told to trust). A recording travels in its compact
form (``render/recording.compact_bytes``: float32, numpy's zip read with ``allow_pickle=False``)
and the model once: a 500-step HalfCheetah episode is 34 KB, its model 16 KB.
"""
import collections
import dataclasses
import logging
import os
import queue
import struct
import threading
import time
import zlib
from typing import Any, Callable, Optional, Set, Tuple

from async_plotter.channel.redis.link import (Backoff, close_quietly, connect, connection_errors,
                                              probe, read_exact)
from async_plotter.channel.redis.signing import TAG_BYTES, PayloadRejected, Verifier, compute_tag
from async_plotter.channel.redis.wire import KEY_PREFIX, check_length, run_hex
from async_plotter.render.recording import (RecordingError, compact_bytes, read_recording,
                                            recording_from_compact, write_recording)
from async_plotter.render.videos import history_name

logger = logging.getLogger("async_plotter")

#: recordings an experiment keeps in Redis; the oldest go first
DEFAULT_KEPT = 200
#: the bytes of one recording (a 500-step HalfCheetah episode: 34 KB) and of the model a viewer
#: reads
MAX_RECORDING_BYTES = 32 * 1024 * 1024
MAX_MODEL_BYTES = 64 * 1024 * 1024
#: recordings waiting to be sent; more and the oldest waiting is dropped (the file stays)
_QUEUE_LENGTH = 64
_POLL_SECONDS = 1.0
#: seconds between two attempts at most while the server is away
_RETRY_CAP = 5.0

# magic, version, flags, run id, run start (ns), update number (-1: the model), iteration
# (-1: none), payload length
_HEADER = struct.Struct("<4sHHQQqqQ")
_MAGIC = b"APRS"
# 2: recordings in their compact form
_VERSION = 2
_SIGNED = 1


@dataclasses.dataclass(frozen=True)
class StateKeys:
    """The Redis names of one experiment's recordings."""

    experiment: str

    @property
    def model(self) -> str:
        return f"{KEY_PREFIX}:{self.experiment}:model"

    @property
    def index(self) -> str:
        return f"{KEY_PREFIX}:{self.experiment}:recordings"

    def recording(self, member: str) -> str:
        return f"{KEY_PREFIX}:{self.experiment}:recording:{member}"


@dataclasses.dataclass(frozen=True)
class RunTarget:
    """Where one run of a trainer publishes its states, and under which name, secret, run and
    expiry (``RedisWriter.run_target``): plain, picklable data, never part of the structure a
    viewer reads. The history's publisher here and the live episode's (``live.py``) take it."""

    url: str
    experiment: str
    secret: Optional[bytes]
    #: the trainer's run (id, start in ns), as its parameters carry
    run: Tuple[int, int]
    ttl_seconds: float

    @property
    def ttl_ms(self) -> int:
        return max(int(self.ttl_seconds * 1000), 1)


@dataclasses.dataclass(frozen=True)
class Sealed:
    """An opened value: whose run, which update, and what it holds."""

    run_id: int
    run_started_ns: int
    number: int
    iteration: Optional[int]
    payload: bytes


def seal(key: Optional[bytes], kind: bytes, experiment: str, run: Tuple[int, int], number: int,
         iteration: Optional[int], payload: bytes) -> bytes:
    """``payload`` with its header and tag (``kind``: ``b"model"`` or ``b"recording"``)."""
    header = _HEADER.pack(_MAGIC, _VERSION, _SIGNED if key is not None else 0, run[0], run[1],
                          number, -1 if iteration is None else iteration, len(payload))
    return header + payload + compute_tag(key, kind, experiment, header, payload)


def open_sealed(value: bytes, verifier: Verifier, kind: bytes, experiment: str) -> Sealed:
    """Verify a sealed value; ``PayloadRejected`` naming what is wrong."""
    what = kind.decode()
    if len(value) < _HEADER.size + TAG_BYTES:
        raise PayloadRejected(f"the {what} is {len(value)} bytes, shorter than its header")
    magic, version, flags, run_id, started, number, iteration, length = _HEADER.unpack_from(value)
    if magic != _MAGIC or version != _VERSION:
        raise PayloadRejected(f"the {what} is not in this version's format")
    check_length(what, len(value), _HEADER.size + length + TAG_BYTES, f"{length} bytes of payload")
    view = memoryview(value)
    verifier.check(bool(flags & _SIGNED), view[-TAG_BYTES:], kind, experiment, view[:_HEADER.size],
                   view[_HEADER.size:-TAG_BYTES])
    return Sealed(run_id, started, number, None if iteration < 0 else iteration,
                  bytes(view[_HEADER.size:-TAG_BYTES]))


def seal_model(target: RunTarget, mjb: bytes) -> bytes:
    """The run's model as published under its key: MJB through zlib (it is mostly zeros: 509 KB
    for Swimmer, 15 KB compressed), sealed as update -1."""
    return seal(target.secret, b"model", target.experiment, target.run, -1, None,
                zlib.compress(mjb, 6))


def put_dropping_oldest(waiting: "queue.Queue[Any]", item: Any, limit: int) -> int:
    """Queue ``item`` for a sender thread, dropping the oldest waiting past ``limit``; how many
    were dropped (a sender never holds its producer up)."""
    dropped = 0
    while waiting.qsize() >= limit:
        try:
            waiting.get_nowait()
            dropped += 1
        except queue.Empty:
            break
    waiting.put(item)
    return dropped


def inflate_model(data: bytes, limit: int = MAX_MODEL_BYTES) -> bytes:
    """A published model's MJB from its ``zlib`` bytes, refused past ``limit`` bytes (a forged
    bomb stops there)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit)
    except zlib.error as error:
        raise PayloadRejected(f"the model is not zlib data ({error})") from error
    if inflater.unconsumed_tail or not inflater.eof:
        raise PayloadRejected(f"the model is over {limit} bytes, or cut short")
    return out


def _bounded_get(client: Any, key: str, limit: int, what: str) -> Optional[bytes]:
    """The value at ``key`` (None: none), refused before its download past ``limit`` bytes, and
    if it changed size meanwhile (``link.probe`` and ``read_exact``, as for the parameters)."""
    length, _ = probe(client, key, _HEADER.size)
    if length > limit:
        raise PayloadRejected(f"the {what} is {length} bytes, over the {limit} a viewer reads")
    return read_exact(client, key, length, what) if length else None


def _member(run_id: int, number: int) -> str:
    return f"{run_hex(run_id)}:{number}"


class RecordingPublisher:
    """Sends each history recording of a trainer's run to Redis, in a thread of its own.

    ``add`` never blocks nor raises: the recording is queued (the oldest waiting is dropped
    past ``_QUEUE_LENGTH``; its file stays). A server that is down costs one warning, and what
    could not be sent waits (the newest ``_QUEUE_LENGTH``) and goes as soon as the server is
    back: retried after 0.1 s, doubling up to ``_RETRY_CAP`` s. A server that comes back
    without the run's model (restarted empty) gets it again, and the recordings it held (the
    newest ``kept`` sent, those whose files are still on disk) sent again before it. A recording
    the server refuses (the role, a full server) or whose file is gone is not retried.
    """

    def __init__(self, target: RunTarget, kept: int = DEFAULT_KEPT) -> None:
        self._target = target
        self._keys = StateKeys(target.experiment)
        self._ttl_ms = target.ttl_ms
        self._kept = max(int(kept), 1)
        #: what the server holds of the run: sent again if it loses them
        self._held: "collections.deque[Tuple[str, int, Optional[int]]]" = collections.deque(
            maxlen=self._kept)
        #: recordings sent again to a server that had lost them
        self.resent = 0
        self._queue: "queue.Queue[Optional[Tuple[str, int, Optional[int]]]]" = queue.Queue()
        self._model: Optional[bytes] = None
        self._model_sent = False
        self._give_up_at = float("inf")
        self._warned = False
        #: recordings sent, and those that could not be
        self.sent = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run_thread,
                                        name="async_plotter-redis-states",
                                        daemon=True)
        self._thread.start()

    def add(self, path: str, update: int, iteration: Optional[int]) -> None:
        """Publish the recording at ``path`` (update ``update``) soon."""
        self.failed += put_dropping_oldest(self._queue, (path, update, iteration), _QUEUE_LENGTH)

    def close(self, timeout: float) -> None:
        """Send what is queued within ``timeout`` s, then stop (what is left is not sent)."""
        self._give_up_at = time.monotonic() + max(timeout, 0.0)
        self._queue.put(None)
        self._thread.join(max(timeout, 0.0))

    def _run_thread(self) -> None:
        client = connect(self._target.url)
        waiting: "collections.deque[Tuple[str, int, Optional[int]]]" = collections.deque(
            maxlen=_QUEUE_LENGTH)
        backoff = Backoff(cap=_RETRY_CAP)
        stopping = False
        try:
            while not (stopping and (not waiting or time.monotonic() > self._give_up_at)):
                if not waiting:
                    item = self._queue.get()
                    if item is None:
                        return
                    waiting.append(item)
                try:
                    self._send(client, *waiting[0])
                except connection_errors() as error:
                    self._warn(waiting[0][0], error)
                    # Newer ones join the wait meanwhile (the oldest go past the bound).
                    stopping = self._wait_for_server(backoff, waiting) or stopping
                    continue
                except Exception as error:  # noqa: BLE001 - the file, a refusal, a full server
                    self.failed += 1
                    self._warn(waiting[0][0], error)
                else:
                    self.sent += 1
                    backoff.reset()
                waiting.popleft()
        finally:
            self.failed += len(waiting)
            close_quietly(client)

    def _wait_for_server(self, backoff: Backoff, waiting: Any) -> bool:
        """Sleep before the next attempt, taking what is added meanwhile into ``waiting``;
        True once ``close`` was called (what waits then gets the time ``close`` gives)."""
        deadline = time.monotonic() + backoff.next_delay()
        while True:
            try:
                item = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return False
            if item is None:
                return True
            if len(waiting) == waiting.maxlen:
                self.failed += 1
            waiting.append(item)

    def _warn(self, path: str, error: BaseException) -> None:
        log = logger.debug if self._warned else logger.warning
        self._warned = True
        log(
            "publishing experiment %r: the history recording %s did not reach Redis (%s: %s); "
            "it stays on disk", self._target.experiment, os.path.basename(path),
            type(error).__name__, error)

    def _put(self, pipe: Any, recording: Any, update: int, iteration: Optional[int]) -> None:
        """Queue on ``pipe`` the commands that store one recording and index it."""
        target, keys = self._target, self._keys
        member = _member(target.run[0], update)
        pipe.set(keys.recording(member),
                 seal(target.secret, b"recording", target.experiment, target.run, update, iteration,
                      compact_bytes(recording)),
                 px=self._ttl_ms)
        pipe.zadd(keys.index, {member: update})
        pipe.pexpire(keys.index, self._ttl_ms)

    def _send_again(self, client: Any) -> None:
        """Send the recordings the server held again, those whose files are still here."""
        pipe = client.pipeline(transaction=False)
        again = 0
        for path, update, iteration in self._held:
            try:
                recording = read_recording(path)
            except (OSError, RecordingError):
                continue  # the history's bound removed it since
            self._put(pipe, recording, update, iteration)
            again += 1
        pipe.execute()
        self.resent += again
        if again:
            logger.info(
                "publishing experiment %r: Redis came back without the run's history; "
                "%d recording(s) sent again", self._target.experiment, again)

    def _sealed_model(self, mjb: bytes) -> bytes:
        if self._model is None:
            self._model = seal_model(self._target, mjb)
        return self._model

    def _send(self, client: Any, path: str, update: int, iteration: Optional[int]) -> None:
        recording = read_recording(path)
        keys = self._keys
        model = self._sealed_model(recording.model_mjb)
        pipe = client.pipeline(transaction=False)
        if not self._model_sent:
            # A new run's history starts empty: the previous run's goes with its keys' expiry.
            pipe.delete(keys.index)
        self._put(pipe, recording, update, iteration)
        if self._model_sent:
            pipe.pexpire(keys.model, self._ttl_ms)
        else:
            pipe.set(keys.model, model, px=self._ttl_ms)
        pipe.zcard(keys.index)
        *_, model_kept, count = pipe.execute()
        if not model_kept:
            # A server that lost the model (restarted empty) lost the recordings too: they go
            # again, then the model (last: should this fail, the next send sees it missing).
            self._send_again(client)
            client.set(keys.model, model, px=self._ttl_ms)
        self._model_sent = True
        self._held.append((path, update, iteration))
        if count > self._kept:  # the oldest go, keys and all
            dropped = [member for member, _ in client.zpopmin(keys.index, count - self._kept)]
            client.delete(*[keys.recording(m.decode("ascii")) for m in dropped])


class RecordingFetcher:
    """Keeps ``folder`` holding the experiment's published recordings, each as a whole file
    (``iter_0059.npz``, with the model put back), in a thread of its own; the newest run's
    only (a new run's first recording removes the files of the one before); ``on_written(path)``
    after each. What fails its check is logged once and skipped; the
    fetcher goes on."""

    def __init__(self,
                 url: str,
                 experiment: str,
                 verifier: Verifier,
                 folder: str,
                 on_written: Optional[Callable[[str], None]] = None) -> None:
        self._url = url
        self._on_written = on_written
        self._experiment = experiment
        self._keys = StateKeys(experiment)
        self._verifier = verifier
        self._folder = folder
        self._model: Optional[Sealed] = None
        self._mjb = b""
        self._done: Set[str] = set()
        #: the files written of the current run
        self._paths: Set[str] = set()
        self._rejected: Set[str] = set()
        self._stop = threading.Event()
        #: files written, and values refused
        self.written = 0
        self.refused = 0
        #: set once the first file is written
        self.first_written = threading.Event()
        self._thread = threading.Thread(target=self._run_thread,
                                        name="async_plotter-redis-fetch",
                                        daemon=True)
        self._thread.start()

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run_thread(self) -> None:
        client = connect(self._url)
        try:
            while not self._stop.is_set():
                try:
                    self.fetch_once(client)
                except connection_errors() as error:
                    logger.debug("fetching %r: %s", self._experiment, error)
                self._stop.wait(_POLL_SECONDS)
        finally:
            close_quietly(client)

    def fetch_once(self, client: Any) -> int:
        """Write the recordings not fetched yet; how many were written."""
        try:
            value = _bounded_get(client, self._keys.model, MAX_MODEL_BYTES, "model")
            if value is None:
                return 0  # nothing published yet (or expired): wait
            model = open_sealed(value, self._verifier, b"model", self._experiment)
        except PayloadRejected as error:
            self._refuse("model", error)
            return 0
        if self._model is None or model.run_id != self._model.run_id:
            try:
                self._mjb = inflate_model(model.payload)
            except PayloadRejected as error:
                self._refuse("model", error)
                return 0
            self._model, self._done = model, set()
            self._forget_files()
        prefix = run_hex(model.run_id) + ":"
        written = 0
        # The newest DEFAULT_KEPT only: a forged index may be of any length.
        for raw in client.zrange(self._keys.index, -DEFAULT_KEPT, -1):
            member = raw.decode("ascii", "replace")
            if not member.startswith(prefix) or member in self._done | self._rejected:
                continue
            try:
                value = _bounded_get(client, self._keys.recording(member), MAX_RECORDING_BYTES,
                                     "recording")
                if value is None:
                    continue  # gone since the index was read (the cap, or expiry)
                self._write(value)
            except (PayloadRejected, RecordingError) as error:
                self._rejected.add(member)
                self._refuse(f"recording {member}", error)
                continue
            self._done.add(member)
            written += 1
        self.written += written
        if written:
            self.first_written.set()
        return written

    def _write(self, value: Optional[bytes]) -> None:
        sealed = open_sealed(value, self._verifier, b"recording", self._experiment)
        if sealed.run_id != self._model.run_id:
            raise PayloadRejected("the recording is of another run than the model")
        recording = recording_from_compact(sealed.payload, f"update {sealed.number}'s recording",
                                           self._mjb)
        os.makedirs(self._folder, exist_ok=True)
        path = os.path.join(self._folder, history_name(sealed.number, sealed.iteration))
        write_recording(path, recording)
        self._paths.add(path)
        if self._on_written is not None:
            self._on_written(path)

    def _forget_files(self) -> None:
        """Remove the previous run's files: a folder holds one run, as a history shows one."""
        for path in self._paths:
            try:
                os.remove(path)
            except OSError:
                pass
        self._paths = set()

    def _refuse(self, what: str, error: Exception) -> None:
        self.refused += 1
        log = logger.warning if self.refused == 1 else logger.debug
        log("experiment %r: the %s was refused: %s", self._experiment, what, error)
