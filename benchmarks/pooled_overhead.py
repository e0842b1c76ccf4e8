"""Whole-run figures pooled over several ``plot_overhead.py`` result files: one set of 4-6
rounds swings by ±5% on this machine (its A/A control), so a figure of a few percent needs the
runs of several sets, each still measured against the ``off`` run of its own round.

Each ``--set`` names a result file (a path, or a name under ``benchmarks/results``) and the
modes to take from it, each optionally under another name: ``before=defaults`` counts a set's
``before`` runs as ``defaults`` (where the tree measured as ``before`` is what the defaults are
now), ``defaults=on-demand`` keeps a tried change apart. It prints, per mode, the runs' mean and
its standard error, each mode's difference from the A/A control (``off-again``), and each
mode's steady ratio against ``--reference`` (``defaults``) in the same round of the same set,
where a set's swing cancels: the fair comparison of changes measured in different sets.

    python benchmarks/pooled_overhead.py --env Swimmer-v5 \\
        --set plot_overhead_aa_control.json:defaults,off-again \\
        --set plot_overhead_idle_priority_50s_runs.json:defaults,off-again,idle

Reads only; writes ``benchmarks/results/pooled_overhead.json`` (``--out``).
"""
import argparse
import json
import math
import os
import statistics
import sys
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.machine import write_results  # noqa: E402 - after the path

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
#: the per-run figures pooled: (key in ``per_run``, label, format)
FIGURES = (
    ("steady_ratio", "steady / off", ".3f"),
    ("end_to_end_ratio", "end to end / off", ".3f"),
    ("fixed_extra_s", "start-up + close extra (s)", ".2f"),
    ("history_share", "history recorded", ".2f"),
    ("videos_per_10_itr", "videos / 10 itr", ".2f"),
)
CONTROL = "off-again"
#: the mode every other is compared with round by round, unless ``--reference`` names another
REFERENCE = "defaults"


def parse_set(text: str) -> Tuple[str, Dict[str, str]]:
    """``FILE:mode[=name],...`` -> the file's path and ``{mode in the file: pooled name}``."""
    path, _, modes = text.rpartition(":")
    if not path or not modes:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected FILE:mode[=name],...")
    if not os.path.exists(path):
        path = os.path.join(RESULTS, path)
    renames = {}
    for item in modes.split(","):
        mode, _, name = item.partition("=")
        renames[mode] = name or mode
    return path, renames


def mean_and_error(values: List[float]) -> Tuple[float, float]:
    """The mean, and its standard error (0 with one value)."""
    if len(values) < 2:
        return statistics.fmean(values), 0.0
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def pool(sets: List[Tuple[str, Dict[str, str]]],
         env: str,
         reference: str = REFERENCE) -> Dict[str, dict]:
    """Every pooled mode's runs and figures."""
    runs: Dict[str, List[dict]] = {}
    for path, renames in sets:
        with open(path) as source:
            result = json.load(source)
        result = result.get("results", result)  # written by write_results, or bare
        for run in result["per_run"]:
            name = renames.get(run["mode"])
            if name is not None and run["env"] == env:
                runs.setdefault(name, []).append(dict(run, set=os.path.basename(path)))
    pooled = {}
    for name, rows in runs.items():
        figures = {}
        for key, _, _ in FIGURES:
            values = [row[key] for row in rows if row.get(key) is not None]
            if values:
                figures[key] = mean_and_error(values)
        pooled[name] = {
            "runs": len(rows),
            "sets": sorted({row["set"]
                            for row in rows}),
            "figures": figures
        }
    for name, entry in pooled.items():
        entry["against_reference"] = (None if name == reference else _paired(
            runs[name], runs.get(reference, [])))
    control = pooled.get(CONTROL)
    for name, entry in pooled.items():
        if control is None or name == CONTROL:
            continue
        entry["over_control"] = {}
        for key in ("steady_ratio", "end_to_end_ratio"):
            (mean, error), (base, base_error) = entry["figures"][key], control["figures"][key]
            entry["over_control"][key] = (mean - base, math.hypot(error, base_error))
    return pooled


def _paired(rows: List[dict], references: List[dict]) -> Optional[dict]:
    """The steady ratio's difference from the reference mode's run of the same round of the same
    set (a set's swing cancels): mean ± standard error, and in how many rounds it was lower."""
    by_round = {(row["set"], row["round"]): row["steady_ratio"] for row in references}
    differences = [
        row["steady_ratio"] - by_round[(row["set"], row["round"])] for row in rows
        if (row["set"], row["round"]) in by_round
    ]
    if not differences:
        return None
    mean, error = mean_and_error(differences)
    return {
        "steady_difference": (mean, error),
        "rounds": len(differences),
        "rounds_lower": sum(difference < 0 for difference in differences)
    }


def print_table(pooled: Dict[str, dict], env: str, reference: str) -> None:
    print(f"\n{env}: mean ± standard error over the pooled runs")
    print("| mode | runs (sets) | " + " | ".join(label for _, label, _ in FIGURES) +
          f" | steady - {CONTROL} | end to end - {CONTROL} |")
    print("| --- | ---: |" + " ---: |" * (len(FIGURES) + 2))
    for name, entry in pooled.items():
        cells = []
        for key, _, spec in FIGURES:
            value = entry["figures"].get(key)
            cells.append("-" if value is
                         None else f"{format(value[0], spec)} ± {format(value[1], spec)}")
        for key in ("steady_ratio", "end_to_end_ratio"):
            value = entry.get("over_control", {}).get(key)
            cells.append("-" if value is None else f"{value[0]:+.3f} ± {value[1]:.3f}")
        print(f"| {name} | {entry['runs']} ({len(entry['sets'])}) | " + " | ".join(cells) + " |")
    print(f"\nagainst {reference} in the same round of the same set (steady / off):")
    for name, entry in pooled.items():
        paired = entry.get("against_reference")
        if paired is not None:
            mean, error = paired["steady_difference"]
            print(f"  {name}: {mean:+.3f} ± {error:.3f} over {paired['rounds']} rounds, lower "
                  f"in {paired['rounds_lower']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="Swimmer-v5")
    parser.add_argument("--set",
                        dest="sets",
                        action="append",
                        type=parse_set,
                        required=True,
                        help="FILE:mode[=name],... (repeat for each result file)")
    parser.add_argument("--reference",
                        default=REFERENCE,
                        help="the mode the others are compared with round by round")
    parser.add_argument("--out", default=os.path.join(RESULTS, "pooled_overhead.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    pooled = pool(args.sets, args.env, args.reference)
    if not pooled:
        parser.error(f"no run of {args.env} in those modes")
    print_table(pooled, args.env, args.reference)
    write_results(args.out, args, load_before, pooled=pooled)


if __name__ == "__main__":
    main()
