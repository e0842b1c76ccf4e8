"""What a CPU-second taken from a busy trainer's idle time costs it: a bare spinner at
``SCHED_IDLE`` against the plot worker at ``SCHED_IDLE`` (``priority="idle"``) and at the
defaults (the budget), side by side in one run.

A trainer that keeps both cores busy (TRPO on Swimmer-v5, ``n_parallel=2``, batch 20000: ~0.9-s
iterations) leaves a few percent of the machine idle. ``SCHED_IDLE`` hands that time to a process
only when nothing else wants it, so in principle it costs nothing. This measures what it does
cost: the training time of the steady iterations (past the first two) against a run with nothing
beside it, and the CPU the competitor took in the same window: training seconds lost per
CPU-second taken. Three stand-ins tell what in the worker's work costs: a Python loop (no memory
traffic, no sleeping: what any process pays for idle time here), numpy streaming through memory,
and a loop that works 5 ms and sleeps 35 ms (a capped frame's rhythm). ``--modes`` picks some;
they rotate by one place each round.

    .venv/bin/python benchmarks/idle_cost.py [--rounds 3] [--n-itr 22]

Prints a table; writes benchmarks/results/idle_cost.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
MODES = ("off", "spinner-idle", "memory-idle", "sleeper-idle", "worker-idle",
         "worker-idle-uncapped", "worker-defaults")
#: iterations whose end marks the start of the steady window (start-up left out)
FIRST_STEADY = 2
_IDLE = "import os, time\nos.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
#: the competitors that are not the worker: a Python loop; numpy streaming through 128 MB (the
#: caches and memory bus busy, as drawing and encoding keep them); and a loop that works 5 ms and
#: sleeps 35 ms (a frame's work at 25 frames/s, waking as the capped render process does)
_COMPETITORS = {
    "spinner-idle":
    _IDLE + "while True:\n    pass\n",
    "memory-idle":
    _IDLE + ("import numpy as np\na = np.ones(8 << 20)\nb = np.empty_like(a)\n"
             "while True:\n    np.multiply(a, 1.0001, out=b)\n"),
    "sleeper-idle":
    _IDLE + ("while True:\n    end = time.perf_counter() + 0.005\n"
             "    while time.perf_counter() < end:\n        pass\n"
             "    time.sleep(0.035)\n"),
}


def child(mode: str, n_itr: int, batch_size: int) -> None:
    """One training run in this process; prints its steady window's seconds and the CPU the
    competitor took in it."""
    import logging

    sys.path.insert(0, ROOT)
    from async_plotter.cpu import process_cpu_seconds, tree_cpu_seconds
    from async_plotter.rl import TRPO, GaussianMLPPolicy, LinearFeatureBaseline
    from async_plotter.rl.batch_polopt import BatchPolopt
    from async_plotter.rl.experiment import run_experiment_lite

    logging.basicConfig(level=logging.WARNING)
    spinner = (subprocess.Popen([sys.executable, "-c", _COMPETITORS[mode]])
               if mode in _COMPETITORS else None)

    def competitor_cpu(algo) -> float:
        if spinner is not None:
            return process_cpu_seconds(spinner.pid) or 0.0
        plotter = getattr(algo, "plotter", None)
        if plotter is None:
            return 0.0
        # A worker restarting counts from its next reading.
        return sum(tree_cpu_seconds(pid) or 0.0 for pid in plotter.stats["worker_pids"].values())

    marks = []
    original = BatchPolopt._iteration

    def timed(self, itr, *args, **kwargs):
        original(self, itr, *args, **kwargs)
        marks.append((time.monotonic(), competitor_cpu(self)))

    BatchPolopt._iteration = timed
    algo = TRPO("Swimmer-v5",
                GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(32, 32), seed=1),
                LinearFeatureBaseline(),
                batch_size=batch_size,
                max_path_length=500,
                n_itr=n_itr,
                discount=0.99,
                gae_lambda=0.97,
                step_size=0.01)
    plotting = {
        "worker-idle": dict(plot=True, priority="idle", window=False),
        # Its videos drawn as fast as idle CPU allows rather than at the frame cap's pace: the
        # same work in longer bursts, with fewer wake-ups.
        "worker-idle-uncapped": dict(plot=True, priority="idle", fps=1000, window=False),
        "worker-defaults": dict(plot=True, window=False),
    }.get(mode, dict(plot=False))
    try:
        run_experiment_lite(algo,
                            n_parallel=2,
                            seed=1,
                            log_dir=tempfile.mkdtemp(prefix="idle_cost_"),
                            snapshot_mode="none",
                            tensorboard=False,
                            **plotting)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    (start, cpu_start), (end, cpu_end) = marks[FIRST_STEADY], marks[-1]
    print(
        json.dumps(
            dict(steady_s=round(end - start, 3), competitor_cpu_s=round(cpu_end - cpu_start, 3))))


def measure(mode: str, args) -> dict:
    from benchmarks.machine import child_result

    return child_result(
        __file__,
        ["--child", mode, "--n-itr",
         str(args.n_itr), "--batch-size",
         str(args.batch_size)],
        dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OPENBLAS_NUM_THREADS="1"),
        timeout=1800)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n-itr", type=int, default=22)
    parser.add_argument("--batch-size", type=int, default=20000)
    parser.add_argument("--modes",
                        default=",".join(MODES),
                        help=f"comma-separated, of {', '.join(MODES)} (off always runs)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "idle_cost.json"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.n_itr, args.batch_size)
        return
    sys.path.insert(0, ROOT)
    from benchmarks.machine import write_results

    modes = ["off"] + [m for m in args.modes.split(",") if m and m != "off"]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown --modes {unknown}; choose among {', '.join(MODES)}")
    load_before = os.getloadavg()
    runs = []
    for round_number in range(args.rounds):
        shift = round_number % len(modes)
        for place, mode in enumerate(modes[shift:] + modes[:shift], start=1):
            runs.append(dict(measure(mode, args), mode=mode, round=round_number + 1, place=place))
            print(f"  round {round_number + 1}: {mode} {runs[-1]}", flush=True)
    summary = {}
    print(f"\nSteady iterations of TRPO Swimmer-v5 (n_parallel=2, batch {args.batch_size}), "
          f"{args.rounds} rounds, each against its round's `off` run")
    print("| competitor | steady / off, by round | CPU-s it took | training s lost per CPU-s |")
    print("| --- | --- | ---: | ---: |")
    for mode in modes[1:]:
        ratios, cpus, costs = [], [], []
        for run in (r for r in runs if r["mode"] == mode):
            off = next(r for r in runs if r["mode"] == "off" and r["round"] == run["round"])
            ratios.append(run["steady_s"] / off["steady_s"])
            cpus.append(run["competitor_cpu_s"])
            costs.append((run["steady_s"] - off["steady_s"]) / max(run["competitor_cpu_s"], 1e-9))
        summary[mode] = dict(steady_ratios=[round(r, 3) for r in ratios],
                             competitor_cpu_s=statistics.mean(cpus),
                             seconds_lost_per_cpu_second=statistics.mean(costs),
                             lost_per_cpu_second_by_round=[round(c, 2) for c in costs])
        print(f"| {mode} | " + ", ".join(f"{r:.3f}" for r in ratios) +
              f" | {statistics.mean(cpus):.2f} | {statistics.mean(costs):.2f} "
              f"({min(costs):.2f} to {max(costs):.2f}) |")
    write_results(args.out, args, load_before, runs=runs, summary=summary)


if __name__ == "__main__":
    main()
