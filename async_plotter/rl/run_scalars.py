"""A run's TensorBoard scalars: ``progress.csv``'s numeric columns and the history's returns, in
one event file of the run folder, through the faults of a long run.

Scalars that cannot be written (a full device) wait in order and go with the next ones; an event
file removed with its folder is followed by a new one holding everything again, from the rows
and returns the run keeps in memory."""
import numbers
from typing import Any, Dict, List, Tuple

from async_plotter.learning_curve import SHOWN_RETURN
from async_plotter.render.history import HISTORY_RETURN_TAG
from async_plotter.rl.kept_writes import KeptWrite
from async_plotter.rl.shown_returns import SHOWN_ITERATION

#: TensorBoard tags of progress.csv's columns: ``progress/AverageReturn``, ... (one group of charts)
SCALAR_PREFIX = "progress/"
#: columns not written as ``progress/`` scalars: a row's one history return, written at the row's
#: step and replaced in the last row at close, would draw a lagged, partial copy of
#: ``history/return`` (every recording once, at its policy's iteration) and put two values at
#: the last step
NOT_SCALARS = frozenset({SHOWN_RETURN, SHOWN_ITERATION})

#: one event: its step and ``{tag: value}``
Scalars = Tuple[int, Dict[str, float]]


class RunScalars:
    """The scalars of the run in ``log_dir``, whose ``rows`` and history returns (``shown``:
    ``{iteration: return}``) are the recorder's own, read again after a removal."""

    def __init__(self, log_dir: str, rows: List[Dict[str, Any]], shown: Dict[float, float]) -> None:
        self.log_dir = log_dir
        self._rows = rows
        self._shown = shown
        self._writer: Any = None  # the SummaryWriter, opened with the first scalars
        #: scalars not yet in the event file (a full device), oldest first
        self._pending: List[Scalars] = []
        self._writes = KeptWrite(
            "the TensorBoard scalars",
            "training goes on, and they are written with the next row (progress.csv has them)")

    def add_row(self, row: Dict[str, Any], index: int) -> None:
        """Row ``index``'s numeric columns, at its iteration."""
        self._add([row_scalars(row, index)])

    def add_returns(self, points: Dict[float, float]) -> None:
        """History recordings' returns, at their policies' iterations."""
        self._add(returns_scalars(points))

    def close(self) -> None:
        """Write what waits, a last time, and close the file."""
        if self._pending:
            self._writes.attempt(self._write_pending, last=True)
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def _add(self, events: List[Scalars]) -> None:
        self._pending.extend((step, scalars) for step, scalars in events if scalars)
        if self._pending:
            self._writes.attempt(self._write_pending)

    def _write_pending(self) -> None:
        # The trainer may have TensorFlow loaded anyway; this writer does not need it, and a
        # run without the tensorboard package still gets its event files.
        from async_plotter.tensorboard.writer import SummaryWriter

        if self._writer is None:
            self._writer = SummaryWriter(self.log_dir)
        elif self._writer.reopen_if_gone():
            # Removed with its folder: what it held comes again from memory.
            rows = [row_scalars(row, index) for index, row in enumerate(self._rows)]
            self._pending = [event for event in rows if event[1]] + returns_scalars(self._shown)
        while self._pending:
            step, scalars = self._pending[0]
            self._writer.add_scalars(step, scalars)
            del self._pending[0]


def row_scalars(row: Dict[str, Any], index: int) -> Scalars:
    """A row's TensorBoard step (its ``Iteration``, else its ``index``) and scalars: every
    numeric column but ``NOT_SCALARS``, as ``progress/<column>``."""
    step = row.get("Iteration", index)
    scalars = {
        SCALAR_PREFIX + key: value
        for key, value in row.items()
        if key != "Iteration" and key not in NOT_SCALARS and isinstance(value, numbers.Real)
    }
    return int(step), scalars


def returns_scalars(points: Dict[float, float]) -> List[Scalars]:
    """The history recordings' returns as ``history/return`` at their policies' iterations."""
    return [(int(step), {HISTORY_RETURN_TAG: value}) for step, value in sorted(points.items())]
