"""CPU time of a process and its descendants (psutil).

The recorder charges its CPU budget with what a recording really cost (both worker processes
and the video encoder, start-up included), and the cost benchmark measures the serve process
the same way. Descendants that already exited count too, once their parent has reaped them:
their time is then in the parent's children's times (Linux; psutil reports 0 for them on macOS
and Windows).
"""
from typing import Iterable, List, Set

import psutil


def tree(pid: int) -> List[int]:
    """``pid`` and all its descendants alive (or not yet reaped) now; empty if it is gone."""
    try:
        return [pid] + [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def process_cpu_seconds(pid: int) -> float:
    """User + system time of ``pid`` and of its reaped children; 0 if it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system + times.children_user + times.children_system


def tree_cpu_seconds(pids: Iterable[int]) -> float:
    """CPU seconds used so far by the processes ``pids`` and all their descendants."""
    total = 0.0
    counted: Set[int] = set()
    for pid in pids:
        for member in tree(pid):
            if member not in counted:
                counted.add(member)
                total += process_cpu_seconds(member)
    return total
