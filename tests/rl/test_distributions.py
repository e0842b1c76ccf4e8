"""Distributions against values computed by hand, and TensorFlow against numpy."""
import math

import numpy as np
import pytest
import tensorflow as tf

from async_plotter.rl.distributions import Categorical, DiagGaussian


def test_diag_gaussian_log_likelihood_by_hand():
    dist = DiagGaussian(2)
    info = {"mean": np.array([[0.0, 1.0]]), "log_std": np.array([[math.log(2.0), 0.0]])}
    x = np.array([[1.0, 1.5]])
    # Per dimension: -0.5 z^2 - log(sigma) - 0.5 log(2 pi); z = (1-0)/2 and (1.5-1)/1.
    expected = (-0.5 * 0.25 - math.log(2.0) -
                0.5 * math.log(2 * math.pi)) + (-0.5 * 0.25 - 0.0 - 0.5 * math.log(2 * math.pi))
    assert dist.log_likelihood_np(x, info)[0] == pytest.approx(expected, rel=1e-12)
    tf_value = dist.log_likelihood(tf.constant(x), {k: tf.constant(v) for k, v in info.items()})
    assert float(tf_value[0]) == pytest.approx(expected, rel=1e-6)


def test_diag_gaussian_kl_and_entropy_by_hand():
    dist = DiagGaussian(1)
    old = {"mean": np.array([[1.0]]), "log_std": np.array([[math.log(0.5)]])}
    new = {"mean": np.array([[0.0]]), "log_std": np.array([[math.log(2.0)]])}
    # KL(N(m1, s1) || N(m2, s2)) = log(s2/s1) + (s1^2 + (m1-m2)^2) / (2 s2^2) - 1/2
    expected = math.log(2.0 / 0.5) + (0.25 + 1.0) / (2 * 4.0) - 0.5
    assert dist.kl_np(old, new)[0] == pytest.approx(expected, rel=1e-12)
    assert float(
        dist.kl({
            k: tf.constant(v)
            for k, v in old.items()
        }, {
            k: tf.constant(v)
            for k, v in new.items()
        })[0]) == pytest.approx(expected)
    assert dist.kl_np(old, old)[0] == pytest.approx(0.0, abs=1e-12)
    # Entropy of N(m, s): 0.5 log(2 pi e s^2)
    assert dist.entropy_np(new)[0] == pytest.approx(0.5 * math.log(2 * math.pi * math.e * 4.0))


def test_categorical_by_hand():
    dist = Categorical(2)
    p = {"prob": np.array([[0.2, 0.8]])}
    q = {"prob": np.array([[0.5, 0.5]])}
    kl = 0.2 * math.log(0.2 / 0.5) + 0.8 * math.log(0.8 / 0.5)
    assert dist.kl_np(p, q)[0] == pytest.approx(kl, rel=1e-6)
    assert dist.entropy_np(p)[0] == pytest.approx(-(0.2 * math.log(0.2) + 0.8 * math.log(0.8)),
                                                  rel=1e-6)
    assert dist.log_likelihood_np(np.array([1]), p)[0] == pytest.approx(math.log(0.8), rel=1e-6)
    assert dist.likelihood_ratio_np(np.array([0]), p, q)[0] == pytest.approx(0.5 / 0.2, rel=1e-6)


@pytest.mark.parametrize("dist_cls", [DiagGaussian, Categorical])
def test_tensorflow_matches_numpy(dist_cls):
    rng = np.random.default_rng(0)
    dist = dist_cls(3)

    def random_info():
        if dist_cls is DiagGaussian:
            return {"mean": rng.standard_normal((50, 3)), "log_std": rng.normal(0, 0.5, (50, 3))}
        logits = rng.standard_normal((50, 3))
        return {"prob": np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)}

    old, new = random_info(), random_info()
    x = rng.standard_normal((50, 3)) if dist_cls is DiagGaussian else rng.integers(0, 3, 50)
    as_tf = lambda info: {k: tf.constant(v) for k, v in info.items()}  # noqa: E731
    pairs = [
        (dist.log_likelihood(tf.constant(x), as_tf(new)), dist.log_likelihood_np(x, new)),
        (dist.kl(as_tf(old), as_tf(new)), dist.kl_np(old, new)),
        (dist.entropy(as_tf(new)), dist.entropy_np(new)),
        (dist.likelihood_ratio(tf.constant(x), as_tf(old),
                               as_tf(new)), dist.likelihood_ratio_np(x, old, new)),
    ]
    for tf_value, np_value in pairs:
        np.testing.assert_allclose(tf_value.numpy(), np_value, rtol=1e-6, atol=1e-9)
    assert (dist.kl_np(old, new) >= 0).all()
