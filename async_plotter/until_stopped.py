"""Commands that run until Ctrl-C or SIGTERM (``replay``, ``view``, ``serve``) and stop once,
whenever the signal comes.

The signal is noted (``StopRequest``), never raised: Python raises a Ctrl-C's
``KeyboardInterrupt`` at whatever bytecode the main thread runs next, and while a command starts
(MuJoCo, viser, trimesh, aiohttp) that lands inside libraries. Measured on ``replay
--video-dir`` under OSMesa, 30 Ctrl-Cs in its first seconds: a finalizer printed and lost it and
the command served for ever (2); trimesh's import guard turned it into a ``TypeError`` (exit 1,
3); once the command ended by SIGINT's status (-2) after stopping cleanly, as CPython does
when a ``KeyboardInterrupt`` left code that C ran through ``PyRun_*``. Noted, the signal
stops the command where it looks: between the steps of its start and while it waits, which it
does in short turns (a signal that another thread received never wakes a main thread blocked
on a lock).
"""
import contextlib
import faulthandler
import logging
import signal
import threading
import time
from typing import Any, Callable, Iterator, Optional

logger = logging.getLogger(__name__)

# Seconds between two turns of a waiting main thread: each runs the handler of a signal that
# another thread received.
_TURN_SECONDS = 0.25

#: Seconds a command's stop may take (its bounded shutdown; the longest part is ``replay
#: --video-dir`` finishing its video, 30 s), and then the interpreter's exit, before the
#: command is ended anyway, with exit code 1 and every thread's stack on stderr: stopping must
#: not hang whatever a library's thread does, and what held it is then said.
STOP_DEADLINE_SECONDS = 60.0
EXIT_DEADLINE_SECONDS = 30.0


def end_by_deadline(seconds: float) -> None:
    """End this process in ``seconds`` with exit code 1 and every thread's stack on stderr
    (``faulthandler``'s watchdog, which needs neither the GIL nor the main thread), unless
    ``cancel_deadline`` comes first. For a process that is ending."""
    faulthandler.dump_traceback_later(seconds, exit=True)


def cancel_deadline() -> None:
    """Cancel ``end_by_deadline``."""
    faulthandler.cancel_dump_traceback_later()


class StopRequest:
    """Whether a Ctrl-C or SIGTERM came."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        """Ask to stop."""
        self._event.set()

    def is_set(self) -> bool:
        """Whether asked to stop."""
        return self._event.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until asked to stop, at most ``timeout`` seconds (None: for as long as it
        takes); whether asked."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._event.is_set():
            left = float("inf") if deadline is None else deadline - time.monotonic()
            if left <= 0:
                break
            self._event.wait(min(_TURN_SECONDS, left))
        return self._event.is_set()


@contextlib.contextmanager
def until_interrupted(stop: Callable[[], None]) -> Iterator[StopRequest]:
    """Run the block, which ends once its ``StopRequest`` is set (by Ctrl-C or SIGTERM: look at
    it, or wait for it), then call ``stop`` with both signals ignored: a second Ctrl-C must not
    cut a bounded shutdown short and orphan worker processes; ``stop`` taking more than
    ``STOP_DEADLINE_SECONDS`` ends the process (``end_by_deadline``). Call from the main
    thread. A SIGINT ignored from the start (a background job's) stays ignored."""
    request = StopRequest()

    def note(signum: int, frame: Any) -> None:
        request.set()

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, note)
    signal.signal(signal.SIGTERM, note)
    try:
        yield request
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if request.is_set():
            logger.info("stopping")
        end_by_deadline(STOP_DEADLINE_SECONDS)
        try:
            stop()
        finally:
            cancel_deadline()
