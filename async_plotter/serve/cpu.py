"""CPU time of a process and its descendants, read from ``/proc`` (Linux).

The recorder charges its CPU budget with what a recording really cost (both worker processes
and the video encoder, start-up included), and the cost benchmark measures the serve process
the same way. Descendants that already exited count too, once their parent has reaped them:
their time is then in the parent's ``cutime``/``cstime``.
"""
import os
from typing import Iterable, List, Set

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def children(pid: int) -> List[int]:
    """The direct children of ``pid`` (every thread's list: a child belongs to the thread that
    started it); empty if the process is gone."""
    found: List[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return found


def tree(pid: int) -> List[int]:
    """``pid`` and all its descendants alive (or not yet reaped) now."""
    seen: Set[int] = set()
    order: List[int] = []
    pending = [pid]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        order.append(current)
        pending.extend(children(current))
    return order


def process_cpu_seconds(pid: int) -> float:
    """User + system time of ``pid`` and of its reaped children; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return 0.0
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = text[text.rfind(")") + 2:].split()
    try:
        utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    except (ValueError, IndexError):
        return 0.0
    return (utime + stime + cutime + cstime) / _TICKS


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
