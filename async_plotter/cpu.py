"""The CPU, one way everywhere: the cores this process may use (its affinity: a container or
``taskset`` may allow fewer than the machine has), and the CPU time (user + system, all threads,
from psutil) that a process, a process tree and the machine used."""
import os
from typing import Any, Optional

import psutil


def usable_cores() -> int:
    """The cores this process may run on (a budget's fraction is of these)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def process_cpu_seconds(pid: int) -> Optional[float]:
    """CPU time of one process (none of its children's), or None once it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def tree_cpu_seconds(pid: int) -> Optional[float]:
    """CPU time of a process and of its descendants, alive or exited and reaped (then in their
    parent's children's times: Linux; 0 on macOS and Windows); None once ``pid`` is gone. A
    child exited but not yet reaped counts nowhere for a moment: keep the largest total seen."""
    try:
        process = psutil.Process(pid)
        total = _with_reaped_children(process.cpu_times())
        descendants = process.children(recursive=True)
    except psutil.Error:
        return None
    for child in descendants:
        try:
            total += _with_reaped_children(child.cpu_times())
        except psutil.Error:
            continue  # exited meanwhile: in its parent's children's times once reaped
    return total


def _with_reaped_children(times: Any) -> float:
    return times.user + times.system + times.children_user + times.children_system


def machine_idle_seconds() -> float:
    """Idle CPU-seconds of the whole machine since boot (idle + iowait where counted)."""
    times = psutil.cpu_times()
    return times.idle + getattr(times, "iowait", 0.0)
