"""The run's history over Redis: state recordings a viewer draws with neither TensorFlow nor
the policy's code, and nothing unpickled.

A trainer that publishes (``Plotter(channel=..., video_dir=...)``) records every policy its
worker applies (``worker/history.py``); ``RecordingPublisher`` sends each recording as it is
written, with every recording's return (``returns.py``: those of recordings Redis no longer
keeps too), and ``states_fetch.RecordingFetcher`` keeps a viewer's folder in step with them, its
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
from typing import Any, List, Mapping, Optional, Tuple

from async_plotter.channel.redis.acl import DOCS
from async_plotter.channel.redis.history_chain import index_score, trim
from async_plotter.channel.redis.link import Backoff, close_quietly, connect, connection_errors
from async_plotter.channel.redis.refusals import AccessDenied
from async_plotter.channel.redis.returns import (KEPT_ROWS, ReturnRow, returns_key, seal_row)
from async_plotter.channel.redis.sealed import RunTarget, seal, seal_model
from async_plotter.channel.redis.wire import KEY_PREFIX, ExperimentKeys, run_hex
from async_plotter.render.recording import RecordingError, compact_bytes, read_recording

logger = logging.getLogger("async_plotter")

#: recordings an experiment keeps in Redis; the oldest go first
DEFAULT_KEPT = 200
#: recordings waiting to be sent; more and the oldest waiting is dropped (the file stays)
_QUEUE_LENGTH = 64
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
