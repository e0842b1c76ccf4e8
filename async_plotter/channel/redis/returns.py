"""Every history recording's return over Redis: the rows of the trainer's ``returns.csv``
(``render/history_returns.py``), which a viewer writes into its own folder's, so its curve has
every policy the run recorded, not only the newest recordings Redis keeps.

A row is a sealed value of kind ``b"return"`` (``sealed.py``): the header names the run, the
update and the iteration; the payload is ``_ROW``. Rows are small (113 bytes) and an experiment
keeps about the newest ``KEPT_ROWS`` in one stream (``returns_key``), expiring with its other
keys; ``b"returns RUN"`` on its events channel says rows were added. Viewers read it with
``ReturnsReader``: ``states.RecordingFetcher`` into a folder's ``returns.csv``, the ``view``
watcher onto its live page's curve.
"""
import collections
import dataclasses
import logging
import math
import os
import struct
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from async_plotter.channel.redis.link import bounded_xrange, stream_ends_before
from async_plotter.channel.redis.refusals import AccessDenied, role_refusal
from async_plotter.channel.redis.sealed import HEADER_BYTES, RunTarget, open_sealed, seal
from async_plotter.channel.redis.signing import TAG_BYTES, PayloadRejected, Verifier
from async_plotter.channel.redis.wire import KEY_PREFIX
from async_plotter.render.history import HistoryPoint
from async_plotter.render.videos import history_name

logger = logging.getLogger("async_plotter")

#: rows an experiment keeps in Redis (about 2.3 MB of them); the oldest go first
KEPT_ROWS = 20000
KIND = b"return"
# return (NaN: none), length, time (s since the epoch), CPU seconds (NaN: none), whether the
# trainer wrote a recording of it
_ROW = struct.Struct("<dqdd?")
#: the most a viewer downloads of one stream entry: a sealed row and its field's name
ROW_ENTRY_BYTES = HEADER_BYTES + _ROW.size + TAG_BYTES + 8
#: rows a viewer reads at once, and reads in one call of ``ReturnsReader.read`` (a viewer
#: joining a long run catches up over a few)
_ROWS_A_READ = 500
_READS_A_CALL = 10


def returns_key(experiment: str) -> str:
    """The stream of ``experiment``'s returns."""
    return f"{KEY_PREFIX}:{experiment}:returns"


@dataclasses.dataclass(frozen=True)
class ReturnRow:
    """One history recording's outcome, as ``returns.csv`` has it."""

    update: int
    iteration: Optional[int]
    episode_return: Optional[float]
    length: int
    time: float
    cpu_seconds: Optional[float]
    #: a recording file was written (its name follows from the update and the iteration)
    recorded: bool

    @classmethod
    def from_report(cls, payload: Mapping[str, Any]) -> "ReturnRow":
        """The row of a worker's history report (``worker/history.py``)."""
        return cls(int(payload["update"]), payload.get("iteration"), payload.get("episode_return"),
                   int(payload.get("length") or 0), float(payload.get("time") or 0.0),
                   payload.get("cpu_seconds"), bool(payload.get("path")))

    def as_point(self) -> Optional[HistoryPoint]:
        """The row on a curve (``render/history.py``), or None without a finite return."""
        if self.episode_return is None or not math.isfinite(self.episode_return):
            return None
        return HistoryPoint(self.update, self.iteration, self.episode_return, self.length)

    def as_entry(self, folder: str) -> Dict[str, Any]:
        """The row as ``ReturnsFile.append`` takes it, its recording named in ``folder``."""
        path = (os.path.join(folder, history_name(self.update, self.iteration))
                if self.recorded else None)
        return {
            "update": self.update,
            "iteration": self.iteration,
            "return": self.episode_return,
            "length": self.length,
            "path": path,
            "time": self.time,
            "cpu_seconds": self.cpu_seconds,
        }


def seal_row(target: RunTarget, row: ReturnRow) -> bytes:
    """``row`` sealed for ``target``'s run."""
    payload = _ROW.pack(_or_nan(row.episode_return), row.length, row.time, _or_nan(row.cpu_seconds),
                        row.recorded)
    return seal(target.secret, KIND, target.experiment, target.run, row.update, row.iteration,
                payload)


def open_row(value: bytes, verifier: Verifier,
             experiment: str) -> Tuple[Tuple[int, int], ReturnRow]:
    """``((run id, run start in ns), row)`` of a sealed row; ``PayloadRejected`` naming what is
    wrong."""
    sealed = open_sealed(value, verifier, KIND, experiment)
    if len(sealed.payload) != _ROW.size:
        raise PayloadRejected(f"the return of update {sealed.number} is "
                              f"{len(sealed.payload)} bytes, not {_ROW.size}")
    episode_return, length, moment, cpu_seconds, recorded = _ROW.unpack(sealed.payload)
    if sealed.number < 0 or length < 0:
        raise PayloadRejected(f"the return of update {sealed.number} has a negative number")
    return (sealed.run_id, sealed.run_started_ns), ReturnRow(sealed.number, sealed.iteration,
                                                             _none_if_nan(episode_return),
                                                             length, moment,
                                                             _none_if_nan(cpu_seconds), recorded)


def _or_nan(value: Optional[float]) -> float:
    return math.nan if value is None else float(value)


def _none_if_nan(value: float) -> Optional[float]:
    return None if math.isnan(value) else value


class ReturnsReader:
    """Reads an experiment's returns on from the last stream entry read, each entry's size
    checked on the server (``link.bounded_xrange``, as for the metrics), each row verified.

    A row already read (the same sealed value: a server restarted empty is sent every row
    again) is not handed on twice. A row that fails its check goes to ``on_rejected(reason)``.
    A stream that cannot be read (the user's role lacks ``EVAL_RO``, the key holds something
    else) is said once and not read again until ``restart``: the recordings and the metrics do
    not depend on it."""

    def __init__(self, url: str, experiment: str, verifier: Verifier,
                 on_rejected: Callable[[str], None]) -> None:
        self._url = url
        self._experiment = experiment
        self._key = returns_key(experiment)
        self._verifier = verifier
        self._on_rejected = on_rejected
        self._after = "-"
        #: the tags of the newest rows read (a tag covers the whole sealed row)
        self._seen: "collections.OrderedDict[bytes, None]" = collections.OrderedDict()
        #: why the stream is not read, once it could not be
        self.refused: Optional[str] = None

    def restart(self, forget_read: bool = False) -> None:
        """Read from the first row again (a new run's rows, or a server restarted empty);
        ``forget_read``: hand on the rows read before again too."""
        self._after, self.refused = "-", None
        if forget_read:
            self._seen.clear()

    def restart_if_replaced(self, client: Any) -> None:
        """After a reconnect: a stream that ends before the last row read is another (a server
        restarted empty, its rows sent again): read it from the start."""
        if self._after == "-" or self.refused is not None:
            return
        try:
            replaced = stream_ends_before(client, self._key, self._after)
        except Exception:  # noqa: BLE001 - read() meets the same failure and says it
            return
        if replaced:
            self._after = "-"

    def read(self, client: Any) -> List[Tuple[Tuple[int, int], ReturnRow]]:
        """``((run id, run start in ns), row)`` of the rows added since the last call,
        verified, in order."""
        import redis

        rows: List[Tuple[Tuple[int, int], ReturnRow]] = []
        for _ in range(_READS_A_CALL):
            if self.refused is not None:
                break
            start = "-" if self._after == "-" else f"({self._after}"
            try:
                entries = bounded_xrange(client, self._key, start, _ROWS_A_READ, ROW_ENTRY_BYTES)
            except (redis.exceptions.ResponseError, AccessDenied) as error:
                self.refused = role_refusal(error, self._url, "the viewer role") or str(error)
                logger.warning(
                    "experiment %r: the returns it publishes cannot be read, so the curve of "
                    "what was shown goes without them: %s", self._experiment, self.refused)
                break
            for entry_id, fields in entries:
                self._after = entry_id.decode("ascii", "replace")
                try:
                    if b"oversized" in fields or b"v" not in fields:
                        raise PayloadRejected("the entry is not one sealed return (not downloaded)")
                    run, row = open_row(fields[b"v"], self._verifier, self._experiment)
                except PayloadRejected as error:
                    self._on_rejected(str(error))
                    continue
                if self._new(fields[b"v"][-TAG_BYTES:]):
                    rows.append((run, row))
            if len(entries) < _ROWS_A_READ:
                break
        return rows

    def _new(self, tag: bytes) -> bool:
        if tag in self._seen:
            return False
        self._seen[tag] = None
        if len(self._seen) > KEPT_ROWS:
            self._seen.popitem(last=False)
        return True
