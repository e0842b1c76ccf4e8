"""Setting the CPU priority of another process, thread by thread.

Linux keeps the scheduling policy and the nice value per *thread*: a process's threads (TensorFlow's
pools, llvmpipe's render threads) each have their own, inherited from the thread that created
them. So a priority is applied to every thread of the process. Elsewhere (macOS) a priority
belongs to the process, set through its pid.

Two rules of the kernel shape what the plotter can do without privileges: lowering a priority
(raising the nice value, entering ``SCHED_IDLE``) is always allowed for one's own processes;
raising it again needs ``CAP_SYS_NICE`` (root) or an ``RLIMIT_NICE`` high enough for the target
nice value. ``can_raise_priority`` says which case this is.
"""
import contextlib
import os
import resource
import sys
from typing import List

import psutil

#: the static priorities a user may ask for
PRIORITIES = ("idle", "low", "normal")
_LOW_NICE = 10


def tasks(pid: int) -> List[int]:
    """The thread ids of process ``pid`` on Linux, ``[pid]`` elsewhere (empty once it is
    gone)."""
    try:
        process = psutil.Process(pid)
        if not sys.platform.startswith("linux"):
            return [pid]
        return [thread.id for thread in process.threads()]
    except psutil.NoSuchProcess:
        return []
    except psutil.Error:
        return [pid]


def can_raise_priority(nice: int) -> bool:
    """Whether this user may bring a thread back from ``SCHED_IDLE`` or a higher nice value to
    nice ``nice`` (root, or ``RLIMIT_NICE`` of at least ``20 - nice``)."""
    if not hasattr(os, "sched_setscheduler"):
        return False
    if os.geteuid() == 0:
        return True
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return soft == resource.RLIM_INFINITY or soft >= 20 - nice


def set_idle(pid: int) -> None:
    """Every thread of ``pid`` under ``SCHED_IDLE`` (only CPU nobody else wants); nice 19 where
    the OS has no such policy."""
    for tid in tasks(pid):
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError):
            _set_nice(tid, 19)


def set_normal(pid: int, nice: int) -> None:
    """Every thread of ``pid`` under the ordinary policy at ``nice``; needs the right to raise
    priorities (``can_raise_priority``) when they were lowered before."""
    for tid in tasks(pid):
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        _set_nice(tid, nice)


def set_normal_if_allowed(pid: int) -> None:
    """Back to this process's own priority, where the kernel lets this user raise it."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    if can_raise_priority(own):
        set_normal(pid, own)


def set_nice(pid: int, nice: int) -> None:
    """Every thread of ``pid`` at nice ``nice`` (ordinary policy)."""
    for tid in tasks(pid):
        _set_nice(tid, nice)


def apply_static(pid: int, priority: str) -> None:
    """A user's fixed choice: ``"idle"`` (``SCHED_IDLE``), ``"low"`` (nice 10), ``"normal"``."""
    if priority == "idle":
        set_idle(pid)
    elif priority == "low":
        set_nice(pid, max(_LOW_NICE, os.getpriority(os.PRIO_PROCESS, 0)))


def _set_nice(tid: int, nice: int) -> None:
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, nice)
