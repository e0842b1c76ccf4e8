"""Returns, GAE and baselines against plain-loop references."""
import numpy as np
import pytest

from async_plotter.rl.baselines import LinearFeatureBaseline, ZeroBaseline
from async_plotter.rl.batch import SampleBatch
from async_plotter.rl.sample_processing import (discount_cumsum, explained_variance, gae_advantages,
                                                process_samples)


def loop_discount_cumsum(x, discount, lengths):
    out, start = np.zeros(len(x)), 0
    for length in lengths:
        running = 0.0
        for t in reversed(range(start, start + length)):
            running = x[t] + discount * running
            out[t] = running
        start += length
    return out


def loop_gae(rewards, values, lengths, discount, lam, finals=None):
    """GAE by the textbook loop; ``finals[i]`` is the value after path i's last step (else 0)."""
    out, start = np.zeros(len(rewards)), 0
    for i, length in enumerate(lengths):
        advantage = 0.0
        final = 0.0 if finals is None else finals[i]
        for t in reversed(range(start, start + length)):
            next_value = values[t + 1] if t + 1 < start + length else final
            delta = rewards[t] + discount * next_value - values[t]
            advantage = delta + discount * lam * advantage
            out[t] = advantage
        start += length
    return out


def make_batch(lengths, obs_dim=3, seed=0):
    rng = np.random.default_rng(seed)
    n = int(np.sum(lengths))
    return SampleBatch(observations=rng.standard_normal((n, obs_dim)).astype(np.float32),
                       actions=rng.standard_normal((n, 1)).astype(np.float32),
                       rewards=rng.standard_normal(n),
                       agent_infos={
                           "mean": np.zeros((n, 1), np.float32),
                           "log_std": np.zeros((n, 1), np.float32)
                       },
                       path_lengths=np.asarray(lengths, dtype=np.int64),
                       terminated=np.zeros(len(lengths), dtype=bool))


@pytest.mark.parametrize("lengths", [[1], [5], [3, 1, 7, 2], [17, 33, 1, 64, 2, 9], [1] * 6])
@pytest.mark.parametrize("discount", [0.0, 0.5, 0.99, 1.0])
def test_discount_cumsum_matches_loop(lengths, discount):
    x = np.random.default_rng(len(lengths)).standard_normal(sum(lengths))
    np.testing.assert_allclose(discount_cumsum(x, discount, lengths),
                               loop_discount_cumsum(x, discount, lengths),
                               rtol=1e-12,
                               atol=1e-12)


def test_discount_cumsum_long_paths_stay_accurate():
    # gamma**t underflows the "divide by gamma**t" trick; the scan has no such problem.
    lengths = [1000, 3, 1000]
    x = np.ones(sum(lengths))
    result = discount_cumsum(x, 0.9, lengths)
    np.testing.assert_allclose(result, loop_discount_cumsum(x, 0.9, lengths), rtol=1e-12)
    assert result[999] == 1.0 and result[1002] == 1.0


def test_discount_cumsum_rejects_bad_lengths():
    with pytest.raises(ValueError, match="path_lengths must be positive and sum to 5"):
        discount_cumsum(np.zeros(5), 0.9, [2, 2])


@pytest.mark.parametrize("lam", [0.0, 0.95, 1.0])
def test_gae_matches_loop(lam):
    lengths = [4, 1, 9, 6]
    rng = np.random.default_rng(1)
    rewards, values = rng.standard_normal(20), rng.standard_normal(20)
    np.testing.assert_allclose(gae_advantages(rewards, values, lengths, 0.98, lam),
                               loop_gae(rewards, values, lengths, 0.98, lam),
                               rtol=1e-12,
                               atol=1e-12)


def test_process_samples_statistics_and_normalisation():
    batch = make_batch([4, 1, 9, 6])
    processed = process_samples(batch,
                                ZeroBaseline(),
                                discount=0.9,
                                gae_lambda=1.0,
                                center_adv=False)
    expected_returns = loop_discount_cumsum(batch.rewards, 0.9, batch.path_lengths)
    np.testing.assert_allclose(processed.returns, expected_returns, rtol=1e-12)
    # With a zero baseline and lambda = 1 the advantages are the returns.
    np.testing.assert_allclose(processed.advantages, expected_returns, rtol=1e-12)
    sums = [
        batch.rewards[0:4].sum(), batch.rewards[4:5].sum(), batch.rewards[5:14].sum(),
        batch.rewards[14:20].sum()
    ]
    assert processed.stats["AverageReturn"] == pytest.approx(np.mean(sums))
    assert processed.stats["MaxReturn"] == pytest.approx(max(sums))
    assert processed.stats["NumTrajs"] == 4

    centred = process_samples(batch, ZeroBaseline(), discount=0.9, center_adv=True)
    assert centred.advantages.mean() == pytest.approx(0.0, abs=1e-12)
    assert centred.advantages.std() == pytest.approx(1.0, rel=1e-6)


def test_linear_feature_baseline_fits_and_predicts_before_fitting():
    batch = make_batch([50, 30, 70], obs_dim=2, seed=3)
    obs, steps = batch.observations, batch.timesteps
    baseline = LinearFeatureBaseline()
    np.testing.assert_array_equal(baseline.predict(obs, steps), 0.0)
    # A target inside the feature span is recovered exactly.
    t = steps / 100.0
    target = 1.0 + 2.0 * obs[:, 0] - obs[:, 1].astype(np.float64)**2 + 0.5 * t**3
    baseline.fit(obs, steps, target)
    np.testing.assert_allclose(baseline.predict(obs, steps), target, atol=1e-4)
    assert explained_variance(baseline.predict(obs, steps), target) == pytest.approx(1.0, abs=1e-8)

    # rllab semantics: predictions come from the previous fit, then the baseline refits.
    fresh = LinearFeatureBaseline()
    first = process_samples(batch, fresh, discount=0.99)
    np.testing.assert_array_equal(first.baselines, 0.0)
    second = process_samples(batch, fresh, discount=0.99)
    assert second.stats["ExplainedVariance"] > 0.0


class ConstantBaseline:
    """Values every state at ``value``."""

    def __init__(self, value):
        self.value = value

    def predict(self, observations, timesteps):
        return np.full(len(timesteps), self.value)

    def fit(self, observations, timesteps, returns):
        pass


@pytest.mark.parametrize("lam", [0.9, 1.0])
def test_truncated_paths_bootstrap_from_the_state_they_stopped_in(lam):
    lengths = [3, 4, 2]
    batch = make_batch(lengths)
    batch.terminated = np.array([True, False, False])  # the first path failed; the others were cut
    batch.last_observations = np.zeros((3, 3), np.float32)
    discount, value = 0.9, 5.0

    processed = process_samples(batch, ConstantBaseline(value), discount, lam, center_adv=False)
    # Reference returns: the bootstrap value is one more "reward" after each cut path.
    finals = [0.0, value, value]
    returns = []
    for start, length, final in zip([0, 3, 7], lengths, finals):
        rewards = np.append(batch.rewards[start:start + length], final)
        returns.extend(loop_discount_cumsum(rewards, discount, [length + 1])[:length])
    np.testing.assert_allclose(processed.returns, returns, rtol=1e-12)
    advantages = loop_gae(batch.rewards, np.full(9, value), lengths, discount, lam, finals)
    np.testing.assert_allclose(processed.advantages, advantages, rtol=1e-12, atol=1e-12)
    # The reported discounted return is what the paths earned, without the bootstrap.
    earned = [
        loop_discount_cumsum(batch.rewards[s:s + n], discount, [n])[0]
        for s, n in zip([0, 3, 7], lengths)
    ]
    assert processed.stats["AverageDiscountedReturn"] == pytest.approx(np.mean(earned))

    plain = process_samples(batch,
                            ConstantBaseline(value),
                            discount,
                            lam,
                            center_adv=False,
                            bootstrap_truncated=False)
    np.testing.assert_allclose(plain.returns, loop_discount_cumsum(batch.rewards, discount,
                                                                   lengths))


def test_timesteps_and_path_helpers():
    batch = make_batch([3, 1, 2])
    np.testing.assert_array_equal(batch.timesteps, [0, 1, 2, 0, 0, 1])
    np.testing.assert_array_equal(batch.path_starts, [0, 3, 4])
    paths = batch.paths()
    assert [len(p["rewards"]) for p in paths] == [3, 1, 2]
    rebuilt = SampleBatch.from_paths(paths)
    np.testing.assert_array_equal(rebuilt.rewards, batch.rewards)
    np.testing.assert_array_equal(rebuilt.path_lengths, batch.path_lengths)
