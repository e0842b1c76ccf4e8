"""Whether a worker thread has stopped getting anywhere: the history thread, watched from the
rollout process's main loop.

The supervisor finds a hung *process* from its reports and its CPU time (``supervision/
supervisor.py``). A thread inside a live process escapes that: its process goes on reporting,
and a thread that spins still burns CPU. So the thread marks its progress (every env step, every
file written) and the main loop asks, about once a second, whether the mark has stood still for
``limit`` seconds:

- of the thread's own CPU time: it spins (a loop that never ends);
- or of the clock, in which it used next to no CPU and is asleep (``S``, or ``D`` in the
  kernel, in ``/proc``) when looked at: it waits for something that never comes (a lock, a
  pipe, a lost file system).

A thread starved with its whole process is neither: behind a saturated trainer
(``SCHED_IDLE``) it is runnable (``R``), not asleep, and under the budget's ``SIGSTOP`` it is
stopped (``T``) and nobody looks.
"""
import sys
import threading
import time
import traceback
from typing import Optional

from async_plotter.stacks import frames_line

#: a waiting thread uses at most this many CPU-seconds (waking on a timeout, a signal)
_WAITING_CPU_SECONDS = 0.1
#: the states of ``/proc/.../stat`` of a thread asleep: waiting (``S``), in the kernel (``D``)
_ASLEEP = ("S", "D")
#: how often ``stalled`` looks (the clocks are system calls; it is asked every env step)
_LOOK_EVERY_SECONDS = 1.0


class StallWatch:
    """Progress marks of one thread (``mark``, ``idle``, from that thread) and the question
    whether they stand still (``stalled``, from another).

    Args:
        limit: seconds without a mark after which the thread counts as hung (the Plotter's
            ``hang_timeout``).
    """

    def __init__(self, limit: float) -> None:
        self.limit = float(limit)
        self._marks = 0
        self._busy = False
        self.doing = ""  # what the thread does, for the message: "iteration 3's recording"
        self._seen = -1  # the mark when last looked at
        self._since: Optional[_Clocks] = None  # the clocks then
        self._next_look = 0.0

    # ------------------------------------------------------------------- from the watched thread

    def mark(self, doing: Optional[str] = None) -> None:
        """The thread got somewhere (one step), and is busy until ``idle``."""
        if doing is not None:
            self.doing = doing
        self._busy = True
        self._marks += 1  # one writer: this thread; the reader only compares

    def idle(self) -> None:
        """The thread waits for work: no progress is expected."""
        self._busy = False
        self._marks += 1

    # ---------------------------------------------------------------------- from another thread

    def stalled(self, thread: threading.Thread) -> Optional[str]:
        """Why ``thread`` counts as hung (where it is, and how long it has been there), or None.
        Cheap between looks (one clock read)."""
        now = time.monotonic()
        if now < self._next_look or thread.ident is None or not thread.is_alive():
            return None
        self._next_look = now + _LOOK_EVERY_SECONDS
        clocks = _Clocks.read(thread.ident)
        marks = self._marks
        if marks != self._seen or not self._busy or clocks is None or self._since is None:
            self._seen, self._since = marks, clocks
            return None
        own = clocks.thread_cpu - self._since.thread_cpu
        wall = clocks.wall - self._since.wall
        if own >= self.limit:
            how = f"spinning: {own:.1f} CPU-s"
        elif (wall >= self.limit and own <= _WAITING_CPU_SECONDS
              and _state(thread.native_id) in _ASLEEP):
            how = f"waiting: {wall:.0f} s asleep, {own:.2f} CPU-s"
        else:
            return None
        return (f"{self.doing or 'its work'} made no progress ({how}) at "
                f"{_where(thread.ident)}")


class _Clocks:
    """A thread's CPU time and the clock, read together."""

    def __init__(self, thread_cpu: float, wall: float) -> None:
        self.thread_cpu, self.wall = thread_cpu, wall

    @classmethod
    def read(cls, ident: int) -> Optional["_Clocks"]:
        try:
            thread_cpu = time.clock_gettime(time.pthread_getcpuclockid(ident))
        except (OSError, AttributeError):  # the thread just ended; a platform without it
            return None
        return cls(thread_cpu, time.monotonic())


def _state(native_id: Optional[int]) -> str:
    """The kernel's one-letter state of thread ``native_id`` of this process (``R``, ``S``,
    ``D``, ``T`` ...); ``?`` where it cannot be read."""
    try:
        with open(f"/proc/self/task/{native_id}/stat", "rb") as stat:
            # "tid (name) S ...": the name may hold spaces and parentheses
            return stat.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return "?"


def _where(ident: int) -> str:
    """The innermost frames of thread ``ident``: ``history.py:170 _record <- policies.py:95
    get_action``."""
    frame = sys._current_frames().get(ident)  # noqa: SLF001 - the documented way to look
    if frame is None:
        return "an unknown place"
    frames = traceback.extract_stack(frame)[-3:]
    return frames_line(
        (summary.filename, summary.lineno, summary.name) for summary in reversed(frames))
