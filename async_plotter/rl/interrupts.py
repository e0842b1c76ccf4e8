"""One Ctrl-C ends a training run, even when Python loses it.

Python raises a Ctrl-C's ``KeyboardInterrupt`` at whatever bytecode the main thread runs next. When
that is a ``__del__`` or a weakref callback (TensorFlow runs many: a ``WeakKeyDictionary`` cleans up
after every tensor), CPython prints "Exception ignored in ..." and goes on: the run kept training
after a Ctrl-C (seen in ``tests/test_interrupts.py`` during TRPO's optimisation). While
``train()`` runs, ``ctrl_c_kept()`` notes every SIGINT before raising it as usual, and
``raise_if_lost()``, called between the loop's stages and in its long loops, raises a noted one
that never arrived.
"""
import contextlib
import signal
import threading
from typing import Any, Iterator

#: SIGINTs noted and not yet seen arriving as a ``KeyboardInterrupt`` in ``train()``
_noted = []


def _note_and_raise(signum: int, frame: Any) -> None:
    _noted.append(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def ctrl_c_kept() -> Iterator[None]:
    """While inside, a SIGINT is noted before it is raised. Only where Python's own handler is in
    place (the main thread, no handler of the user's): anything else is left as it is."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    signal.signal(signal.SIGINT, _note_and_raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _noted.clear()


def arrived() -> None:
    """A ``KeyboardInterrupt`` reached ``train()``: nothing was lost."""
    _noted.clear()


def raise_if_lost() -> None:
    """Raise the ``KeyboardInterrupt`` of a Ctrl-C that Python swallowed since it was noted."""
    if _noted:
        _noted.clear()
        raise KeyboardInterrupt
