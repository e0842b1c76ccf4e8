"""The facts about the machine each benchmark's JSON records beside its figures, and what the
benchmarks that compare two checkouts side by side share."""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence


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


def child_result(script: str,
                 arguments: Sequence[str],
                 env: Optional[Dict[str, str]] = None,
                 timeout: float = 600) -> Any:
    """What a benchmark's child printed last, as JSON: ``script`` run again in a fresh Python
    process with ``arguments`` (and ``env``, e.g. ``library_env``'s); its failure raises."""
    result = subprocess.run([sys.executable, os.path.abspath(script), *arguments],
                            env=env,
                            capture_output=True,
                            text=True,
                            check=True,
                            timeout=timeout)
    return json.loads(result.stdout.strip().splitlines()[-1])


def child_in_scratch_folder(script: str, case: str, tree: str, more: Sequence[str] = (),
                            **env: str) -> Any:
    """``child_result`` of ``script --child case [more] --folder F``, F a scratch folder removed
    afterwards, the child importing ``async_plotter`` from the checkout ``tree`` (``env``: more
    of its environment, as ``library_env`` takes it)."""
    name = os.path.splitext(os.path.basename(script))[0]
    with tempfile.TemporaryDirectory(prefix=f"{name}_") as folder:
        return child_result(script, ["--child", case, *more, "--folder", folder],
                            library_env(tree, **env))


def checkouts_parser(doc: str, cases_flag: str, cases: Sequence[str], rounds: int,
                     out: str) -> argparse.ArgumentParser:
    """The command line of a benchmark run with ``child_in_scratch_folder`` and
    ``side_by_side``: ``--before-tree``, its cases (``cases_flag``, e.g. ``--envs``, comma-
    separated), ``--rounds``, ``--out`` and its children's hidden ``--child`` and ``--folder``;
    a benchmark adds its own flags to it."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--before-tree", help="another checkout of async_plotter to compare")
    parser.add_argument(cases_flag, default=",".join(cases))
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--out", default=out)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    return parser


def side_by_side(rounds: int, cases: Sequence[str], trees: Dict[str, str],
                 measure: Callable[[str, str], Any]) -> Dict[str, Dict[str, List[Any]]]:
    """``measure(checkout path, case)`` for every case and checkout, ``rounds`` times, the
    checkouts taking turns at going first (``in_turn``), a line of progress after each round:
    ``{case: {checkout name: [results]}}``."""
    runs: Dict[str, Dict[str, List[Any]]] = {case: {name: [] for name in trees} for case in cases}
    for round_number in range(rounds):
        for case in cases:
            for name in in_turn(list(trees), round_number):
                runs[case][name].append(measure(trees[name], case))
        print(f"  round {round_number + 1}/{rounds} done", flush=True)
    return runs


class CheckoutRuns(NamedTuple):
    """What ``child_or_side_by_side`` ran: the checkouts, the load before, and the results."""

    trees: Dict[str, str]
    load_before: Sequence[float]
    runs: Dict[str, Dict[str, List[Any]]]


def child_or_side_by_side(args: argparse.Namespace, here: str, cases: Sequence[str],
                          measure: Callable[[str, str], Any],
                          child: Callable[[], None]) -> Optional[CheckoutRuns]:
    """A benchmark of ``checkouts_parser``'s command line, either side. As a child (``--child``):
    ``child()``, run on the measured checkout's code (``here``, the repository root the script
    put first on ``sys.path``, is taken back off), and None. Else ``side_by_side`` of every case
    in every checkout."""
    if args.child:
        sys.path.remove(here)
        child()
        return None
    trees = checkouts(here, args.before_tree)
    load_before = os.getloadavg()
    return CheckoutRuns(trees, load_before, side_by_side(args.rounds, cases, trees, measure))


def in_turn(names: Sequence[str], round_number: int) -> List[str]:
    """``names`` in order in even rounds and reversed in odd ones, so that no checkout or case
    always goes first (the first of a round finds the machine calmest)."""
    return list(names) if round_number % 2 == 0 else list(names)[::-1]
