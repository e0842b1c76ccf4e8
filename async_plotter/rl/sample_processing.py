"""From sampled paths to what the policy update needs: returns, advantages, baseline, statistics.

Everything is vectorised over the whole batch. The per-path discounted sums, the one recurrence in
here, use a segmented parallel scan (Hillis-Steele doubling): ``log2(longest path)`` numpy passes
over the batch instead of a Python loop per step or per path, and, unlike the "reverse cumsum of
``gamma**t * x`` divided by ``gamma**t``" trick, without cancellation when ``gamma**t`` gets tiny.
"""
import dataclasses
from typing import Dict, Optional

import numpy as np

from async_plotter.rl.baselines import Baseline
from async_plotter.rl.batch import SampleBatch


def discount_cumsum(x: np.ndarray, discount: float, path_lengths: np.ndarray) -> np.ndarray:
    """``y[t] = x[t] + discount * y[t + 1]``, restarting at every path boundary.

    Args:
        x: ``(N,)`` values, paths concatenated.
        discount: the factor per step.
        path_lengths: ``(P,)`` positive lengths summing to N.
    """
    out = np.array(x, dtype=np.float64)
    n = out.shape[0]
    lengths = np.asarray(path_lengths, dtype=np.int64)
    if n == 0:
        return out
    if lengths.sum() != n or (lengths <= 0).any():
        raise ValueError(f"path_lengths must be positive and sum to {n}, got sum "
                         f"{int(lengths.sum())}, min {int(lengths.min()) if lengths.size else 0}")
    # coef[i] is the factor that links y[i] to the value `span` steps ahead; it is zero when that
    # crosses the end of i's path, which is what keeps paths apart.
    coef = np.full(n, float(discount))
    coef[np.cumsum(lengths) - 1] = 0.0
    span, longest = 1, int(lengths.max())
    while span < longest:
        out[:-span] += coef[:-span] * out[span:]
        coef[:-span] = coef[:-span] * coef[span:]
        span *= 2
    return out


def discounted_returns(batch: SampleBatch,
                       discount: float,
                       final_values: Optional[np.ndarray] = None) -> np.ndarray:
    """Discounted return from every step to the end of its path.

    ``final_values`` (one per path) is the value of the state each path stopped in; it is added,
    discounted, after the last reward (0 for paths that ended in a terminal state).
    """
    rewards = batch.rewards
    if final_values is not None:
        rewards = rewards.copy()
        rewards[batch.path_ends] += discount * np.asarray(final_values, dtype=np.float64)
    return discount_cumsum(rewards, discount, batch.path_lengths)


def gae_advantages(rewards: np.ndarray,
                   values: np.ndarray,
                   path_lengths: np.ndarray,
                   discount: float,
                   gae_lambda: float,
                   final_values: Optional[np.ndarray] = None) -> np.ndarray:
    """Generalised advantage estimation (Schulman et al. 2016).

    The value after the last step of a path is ``final_values`` (one per path), or 0 when not
    given, as in rllab; ``gae_lambda=1`` then gives exactly ``returns - values``.
    """
    values = np.asarray(values, dtype=np.float64)
    next_values = np.empty_like(values)
    next_values[:-1] = values[1:]
    ends = np.cumsum(path_lengths) - 1
    next_values[ends] = 0.0 if final_values is None else final_values
    deltas = np.asarray(rewards, dtype=np.float64) + discount * next_values - values
    return discount_cumsum(deltas, discount * gae_lambda, path_lengths)


def normalize(x: np.ndarray, center: bool = True) -> np.ndarray:
    """Divide by the standard deviation, and subtract the mean when ``center``."""
    std = x.std() + 1e-8
    return (x - x.mean()) / std if center else x / std


def explained_variance(predicted: np.ndarray, target: np.ndarray) -> float:
    """``1 - Var(target - predicted) / Var(target)``: 1 is perfect, 0 is no better than the mean."""
    var = float(np.var(target))
    if var == 0.0:
        return 1.0 if np.allclose(predicted, target) else 0.0
    return 1.0 - float(np.var(target - predicted)) / var


@dataclasses.dataclass
class ProcessedSamples:
    """A batch plus the per-step quantities the update needs, and summary statistics."""

    batch: SampleBatch
    returns: np.ndarray  # (N,) discounted returns
    baselines: np.ndarray  # (N,) baseline predictions (from the fit of the previous iteration)
    advantages: np.ndarray  # (N,) possibly centred and normalised
    stats: Dict[str, float]


def process_samples(batch: SampleBatch,
                    baseline: Optional[Baseline],
                    discount: float = 0.99,
                    gae_lambda: float = 1.0,
                    center_adv: bool = True,
                    bootstrap_truncated: bool = True,
                    fit_baseline: bool = True) -> ProcessedSamples:
    """Compute returns, advantages and statistics, then refit the baseline on this batch.

    The baseline predicts *before* it is fitted on this batch, as in rllab: advantages from a
    baseline fitted to the same returns would be biased towards zero.

    ``bootstrap_truncated``: a path cut by a time limit (not ``terminated``) did not end; the
    baseline's value of the state it stopped in stands in for the rewards it would have collected
    (Pardo et al. 2018, "Time Limits in Reinforcement Learning"). rllab counted it as 0, which makes
    every cut path look like a failure near its end. Terminal states are always worth 0.
    """
    timesteps = batch.timesteps
    if baseline is None:
        values = np.zeros(batch.num_steps)
    else:
        values = np.asarray(baseline.predict(batch.observations, timesteps), dtype=np.float64)
    final_values = None
    if bootstrap_truncated and baseline is not None and batch.last_observations is not None:
        final_values = baseline.predict(batch.last_observations, batch.path_lengths)
        final_values = np.where(batch.terminated, 0.0, final_values)
    returns = discounted_returns(batch, discount, final_values)
    advantages = gae_advantages(batch.rewards, values, batch.path_lengths, discount, gae_lambda,
                                final_values)
    if center_adv:
        advantages = normalize(advantages, center=True)
    path_returns = batch.path_sums(batch.rewards)
    discounted = returns[batch.path_starts]
    if final_values is not None:  # report what the paths earned, not the bootstrap
        discounted = discounted - discount**batch.path_lengths * final_values
    stats = {
        "AverageReturn": float(path_returns.mean()),
        "StdReturn": float(path_returns.std()),
        "MaxReturn": float(path_returns.max()),
        "MinReturn": float(path_returns.min()),
        "NumTrajs": batch.num_paths,
        "AveragePathLength": float(batch.path_lengths.mean()),
        "AverageDiscountedReturn": float(discounted.mean()),
        "ExplainedVariance": explained_variance(values, returns),
    }
    if baseline is not None and fit_baseline:
        baseline.fit(batch.observations, timesteps, returns)
    return ProcessedSamples(batch, returns, values, advantages, stats)
