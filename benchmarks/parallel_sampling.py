"""Sampling throughput on Swimmer-v5 with one process versus two, measured in the same run.

    python benchmarks/parallel_sampling.py [--batch-size 10000] [--repeats 3]

Measures env steps per second of ``SerialSampler`` (n_parallel=1: sampling in the trainer's own
process), ``ParallelSampler(1)`` and ``ParallelSampler(2)``, with a (32, 32) Gaussian MLP policy and
paths of 500 steps; the first batch of each sampler is a warm-up, then rounds alternate between
the samplers. Writes
``benchmarks/results/parallel_sampling.json``.
"""
import argparse
import json
import os
import sys
import time
from typing import Any, Dict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ENV_ID = "Swimmer-v5"


def measure(samplers: Dict[str, Any], policy: Any, batch_size: int,
            repeats: int) -> Dict[str, float]:
    """Steps per second of each sampler, measured in interleaved rounds.

    Rounds alternate between the samplers, so load from anything else on the machine hits all of
    them alike instead of whichever happened to run at the time.
    """
    params = policy.get_param_values()
    steps = {name: 0 for name in samplers}
    seconds = {name: 0.0 for name in samplers}
    for sampler in samplers.values():
        sampler.start(ENV_ID, policy, seed=0)
    try:
        for sampler in samplers.values():
            sampler.obtain_samples(0, params, batch_size, 500)  # warm-up (tracing, first resets)
        for itr in range(1, repeats + 1):
            for name, sampler in samplers.items():
                started = time.perf_counter()
                batch = sampler.obtain_samples(itr, params, batch_size, 500)
                seconds[name] += time.perf_counter() - started
                steps[name] += batch.num_steps
    finally:
        for sampler in samplers.values():
            sampler.shutdown()
    return {name: steps[name] / seconds[name] for name in samplers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from async_plotter.rl import GaussianMLPPolicy, ParallelSampler, SerialSampler
    policy = GaussianMLPPolicy(ENV_ID, hidden_sizes=(32, 32), seed=0)
    policy.set_param_values(np.random.default_rng(0).normal(0, 0.1, policy.num_params))
    samplers = {
        "serial (n_parallel=1)": SerialSampler(),
        "ParallelSampler(1)": ParallelSampler(1),
        "ParallelSampler(2)": ParallelSampler(2),
    }
    rates = measure(samplers, policy, args.batch_size, args.repeats)
    serial = rates["serial (n_parallel=1)"]
    print(f"{'sampler':<24}{'steps/s':>10}{'vs serial':>11}")
    for name, rate in rates.items():
        print(f"{name:<24}{rate:>10,.0f}{rate / serial:>10.2f}x")
    ratio = rates["ParallelSampler(2)"] / serial
    print(f"n_parallel=2 vs n_parallel=1: {ratio:.2f}x on {os.cpu_count()} cores")
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "parallel_sampling.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(
            {
                "env_id":
                ENV_ID,
                "batch_size":
                args.batch_size,
                "repeats":
                args.repeats,
                "cpu_count":
                os.cpu_count(),
                "steps_per_s":
                rates,
                "ratio_n_parallel_2_vs_1":
                ratio,
                "ratio_parallel2_vs_parallel1":
                rates["ParallelSampler(2)"] / rates["ParallelSampler(1)"],
            },
            f,
            indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
