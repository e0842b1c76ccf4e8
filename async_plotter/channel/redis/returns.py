"""Every history recording's return over Redis: the rows of the trainer's ``returns.csv``
(``render/history_returns.py``), which a viewer writes into its own folder's, so its curve has
every policy the run recorded, not only the newest recordings Redis keeps.

A row is a sealed value of kind ``b"return"`` (``sealed.py``): the header names the run, the
update and the iteration; the payload is ``_ROW``. Rows are small (113 bytes) and an experiment
keeps about the newest ``KEPT_ROWS`` in one stream (``StateKeys.returns``), expiring with its
other keys.
"""
import dataclasses
import math
import os
import struct
from typing import Any, Dict, Mapping, Optional, Tuple

from async_plotter.channel.redis.sealed import HEADER_BYTES, RunTarget, open_sealed, seal
from async_plotter.channel.redis.signing import TAG_BYTES, PayloadRejected, Verifier
from async_plotter.render.videos import history_name

#: rows an experiment keeps in Redis (about 2.3 MB of them); the oldest go first
KEPT_ROWS = 20000
KIND = b"return"
# return (NaN: none), length, time (s since the epoch), CPU seconds (NaN: none), whether the
# trainer wrote a recording of it
_ROW = struct.Struct("<dqdd?")
#: the most a viewer downloads of one stream entry: a sealed row and its field's name
ROW_ENTRY_BYTES = HEADER_BYTES + _ROW.size + TAG_BYTES + 8


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


def open_row(value: bytes, verifier: Verifier, experiment: str) -> Tuple[int, ReturnRow]:
    """``(run id, row)`` of a sealed row; ``PayloadRejected`` naming what is wrong."""
    sealed = open_sealed(value, verifier, KIND, experiment)
    if len(sealed.payload) != _ROW.size:
        raise PayloadRejected(f"the return of update {sealed.number} is "
                              f"{len(sealed.payload)} bytes, not {_ROW.size}")
    episode_return, length, moment, cpu_seconds, recorded = _ROW.unpack(sealed.payload)
    if sealed.number < 0 or length < 0:
        raise PayloadRejected(f"the return of update {sealed.number} has a negative number")
    return sealed.run_id, ReturnRow(sealed.number, sealed.iteration, _none_if_nan(episode_return),
                                    length, moment, _none_if_nan(cpu_seconds), recorded)


def _or_nan(value: Optional[float]) -> float:
    return math.nan if value is None else float(value)


def _none_if_nan(value: float) -> Optional[float]:
    return None if math.isnan(value) else value
