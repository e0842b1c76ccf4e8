"""Throughput of sample processing (returns, GAE, linear baseline predict + fit, normalisation).

    python benchmarks/sample_processing.py

Synthetic batches shaped like Swimmer's (8-dimensional observations, paths of 1-1000 steps) of
1e4, 1e5 and 1e6 transitions. Target: >= 1,000,000 transitions/s for the whole
``process_samples`` call. A per-step Python loop (what a straightforward port of rllab's per-path
code costs) is timed alongside for scale. Writes ``benchmarks/results/sample_processing.json``.
"""
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from async_plotter.rl.baselines import LinearFeatureBaseline  # noqa: E402
from async_plotter.rl.batch import SampleBatch  # noqa: E402
from async_plotter.rl.sample_processing import discount_cumsum, process_samples  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
TARGET = 1_000_000


def make_batch(n: int, rng: np.random.Generator, obs_dim: int = 8) -> SampleBatch:
    lengths = []
    while sum(lengths) < n:
        lengths.append(int(rng.integers(1, 1001)))
    lengths[-1] -= sum(lengths) - n
    if lengths[-1] == 0:
        lengths.pop()
    return SampleBatch(observations=rng.standard_normal((n, obs_dim)).astype(np.float32),
                       actions=rng.standard_normal((n, 2)).astype(np.float32),
                       rewards=rng.standard_normal(n),
                       agent_infos={
                           "mean": np.zeros((n, 2), np.float32),
                           "log_std": np.zeros((n, 2), np.float32)
                       },
                       path_lengths=np.asarray(lengths, dtype=np.int64),
                       terminated=rng.random(len(lengths)) < 0.5,
                       last_observations=rng.standard_normal(
                           (len(lengths), obs_dim)).astype(np.float32))


def loop_returns_and_gae(batch: SampleBatch, values: np.ndarray, discount: float,
                         lam: float) -> None:
    """The per-step Python loop, for scale (returns and GAE only: no baseline fit)."""
    returns = np.empty(batch.num_steps)
    advantages = np.empty(batch.num_steps)
    start = 0
    for length in batch.path_lengths:
        ret = adv = 0.0
        for t in range(start + length - 1, start - 1, -1):
            next_value = values[t + 1] if t + 1 < start + length else 0.0
            ret = batch.rewards[t] + discount * ret
            adv = batch.rewards[t] + discount * next_value - values[t] + discount * lam * adv
            returns[t], advantages[t] = ret, adv
        start += length


def best_of(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for n in (10_000, 100_000, 1_000_000):
        batch = make_batch(n, rng)
        baseline = LinearFeatureBaseline()
        # Fitted once so that predict() does real work; process_samples then predicts, computes
        # returns and GAE, bootstraps cut paths, normalises, and refits.
        baseline.fit(batch.observations, batch.timesteps, rng.standard_normal(n))
        repeats = 5 if n < 1_000_000 else 3
        full = best_of(lambda: process_samples(batch, baseline, 0.99, 0.97, True), repeats)
        scan = best_of(lambda: discount_cumsum(batch.rewards, 0.99, batch.path_lengths), repeats)
        values = baseline.predict(batch.observations, batch.timesteps)
        loop = best_of(lambda: loop_returns_and_gae(batch, values, 0.99, 0.97), 1)
        rows.append({
            "transitions": n,
            "paths": batch.num_paths,
            "process_samples_s": full,
            "process_samples_per_s": n / full,
            "discount_cumsum_per_s": n / scan,
            "python_loop_returns_gae_per_s": n / loop,
            "meets_target": n / full >= TARGET,
        })

    print(f"{'transitions':>12}{'paths':>8}{'process_samples/s':>20}{'discount_cumsum/s':>20}"
          f"{'python loop/s':>16}")
    for r in rows:
        print(f"{r['transitions']:>12,}{r['paths']:>8}{r['process_samples_per_s']:>20,.0f}"
              f"{r['discount_cumsum_per_s']:>20,.0f}{r['python_loop_returns_gae_per_s']:>16,.0f}")
    print(f"target: >= {TARGET:,} transitions/s for process_samples "
          f"({'met' if all(r['meets_target'] for r in rows) else 'NOT met'})")
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "sample_processing.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"target_per_s": TARGET, "results": rows}, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
