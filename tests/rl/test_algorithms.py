"""TRPO and VPG: the pieces (Fisher-vector product, conjugate gradient) and that they learn."""
import numpy as np
import pytest
import tensorflow as tf

from async_plotter.rl.baselines import LinearFeatureBaseline
from async_plotter.rl.optim import Adam, conjugate_gradient, flatten_tensors
from async_plotter.rl.policies import CategoricalMLPPolicy, GaussianMLPPolicy
from async_plotter.rl.trpo import TRPO
from async_plotter.rl.vpg import VPG


def test_conjugate_gradient_solves_spd_system():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((6, 6))
    a = m @ m.T + 6 * np.eye(6)
    b = rng.standard_normal(6)
    x = conjugate_gradient(lambda v: a @ v, b, iterations=6)
    np.testing.assert_allclose(a @ x, b, rtol=1e-8, atol=1e-8)


def test_adams_state_goes_on_in_another_adam_and_other_shapes_are_refused():
    """What a snapshot keeps of VPG's optimizer: a second Adam given the first's state takes the
    same step the first takes next."""
    first, second = tf.Variable([1.0, -2.0]), tf.Variable([0.0, 0.0])
    adam, other = Adam([first], 0.1), Adam([second], 0.1)
    for gradient in ([0.5, -1.0], [0.2, 0.3]):
        adam.apply([tf.constant(gradient)])
    other.restore(adam.state())
    second.assign(first)
    for optimizer in (adam, other):
        optimizer.apply([tf.constant([1.0, 1.0])])
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    with pytest.raises(ValueError, match=r"shaped \[\(2,\)\], and this one's are \[\(3,\)\]"):
        Adam([tf.Variable([0.0, 0.0, 0.0])]).restore(adam.state())


def test_fisher_vector_product_matches_explicit_kl_hessian():
    policy = GaussianMLPPolicy(obs_dim=3, action_dim=2, hidden_sizes=(4, ), seed=0)
    algo = TRPO("InvertedPendulum-v5", policy)  # only the TF functions are under test
    algo._build()
    fisher_vector_product = algo._functions[2]
    rng = np.random.default_rng(1)
    obs = tf.constant(rng.standard_normal((20, 3)), tf.float32)
    old_info = {k: tf.constant(v) for k, v in policy.dist_info_np(obs.numpy()).items()}
    variables = policy.trainable_variables

    with tf.GradientTape(persistent=True) as outer:
        with tf.GradientTape() as inner:
            kl = tf.reduce_mean(policy.distribution.kl(old_info, policy.dist_info(obs)))
        grad = flatten_tensors(inner.gradient(kl, variables), variables)
    n = policy.num_params
    hessian = np.concatenate([j.numpy().reshape(n, -1) for j in outer.jacobian(grad, variables)],
                             axis=1)
    del outer

    v = rng.standard_normal(policy.num_params).astype(np.float32)
    product = fisher_vector_product(obs, old_info, tf.constant(v)).numpy()
    np.testing.assert_allclose(product, hessian @ v, rtol=1e-4, atol=1e-6)
    # The Fisher matrix is symmetric positive semi-definite.
    np.testing.assert_allclose(hessian, hessian.T, atol=1e-6)
    assert np.linalg.eigvalsh(hessian).min() > -1e-6


@pytest.mark.slow
def test_trpo_improves_cartpole():
    tf.random.set_seed(0)
    policy = CategoricalMLPPolicy("CartPole-v1", seed=0)
    algo = TRPO("CartPole-v1",
                policy,
                LinearFeatureBaseline(),
                batch_size=2000,
                max_path_length=200,
                n_itr=8,
                gae_lambda=0.97,
                seed=0)
    history = algo.train()
    returns = [row["AverageReturn"] for row in history]
    assert returns[0] < 35  # a near-uniform random policy
    assert np.mean(returns[-2:]) > 2.0 * returns[0], returns
    # The trust region holds on every accepted step.
    assert all(row["MeanKL"] <= 0.01 + 1e-6 for row in history)
    for key in ("Iteration", "AverageReturn", "StdReturn", "MaxReturn", "MinReturn", "NumTrajs",
                "Entropy", "MeanKL", "ExplainedVariance", "ItrTime", "SampleTime"):
        assert key in history[-1]


def test_vpg_runs_and_changes_the_policy():
    policy = GaussianMLPPolicy("InvertedPendulum-v5", seed=0)
    before = policy.get_param_values()
    algo = VPG("InvertedPendulum-v5", policy, batch_size=500, max_path_length=100, n_itr=2, seed=0)
    history = algo.train()
    assert len(history) == 2
    assert not np.array_equal(before, policy.get_param_values())
    assert np.isfinite(history[-1]["LossAfter"]) and history[-1]["MeanKL"] > 0


@pytest.mark.parametrize("kwargs,message", [
    ({
        "batch_size": 0
    }, "batch_size must be a positive int, got 0"),
    ({
        "max_path_length": 2.5
    }, "max_path_length must be a positive int, got 2.5"),
    ({
        "discount": 1.5
    }, r"discount must be a number in \[0, 1\], got 1.5"),
    ({
        "n_parallel": -1
    }, "n_parallel must be a positive int, got -1"),
    ({
        "seed": "x"
    }, "seed must be a non-negative int or None, got 'x'"),
    ({
        "step_size": 0
    }, "step_size must be positive, got 0"),
])
def test_algorithm_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TRPO("CartPole-v1", CategoricalMLPPolicy(obs_dim=4, action_dim=2), **kwargs)
