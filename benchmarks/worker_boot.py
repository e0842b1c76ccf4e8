"""What the plot worker's start-up costs for each kind of policy: the seconds until it is ready
(``stats["boot_seconds"]``), the CPU its two processes have used by then (read from /proc: the
imports, TensorFlow's where the policy acts through it, the policy's rebuild, the env, GL), the
budget's count of the start-up's CPU (``stats["boot_cpu_seconds"]``, the first video included)
and the seconds from ``start()`` to the first video, this checkout against another in the same
rounds.

    .venv/bin/python benchmarks/worker_boot.py --before-tree DIR [--rounds 3]

Each measurement is a fresh trainer process (its own TensorFlow imported first, as a trainer's
is) that plots a policy on Swimmer-v5 into a scratch folder until its first video, then closes.
Policies: a Keras 2x64 MLP of Dense layers, the same with its input normalized and each hidden
layer layer-normalized, the 2x64 MLP with its input joined to the last layer's (a skip
connection), the 2x64 MLP with ``keras.ops`` of its own (a leaky hidden layer through
``keras.ops.leaky_relu(x, 0.1)``, the actions scaled by an array), the 2x64 MLP with an
``EinsumDense`` output layer (which the numpy copy does not compute: the worker acts through
TensorFlow), and the RL host's 32x32 Gaussian MLP (``--policies`` picks some of them).
Checkouts alternate which goes first; medians over ``--rounds``. Takes ~3 minutes on 2 cores.
Prints a table; writes benchmarks/results/worker_boot.json.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
POLICIES = ("2x64 MLP", "2x64 MLP, normalized", "2x64 MLP, skip connection",
            "2x64 MLP, keras.ops with arguments", "2x64 MLP, EinsumDense output", "RL 32x32 MLP")


def build(name: str):
    """The policy ``name`` for Swimmer-v5 (8 observations, 2 actions): a Keras model, or the RL
    host's Gaussian MLP."""
    if name == "RL 32x32 MLP":
        from async_plotter.rl import GaussianMLPPolicy

        return GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(32, 32), seed=0)
    import keras
    import numpy as np

    layers = keras.layers
    inputs = keras.Input((8, ))
    if name == "2x64 MLP, normalized":
        hidden = layers.Normalization(mean=np.zeros(8), variance=np.ones(8))(inputs)
        for _ in range(2):
            hidden = layers.Activation("tanh")(layers.LayerNormalization()(
                layers.Dense(64)(hidden)))
        return keras.Model(inputs, layers.Dense(2)(hidden))
    if name == "2x64 MLP, keras.ops with arguments":
        hidden = keras.ops.leaky_relu(layers.Dense(64)(inputs), 0.1)
        hidden = keras.ops.leaky_relu(layers.Dense(64)(hidden), 0.1)
        scale = np.array([1.0, 0.5], np.float32)
        return keras.Model(inputs, keras.ops.tanh(layers.Dense(2)(hidden)) * scale)
    hidden = layers.Dense(64, activation="tanh")(inputs)
    hidden = layers.Dense(64, activation="tanh")(hidden)
    if name == "2x64 MLP, skip connection":
        hidden = layers.Concatenate()([inputs, hidden])
    if name == "2x64 MLP, EinsumDense output":
        return keras.Model(inputs, layers.EinsumDense("ab,bc->ac", 2, bias_axes="c")(hidden))
    return keras.Model(inputs, layers.Dense(2)(hidden))


def child(name: str) -> None:
    """In a process that imports ``async_plotter`` from the measured checkout: one start-up."""
    from async_plotter import Plotter

    model = build(name)
    with tempfile.TemporaryDirectory(prefix="worker_boot_") as folder:
        started = time.monotonic()
        with Plotter("Swimmer-v5",
                     model,
                     max_path_length=100,
                     video_dir=folder,
                     min_video_seconds=0) as plotter:
            plotter.update_plot(model, iteration=0)
            while not plotter.stats["boot_seconds"] and time.monotonic() - started < 300:
                time.sleep(0.005)
            ready_cpu = _cpu_seconds(plotter.stats["worker_pids"])
            while not plotter.stats["video_log"] and time.monotonic() - started < 300:
                time.sleep(0.02)
            first_video = time.monotonic() - started
    stats = plotter.stats
    print(
        json.dumps(
            dict(policy_call=stats["policy_call"],
                 boot_s=stats["boot_seconds"],
                 boot_cpu_s=stats["boot_cpu_seconds"],
                 ready_cpu_s=ready_cpu,
                 first_video_s=round(first_video, 3))))


def _cpu_seconds(pids: dict) -> float:
    """The CPU the worker's two processes have used so far (their own, read from /proc when the
    worker reports ready: the boot alone, before any video's frames or encoder)."""
    import psutil

    used = 0.0
    for pid in pids.values():
        times = psutil.Process(pid).cpu_times()
        used += times.user + times.system
    return round(used, 3)


def measure(tree: str, name: str) -> dict:
    from benchmarks.machine import child_result, library_env

    return child_result(__file__, ["--child", name],
                        library_env(tree, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""))


FIGURES = ("boot_s", "ready_cpu_s", "boot_cpu_s", "first_video_s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-tree", help="another checkout of async_plotter to compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policies",
                        default=";".join(POLICIES),
                        help="separated by semicolons, of: " + "; ".join(POLICIES))
    parser.add_argument("--out", default=os.path.join(RESULTS, "worker_boot.json"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    sys.path.insert(0, ROOT)
    from benchmarks.machine import checkouts, side_by_side, write_results

    load_before = os.getloadavg()
    trees = checkouts(ROOT, args.before_tree)
    policies = [name.strip() for name in args.policies.split(";")]
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown:
        parser.error(f"unknown --policies {unknown}; choose among {list(POLICIES)}")
    runs = side_by_side(args.rounds, policies, trees, measure)
    rows = []
    print(f"\nThe plot worker's start-up on Swimmer-v5, medians of {args.rounds}")
    print("| policy | checkout | worker acts with | ready after s | CPU-s at ready | boot CPU-s "
          "| first video s |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for name, by_tree in runs.items():
        for tree, measured in by_tree.items():
            row = dict(policy=name,
                       checkout=tree,
                       policy_call=measured[-1]["policy_call"],
                       runs=measured,
                       **{f: statistics.median(m[f] for m in measured)
                          for f in FIGURES})
            rows.append(row)
            print(f"| {name} | {tree} | {row['policy_call']} | {row['boot_s']:.2f} | "
                  f"{row['ready_cpu_s']:.2f} | {row['boot_cpu_s']:.2f} | "
                  f"{row['first_video_s']:.2f} |")
    ratios = {}
    if "before" in trees:
        print("\n| policy | ready now / before | CPU at ready now / before | boot CPU now / before "
              "| first video now / before |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name in policies:
            now, then = (next(r for r in rows if r["policy"] == name and r["checkout"] == tree)
                         for tree in ("now", "before"))
            ratios[name] = {f: round(now[f] / then[f], 3) for f in FIGURES}
            print(f"| {name} | " + " | ".join(f"{ratios[name][f]:.2f}x" for f in FIGURES) + " |")
    write_results(args.out, args, load_before, trees=trees, rows=rows, ratios=ratios)


if __name__ == "__main__":
    main()
