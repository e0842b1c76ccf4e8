"""Policies: shapes, the flat-parameter protocol, and rebuilding in a fresh process."""
import cloudpickle
import gymnasium as gym
import numpy as np
import pytest

import rl_child
from async_plotter import processes
from async_plotter.rl.envs import EnvSpec
from async_plotter.rl.policies import CategoricalMLPPolicy, GaussianMLPPolicy


def test_gaussian_policy_shapes_and_params():
    policy = GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(16, 8), init_std=0.5, seed=0)
    assert (policy.obs_dim, policy.action_dim) == (8, 2)
    # 8*16+16 + 16*8+8 + 8*2+2 + 2 (log_std)
    assert policy.num_params == 144 + 136 + 18 + 2
    actions, info = policy.get_actions(np.zeros((5, 8)))
    assert actions.shape == (5, 2) and actions.dtype == np.float32
    assert info["mean"].shape == (5, 2) and info["log_std"].shape == (5, 2)
    np.testing.assert_allclose(info["log_std"], np.log(0.5), rtol=1e-6)
    action, single = policy.get_action(np.zeros(8))
    assert action.shape == (2, ) and single["mean"].shape == (2, )

    flat = policy.get_param_values()
    assert flat.dtype == np.float32 and flat.shape == (policy.num_params, )
    other = GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(16, 8), seed=1)
    assert not np.array_equal(other.get_param_values(), flat)
    other.set_param_values(flat)
    np.testing.assert_array_equal(other.get_param_values(), flat)
    obs = np.random.default_rng(0).standard_normal((4, 8))
    np.testing.assert_array_equal(other.dist_info_np(obs)["mean"], policy.dist_info_np(obs)["mean"])
    with pytest.raises(ValueError, match="has 300 parameters, got a vector of 3"):
        policy.set_param_values(np.zeros(3))


def test_fixed_std_is_not_a_parameter():
    policy = GaussianMLPPolicy(obs_dim=3, action_dim=2, hidden_sizes=(4, ), learn_std=False)
    assert policy.num_params == 3 * 4 + 4 + 4 * 2 + 2


def test_categorical_policy_samples_valid_actions():
    policy = CategoricalMLPPolicy(EnvSpec.from_id("CartPole-v1"), seed=0)
    actions, info = policy.get_actions(np.zeros((1000, 4)), np.random.default_rng(0))
    assert actions.dtype == np.int64 and set(np.unique(actions)) == {0, 1}
    np.testing.assert_allclose(info["prob"].sum(-1), 1.0, rtol=1e-6)
    # Near-uniform start (small output layer): both actions about equally often.
    assert 400 < (actions == 1).sum() < 600


def test_policies_reject_what_they_cannot_serve():
    with pytest.raises(TypeError, match="not a live environment; pass env.spec.id"):
        GaussianMLPPolicy(gym.make("Swimmer-v5"))
    with pytest.raises(TypeError, match="needs a Box action space"):
        GaussianMLPPolicy("CartPole-v1")
    with pytest.raises(TypeError, match="needs a Discrete action space"):
        CategoricalMLPPolicy("Swimmer-v5")
    with pytest.raises(ValueError, match="pass env_spec, or both obs_dim and action_dim"):
        GaussianMLPPolicy(obs_dim=3)
    with pytest.raises(ValueError, match="unknown hidden_nonlinearity 'tanhh'"):
        GaussianMLPPolicy(obs_dim=3, action_dim=1, hidden_nonlinearity="tanhh")


def test_pickle_stores_the_recipe_not_the_weights():
    policy = GaussianMLPPolicy("InvertedPendulum-v5", hidden_sizes=(8, ), seed=3)
    data = cloudpickle.dumps(policy)
    assert b"__main__" not in data
    assert len(data) < 2000  # constructor arguments only
    copy = cloudpickle.loads(data)
    assert type(copy) is GaussianMLPPolicy and copy.num_params == policy.num_params


def _numpy_copy_of(policy):
    """The copy the plotter's worker gets, given the trainer's parameters as update_plot does."""
    copy = cloudpickle.loads(cloudpickle.dumps(policy.numpy_copy()))
    copy.set_param_values(policy.get_param_values())
    return copy


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu", "elu", "softplus", None])
@pytest.mark.parametrize("learn_std", [True, False])
def test_the_numpy_copy_acts_as_the_policy_does(nonlinearity, learn_std):
    """The plot worker acts through it: the same distribution, and from the same generator the
    same samples, as the TensorFlow policy, for every named nonlinearity."""
    policy = GaussianMLPPolicy(obs_dim=17,
                               action_dim=6,
                               hidden_sizes=(64, 64),
                               hidden_nonlinearity=nonlinearity,
                               learn_std=learn_std,
                               init_std=0.3,
                               seed=1)
    rng = np.random.default_rng(2)
    policy.set_param_values(rng.normal(0, 0.3, policy.num_params).astype(np.float32))
    copy = _numpy_copy_of(policy)
    np.testing.assert_array_equal(copy.get_param_values(), policy.get_param_values())
    observations = rng.normal(0, 3, (64, 17)).astype(np.float32)
    expected, actual = policy.dist_info_np(observations), copy.dist_info_np(observations)
    assert set(actual) == set(expected)
    for key in expected:
        assert actual[key].dtype == np.float32
        np.testing.assert_allclose(actual[key], expected[key], rtol=1e-4, atol=1e-4)
    sampled = policy.get_action(observations[0], np.random.default_rng(7))
    from_copy = copy.get_action(observations[0], np.random.default_rng(7))
    np.testing.assert_allclose(from_copy[0], sampled[0], rtol=1e-4, atol=1e-4)


def test_the_categorical_numpy_copy_gives_the_same_probabilities():
    policy = CategoricalMLPPolicy(obs_dim=4, action_dim=3, hidden_sizes=(16, ), seed=0)
    policy.set_param_values(np.random.default_rng(0).normal(0, 1, policy.num_params))
    observations = np.random.default_rng(1).normal(0, 2, (32, 4))
    copy = _numpy_copy_of(policy)
    np.testing.assert_allclose(copy.dist_info_np(observations)["prob"],
                               policy.dist_info_np(observations)["prob"],
                               rtol=1e-5,
                               atol=1e-6)
    actions, _ = copy.get_actions(observations, np.random.default_rng(3))
    assert np.array_equal(actions, policy.get_actions(observations, np.random.default_rng(3))[0])


@pytest.mark.parametrize("kind", ["gaussian", "categorical"])
def test_the_worker_acts_deterministically_without_drawing_an_action(kind):
    """The plot worker's deterministic action (every step of the history's recordings) is what
    ``get_action``'s info reports, the Gaussian's mean or the categorical's probabilities, for
    the TensorFlow policy and its numpy copy alike; drawing an action first, then throwing it
    away, took a third of the copy's step."""
    from async_plotter.policy.adapters import ProtocolAdapter

    if kind == "gaussian":
        policy = GaussianMLPPolicy(obs_dim=5, action_dim=2, hidden_sizes=(8, ), seed=0)
    else:
        policy = CategoricalMLPPolicy(obs_dim=5, action_dim=3, hidden_sizes=(8, ), seed=0)
    policy.set_param_values(np.random.default_rng(0).normal(0, 1, policy.num_params))
    observation = np.random.default_rng(1).normal(0, 2, 5).astype(np.float32)
    key = "mean" if kind == "gaussian" else "prob"
    for acting in (policy, _numpy_copy_of(policy)):
        drawn_before = acting._rng.bit_generator.state
        shown = ProtocolAdapter().act(acting, observation, deterministic=True)
        assert acting._rng.bit_generator.state == drawn_before, "no action was drawn"
        np.testing.assert_allclose(shown, acting.get_action(observation)[1][key], rtol=1e-6)


def test_no_numpy_copy_where_numpy_would_compute_something_else():
    """A TensorFlow callable as nonlinearity, or a subclass with its own dist_info: the worker
    then rebuilds the policy itself, rather than acting as the class's own network would."""
    import tensorflow as tf

    assert GaussianMLPPolicy(obs_dim=3, action_dim=1,
                             hidden_nonlinearity=tf.nn.relu).numpy_copy() is None

    class Scaled(GaussianMLPPolicy):

        def dist_info(self, observations):
            info = super().dist_info(observations)
            return {"mean": 2 * info["mean"], "log_std": info["log_std"]}

    assert Scaled(obs_dim=3, action_dim=1).numpy_copy() is None


def test_the_numpy_copy_needs_no_tensorflow(no_leftover_children):
    """Unpickled in a fresh process, as in the plot worker, the copy takes the parameters and
    acts as the policy does without TensorFlow ever being imported."""
    policy = GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(16, ), seed=4)
    params = np.random.default_rng(5).normal(0, 0.3, policy.num_params).astype(np.float32)
    policy.set_param_values(params)
    obs = np.random.default_rng(6).standard_normal((6, policy.obs_dim)).astype(np.float32)
    parent_end, child_end = processes.spawn_context().Pipe(duplex=False)
    child = processes.start_process(
        rl_child.rebuild_policy_and_act,
        (child_end, cloudpickle.dumps(policy.numpy_copy()), params, obs, 42))
    child_end.close()
    assert parent_end.poll(60), "child did not answer"
    answer = parent_end.recv()
    processes.stop_process(child, 10)
    assert answer["type"] == "NumpyMLPPolicy" and not answer["tensorflow_loaded"]
    np.testing.assert_array_equal(answer["params"], params)
    info = policy.dist_info_np(obs)
    for key in info:
        np.testing.assert_allclose(answer["info"][key], info[key], rtol=1e-5, atol=1e-6)


POLICY_FACTORIES = {
    "gaussian": lambda: GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(32, 32), seed=5),
    "categorical": lambda: CategoricalMLPPolicy("CartPole-v1", seed=5),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(POLICY_FACTORIES))
def test_rebuild_in_fresh_process_acts_identically(kind, no_leftover_children):
    policy = POLICY_FACTORIES[kind]()
    rng = np.random.default_rng(1)
    params = (policy.get_param_values() + rng.normal(0, 0.1, policy.num_params)).astype(np.float32)
    policy.set_param_values(params)
    obs = rng.standard_normal((6, policy.obs_dim)).astype(np.float32)

    parent_end, child_end = processes.spawn_context().Pipe(duplex=False)
    child = processes.start_process(rl_child.rebuild_policy_and_act,
                                    (child_end, cloudpickle.dumps(policy), params, obs, 42))
    child_end.close()
    assert parent_end.poll(60), "child did not answer"
    answer = parent_end.recv()
    processes.stop_process(child, 10)

    assert answer["type"] == type(policy).__name__
    assert answer["main_file"] is None  # the child did not re-run pytest's main script
    np.testing.assert_array_equal(answer["params"], params)
    info = policy.dist_info_np(obs)
    for key in info:
        np.testing.assert_array_equal(answer["info"][key], info[key])
    actions, _ = policy.get_actions(obs, np.random.default_rng(42))
    np.testing.assert_array_equal(answer["actions"], actions)
