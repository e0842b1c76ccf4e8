"""The facts about the machine each benchmark's JSON records beside its figures, and what the
benchmarks that compare two checkouts side by side share."""
import json
import os
import platform
from typing import Any, Dict, List, Optional, Sequence


def machine_facts(load_before: Sequence[float], load_after: Sequence[float]) -> Dict[str, Any]:
    """Platform, Python, CPU count and the load averages around the measurement (a busy machine
    explains odd figures)."""
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_before": list(load_before),
        "load_average_after": list(load_after),
    }


def write_results(path: str, settings: Any, load_before: Sequence[float], **sections: Any) -> None:
    """Write a benchmark's JSON: its settings (``argparse`` arguments), the machine's facts and
    ``sections``; then say where."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as out:
        json.dump(dict(settings=vars(settings),
                       machine=machine_facts(load_before, os.getloadavg()),
                       **sections),
                  out,
                  indent=1)
    print(f"\nwrote {path}")


def checkouts(here: str, before_tree: Optional[str]) -> Dict[str, str]:
    """The checkouts a benchmark compares, by name: ``"now"`` (``here``) and, where given,
    ``"before"`` (``--before-tree``, e.g. a ``git worktree`` of an older commit)."""
    trees = {"now": os.path.abspath(here)}
    if before_tree:
        trees["before"] = os.path.abspath(before_tree)
    return trees


def library_env(tree: str, **extra: str) -> Dict[str, str]:
    """The environment of a child process that imports ``async_plotter`` from the checkout
    ``tree``: first on ``PYTHONPATH``, ahead of the editable install (whose import finder also
    made the library's own imports ~2 ms slower)."""
    return dict(os.environ, PYTHONPATH=os.path.abspath(tree), **extra)


def in_turn(names: Sequence[str], round_number: int) -> List[str]:
    """``names`` in order in even rounds and reversed in odd ones, so that no checkout or case
    always goes first (the first of a round finds the machine calmest)."""
    return list(names) if round_number % 2 == 0 else list(names)[::-1]
