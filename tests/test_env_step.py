"""The worker steps the env the way ``Plotter()`` checked it: one step function (``env/stepper.py``)
in both, so an env the worker cannot step is a named error at ``Plotter()``.

Before it, a duck-typed ``Box`` with scalar bounds (``low = -0.1``) passed ``Plotter()`` and then
failed the rollout process at its first step (``'float' object has no attribute 'astype'``)
until plotting was disabled; so did a factory whose env normalizes its observations (the
worker's copy refused wrappers whose state did not travel, though ``Plotter()`` had only warned
that they would start fresh).
"""
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
