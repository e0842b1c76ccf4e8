"""The worker steps the env the way ``Plotter()`` checked it: one step function (``env/stepper.py``)
in both, so an env the worker cannot step is a named error at ``Plotter()``.

Before it, a duck-typed ``Box`` with scalar bounds (``low = -0.1``) passed ``Plotter()`` and then
failed the rollout process at its first step (``'float' object has no attribute 'astype'``)
until plotting was disabled; so did a factory whose env normalizes its observations (the
worker's copy refused wrappers whose state did not travel, though ``Plotter()`` had only warned
that they would start fresh).
"""
import gymnasium
import imageio.v2 as imageio
import numpy as np
import pytest
from gymnasium.wrappers import NormalizeObservation

from async_plotter import EnvStepError, Plotter, PlotterError
from tests import action_spaces
from tests.conftest import wait_for, worker_children
from tests.env_state_helpers import CartPositionPolicy, cartpole

pytestmark = pytest.mark.slow


def _plots(env, policy, videos, **options):
    """A real Plotter's first video of ``env``; its stats."""
    with Plotter(env,
                 policy,
                 max_path_length=10,
                 video_dir=str(videos),
                 min_video_seconds=0,
                 priority="normal",
                 max_restarts=0,
                 **options) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1 or plotter.stats["disabled"],
                 120,
                 message="a video")
        return plotter.stats


@pytest.mark.parametrize("form", sorted(action_spaces.FORMS))
def test_every_form_of_action_space_plots(form, tmp_path, no_leftovers):
    """Gymnasium's and gym 0.26's Box and Discrete, and rllab-style boxes whose bounds are arrays,
    lists or scalars: each plots, with the policy's actions clipped to the box (the env refuses
    anything beyond its bounds) and no restart."""
    stats = _plots(action_spaces.factory(form), action_spaces.policy_for(form), tmp_path)
    assert stats["last_error"] is None, stats["last_error"]
    assert stats["restarts"] == 0 and stats["videos"] >= 1 and not stats["disabled"]
    frames = [frame for frame in imageio.get_reader(stats["last_video"])]
    assert len(frames) >= 2 and not np.array_equal(frames[0], frames[-1]), "the point moves"


def test_an_env_whose_step_rejects_the_action_is_named_at_plotter(tmp_path):
    videos = tmp_path / "videos"
    with pytest.raises(EnvStepError) as raised:
        Plotter(action_spaces.ListOnlyPoint,
                action_spaces.policy_for("rllab-box-array-bounds"),
                video_dir=str(videos))
    message = str(raised.value)
    assert "ListOnlyPoint.step() failed" in message and "takes a list of floats" in message
    assert "[0.1 0.1]" in message, "the action as the worker gives it (clipped), named"
    assert isinstance(raised.value, PlotterError)
    assert not videos.exists() and not worker_children(), "a failed Plotter() creates nothing"


def test_a_factory_whose_env_normalizes_plots_with_fresh_statistics(tmp_path, no_leftovers):
    """An id or a factory gets fresh statistics in the worker, as the README says, instead of a
    worker that refuses its own wrappers at every restart."""

    def make(render_mode=None):
        return NormalizeObservation(cartpole(render_mode))

    stats = _plots(make, CartPositionPolicy(), tmp_path)
    assert stats["last_error"] is None, stats["last_error"]
    assert stats["restarts"] == 0 and stats["videos"] >= 1


class RewardOfOne(gymnasium.Wrapper):
    """Gives each step's reward as an array of one, as some custom envs do (or, with
    ``objectives=2``, a vector: the reward and minus the control cost)."""

    def __init__(self, env, objectives=1):
        super().__init__(env)
        self.objectives = objectives

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        vector = [reward, -1.0][:self.objectives]
        return observation, np.array(vector, np.float32), terminated, truncated, info


def test_a_reward_given_as_an_array_of_one_is_its_value(tmp_path, no_leftovers):
    """Before, ``EnvStepError`` at Plotter() ("only 0-dimensional arrays can be converted to
    Python scalars", blamed on the action); the RL host's samplers kept (T, 1) rewards."""
    from async_plotter.rl.numpy_mlp import NumpyMLPPolicy
    from async_plotter.rl.samplers import rollout
    from tests.policies import LinearPolicy

    policy = LinearPolicy(8, 2)
    policy.fill(0.3)
    with Plotter(RewardOfOne(gymnasium.make("Swimmer-v5")),
                 policy,
                 max_path_length=30,
                 video_dir=str(tmp_path),
                 priority="normal") as plotter:
        plotter.update_plot(policy, iteration=0)
        wait_for(lambda: plotter.stats["history"], 90, message="the history of iteration 0")
    shown = plotter.stats["history"][-1]["return"]
    env = gymnasium.make("Swimmer-v5")
    observation, _ = env.reset(seed=0)
    expected = 0.0
    for _ in range(30):
        observation, reward, *_ = env.step(policy.get_action(observation)[0])
        expected += reward
    assert shown == pytest.approx(expected, rel=1e-5, abs=1e-6)

    sampler_policy = NumpyMLPPolicy((8, 2), "tanh", "gaussian")
    path = rollout(RewardOfOne(gymnasium.make("Swimmer-v5"), objectives=2), sampler_policy, 10)
    assert path["rewards"].shape == (10, )  # a vector's sum, a step's one number
