"""The few lines a user must see, shown by default.

Where the live page is, and what a run showed (``close()``'s summary), are logged at INFO like
everything else, which a script that never configured logging does not show. So each of these
lines is also handed to a small stderr handler, but only when the program configured no logging
that would show it (no handler on ``async_plotter``'s logger or above it): nothing is printed
twice, and a program that configured logging decides for itself. ``Plotter(verbose=0)``
silences the handler, as Stable-Baselines3's ``verbose=0`` does.
"""
import logging
import sys
from typing import Any


class _Stderr(logging.Handler):
    """Writes to ``sys.stderr`` as it is when a line comes (tests and notebooks replace it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging's own rule: never raise into the caller
            self.handleError(record)


_handler = _Stderr()
_handler.setFormatter(logging.Formatter("%(message)s"))


def logging_configured(logger: logging.Logger) -> bool:
    """Whether a record of ``logger`` reaches any handler (one the program set up)."""
    current: Any = logger
    while current is not None:
        if current.handlers:
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def tell(logger: logging.Logger, verbose: int, message: str, *args: Any) -> None:
    """Log ``message % args`` at INFO; with ``verbose``, also show it on stderr when no logging
    is configured that would."""
    logger.info(message, *args)
    if verbose and not logging_configured(logger):
        _handler.handle(
            logger.makeRecord(logger.name, logging.INFO, "(async_plotter)", 0, message, args, None))


def configure_command_logging(level: int) -> None:
    """Logging for the ``async-plotter`` command and the processes it starts: our lines from
    ``level`` on, other libraries' warnings only (their INFO lines are noise there: PyOpenGL's
    "No OpenGL_accelerate module loaded", websockets' "server listening on" for viser's internal
    port, which is not the address to open)."""
    logging.basicConfig(level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("async_plotter").setLevel(level)
