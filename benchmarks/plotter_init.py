"""What ``Plotter(...)`` costs the trainer before ``start()``: its checks (env built once, the
policy acting once, the worker's copy of policy and env compared with the trainer's) for each
kind of policy and env, side by side with building and resetting the env alone.

    .venv/bin/python benchmarks/plotter_init.py [--rounds 5] [--before-tree DIR]

Each case runs in a fresh process (the first Plotter of a process is the one users wait for),
the cases interleaved round by round; what is timed is the ``Plotter(...)`` call alone, after
what a trainer has done before it: its imports (TensorFlow for the Keras and RL host cases) and
its own env built and reset. With ``--before-tree`` (an older checkout) every case also runs
from there in the same rounds, and the table gives now / before. Goal (issue 26): a numpy policy
on Swimmer well under 0.5 s with TensorFlow never imported, a Keras 2x64 MLP under 0.3 s, on a
quiet machine. Prints a table; writes benchmarks/results/plotter_init.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.machine import checkouts, in_turn, library_env, machine_facts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")

_NUMPY_POLICY = """
import numpy as np
class Linear:
    def __init__(self, n, m):
        self.w = np.zeros((n, m))
    def get_param_values(self):
        return self.w.ravel().copy()
    def set_param_values(self, flat):
        self.w = np.asarray(flat).reshape(self.w.shape)
    def get_action(self, o):
        mean = np.asarray(o) @ self.w
        return mean, {"mean": mean}
"""

_KERAS_POLICY = """
import keras
policy = keras.Sequential([keras.Input((8,)), keras.layers.Dense(64, activation="tanh"),
                           keras.layers.Dense(64, activation="tanh"), keras.layers.Dense(2)])
"""

# What a trainer has done before it builds a Plotter: imported Gymnasium and built its env.
_TRAINER_ENV = "import gymnasium\nenv = gymnasium.make('Swimmer-v5')\nenv.reset(seed=0)\n"

# name -> (setup code run before the clock starts, the statement timed)
CASES = {
    "gymnasium.make + reset, a second env (baseline)":
    (_TRAINER_ENV, "gymnasium.make('Swimmer-v5').reset(seed=0)"),
    "numpy policy, Swimmer-v5 id":
    (_TRAINER_ENV + _NUMPY_POLICY + "from async_plotter import Plotter",
     "Plotter('Swimmer-v5', Linear(8, 2), video_dir=VIDEOS)"),
    "numpy policy, the trainer's env + NormalizeObservation":
    (_TRAINER_ENV + _NUMPY_POLICY + "from gymnasium.wrappers import NormalizeObservation\n"
     "from async_plotter import Plotter\nenv = NormalizeObservation(env)",
     "Plotter(env, Linear(8, 2), video_dir=VIDEOS)"),
    "Keras 2x64 MLP, Swimmer-v5 id (TF imported)":
    (_TRAINER_ENV + _KERAS_POLICY + "from async_plotter import Plotter",
     "Plotter('Swimmer-v5', policy, video_dir=VIDEOS)"),
    "RL host's GaussianMLPPolicy (32, 32), Swimmer-v5 id":
    (_TRAINER_ENV + "from async_plotter.rl import GaussianMLPPolicy\n"
     "policy = GaussianMLPPolicy('Swimmer-v5', hidden_sizes=(32, 32), seed=1)\n"
     "from async_plotter import Plotter", "Plotter('Swimmer-v5', policy, video_dir=VIDEOS)"),
}

# The tree's package is the one imported, or the comparison is of nothing.
_CHECK_TREE = """
import async_plotter
assert async_plotter.__file__.startswith({tree!r}), async_plotter.__file__
"""

_RUNNER = """
import os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
VIDEOS = sys.argv[1]
{setup}
started = time.perf_counter()
{timed}
elapsed = time.perf_counter() - started
print("RESULT", elapsed, int("tensorflow" in sys.modules))
"""


def run_case(setup: str, timed: str, videos: str, tree: str) -> tuple:
    """Seconds the timed statement took in a fresh process, and whether TensorFlow was imported;
    ``tree``: the checkout whose ``async_plotter`` it imports, through ``PYTHONPATH`` (this one
    too: an editable install's finder makes the imports inside the timed call ~2 ms slower)."""
    tree = os.path.abspath(tree)
    code = _CHECK_TREE.format(tree=tree) + _RUNNER.format(setup=setup, timed=timed)
    environment = library_env(tree)
    result = subprocess.run([sys.executable, "-c", code, videos],
                            cwd=tree,
                            capture_output=True,
                            text=True,
                            timeout=600,
                            check=True,
                            env=environment)
    line = [line for line in result.stdout.splitlines() if line.startswith("RESULT")][-1]
    _, seconds, tensorflow = line.split()
    return float(seconds), bool(int(tensorflow))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before-tree", default=None, help="an older checkout to compare with")
    parser.add_argument("--out", default=os.path.join(RESULTS, "plotter_init.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    videos = os.path.join("/tmp", f"plotter_init_videos_{os.getpid()}")
    trees = checkouts(ROOT, args.before_tree)
    seconds = {tree: {name: [] for name in CASES} for tree in trees}
    tensorflow = {}
    for round_number in range(args.rounds):
        order = in_turn(trees, round_number)
        for name, (setup, timed) in CASES.items():
            for tree in order:
                elapsed, tensorflow[name, tree] = run_case(setup, timed, videos, trees[tree])
                seconds[tree][name].append(elapsed)
        print(f"  round {round_number + 1}/{args.rounds} done", flush=True)
    times, before = seconds["now"], seconds.get("before", {})
    baseline = statistics.median(times["gymnasium.make + reset, a second env (baseline)"])
    rows = []
    print(f"\nPlotter(...) in a fresh process, median of {args.rounds} (cases interleaved)")
    print("| case | median s | max s | / make+reset | before: median s | now / before | "
          "TensorFlow imported |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, values in times.items():
        row = {
            "case": name,
            "median_s": round(statistics.median(values), 4),
            "max_s": round(max(values), 4),
            "over_make_reset": round(statistics.median(values) / baseline, 2),
            "tensorflow_imported": tensorflow[name, "now"],
            "all_s": [round(v, 4) for v in values],
        }
        old = before.get(name)
        if old:
            row["before_median_s"] = round(statistics.median(old), 4)
            row["before_all_s"] = [round(v, 4) for v in old]
            row["over_before"] = round(statistics.median(values) / statistics.median(old), 2)
        rows.append(row)
        then = f"{row['before_median_s']:.3f} | {row['over_before']:.2f}x" if old else "- | -"
        print(f"| {name} | {row['median_s']:.3f} | {row['max_s']:.3f} | "
              f"{row['over_make_reset']:.1f}x | {then} | "
              f"{'yes' if row['tensorflow_imported'] else 'no'} |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump(
            {
                "rows": rows,
                "rounds": args.rounds,
                "before_tree": args.before_tree,
                "machine": machine_facts(load_before, os.getloadavg())
            },
            out,
            indent=2)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
