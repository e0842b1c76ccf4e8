"""What one ``update_plot`` costs the trainer, against the floor and against the old way.

For 1e3 .. 1e7 float32 parameters, three ways of handing a parameter vector to another process are
timed side by side, interleaved in rounds so that machine drift hits all three alike:

* ``copy``: ``np.copyto`` into a preallocated array - the floor any hand-over must pay.
* ``update_plot``: ``Plotter.update_plot`` with a live worker (shared memory + a wake-up byte),
  given the next iteration each call, as a training loop gives it.
* ``queue``: pickling the vector through a ``multiprocessing.Queue`` to a consumer process, the
  way rllab's plotter did.
* ``env object``: ``update_plot`` of a Plotter given the env object itself (Swimmer-v5) rather
  than its id: its settings and model physics travel with every update and its model is
  watched (``env/settings_travel.py``, ``trainer/model_check.py``).

Two figures per method: the wall time of the call in the training thread, and the trainer
process's CPU time per update (all threads: a Queue pickles in a background feeder thread, which
still takes the trainer's CPU and GIL). Both are reported as ratios to ``copy``.

    python benchmarks/update_cost.py [--quick]

Writes benchmarks/results/update_cost.json.
"""
import argparse
import itertools
import json
import os
import platform
import sys
import time

import gymnasium
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from async_plotter import Plotter  # noqa: E402
from async_plotter.processes import spawn_context  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


class FlatPolicy:
    """A policy whose parameters already are one flat vector (get_param_values returns it)."""

    def __init__(self, size):
        self.params = np.random.default_rng(0).standard_normal(size).astype(np.float32)

    def get_param_values(self):
        return self.params

    def set_param_values(self, flat):
        self.params = flat

    def get_action(self, observation):
        return np.zeros(2, np.float32), {}


def _consume(queue, done):
    count = 0
    while True:
        item = queue.get()
        if item is None:
            break
        count += 1
        done.put(count)
    done.close()
    done.join_thread()  # flush before exiting, so nothing is written to a pipe the parent closed


def _discard(frame, info):
    pass


def time_calls(call, repeats, settle=None):
    """Mean wall seconds per call and trainer CPU seconds per call (after ``settle()``)."""
    cpu_before = time.process_time()
    wall = 0.0
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        wall += time.perf_counter() - started
    if settle is not None:
        settle()
    return wall / repeats, (time.process_time() - cpu_before) / repeats


def bench_size(size, rounds, repeats, plotter_for):
    policy = FlatPolicy(size)
    target = np.empty_like(policy.params)
    plotter = plotter_for(policy, "Swimmer-v5")
    with_env = plotter_for(policy, gymnasium.make("Swimmer-v5"))
    ctx = spawn_context()
    queue, done = ctx.Queue(), ctx.Queue()
    # A plain spawn Process: its target lives in this script, which has a main guard.
    consumer = ctx.Process(target=_consume, args=(queue, done), daemon=True)
    consumer.start()
    sent = [0]

    def queue_put():
        queue.put(policy.params)
        sent[0] += 1

    def queue_settle():
        while True:  # the Queue's work is only done once the consumer has the last vector
            if done.get() == sent[0]:
                return

    iterations = itertools.count()

    def update():
        plotter.update_plot(policy, iteration=next(iterations))

    samples = {"copy": [], "update_plot": [], "queue": [], "env_object": []}
    for method, call, settle in [("copy", lambda: np.copyto(target, policy.params), None),
                                 ("update_plot", update, None), ("queue", queue_put, queue_settle),
                                 ("env_object", lambda: with_env.update_plot(policy), None)]:
        time_calls(call, max(2, repeats // 10), settle)  # warm up: page faults, first pickles
    for _ in range(rounds):
        samples["copy"].append(time_calls(lambda: np.copyto(target, policy.params), repeats))
        samples["update_plot"].append(time_calls(update, repeats))
        samples["queue"].append(time_calls(queue_put, repeats, queue_settle))
        samples["env_object"].append(time_calls(lambda: with_env.update_plot(policy), repeats))
    queue.put(None)
    consumer.join(30)
    applied = plotter.stats["updates_applied"]
    plotter.close()
    with_env.close()
    means = {
        m: tuple(float(np.mean([s[i] for s in v])) for i in range(2))
        for m, v in samples.items()
    }
    return means, applied


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two sizes, few repeats (smoke run)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "update_cost.json"))
    args = parser.parse_args()
    sizes = [1_000, 1_000_000] if args.quick else [1_000, 10_000, 100_000, 1_000_000, 10_000_000]
    rounds = 2 if args.quick else 5

    def plotter_for(policy, env):
        plotter = Plotter(env, policy, max_path_length=50, on_frame=_discard, fps=10)
        plotter.start()
        return plotter

    rows = []
    header = (f"{'params':>10} | {'copy us':>9} | {'update_plot us':>14} | {'queue us':>9} | "
              f"{'update/copy':>11} | {'queue/copy':>10} | {'queue/update':>12} | "
              f"{'CPU update/copy':>15} | {'CPU queue/update':>16} | {'env obj/update':>14}")
    print(header, flush=True)
    print("-" * len(header))
    for size in sizes:
        repeats = int(min(2000, max(10, 3e7 / size)))
        if args.quick:
            repeats = max(5, repeats // 20)
        means, applied = bench_size(size, rounds, repeats, plotter_for)
        (copy_wall, copy_cpu), (up_wall, up_cpu), (q_wall,
                                                   q_cpu) = (means["copy"], means["update_plot"],
                                                             means["queue"])
        env_wall = means["env_object"][0]
        row = {
            "params": size,
            "repeats_per_round": repeats,
            "rounds": rounds,
            "copy_wall_s": copy_wall,
            "update_plot_wall_s": up_wall,
            "queue_wall_s": q_wall,
            "copy_cpu_s": copy_cpu,
            "update_plot_cpu_s": up_cpu,
            "queue_cpu_s": q_cpu,
            "update_over_copy": up_wall / copy_wall,
            "queue_over_copy": q_wall / copy_wall,
            "queue_over_update": q_wall / up_wall,
            "cpu_update_over_copy": up_cpu / copy_cpu,
            "cpu_queue_over_update": q_cpu / up_cpu,
            "env_object_wall_s": env_wall,
            "env_object_over_update": env_wall / up_wall,
            "worker_applied": applied,
        }
        rows.append(row)
        print(
            f"{size:>10} | {copy_wall * 1e6:>9.1f} | {up_wall * 1e6:>14.1f} | {q_wall * 1e6:>9.1f} | "
            f"{row['update_over_copy']:>11.2f} | {row['queue_over_copy']:>10.2f} | "
            f"{row['queue_over_update']:>12.2f} | {row['cpu_update_over_copy']:>15.2f} | "
            f"{row['cpu_queue_over_update']:>16.2f} | {row['env_object_over_update']:>14.2f}",
            flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "rows": rows
        },
                  out,
                  indent=2)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
