"""Where a worker process is, asked from the trainer: every thread's stack, which the process
writes itself on ``SIGUSR1``.

A hung or spinning worker is restarted (``supervision/supervisor.py``), and the user is owed
where it was stuck: their policy's ``get_action``, their env's ``step``, a callback. The child
registers ``faulthandler`` for the signal; its handler runs in C, so it answers while a thread
spins holding the GIL or sleeps in a system call. It writes into an anonymous file (``memfd``)
that the parent reads through ``/proc/<pid>/fd/<n>`` (the child reports ``n``): nothing lands
on disk, and the file goes with the process. Linux only; elsewhere nobody is asked.
"""
import faulthandler
import os
import re
import signal
import time
from typing import Any, Iterable, Optional, Tuple

#: the signal that asks a child for its stacks
ASK = signal.SIGUSR1
#: how long a child has to answer (a stopped one never does)
_ANSWER_SECONDS = 1.0
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]*)", line (?P<line>\d+) in (?P<name>.*)$')


def answer_when_asked() -> Optional[int]:
    """In a worker process, first thing: from now on ``ASK`` writes every thread's stack into
    an anonymous file, whose descriptor this returns (for the parent: ``ask``); None where
    there is no such file (not Linux)."""
    try:
        descriptor = os.memfd_create("async_plotter_stacks", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None
    faulthandler.register(ASK, file=descriptor, all_threads=True)
    return descriptor


def ask(pid: int, descriptor: int) -> Optional[str]:
    """The stacks process ``pid`` writes when asked, read from its ``descriptor``; None where it
    does not answer within a second (stopped, gone, or not reading signals)."""
    path = f"/proc/{pid}/fd/{descriptor}"
    try:
        os.kill(pid, ASK)
    except OSError:
        return None
    deadline = time.monotonic() + _ANSWER_SECONDS
    text, stable_since = "", time.monotonic()
    while time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8", errors="replace") as written:
                now = written.read()
        except OSError:
            return None
        if now != text:
            text, stable_since = now, time.monotonic()
        elif text and time.monotonic() - stable_since > 0.05:
            return text  # written whole: a handler writes at once, then stops
        time.sleep(0.01)
    return text or None


def innermost(stacks: str, frames: int = 3) -> str:
    """The main thread's innermost ``frames`` from ``ask``'s text, on one line:
    ``policies.py:95 get_action <- adapters.py:149 act <- recipe.py:126 act``. The main thread
    is the one that started first: faulthandler lists it last."""
    blocks = [block for block in stacks.split("\n\n") if block.strip()]
    if not blocks:
        return ""
    found = [_FRAME.match(line) for line in blocks[-1].splitlines()[1:]]
    return frames_line(
        (match["path"], match["line"], match["name"]) for match in found[:frames] if match)


def frames_line(frames: Iterable[Tuple[str, Any, str]]) -> str:
    """``(path, line, function)`` frames, innermost first, as one line:
    ``policies.py:95 get_action <- adapters.py:149 act``."""
    return " <- ".join(f"{os.path.basename(path)}:{line} {name}" for path, line, name in frames)
