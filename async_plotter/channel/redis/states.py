"""The run's history over Redis: state recordings a viewer draws with neither TensorFlow nor
the policy's code, and nothing unpickled.

A trainer that publishes (``Plotter(channel=..., video_dir=...)``) records every policy its
worker applies (``worker/history.py``); ``RecordingPublisher`` sends each recording as it is
written, with every recording's return (``returns.py``: those of recordings Redis no longer
keeps too), and ``RecordingFetcher`` keeps a viewer's folder in step with them, its
``returns.csv`` included. Keys of experiment ``E``, all expiring with the experiment's other
keys::

    async_plotter:E:model               header | MuJoCo model (MJB, zlib), once per run | tag
    async_plotter:E:recording:RUN:N     header | recording of update N, without model | tag
    async_plotter:E:recordings          sorted set of "RUN:N" by iteration (capped)
    async_plotter:E:returns             stream of sealed returns, {"v": value} (capped)

Each value is sealed (``sealed.py``: a header naming the run, the update and the iteration,
the payload, and a tag over both). A recording travels in its compact form
(``render/recording.compact_bytes``: float32, numpy's zip read with ``allow_pickle=False``) and
the model once: a 500-step HalfCheetah episode is 34 KB, its model 16 KB. A new run's history
starts empty; a resumed run's goes on from the runs it resumes (``history_chain.py``).
"""
import collections
import dataclasses
import logging
import os
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple, Union

from async_plotter.channel.redis.acl import DOCS
from async_plotter.channel.redis.history_chain import earlier_runs_keep, index_score, trim
from async_plotter.channel.redis.link import (Backoff, OutageLog, bounded_zrange, close_quietly,
                                              connect, connection_errors, probe, read_exact)
from async_plotter.channel.redis.refusals import AccessDenied
from async_plotter.channel.redis.returns import (KEPT_ROWS, ReturnRow, ReturnsReader, returns_key,
                                                 seal_row)
from async_plotter.channel.redis.sealed import (HEADER_BYTES, MAX_MODEL_BYTES, RunTarget, Sealed,
                                                inflate_model, open_sealed, seal, seal_model)
from async_plotter.channel.redis.signing import PayloadRejected, Verifier
from async_plotter.channel.redis.wire import KEY_PREFIX, ExperimentKeys, run_hex
from async_plotter.render.history_returns import ReturnsFile
from async_plotter.render.recording import (RecordingError, compact_bytes, read_recording,
                                            recording_from_compact, write_recording)
from async_plotter.render.videos import history_name

logger = logging.getLogger("async_plotter")

#: recordings an experiment keeps in Redis; the oldest go first
DEFAULT_KEPT = 200
#: the longest name a viewer reads from the recordings' index (ours: ``run:update``, < 40)
MAX_MEMBER_BYTES = 64
#: the bytes of one recording a viewer reads (a 500-step HalfCheetah episode: 34 KB)
MAX_RECORDING_BYTES = 32 * 1024 * 1024
#: recordings waiting to be sent; more and the oldest waiting is dropped (the file stays)
_QUEUE_LENGTH = 64
_POLL_SECONDS = 1.0
#: seconds between two attempts at most while the server is away
_RETRY_CAP = 5.0


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

    @property
    def returns(self) -> str:
        return returns_key(self.experiment)

    def recording(self, member: str) -> str:
        return f"{KEY_PREFIX}:{self.experiment}:recording:{member}"


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


def _bounded_get(client: Any, key: str, limit: int, what: str) -> Optional[bytes]:
    """The value at ``key`` (None: none), refused before its download past ``limit`` bytes, and
    if it changed size meanwhile (``link.probe`` and ``read_exact``, as for the parameters)."""
    length, _ = probe(client, key, HEADER_BYTES)
    if length > limit:
        raise PayloadRejected(f"the {what} is {length} bytes, over the {limit} a viewer reads")
    return read_exact(client, key, length, what) if length else None


def _recording_named(path: str) -> str:
    return f"the history recording {os.path.basename(path)} (it stays on disk)"


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

    ``add_return`` queues a recording's return the same way; the returns go with the next
    recording sent (or at ``close``), none dropped but past ``KEPT_ROWS``, and again to a server
    that lost them.
    """

    def __init__(self, target: RunTarget, kept: int = DEFAULT_KEPT) -> None:
        self._target = target
        self._keys = StateKeys(target.experiment)
        self._events = ExperimentKeys(target.experiment).events
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
        #: sealed returns waiting (added from another thread), and sent
        self._rows: List[bytes] = []
        self._rows_lock = threading.Lock()
        self._rows_held: "collections.deque[bytes]" = collections.deque(maxlen=KEPT_ROWS)
        #: the previous run's index and returns were removed from the server
        self._run_begun = False
        #: returns sent
        self.returns_sent = 0
        self._thread = threading.Thread(target=self._run_thread,
                                        name="async_plotter-redis-states",
                                        daemon=True)
        self._thread.start()

    def add(self, path: str, update: int, iteration: Optional[int]) -> None:
        """Publish the recording at ``path`` (update ``update``) soon."""
        self.failed += put_dropping_oldest(self._queue, (path, update, iteration), _QUEUE_LENGTH)

    def add_report(self, report: Mapping[str, Any]) -> None:
        """A history report (``worker/history.py``): its recording, where one was written, and
        its return."""
        if report.get("path"):
            self.add(report["path"], report["update"], report.get("iteration"))
        self.add_return(ReturnRow.from_report(report))

    def add_return(self, row: ReturnRow) -> None:
        """Publish ``row`` (a history report's return) with the next recording, or at close."""
        sealed = seal_row(self._target, row)
        with self._rows_lock:
            self._rows.append(sealed)
            del self._rows[:-KEPT_ROWS]

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
                        break
                    waiting.append(item)
                try:
                    self._send(client, *waiting[0])
                except connection_errors() as error:
                    self._warn(_recording_named(waiting[0][0]), error)
                    # Newer ones join the wait meanwhile (the oldest go past the bound).
                    stopping = self._wait_for_server(backoff, waiting) or stopping
                    continue
                except Exception as error:  # noqa: BLE001 - the file, a refusal, a full server
                    self.failed += 1
                    self._warn(_recording_named(waiting[0][0]), error)
                else:
                    self.sent += 1
                    backoff.reset()
                waiting.popleft()
            if not waiting:  # closed in time
                self._send_last_returns(client)
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

    def _warn(self, what: str, error: BaseException) -> None:
        log = logger.debug if self._warned else logger.warning
        self._warned = True
        kind = type(error).__name__
        log("publishing experiment %r: %s did not reach Redis (%s: %s)", self._target.experiment,
            what, kind, error)

    def _put(self, pipe: Any, recording: Any, update: int, iteration: Optional[int]) -> None:
        """Queue on ``pipe`` the commands that store one recording and index it."""
        target, keys = self._target, self._keys
        member = _member(target.run[0], update)
        pipe.set(keys.recording(member),
                 seal(target.secret, b"recording", target.experiment, target.run, update, iteration,
                      compact_bytes(recording)),
                 px=self._ttl_ms)
        pipe.zadd(keys.index, {member: index_score(update, iteration)})
        pipe.pexpire(keys.index, self._ttl_ms)

    def _begin_run(self, client: Any) -> None:
        """Before the run's first value: a new run's history starts empty (the previous run's
        recordings go with their keys' expiry); a resumed run's keeps what the runs before it
        recorded up to its snapshot's iteration (``history_chain.py``)."""
        if self._run_begun:
            return
        keys, after = self._keys, self._target.resumes_after
        if after is None:
            client.delete(keys.index, keys.returns)
        else:
            try:
                trim(client, keys.index, keys.recording, keys.returns, after)
            except AccessDenied as error:
                # A role from before resumed runs kept their history: as then, the curve goes
                # on (the returns stay) and the recordings start again.
                logger.warning(
                    "publishing experiment %r: %s, so viewers' history of this resumed run "
                    "starts at iteration %d (give the trainer role ZRANGEBYSCORE, ZREM, XRANGE "
                    "and XDEL: %s)", self._target.experiment, error, after, DOCS)
                client.delete(keys.index)
        self._run_begun = True

    def _take_rows(self, pipe: Any) -> List[bytes]:
        """Queue on ``pipe`` the returns waiting; those taken, to be put back if the pipeline
        fails."""
        with self._rows_lock:
            rows, self._rows = self._rows, []
        self._put_rows(pipe, rows)
        return rows

    def _put_rows(self, pipe: Any, rows: List[bytes]) -> None:
        # A stream, as the metrics: a viewer reads on from the last entry it has, each entry's
        # size checked on the server (``link.bounded_xrange``). A policy recorded again (a
        # restarted worker) has a second row, as in returns.csv.
        for sealed in rows:
            pipe.xadd(self._keys.returns, {"v": sealed}, maxlen=KEPT_ROWS, approximate=True)
        if rows:
            pipe.pexpire(self._keys.returns, self._ttl_ms)
            # A watching viewer reads them at once (its live page's curve).
            pipe.publish(self._events, f"returns {run_hex(self._target.run[0])}")

    def _rows_sent(self, rows: List[bytes], sent: bool) -> None:
        if sent:
            self._rows_held.extend(rows)
            self.returns_sent += len(rows)
            return
        with self._rows_lock:  # the next pipeline takes them again
            self._rows = (rows + self._rows)[-KEPT_ROWS:]

    def _send_last_returns(self, client: Any) -> None:
        """At close: the returns that no recording took (an env whose recording failed)."""
        if not self._rows:
            return
        rows: List[bytes] = []
        try:
            self._begin_run(client)
            pipe = client.pipeline(transaction=False)
            rows = self._take_rows(pipe)
            pipe.execute()
        except Exception as error:  # noqa: BLE001 - the server away, a refusal: warned once
            self._rows_sent(rows, False)
            self._warn(f"the returns of {len(rows) or len(self._rows)} recording(s)", error)
        else:
            self._rows_sent(rows, True)

    def _send_again(self, client: Any) -> None:
        """Send the recordings the server held again, those whose files are still here, and
        every return sent before."""
        pipe = client.pipeline(transaction=False)
        self._put_rows(pipe, list(self._rows_held))
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
        self._begin_run(client)
        pipe = client.pipeline(transaction=False)
        rows = self._take_rows(pipe)
        self._put(pipe, recording, update, iteration)
        if self._model_sent:
            pipe.pexpire(keys.model, self._ttl_ms)
        else:
            pipe.set(keys.model, model, px=self._ttl_ms)
        pipe.zcard(keys.index)
        try:
            *_, model_kept, count = pipe.execute()
        except BaseException:
            self._rows_sent(rows, False)
            raise
        self._rows_sent(rows, True)
        if not model_kept:
            # A server that lost the model (restarted empty) lost the recordings and returns
            # too: they go again (the returns just sent a second time: the later row of an
            # update is its), then the model (last: should this fail, the next send sees it
            # missing).
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
    only (a new run's first recording removes the files of the one before), with those of the
    runs a resumed run goes on from up to its resume (``history_chain.py``);
    ``on_written(path)`` after each. Every recording's return goes to the folder's ``returns.csv``
    (``render/history_returns.py``), those Redis no longer keeps the recording of too. What
    fails its check is logged once and skipped; the fetcher goes on."""

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
        #: the members handled, each with the file it was written to (None: not written)
        self._done: Dict[str, Optional[str]] = {}
        #: the files written of the current run (and of those it resumes), each with the start
        #: of the run it is of, its update and its iteration
        self._paths: Dict[str, Tuple[int, int, Optional[int]]] = {}
        self._rejected: Set[str] = set()
        #: members of a run newer than the model read (fetched once a new model is read)
        self._later: Set[str] = set()
        self._oversized = 0  # names in the index too long to be ours, at the last poll
        self._index_unbounded = False  # the role may not run the script that bounds them
        self._stop = threading.Event()
        self._returns = ReturnsReader(url, experiment, verifier,
                                      lambda reason: self._refuse("return", reason))
        #: the current run's returns.csv
        self._returns_file: Optional[ReturnsFile] = None
        #: what the server refused, in words naming the fix: the fetcher has stopped
        self.refusal: Optional[str] = None
        #: files written, returns written, and values refused
        self.written = 0
        self.returns_written = 0
        self.refused = 0
        #: set once the first file is written
        self.first_written = threading.Event()
        self._thread = threading.Thread(target=self._run_thread,
                                        name="async_plotter-redis-fetch",
                                        daemon=True)
        self._thread.start()

    def wait_for_first(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the first file; whether it is written. Returns at once
        (False) once the server refused this viewer's settings (``refusal``: the fetch has
        stopped and said why), which no wait would change."""
        deadline = time.monotonic() + timeout
        while not self.first_written.wait(min(max(deadline - time.monotonic(), 0.0), 0.25)):
            if self.refusal is not None or time.monotonic() >= deadline:
                return False
        return True

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run_thread(self) -> None:
        import redis

        client = connect(self._url)
        outage = OutageLog(f"fetching the history of experiment {self._experiment!r}", self._url,
                           "the viewer role")
        try:
            while not self._stop.is_set():
                try:
                    self.fetch_once(client)
                except (*connection_errors(), AccessDenied) as error:
                    problem = outage.refusal(error)
                    if problem is not None:
                        # Settings someone must change (the role, the password, the
                        # certificate): a viewer stops on them, as ``view`` does.
                        self.refusal = problem
                        logger.error("fetching the history of experiment %r: %s; it stops",
                                     self._experiment, problem)
                        return
                    outage.failed(error, "trying again every second")
                except redis.exceptions.ResponseError as error:
                    self._refuse("index", error)  # a key holding something else
                else:
                    outage.recovered()
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
            self._model = model
            self._begin_run(model.iteration)
        prefix = run_hex(model.run_id) + ":"
        after = model.iteration
        written = 0
        # The newest DEFAULT_KEPT only, each a short name: a forged index may be of any length,
        # and its members of any size.
        members = self._index_names(client)
        oversized = members.count(None)
        if oversized > self._oversized:
            self._refuse("recordings' index",
                         f"{oversized} of its names are over {MAX_MEMBER_BYTES} bytes")
        self._oversized = oversized
        for raw in members:
            if raw is None:
                continue
            member = raw.decode("ascii", "replace")
            if member in self._done or member in self._rejected or member in self._later:
                continue
            if not member.startswith(prefix) and after is None:
                continue  # the run before's, going with its keys' expiry
            try:
                value = _bounded_get(client, self._keys.recording(member), MAX_RECORDING_BYTES,
                                     "recording")
                if value is None:
                    continue  # gone since the index was read (the cap, or expiry)
                path = self._write(member, value)
            except _OfANewerRun:
                self._later.add(member)  # a run whose model is not read yet: fetched once it is
                continue
            except (PayloadRejected, RecordingError) as error:
                self._rejected.add(member)
                self._refuse(f"recording {member}", error)
                continue
            self._done[member] = path
            written += path is not None
        self.written += written
        if written:
            self.first_written.set()
        self._fetch_returns(client, model)
        return written

    def _index_names(self, client: Any) -> List[Optional[bytes]]:
        """The newest ``DEFAULT_KEPT`` names in the recordings' index, those too long to be ours
        as None. Read through a script that leaves the long ones on the server; a role that may
        not run scripts reads them whole (one warning says so)."""
        if not self._index_unbounded:
            try:
                return bounded_zrange(client, self._keys.index, -DEFAULT_KEPT, -1, MAX_MEMBER_BYTES)
            except AccessDenied as error:
                self._index_unbounded = True
                logger.warning(
                    "experiment %r: %s, so the recordings' index is read without a bound on its "
                    "names' size (the viewer role has +eval_ro)", self._experiment, error)
        return list(client.zrange(self._keys.index, -DEFAULT_KEPT, -1))

    def _fetch_returns(self, client: Any, model: Sealed) -> None:
        """Append the returns published since the last poll to the folder's ``returns.csv``:
        the run's, and those of the runs it resumes that it keeps."""
        for (row_run, started), row in self._returns.read(client):
            if row_run != model.run_id and not (started < model.run_started_ns
                                                and earlier_runs_keep(row.update, row.iteration,
                                                                      model.iteration)):
                continue  # the run before's not yet removed, or a newer one's (read again then)
            if self._returns_file is None:
                os.makedirs(self._folder, exist_ok=True)
                self._returns_file = ReturnsFile(self._folder)
            self._returns_file.append(row.as_entry(self._folder))
            self.returns_written += 1

    def _write(self, member: str, value: bytes) -> Optional[str]:
        """Write the recording ``value`` (at ``member``) holds; its path, or None where it is
        not the run's: one of an earlier run that the run does not keep, or whose policy a
        later run recorded again. ``_OfANewerRun`` for a run after the model's."""
        sealed = open_sealed(value, self._verifier, b"recording", self._experiment)
        if not member.startswith(run_hex(sealed.run_id) + ":"):
            raise PayloadRejected("the recording is of another run than its name says")
        model = self._model
        if sealed.run_id != model.run_id:
            if sealed.run_started_ns > model.run_started_ns:
                raise _OfANewerRun()
            if not earlier_runs_keep(sealed.number, sealed.iteration, model.iteration):
                return None
        path = os.path.join(self._folder, history_name(sealed.number, sealed.iteration))
        held = self._paths.get(path)
        if held is not None and held[0] > sealed.run_started_ns:
            return None  # a later run recorded that policy again: its recording is the one
        recording = recording_from_compact(sealed.payload, f"update {sealed.number}'s recording",
                                           self._mjb)
        os.makedirs(self._folder, exist_ok=True)
        write_recording(path, recording)
        self._paths[path] = (sealed.run_started_ns, sealed.number, sealed.iteration)
        if self._on_written is not None:
            self._on_written(path)
        return path

    def _begin_run(self, after: Optional[int]) -> None:
        """A new run's model: remove the files of the runs before (a folder holds one run, as a
        history shows one), but those a run resumed after iteration ``after`` keeps, and write
        ``returns.csv`` again from the stream's first row (the stream holds the resumed runs'
        rows that count, ``history_chain.trim``: also where this viewer missed a run between)."""
        kept = {
            path: (started, update, iteration)
            for path, (started, update, iteration) in self._paths.items()
            if earlier_runs_keep(update, iteration, after)
        }
        for path in set(self._paths) - set(kept):
            _remove_quietly(path)
        self._paths, self._later = kept, set()
        self._done = {member: path for member, path in self._done.items() if path in kept}
        if self._returns_file is not None:
            _remove_quietly(self._returns_file.path)
        self._returns_file = None
        self._returns.restart(forget_read=True)

    def _refuse(self, what: str, error: Union[Exception, str]) -> None:
        self.refused += 1
        log = logger.warning if self.refused == 1 else logger.debug
        log("experiment %r: the %s was refused: %s", self._experiment, what, error)


class _OfANewerRun(Exception):
    """A recording of a run newer than the model read: it is fetched once that run's model is
    read."""


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
