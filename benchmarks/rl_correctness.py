"""Does TRPO learn? Learning curves on CartPole-v1, InvertedPendulum-v5 and Swimmer-v5.

Goals: CartPole-v1 average return >= 475 and InvertedPendulum-v5 >= 900 after 100 iterations (mean
over seeds of the last 5 iterations' AverageReturn); Swimmer-v5 has no fixed goal and is compared
with a uniformly random policy measured in the same run.

    python benchmarks/rl_correctness.py                      # everything: ~15-20 min on 2 cores
    python benchmarks/rl_correctness.py --env cartpole --seeds 1
    python benchmarks/rl_correctness.py --quick              # 15 iterations, one seed, each env

Writes ``benchmarks/results/rl_correctness.json`` (entries of other envs already there are kept)
and ``benchmarks/results/rl_correctness.png``; run folders go to ``runs/rl_correctness/``.
"""
import argparse
import json
import logging
import os
import sys
import time
from typing import Any, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# Run folders (progress.csv, snapshots, debug.log) go where .gitignore keeps them out of git.
RUNS = os.path.join(os.path.dirname(RESULTS), os.pardir, "runs", "rl_correctness")

# TRPO settings per task (rllab's benchmark settings where they exist).
TASKS: Dict[str, Dict[str, Any]] = {
    "cartpole":
    dict(env_id="CartPole-v1",
         discrete=True,
         n_itr=100,
         batch_size=4000,
         max_path_length=500,
         discount=0.99,
         gae_lambda=0.97,
         goal=475.0),
    "pendulum":
    dict(env_id="InvertedPendulum-v5",
         discrete=False,
         n_itr=100,
         batch_size=5000,
         max_path_length=1000,
         discount=0.99,
         gae_lambda=0.97,
         goal=900.0),
    "swimmer":
    dict(env_id="Swimmer-v5",
         discrete=False,
         n_itr=100,
         batch_size=5000,
         max_path_length=500,
         discount=0.995,
         gae_lambda=0.97,
         goal=None),
}


def random_policy_return(env_id: str, max_path_length: int, n_paths: int, seed: int) -> float:
    """Average return of uniformly random actions."""
    import gymnasium as gym
    env = gym.make(env_id)
    env.action_space.seed(seed)
    returns = []
    for i in range(n_paths):
        env.reset(seed=seed + i)
        total = 0.0
        for _ in range(max_path_length):
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += reward
            if terminated or truncated:
                break
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def run_task(name: str,
             seeds: List[int],
             n_itr: int,
             n_parallel: int,
             tag: str = "") -> Dict[str, Any]:
    from async_plotter.rl import (TRPO, CategoricalMLPPolicy, GaussianMLPPolicy,
                                  run_experiment_lite)
    task = TASKS[name]
    curves, finals, seconds = {}, {}, {}
    for seed in seeds:

        def make(task=task):
            policy_cls = CategoricalMLPPolicy if task["discrete"] else GaussianMLPPolicy
            return TRPO(task["env_id"],
                        policy_cls(task["env_id"], hidden_sizes=(32, 32)),
                        n_itr=n_itr,
                        batch_size=task["batch_size"],
                        max_path_length=task["max_path_length"],
                        discount=task["discount"],
                        gae_lambda=task["gae_lambda"],
                        step_size=0.01)

        started = time.perf_counter()
        result = run_experiment_lite(make,
                                     n_parallel=n_parallel,
                                     seed=seed,
                                     log_dir=os.path.join(RUNS, f"{name}{tag}_seed{seed}"))
        seconds[seed] = time.perf_counter() - started
        curve = [row["AverageReturn"] for row in result.history]
        curves[seed] = curve
        finals[seed] = float(np.mean(curve[-5:]))
        print(
            f"{task['env_id']} seed {seed}: final {finals[seed]:.1f}, max {max(curve):.1f}, "
            f"{seconds[seed]:.0f} s",
            flush=True)
    entry: Dict[str, Any] = {
        "env_id": task["env_id"],
        "n_itr": n_itr,
        "batch_size": task["batch_size"],
        "max_path_length": task["max_path_length"],
        "discount": task["discount"],
        "gae_lambda": task["gae_lambda"],
        "n_parallel": n_parallel,
        "seeds": seeds,
        "curves": {
            str(s): c
            for s, c in curves.items()
        },
        "final_return_per_seed": {
            str(s): f
            for s, f in finals.items()
        },
        "final_return_mean": float(np.mean(list(finals.values()))),
        "seconds_per_seed": {
            str(s): round(t, 1)
            for s, t in seconds.items()
        },
        "goal": task["goal"],
    }
    if task["goal"] is not None:
        entry["goal_met"] = bool(entry["final_return_mean"] >= task["goal"]
                                 and n_itr >= TASKS[name]["n_itr"])
        first = [
            next((i for i, r in enumerate(c) if r >= task["goal"]), None) for c in curves.values()
        ]
        entry["first_itr_at_goal_per_seed"] = first
    else:
        entry["random_policy_return"] = random_policy_return(task["env_id"],
                                                             task["max_path_length"], 20, 12345)
    return entry


def plot(results: Dict[str, Any], path: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    names = [n for n in results if n.split("_")[0] in TASKS]
    figure = Figure(figsize=(5 * len(names), 3.8), dpi=100)
    FigureCanvasAgg(figure)
    for i, name in enumerate(names):
        entry = results[name]
        axes = figure.add_subplot(1, len(names), i + 1)
        for seed, curve in entry["curves"].items():
            axes.plot(curve, label=f"seed {seed}")
        if entry.get("goal") is not None:
            axes.axhline(entry["goal"], color="k", linestyle="--", linewidth=1, label="goal")
        if "random_policy_return" in entry:
            axes.axhline(entry["random_policy_return"],
                         color="gray",
                         linestyle=":",
                         label="random policy")
        axes.set_title(f"TRPO {entry['env_id']}")
        axes.set_xlabel("Iteration")
        axes.set_ylabel("AverageReturn")
        axes.grid(True, alpha=0.3)
        axes.legend(loc="best", fontsize=8)
    figure.tight_layout()
    figure.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env",
                        action="append",
                        choices=sorted(TASKS),
                        help="task(s) to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="15 iterations, one seed")
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (default 3)")
    parser.add_argument("--n-itr", type=int, default=None, help="override the iteration count")
    parser.add_argument("--n-parallel", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=1, help="seeds are first-seed, +1, ...")
    parser.add_argument("--discount", type=float, default=None, help="override the task's")
    parser.add_argument("--gae-lambda", type=float, default=None, help="override the task's")
    parser.add_argument("--tag", default="", help="suffix of the result key (for tuning runs)")
    args = parser.parse_args()

    # Warnings on the console; the per-iteration tables still go to each run's debug.log.
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING)
    logging.basicConfig(level=logging.WARNING, format="%(message)s", handlers=[console])
    names = args.env or list(TASKS)
    n_seeds = args.seeds or (1 if args.quick else 3)
    os.makedirs(RESULTS, exist_ok=True)
    json_path = os.path.join(RESULTS, "rl_correctness.json")
    results: Dict[str, Any] = {}
    if os.path.exists(json_path):
        with open(json_path, encoding="utf-8") as f:
            results = json.load(f)
    for name in names:
        n_itr = args.n_itr or (15 if args.quick else TASKS[name]["n_itr"])
        for key in ("discount", "gae_lambda"):
            if getattr(args, key) is not None:
                TASKS[name][key] = getattr(args, key)
        seeds = list(range(args.first_seed, args.first_seed + n_seeds))
        results[name + args.tag] = run_task(name, seeds, n_itr, args.n_parallel, args.tag)
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
        plot(results, os.path.join(RESULTS, "rl_correctness.png"))

    print(f"\n{'task':<22}{'itr':>5}{'seeds':>6}{'final (mean)':>14}{'goal':>8}{'random':>9}")
    for name in names:
        e = results[name + args.tag]
        goal = "-" if e["goal"] is None else f"{e['goal']:.0f}"
        rnd = f"{e['random_policy_return']:.1f}" if "random_policy_return" in e else "-"
        print(f"{e['env_id']:<22}{e['n_itr']:>5}{len(e['seeds']):>6}"
              f"{e['final_return_mean']:>14.1f}{goal:>8}{rnd:>9}")
    print(f"\nwrote {json_path} and {os.path.join(RESULTS, 'rl_correctness.png')}")


if __name__ == "__main__":
    main()
