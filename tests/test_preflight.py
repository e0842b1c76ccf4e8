"""Shape and frame mistakes are named in the trainer, before anything starts or is written.

Each test is a call that used to fail only inside the worker (a log line, nothing in the trainer).
"""
import logging
import time

import gymnasium
import keras
import mujoco
import numpy as np
import pytest

from async_plotter import InvalidArgumentError, Plotter
from async_plotter.errors import (CameraError, EnvBuildError, EnvMismatchError, EnvRenderError,
                                  PolicyShapeError)
from tests.conftest import worker_children
from tests.policies import LinearPolicy


def mlp(inputs, outputs):
    return keras.Sequential([
        keras.Input((inputs, )),
        keras.layers.Dense(16, activation="tanh"),
        keras.layers.Dense(outputs)
    ])


def make_cartpole(render_mode=None):
    return gymnasium.make("CartPole-v1", render_mode=render_mode)


def rejected(error, tmp_path, env, policy, **kwargs):
    """The error raised by ``Plotter(env, policy, ...)``; checks that nothing was left behind."""
    videos = tmp_path / "videos"
    with pytest.raises(error) as raised:
        Plotter(env, policy, video_dir=str(videos), **kwargs)
    assert not videos.exists(), "a failed Plotter() must not create its video_dir"
    assert not worker_children(), "a failed Plotter() must not start processes"
    return str(raised.value)


def test_keras_input_shape_that_does_not_fit_the_env(tmp_path):
    message = rejected(PolicyShapeError, tmp_path, "Hopper-v5", mlp(5, 3))
    assert "shape (11,)" in message and "(None, 5)" in message
    assert "keras.Input(shape=(11,))" in message


def test_keras_output_size_that_does_not_fit_the_action_space(tmp_path):
    message = rejected(PolicyShapeError, tmp_path, "Hopper-v5", mlp(11, 2))
    assert "shape (2,) (2 values)" in message and "shape (3,) (3 values)" in message
    assert "3 units" in message


def test_protocol_policy_built_for_another_env(tmp_path):
    message = rejected(PolicyShapeError, tmp_path, "Hopper-v5", LinearPolicy(8, 2))
    assert "shape (11,)" in message and "observation_space.shape" in message


def test_discrete_actions_take_an_index_or_logits(tmp_path):
    Plotter("CartPole-v1", mlp(4, 2), video_dir=str(tmp_path / "logits"))  # 2 logits
    Plotter("CartPole-v1", LinearPolicy(4, 1), video_dir=str(tmp_path / "index"))  # 1 index
    message = rejected(PolicyShapeError, tmp_path, "CartPole-v1", mlp(4, 3))
    assert "Discrete(2)" in message and "3 values" in message and "2 logits" in message


def test_factory_without_render_mode_for_a_self_drawing_env(tmp_path):
    message = rejected(EnvRenderError, tmp_path, lambda: gymnasium.make("CartPole-v1"), mlp(4, 2))
    assert "returned None" in message and "render_mode" in message
    # The fix the message gives works:
    Plotter(make_cartpole, mlp(4, 2), video_dir=str(tmp_path / "ok"))
    assert (tmp_path / "ok").is_dir()


def test_mujoco_factory_without_render_mode_is_fine(tmp_path):
    # MuJoCo scenes are drawn from their physics state in the render process.
    Plotter(lambda: gymnasium.make("Hopper-v5"), mlp(11, 3), video_dir=str(tmp_path))


def test_env_that_fails_to_build(tmp_path):

    def broken():
        raise RuntimeError("no such robot")

    message = rejected(EnvBuildError, tmp_path, broken, LinearPolicy(8, 2))
    assert "no such robot" in message


def test_unknown_camera_name_lists_the_models_cameras(tmp_path):
    message = rejected(CameraError, tmp_path, "Hopper-v5", mlp(11, 3), camera="side")
    assert "'side'" in message and "'track'" in message
    message = rejected(CameraError, tmp_path, "Hopper-v5", mlp(11, 3), camera=3)
    assert "1 camera(s)" in message
    rejected(InvalidArgumentError, tmp_path, "Hopper-v5", mlp(11, 3), camera=dict(zoom=2))
    rejected(InvalidArgumentError, tmp_path, "Hopper-v5", mlp(11, 3), camera=dict(distance=-1))
    rejected(InvalidArgumentError, tmp_path, "Hopper-v5", mlp(11, 3), camera=1.5)
    for camera in ("track", 0, -1, dict(distance=3.0, elevation=-10, lookat=[0, 0, 1])):
        Plotter("Hopper-v5", mlp(11, 3), video_dir=str(tmp_path / "ok"), camera=camera)


def test_the_check_leaves_the_policy_and_random_state_alone(tmp_path):
    from async_plotter.rl import GaussianMLPPolicy

    policy = GaussianMLPPolicy("Hopper-v5", hidden_sizes=(8, ), seed=3)
    params = policy.get_param_values().copy()
    own = policy._rng.bit_generator.state  # the policy's own sampling noise
    np.random.seed(7)
    expected_global = np.random.random()
    np.random.seed(7)
    Plotter("Hopper-v5", policy, video_dir=str(tmp_path))
    assert np.random.random() == expected_global
    assert policy._rng.bit_generator.state == own
    np.testing.assert_array_equal(policy.get_param_values(), params)

    model = mlp(11, 3)
    weights = [w.copy() for w in model.get_weights()]
    Plotter("Hopper-v5", model, video_dir=str(tmp_path))
    for before, after in zip(weights, model.get_weights()):
        np.testing.assert_array_equal(before, after)


def test_check_cost_for_a_keras_policy_and_hopper(tmp_path, caplog):
    # A fresh model each time: its first call (Keras traces it) is part of the cost.
    times = []
    for _ in range(3):
        model = mlp(11, 3)
        started = time.perf_counter()
        with caplog.at_level(logging.DEBUG, logger="async_plotter"):
            Plotter("Hopper-v5", model, video_dir=str(tmp_path))
        times.append(time.perf_counter() - started)
    checks = [r.getMessage() for r in caplog.records if "Plotter checks of" in r.getMessage()]
    assert len(checks) == 3
    logging.getLogger(__name__).info("Plotter(Hopper-v5, keras) took %s; %s",
                                     [f"{t * 1000:.0f} ms" for t in times], checks)
    assert min(times) < 2.0, times  # generous: a loaded 2-core machine


def heavier_hopper():
    """A Hopper whose torso weighs twice as much, on a planet of 5 m/s²: a transfer experiment's
    env, changed where it is made."""
    env = gymnasium.make("Hopper-v5")
    env.unwrapped.model.body_mass[1] *= 2
    env.unwrapped.model.opt.gravity[2] = -5.0
    return env


class RandomMass(gymnasium.Wrapper):
    """Domain randomization: a new torso mass at every reset, from the wrapper's own generator."""

    def __init__(self, env, seed=0):
        super().__init__(env)
        self.nominal = float(env.unwrapped.model.body_mass[1])
        self.generator = np.random.default_rng(seed)

    def reset(self, **kwargs):
        self.env.unwrapped.model.body_mass[1] = self.nominal * self.generator.uniform(0.5, 1.5)
        return self.env.reset(**kwargs)


def test_a_model_changed_after_make_is_named_where_it_does_not_travel(tmp_path):
    """The worker builds its env afresh: a changed body would have been shown as it was made,
    with no word. Physics travel (a heavier torso on a planet of 5 m/s² is accepted)."""
    Plotter(heavier_hopper(), LinearPolicy(11, 3), video_dir=str(tmp_path / "heavier")).close()
    env = heavier_hopper()  # what MuJoCo derives from the masses, updated as its docs advise
    mujoco.mj_setConst(env.unwrapped.model, env.unwrapped.data)
    Plotter(env, LinearPolicy(11, 3), video_dir=str(tmp_path / "set_const")).close()
    env = heavier_hopper()
    env.unwrapped.model.geom_size[2, 0] = 0.2  # a thicker torso
    message = rejected(EnvMismatchError, tmp_path, env, LinearPolicy(11, 3))
    assert "MuJoCo model differs" in message and "Hopper-v5" in message
    assert "geom_size[2, 0]: 0.2 in yours, 0.05 in the worker's" in message, message
    assert "body_mass" not in message and "gravity[2]:" not in message
    assert "its physics parameters travel" in message and "zero-argument function" in message


def test_a_model_changed_where_the_env_is_made_or_randomized_is_no_mismatch(tmp_path, caplog):
    """The same change in a factory travels (the worker calls it), and a model that the env
    randomizes at each reset is not compared (the worker's copy randomizes it too)."""
    Plotter(heavier_hopper, LinearPolicy(11, 3), video_dir=str(tmp_path / "factory")).close()
    randomized = RandomMass(gymnasium.make("Hopper-v5"))
    randomized.reset(seed=0)
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        Plotter(randomized, LinearPolicy(11, 3), video_dir=str(tmp_path / "randomized")).close()
    said = [r.getMessage() for r in caplog.records if "changes its own model" in r.getMessage()]
    assert len(said) == 1 and "Hopper-v5" in said[0], said


class RandomTarget(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """A target speed drawn when the wrapper is made, unless given: each fresh copy has its own."""

    def __init__(self, env, target=None):
        gymnasium.utils.RecordConstructorArgs.__init__(self, target=target)
        super().__init__(env)
        self.target = float(np.random.uniform(0, 1)) if target is None else target


def test_settings_made_with_the_env_travel_and_state_is_no_setting(tmp_path):
    """Settings given to make() travel in the spec: the worker's episode is the one they give.
    What a trainer's env changes as it plays (its counters, its random state), and what differs
    between two fresh copies, are not settings."""
    from tests.test_env_classes import deterministic_return, shown_return

    settings = dict(frame_skip=2, ctrl_cost_weight=0.0)
    env = gymnasium.make("Swimmer-v5", **settings)
    env.reset(seed=5)
    for _ in range(300):  # the trainer's env has been sampled from
        env.step(env.action_space.sample())
    shown, policy = shown_return(env, tmp_path / "made")
    assert shown == pytest.approx(deterministic_return(gymnasium.make("Swimmer-v5", **settings),
                                                       policy),
                                  rel=1e-3,
                                  abs=1e-3)
    assert shown != pytest.approx(deterministic_return(gymnasium.make("Swimmer-v5"), policy),
                                  rel=1e-2,
                                  abs=1e-2)

    drawn = RandomTarget(gymnasium.make("Swimmer-v5"))
    Plotter(drawn, LinearPolicy(8, 2), video_dir=str(tmp_path / "drawn")).close()
