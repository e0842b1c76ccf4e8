"""Observation wrappers that change during the run outside what travels to the worker (a
``TransformObservation`` reading statistics the training loop updates) are refused at the next
``update_plot``, and that update is never shown (``env/drift.py``); wrappers whose state travels
and envs without such wrappers are not followed."""
import logging

import gymnasium
import numpy as np
import pytest
from gymnasium.wrappers import FlattenObservation, NormalizeObservation, TransformObservation

from async_plotter import EnvMismatchError, Plotter
from async_plotter.env import drift
from async_plotter.env.drift import ObservationDrift
from async_plotter.env.state import WorkerEnvState
from tests import env_state_helpers as helpers


class Shift:
    """Statistics of the user's, kept outside the env and updated by their training loop."""

    def __init__(self):
        self.value = np.zeros(4)


def shifted_cartpole(shift):
    """CartPole normalized (state that travels), then shifted by ``shift`` (state that does not)."""
    inner = NormalizeObservation(gymnasium.make("CartPole-v1", render_mode="rgb_array"))
    return TransformObservation(inner, lambda observation: observation - shift.value,
                                inner.observation_space)


def checking_every_update(env, policy, folder, monkeypatch):
    """A started Plotter (40-step rollouts, videos into ``folder``, no history) whose check of
    the observation wrappers runs at every update, however close they come."""
    monkeypatch.setattr(drift, "_SPACING", 0.0)
    return Plotter(env,
                   policy,
                   max_path_length=40,
                   video_dir=str(folder),
                   min_video_seconds=0,
                   history=False).start()


@pytest.mark.slow
def test_a_wrapper_changed_outside_what_travels_is_refused_and_its_update_never_shown(
        tmp_path, monkeypatch, no_leftovers):
    shift = Shift()
    env = shifted_cartpole(shift)
    policy = helpers.CartPositionPolicy()
    plotter = checking_every_update(env, policy, tmp_path / "videos", monkeypatch)
    try:
        plotter.update_plot(policy, iteration=0)
        env.reset(seed=0)
        for _ in range(30):  # the trainer's NormalizeObservation learns: that travels
            if env.step(env.action_space.sample())[2]:
                env.reset()
        plotter.update_plot(policy, iteration=1)
        shift.value = np.array([3.0, 0.0, 0.0, 0.0])  # the training loop moves its statistics
        with pytest.raises(EnvMismatchError) as error:
            plotter.update_plot(policy, iteration=2)
        message = str(error.value)
        assert message.startswith("since Plotter() was built, your env's observation wrappers "
                                  "changed in a way that does not travel to the plot worker")
        assert "after TransformObservation (observation wrapper 2 of 2" in message
        assert "get_wrapper_state() and set_wrapper_state(state)" in message
        assert plotter.stats["updates_sent"] == 2  # the refused one is not counted
    finally:
        plotter.close()
    # The final video shows the newest update that was not refused.
    assert plotter.stats["final_video"].endswith("iter_0001.mp4"), plotter.stats["video_log"]


def test_observation_noise_is_let_through_and_draws_nothing_from_trainings_generators(
        tmp_path, caplog):
    base = gymnasium.make("CartPole-v1", render_mode="rgb_array")
    rng = np.random.default_rng(0)
    noisy = {
        "numpy's global generator":
        lambda observation: observation + np.random.normal(0, 0.01, observation.shape),
        "a generator of its own":
        lambda observation: observation + rng.normal(0, 0.01, 4),
    }
    for what, noise in noisy.items():
        env = TransformObservation(base, noise, base.observation_space)
        np.random.seed(1)
        before, own = np.random.get_state()[1].copy(), rng.bit_generator.state
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="async_plotter"):
            plotter = Plotter(env, helpers.CartPositionPolicy(), video_dir=str(tmp_path / "v"))
        plotter.close()
        assert "TransformObservation gives other observations for the same one each time " \
            "(random noise)" in caplog.text, what
        np.testing.assert_array_equal(np.random.get_state()[1], before, err_msg=what)
        assert rng.bit_generator.state == own, what


def test_only_wrappers_that_could_change_outside_what_travels_are_followed():

    def follow(env):
        check = ObservationDrift.of(lambda: env, lambda copy: WorkerEnvState(copy, layout, "env"),
                                    env, "env")
        if check is not None:
            check.close()
        return check is not None

    from async_plotter.env.state import EnvStateLayout

    layout = EnvStateLayout()
    assert not follow(gymnasium.make("CartPole-v1"))  # no observation wrapper: nothing to do
    assert not follow(NormalizeObservation(gymnasium.make("CartPole-v1")))  # its state travels
    # Gymnasium's own transform (a TransformObservation of its own function) cannot change.
    assert not follow(FlattenObservation(gymnasium.make("CartPole-v1")))
    assert follow(shifted_cartpole(Shift()))
