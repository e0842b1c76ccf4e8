"""rllab's and garage's call patterns, each exactly as their training loops make it."""
import logging

import numpy as np
import pytest
import tensorflow as tf

from async_plotter import InvalidArgumentError, Plotter
from async_plotter.rl import VPG, CategoricalMLPPolicy
from tests.conftest import wait_for
from tests.policies import LinearPolicy


def test_update_plot_with_inf_and_max_length_on_a_plotter(tmp_path, no_leftovers):
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5", policy, max_path_length=5, on_frame=lambda f, i: None,
                 fps=500) as plotter:
        plotter.update_plot(policy, np.inf)  # rllab: update_plot(policy, max_length=np.inf)
        plotter.update_plot(policy, max_length=np.inf)
        plotter.update_plot(policy, max_length=3)
        plotter.update_plot(policy, float("inf"), iteration=2)
        assert plotter.stats["updates_sent"] == 4
        for call in (lambda: plotter.update_plot(policy, max_length=0),
                     lambda: plotter.update_plot(policy, -np.inf),
                     lambda: plotter.update_plot(policy, 5, max_length=5)):
            with pytest.raises(InvalidArgumentError):
                call()
        wait_for(lambda: plotter.stats["updates_applied"] >= 1, 60, message="an applied update")
        assert plotter.stats["restarts"] == 0


def test_garage_passes_its_session_and_graph(tmp_path, no_leftovers):
    graph = tf.Graph()
    with graph.as_default():
        sess = tf.compat.v1.Session(graph=graph)
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5", policy, sess=sess, graph=graph, video_dir=str(tmp_path))
    plotter.start()
    plotter.update_plot(policy, np.inf)
    plotter.close()
    sess.close()
    assert "sess, graph" in Plotter.__doc__


def test_pause_for_plot_without_a_window_is_ignored_once_and_plotter_is_kept(
        tmp_path, caplog, no_leftovers):
    algo = VPG("CartPole-v1",
               CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, ), seed=0),
               batch_size=200,
               max_path_length=20,
               n_itr=3,
               plot=True,
               pause_for_plot=True,
               plot_kwargs=dict(window=False, video_dir=str(tmp_path / "videos")),
               seed=0)
    with caplog.at_level(logging.INFO):
        algo.train()  # stdin is not a terminal under pytest: must not block
    ignored = [r for r in caplog.records if "pause_for_plot=True is ignored" in r.getMessage()]
    assert len(ignored) == 1
    assert isinstance(algo.plotter, Plotter)
    stats = algo.plotter.stats  # closed, still readable
    assert stats["updates_sent"] == 3 and stats["alive"] is False
    assert "state=closed" in repr(algo.plotter)


def test_deterministic_shows_a_categorical_policy_greedily():
    """``deterministic=True`` showed the mean action where a policy reports one, and a
    categorical rllab policy (which reports ``prob``) went on sampling: the worker now shows the
    argmax of its probabilities, as a Keras policy's logits always are. Without it, the worker
    shows the index the policy samples. Through the worker's own runtime and action mapping."""
    import gymnasium

    from async_plotter.env.spaces import ActionConverter
    from async_plotter.policy.adapters import adapter_for
    from async_plotter.policy.recipe import PolicyRuntime, describe_policy

    env = gymnasium.make("CartPole-v1")
    policy = CategoricalMLPPolicy(env.spec, seed=0)  # near-uniform probabilities
    observation, _ = env.reset(seed=0)
    recipe = describe_policy(policy, adapter_for(policy), None)
    greedy = int(np.argmax(policy.get_action(observation)[1]["prob"]))
    to_env_action = ActionConverter(env.action_space)
    shown = {}
    for deterministic in (True, False):
        runtime = PolicyRuntime(recipe, deterministic)
        runtime.set_params(policy.get_param_values())
        shown[deterministic] = {to_env_action(runtime.act(observation))[0] for _ in range(40)}
        runtime.close()
    assert shown[True] == {greedy}
    assert shown[False] == {0, 1}, "sampled: both actions of a near-uniform policy"
