"""Console and file logging for training runs, through the standard ``logging`` module.

The library only emits records on loggers named ``async_plotter...``; it prints nothing itself. So
that a plain training script still shows its progress table, :func:`console_logging` attaches a
console handler for the duration of a run when the application has not configured logging.
"""
import contextlib
import logging
import math
import os
import sys
from typing import Any, Iterator, Mapping, Optional

from async_plotter.appends import identity
from async_plotter.words import amount

logger = logging.getLogger("async_plotter.rl")
_LIBRARY_LOGGER = "async_plotter"
_MARK = "_async_plotter_handler"


@contextlib.contextmanager
def console_logging(debug_log: Optional[str] = None) -> Iterator[None]:
    """Show the library's INFO records on stdout unless logging is configured; tee to a file.

    * No handler anywhere on the ``async_plotter`` logger's chain (a plain script): attach a
      stdout handler at INFO, and record DEBUG into ``debug_log``.
    * Logging configured by the application: leave its handlers alone (so lines are not printed
      twice); unless it set a level on ``async_plotter``, lower that logger to INFO so progress is
      shown; still write ``debug_log``.

    Everything is undone on exit.
    """
    library = logging.getLogger(_LIBRARY_LOGGER)
    saved_level = library.level
    added = []
    if not library.hasHandlers():
        console = logging.StreamHandler(sys.stdout)
        console.setLevel(logging.INFO)
        console.setFormatter(logging.Formatter("%(message)s"))
        setattr(console, _MARK, True)
        added.append(console)
        # Nobody else receives these records, so DEBUG ones cost nothing but reach debug.log.
        library.setLevel(logging.DEBUG if debug_log else logging.INFO)
    elif library.level == logging.NOTSET and library.getEffectiveLevel() > logging.INFO:
        # The application configured logging but said nothing about this library: show progress.
        # A level it set on "async_plotter" itself is respected.
        library.setLevel(logging.INFO)
    if debug_log is not None:
        os.makedirs(os.path.dirname(os.path.abspath(debug_log)), exist_ok=True)
        file_handler = RunLogFile(debug_log)
        file_handler.setLevel(logging.DEBUG)
        file_handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s"))
        setattr(file_handler, _MARK, True)
        added.append(file_handler)
    for handler in added:
        library.addHandler(handler)
    try:
        yield
    finally:
        lost = [h for h in added if isinstance(h, RunLogFile) and h.lost]
        for handler in lost:
            library.warning("%s: %s could not be written (%s)", handler.baseFilename,
                            amount(handler.lost, "line", "lines"), handler.error)
        for handler in added:
            library.removeHandler(handler)
            handler.close()
        library.setLevel(saved_level)


class RunLogFile(logging.FileHandler):
    """``debug.log`` through the faults of a long run. A line that cannot be written (a full
    device, the folder removed) is counted in ``lost``, not printed to stderr with a traceback
    as ``logging`` does for each; the file is opened again once it was removed and its folder is
    back (the run makes it again); closing on a full device does not raise."""

    def __init__(self, path: str) -> None:
        super().__init__(path, encoding="utf-8")
        #: lines not written, and the last error
        self.lost = 0
        self.error: Optional[BaseException] = None
        self._identity = identity(self.baseFilename)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.stream is not None and identity(self.baseFilename) != self._identity:
                self.stream.close()  # removed (or replaced): opened again below
                self.stream = None
            if self.stream is None:
                self.stream = self._open()
                self._identity = identity(self.baseFilename)
            super().emit(record)  # logging.StreamHandler sends its own failures to handleError
        except Exception:  # as logging.Handler.emit does: a log line never raises
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        self.lost += 1
        self.error = sys.exc_info()[1]

    def close(self) -> None:
        try:
            super().close()
        except OSError as error:  # the last lines' flush, on a full device
            self.error = error


def format_value(value: Any) -> str:
    """Numbers with 6 significant digits, nothing (``ShownReturn`` in an iteration that finished
    no recording; blank in ``progress.csv``) as ``-``, everything else as ``str``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def format_table(row: Mapping[str, Any]) -> str:
    """Two aligned columns, one line per key (rllab's tabular layout)."""
    width = max((len(key) for key in row), default=0)
    rule = "-" * (width + 16)
    lines = [rule] + [f"{key:<{width}}  {format_value(value)}" for key, value in row.items()]
    return "\n".join(lines + [rule])


def format_duration(seconds: float) -> str:
    """``"42s"``, ``"3m05s"`` or ``"1h02m"``."""
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
