"""Headline benchmark: how much slower does training get when plotting is on?

The same TRPO training (same seed, same batch) runs in several modes, interleaved
(A B C D A B C D ...) so that machine drift hits every mode alike; each mode's mean iteration time
is reported as a ratio to ``off`` (iteration times on this machine are bimodal, so means, not
medians). Modes:

* ``off``: no plotting.
* ``async``: ``plot=True`` with the library's defaults (worker processes, newest-wins, frame cap,
  cheap visuals on software GL, low priority).
* ``async-full``: the worker with full-quality visuals and no frame cap (what a naive user might set).
* ``async-low``: the defaults, but the worker at nice 10 instead of ``SCHED_IDLE``: the
  other side of the trade-off (more frames, fresher pictures, more cost).
* ``inline``: the old way - after every iteration the trainer waits while a rollout of the same
  length is rendered with the same renderer. TensorFlow and software GL cannot share a process, so
  the rendering happens in the plot worker at normal priority while the trainer blocks on it: the
  same work, blocking. (This baseline lives here, not in the library.)

For ``async`` it also reports the time from ``update_plot`` until the worker applies the new
parameters (median, p95), frames rendered per second, the worker's CPU share and the trainer's
``update_plot`` cost per iteration.

    python benchmarks/plot_overhead.py                 # Swimmer-v5 and HalfCheetah-v5, 2 rounds
    python benchmarks/plot_overhead.py --quick         # smoke run: tiny batches, one round

Writes benchmarks/results/plot_overhead.json and plot_overhead.png. Each run is a fresh Python
process (``--child``), so no mode inherits another's warm caches or leftover threads.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
sys.path.insert(0, ROOT)

# Each mode: (plot, plot keyword arguments, inline). More can be added to explore the knobs,
# e.g. "--modes off,async,prio-low" after adding {"priority": "low"} here.
MODES = {
    "off": (False, {}, False),
    "async": (True, {}, False),
    "async-full": (True, {
        "quality": "full",
        "fps": 1000
    }, False),
    "inline": (True, {
        "priority": "normal",
        "fps": 1000
    }, True),
    # The other priority choice, to show the trade-off; more knobs can be added here and picked
    # with --modes.
    "async-low": (True, {
        "priority": "low"
    }, False),
    "async-low-10fps": (True, {
        "priority": "low",
        "fps": 10
    }, False),
    "async-normal": (True, {
        "priority": "normal"
    }, False),
}
DEFAULT_MODES = ["off", "async", "async-full", "inline", "async-low"]
ENVS = {
    # env id: (max_path_length, batch_size)
    "Swimmer-v5": (500, 5000),
    "HalfCheetah-v5": (1000, 5000),
}

# ----------------------------------------------------------------------------- one run (child)


def _child(mode: str, env_id: str, n_itr: int, batch_size: int, max_path_length: int,
           seed: int) -> dict:
    import logging

    import psutil

    from async_plotter.rl import TRPO, GaussianMLPPolicy, LinearFeatureBaseline
    from async_plotter.rl.samplers import ParallelSampler

    logging.basicConfig(level=logging.WARNING)
    plot, plot_kwargs, inline = MODES[mode]
    events = []  # (kind, payload) from the plot worker, with arrival times
    publish_times = {}
    update_costs = []
    worker_cpu = {}
    applied = {}
    episode_done = threading.Condition()

    def on_event(kind, payload):
        if kind == "applied":
            applied.setdefault(payload["update"], time.time())
        elif kind == "episode":
            with episode_done:
                events.append(payload)
                episode_done.notify_all()

    policy = GaussianMLPPolicy(env_id, hidden_sizes=(32, 32), seed=seed)
    algo = TRPO(env_id,
                policy,
                LinearFeatureBaseline(),
                batch_size=batch_size,
                max_path_length=max_path_length,
                n_itr=n_itr,
                discount=0.99,
                gae_lambda=0.97,
                step_size=0.01,
                seed=seed,
                plot=plot,
                plot_kwargs=dict(plot_kwargs, on_event=on_event) if plot else None,
                sampler=ParallelSampler(2),
                log_dir=None)

    start_plotter = algo._start_plotter

    def instrumented_start(kwargs, video_dir):
        # Videos into a scratch folder: what a headless user gets, encoding included.
        plotter = start_plotter(kwargs, tempfile.mkdtemp(prefix="plot_overhead_"))
        original_update = plotter.update_plot

        def timed_update(policy, **kw):
            started = time.perf_counter()
            number = plotter.stats["updates_sent"] + 1
            publish_times[number] = time.time()
            original_update(policy, **kw)
            update_costs.append(time.perf_counter() - started)
            if inline:  # the old way: wait until this update's rollout has been rendered
                with episode_done:
                    episode_done.wait_for(lambda: any(e["update"] == number for e in events),
                                          timeout=600)

        plotter.update_plot = timed_update
        return plotter

    close_plotter = algo._close_plotter

    def instrumented_close():
        plotter = algo.plotter
        if plotter is not None:
            for role, pid in (plotter.stats["worker_pids"] or {}).items():
                try:
                    times = psutil.Process(pid).cpu_times()
                    worker_cpu[role] = times.user + times.system
                except psutil.Error:
                    pass
            stats = plotter.stats
            worker_cpu["frames"] = stats["frames"]
            worker_cpu["updates_applied"] = stats["updates_applied"]
        close_plotter()

    algo._start_plotter = instrumented_start
    algo._close_plotter = instrumented_close
    if plot:
        algo.plot_kwargs.setdefault("window", False)  # the same work with or without a display
    started = time.time()
    history = algo.train()
    wall = time.time() - started
    # Wall time from one iteration's end to the next, so everything the trainer waits for counts:
    # BatchPolopt's ItrTime stops before update_plot, which would hide the inline mode's wait.
    ends = [row["Time"] for row in history]
    itr_times = [later - earlier for earlier, later in zip(ends, ends[1:])]
    latencies = [applied[n] - publish_times[n] for n in applied if n in publish_times]
    return {
        "mode": mode,
        "env": env_id,
        "itr_times": itr_times,
        "wall": wall,
        "update_costs": update_costs,
        "latencies": latencies,
        "worker": worker_cpu,
        "final_return": history[-1]["AverageReturn"],
    }


# ------------------------------------------------------------------------------ driver (parent)


def run_child(mode, env_id, args):
    max_path_length, batch_size = ENVS[env_id]
    if args.quick:
        max_path_length, batch_size = 100, 1000
    command = [
        sys.executable, __file__, "--child", mode, env_id,
        str(args.n_itr),
        str(batch_size),
        str(max_path_length),
        str(args.seed)
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    for line in result.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{mode} on {env_id} failed:\n{result.stderr[-4000:]}")


def summarize(runs, skip):
    """Per env and mode: mean iteration time over all rounds (first ``skip`` iterations dropped)."""
    table = {}
    for run in runs:
        entry = table.setdefault(run["env"], {}).setdefault(run["mode"], {
            "itr": [],
            "update_costs": [],
            "latencies": [],
            "fps": [],
            "cpu_share": [],
            "applied": []
        })
        entry["itr"].extend(run["itr_times"][skip:])
        entry["update_costs"].extend(run["update_costs"])
        entry["latencies"].extend(run["latencies"])
        worker = run["worker"]
        if worker:
            entry["fps"].append(worker.get("frames", 0) / run["wall"])
            cpu = worker.get("rollout", 0.0) + worker.get("render", 0.0)
            entry["cpu_share"].append(cpu / run["wall"])
            entry["applied"].append(worker.get("updates_applied", 0))
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child",
                        nargs=6,
                        metavar=("MODE", "ENV", "N_ITR", "BATCH", "PATH", "SEED"))
    parser.add_argument("--envs", default="Swimmer-v5,HalfCheetah-v5")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--n-itr", type=int, default=8)
    parser.add_argument("--skip", type=int, default=1, help="warm-up iterations left out")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="tiny settings: a smoke run")
    parser.add_argument("--out", default=os.path.join(RESULTS, "plot_overhead.json"))
    args = parser.parse_args()
    if args.child:
        mode, env_id, n_itr, batch, path, seed = args.child
        result = _child(mode, env_id, int(n_itr), int(batch), int(path), int(seed))
        print("RESULT " + json.dumps(result), flush=True)
        return
    if args.quick:
        args.rounds, args.n_itr, args.skip = 1, 3, 1
    envs = args.envs.split(",")
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES] + [e for e in envs if e not in ENVS]
    if unknown:
        parser.error(f"unknown modes/envs: {unknown}; modes: {sorted(MODES)}, envs: {sorted(ENVS)}")

    runs = []
    total = args.rounds * len(envs) * len(modes)
    started = time.time()
    for round_number in range(args.rounds):
        for env_id in envs:
            for mode in modes:
                run = run_child(mode, env_id, args)
                runs.append(run)
                print(
                    f"[{len(runs)}/{total}] round {round_number + 1} {env_id:15} {mode:12} "
                    f"mean itr {np.mean(run['itr_times'][args.skip:]):.3f} s  "
                    f"({time.time() - started:.0f} s elapsed)",
                    flush=True)
    table = summarize(runs, args.skip)
    report = {"settings": vars(args), "runs": runs, "summary": {}}
    print()
    header = (f"{'env':15} | {'mode':16} | {'mean itr s':>10} | {'ratio to off':>12} | "
              f"{'apply ms p50':>12} | {'apply ms p95':>12} | {'frames/s':>8} | "
              f"{'worker CPU':>10} | {'update_plot us':>14}")
    print(header)
    print("-" * len(header))
    for env_id in envs:
        off = np.mean(table[env_id]["off"]["itr"]) if "off" in table[env_id] else None
        for mode in modes:
            entry = table[env_id][mode]
            mean_itr = float(np.mean(entry["itr"]))
            ratio = mean_itr / off if off else float("nan")
            lat = np.array(entry["latencies"]) * 1e3
            summary = {
                "mean_itr_s":
                mean_itr,
                "ratio_to_off":
                ratio,
                "apply_latency_ms_p50":
                float(np.median(lat)) if lat.size else None,
                "apply_latency_ms_p95":
                float(np.percentile(lat, 95)) if lat.size else None,
                "frames_per_s":
                float(np.mean(entry["fps"])) if entry["fps"] else None,
                "worker_cpu_share":
                float(np.mean(entry["cpu_share"])) if entry["cpu_share"] else None,
                "update_plot_us":
                (float(np.mean(entry["update_costs"]) * 1e6) if entry["update_costs"] else None),
                "updates_applied_per_run":
                (float(np.mean(entry["applied"])) if entry["applied"] else None),
            }
            report["summary"].setdefault(env_id, {})[mode] = summary

            def fmt(value, spec):
                return format(value, spec) if value is not None else "-"

            print(
                f"{env_id:15} | {mode:16} | {mean_itr:>10.3f} | {ratio:>12.3f} | "
                f"{fmt(summary['apply_latency_ms_p50'], '>12.0f')} | "
                f"{fmt(summary['apply_latency_ms_p95'], '>12.0f')} | "
                f"{fmt(summary['frames_per_s'], '>8.1f')} | "
                f"{fmt(summary['worker_cpu_share'] and summary['worker_cpu_share'] * 100, '>9.1f')}% | "
                f"{fmt(summary['update_plot_us'], '>14.0f')}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump(report, out, indent=2)
    chart = os.path.splitext(args.out)[0] + ".png"
    _bar_chart(report["summary"], envs, modes, chart)
    print(f"\nwrote {args.out} and {chart} ({time.time() - started:.0f} s)")


def _bar_chart(summary, envs, modes, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(modes)
    for index, mode in enumerate(modes):
        ratios = [summary[env][mode]["ratio_to_off"] for env in envs]
        bars = axis.bar(np.arange(len(envs)) + index * width, ratios, width, label=mode)
        axis.bar_label(bars, fmt="%.2f", fontsize=8)
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.axhline(1.10, color="red", linewidth=0.8, linestyle="--", label="target 1.10")
    axis.set_xticks(np.arange(len(envs)) + width * (len(modes) - 1) / 2, envs)
    axis.set_ylabel("mean iteration time / off")
    axis.set_title("TRPO iteration time with plotting, relative to no plotting")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


if __name__ == "__main__":
    main()
