"""The env's settings travel with every update: a setting changed on the trainer's env, after
make() or while it trains (a curriculum), is the one the worker's episodes are played with.

Before, the worker built its env once, afresh: a setting changed after make() was refused at
Plotter(), and one changed during training was never shown, with no word.
"""
import logging
import sys

import gymnasium
import numpy as np
import pytest

from async_plotter import Plotter
from async_plotter.env.state import TrainerEnvState, WorkerEnvState
from async_plotter.errors import EnvMismatchError
from tests.conftest import wait_for
from tests.policies import LinearPolicy
from tests.test_env_classes import STEPS, deterministic_return, shown_return


def changed_hopper():
    env = gymnasium.make("Hopper-v5")
    base = env.unwrapped
    base.frame_skip = 2
    base._ctrl_cost_weight = 0  # an int where the env has a float
    base._reset_noise_scale = 1 / 3  # not exact in float32
    base._healthy_z_range = (0.5, float("inf"))
    base._terminate_when_unhealthy = False
    base.init_qpos[1] = 1.5
    env._max_episode_steps = 321  # TimeLimit's
    return env


def shown_return_of(plotter, policy, iteration):
    """``update_plot(policy, iteration)``, then the return of the worker's history episode of
    that iteration (one deterministic episode from the start state)."""
    plotter.update_plot(policy, iteration=iteration)

    def recorded():
        return [e["return"] for e in plotter.stats["history"] if e["iteration"] == iteration]

    wait_for(recorded, 90, message=f"the history of iteration {iteration}")
    return recorded()[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_setting_arrives_exactly_with_its_type(dtype):
    env = changed_hopper()
    trainer = TrainerEnvState(env, "Hopper-v5", settings=True)
    copy = gymnasium.make("Hopper-v5")
    WorkerEnvState(copy, trainer.layout, "Hopper-v5").apply(trainer.read(dtype))
    for name in ("frame_skip", "_ctrl_cost_weight", "_reset_noise_scale", "_healthy_z_range",
                 "_terminate_when_unhealthy", "_forward_reward_weight"):
        mine, theirs = getattr(env.unwrapped, name), getattr(copy.unwrapped, name)
        assert theirs == mine and type(theirs) is type(mine), (name, mine, theirs)
    assert np.array_equal(copy.unwrapped.init_qpos, env.unwrapped.init_qpos)
    assert copy.unwrapped.init_qpos.dtype == env.unwrapped.init_qpos.dtype
    assert copy._max_episode_steps == 321


def test_a_value_too_large_for_float32_stays_put_and_is_compared():
    """A "no limit" of sys.float_info.max cannot travel in a float32 policy's update: it does
    not travel, and is compared instead (a curriculum changing it is refused by name)."""
    env = gymnasium.make("Hopper-v5")
    env.unwrapped._healthy_state_range = (-sys.float_info.max, sys.float_info.max)
    trainer = TrainerEnvState(env, "Hopper-v5", settings=True)
    assert "_healthy_state_range" not in [field.name for field in trainer.layout.settings]
    trainer.read(np.float32)
    env.unwrapped._healthy_state_range = (-100.0, 100.0)
    with pytest.raises(EnvMismatchError, match="HopperEnv._healthy_state_range"):
        trainer.read(np.float32)


def test_a_copy_keeps_what_it_changed_itself_until_training_changes_it():
    env = gymnasium.make("Swimmer-v5")
    trainer = TrainerEnvState(env, "Swimmer-v5", settings=True)
    copy = gymnasium.make("Swimmer-v5")
    state = WorkerEnvState(copy, trainer.layout, "Swimmer-v5")
    state.apply(trainer.read(np.float32))
    copy.unwrapped._ctrl_cost_weight = 0.25  # as an env may change a setting as it plays
    state.apply(trainer.read(np.float32))
    assert copy.unwrapped._ctrl_cost_weight == 0.25
    env.unwrapped._ctrl_cost_weight = 0.5
    state.apply(trainer.read(np.float32))
    assert copy.unwrapped._ctrl_cost_weight == 0.5


def test_a_setting_changed_after_make_is_shown(tmp_path, no_leftovers):
    """Refused at Plotter() before: now the worker's episode is the one the changed env gives,
    not the default env's."""

    def changed():
        env = gymnasium.make("Swimmer-v5")
        env.unwrapped.frame_skip = 2
        env.unwrapped._ctrl_cost_weight = 0
        env.unwrapped.init_qpos[2] = 0.8
        env.unwrapped.model.opt.viscosity = 0.3  # the model's physics travel too
        env.unwrapped.model.dof_damping[3] = 2.0
        return env

    shown, policy = shown_return(changed(), tmp_path / "changed")
    assert shown == pytest.approx(deterministic_return(changed(), policy), rel=1e-6, abs=1e-6)
    assert shown != pytest.approx(deterministic_return(gymnasium.make("Swimmer-v5"), policy),
                                  rel=1e-2,
                                  abs=1e-2)


@pytest.mark.slow
def test_a_frame_skip_set_after_make_plays_the_videos_at_the_env_s_rate(tmp_path, no_leftovers):
    """Gymnasium's render_fps is 1 / dt as the env was made: a Hopper stepping 2 frames at a
    time makes 250 steps a second of simulated time, not 125, and its videos play them so."""
    env = gymnasium.make("Hopper-v5")
    env.unwrapped.frame_skip = 2
    with Plotter(env, LinearPolicy(11, 3), video_dir=str(tmp_path)) as plotter:
        wait_for(lambda: plotter.stats["env_rate"], 90, message="the worker's start")
        assert plotter.stats["env_rate"] == pytest.approx(250.0)
    with Plotter("Hopper-v5", LinearPolicy(11, 3), video_dir=str(tmp_path / "made")) as plotter:
        wait_for(lambda: plotter.stats["env_rate"], 90, message="the worker's start")
        assert plotter.stats["env_rate"] == pytest.approx(125.0)


@pytest.mark.slow
def test_a_curriculum_changed_while_training_is_followed(tmp_path, no_leftovers, caplog):
    """The training loop changes the env's settings between iterations: each recorded episode
    is the one the settings of its iteration give. The videos' rate, planned as the worker
    started, is not planned again: a frame_skip set later is named once, with what it does to
    the videos (they played at the planned rate with no word)."""
    env = gymnasium.make("Swimmer-v5")
    policy = LinearPolicy(8, 2)
    policy.fill(0.3)

    def harder(env):
        env.unwrapped._ctrl_cost_weight = 2.0

    def faster(env):
        harder(env)
        env.unwrapped.frame_skip = 2

    def thicker(env):  # the model's physics, in place
        faster(env)
        env.unwrapped.model.opt.viscosity = 0.4
        env.unwrapped.model.body_mass[2] *= 3

    plans = {0: lambda env: None, 1: harder, 2: faster, 3: thicker}
    with caplog.at_level(logging.WARNING,
                         logger="async_plotter"), Plotter(env,
                                                          policy,
                                                          max_path_length=STEPS,
                                                          video_dir=str(tmp_path),
                                                          priority="normal") as plotter:
        for iteration, change in plans.items():
            change(env)
            shown = shown_return_of(plotter, policy, iteration)
            expected = gymnasium.make("Swimmer-v5")
            change(expected)
            assert shown == pytest.approx(deterministic_return(expected, policy),
                                          rel=1e-6,
                                          abs=1e-6), iteration
    returns = [entry["return"] for entry in plotter.stats["history"] if entry["iteration"] in plans]
    assert len(set(np.round(returns, 6))) == len(plans), returns  # each setting told apart
    said = [
        record.getMessage() for record in caplog.records
        if "steps per simulated" in record.getMessage()
    ]
    assert len(said) == 1 and said[0].startswith(
        "Swimmer-v5 now runs at 50 steps per simulated second, not 25 as when its videos' rate "
        "was planned") and "play 2x slower than real time" in said[0], said


def test_the_settings_of_a_sync_vector_env_s_first_env_travel(tmp_path, no_leftovers):
    """The worker shows one env of a SyncVectorEnv: its first, whose settings a training loop
    changes through the vector env's envs."""
    envs = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("Swimmer-v5")] * 2)
    policy = LinearPolicy(8, 2)
    policy.fill(0.3)
    with Plotter(envs, policy, max_path_length=STEPS, video_dir=str(tmp_path),
                 priority="normal") as plotter:
        returns = {0: shown_return_of(plotter, policy, 0)}
        for env in envs.envs:
            env.unwrapped._ctrl_cost_weight = 2.0
        returns[1] = shown_return_of(plotter, policy, 1)
    expected = gymnasium.make("Swimmer-v5")
    expected.unwrapped._ctrl_cost_weight = 2.0
    assert returns[1] == pytest.approx(deterministic_return(expected, policy), rel=1e-6, abs=1e-6)
    assert returns[0] == pytest.approx(deterministic_return(gymnasium.make("Swimmer-v5"), policy),
                                       rel=1e-6,
                                       abs=1e-6)

    envs = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("Swimmer-v5")] * 2)
    envs.envs[0].unwrapped.model.geom_size[1, 0] *= 2  # geometry: does not travel
    with pytest.raises(EnvMismatchError, match=r"MuJoCo model differs .*geom_size\[1, 0\]"):
        Plotter(envs, policy, video_dir=str(tmp_path / "thicker"))


class Paced(gymnasium.Wrapper):
    """A wrapper of the user's whose pace no constructor parameter names, with a step counter
    (state: it changes as the wrapper steps)."""

    def __init__(self, env):
        super().__init__(env)
        self.pace = 1.0
        self.steps = 0

    def step(self, action):
        self.steps += 1
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward * self.pace, terminated, truncated, info


def test_plain_data_a_users_layer_keeps_as_it_steps_travels(tmp_path, no_leftovers):
    """``self.pace = 1.0`` in a wrapper's ``__init__``, raised as the run trains: the worker's
    episodes are paid at the trainer's pace, not at the pace it had when Plotter() copied it."""
    env = Paced(gymnasium.make("Swimmer-v5"))
    policy = LinearPolicy(8, 2)
    policy.fill(0.3)
    with Plotter(env, policy, max_path_length=STEPS, video_dir=str(tmp_path),
                 priority="normal") as plotter:
        returns = {}
        for iteration, pace in enumerate((1.0, 3.0)):
            env.pace = pace
            returns[iteration] = shown_return_of(plotter, policy, iteration)
    assert returns[1] == pytest.approx(3 * returns[0], rel=1e-6), returns


class Weighted(gymnasium.Wrapper):
    """A wrapper of the user's that keeps its settings in a dict (``self.weights``, with a
    nested one), and a step counter in another (state)."""

    def __init__(self, env):
        super().__init__(env)
        self.weights = {"reward": 1.0, "bonus": {"alive": 0.0}, 3: np.zeros(2)}
        self.counts = {"steps": 0}

    def step(self, action):
        self.counts["steps"] += 1
        observation, reward, terminated, truncated, info = self.env.step(action)
        reward = reward * self.weights["reward"] + self.weights["bonus"]["alive"]
        return observation, reward, terminated, truncated, info


def test_the_entries_of_a_users_settings_dict_travel_and_one_taken_out_is_named(
        tmp_path, no_leftovers, caplog):
    """A curriculum that raises ``env.weights["reward"]`` and a nested bonus: each entry travels
    as a setting of its own; the counter in a dict the wrapper changes as it steps stays the
    copy's; an entry taken out is refused by name, one added is a warning."""
    env = Weighted(gymnasium.make("Swimmer-v5"))
    policy = LinearPolicy(8, 2)
    policy.fill(0.3)
    with Plotter(env, policy, max_path_length=STEPS, video_dir=str(tmp_path),
                 priority="normal") as plotter:
        travelling = {field.label for field in plotter._config.env_state.layout.settings}
        assert {
            "Weighted.weights['reward']", "Weighted.weights['bonus']['alive']",
            "Weighted.weights[3]"
        } <= travelling, travelling
        assert "Weighted.counts['steps']" not in travelling  # state: it changes as it steps
        returns = {}
        for iteration, (weight, bonus) in enumerate(((1.0, 0.0), (3.0, 0.0), (3.0, 0.5))):
            env.weights["reward"], env.weights["bonus"]["alive"] = weight, bonus
            returns[iteration] = shown_return_of(plotter, policy, iteration)
        assert returns[1] == pytest.approx(3 * returns[0], rel=1e-6), returns
        assert returns[2] == pytest.approx(returns[1] + 0.5 * STEPS, rel=1e-6), returns

        env.weights["extra"] = 2.0
        with caplog.at_level("WARNING", logger="async_plotter"):
            plotter.update_plot(policy, iteration=3)
            plotter.update_plot(policy, iteration=4)
            env.weights["more"] = 3.0  # a dict that keeps growing is said once
            plotter.update_plot(policy, iteration=4)
        added = [
            r.getMessage() for r in caplog.records if "did not have at Plotter()" in r.getMessage()
        ]
        assert len(added) == 1 and "Weighted.weights of the env Swimmer-v5" in added[0] and (
            "('extra')" in added[0]), added

        del env.weights["bonus"]["alive"]
        with pytest.raises(EnvMismatchError) as raised:
            plotter.update_plot(policy, iteration=5)
        assert str(raised.value).startswith(
            "the setting Weighted.weights['bonus']['alive'] of the env Swimmer-v5 is now <taken "
            "out of its dict>, which cannot travel to the plot worker: an entry taken out of a "
            "dict does not travel"), raised.value


class Mode(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """A wrapper whose string setting doubles the reward when "hard", and whose tuple of
    strings cannot travel."""

    def __init__(self, env, mode="easy", modes=("easy", "hard")):
        gymnasium.utils.RecordConstructorArgs.__init__(self, mode=mode, modes=modes)
        super().__init__(env)
        self.mode, self.modes = mode, modes

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward * (2 if self.mode == "hard" else 1), terminated, truncated, info


def test_a_string_travels_and_what_cannot_is_named_before_start_and_while_training(
        tmp_path, no_leftovers):
    env = Mode(gymnasium.make("Swimmer-v5"))
    env.modes = ("easy", "hard", "harder")
    with pytest.raises(EnvMismatchError) as raised:
        Plotter(env, LinearPolicy(8, 2), video_dir=str(tmp_path / "before"))
    message = str(raised.value)
    assert "Mode.modes: ('easy', 'hard', 'harder') in yours, ('easy', 'hard') in the worker's" in (
        message), message
    assert "Mode(env, modes=('easy', 'hard', 'harder')) records it" in message, message
    assert not (tmp_path / "before").exists()

    env = Mode(gymnasium.make("Swimmer-v5"))
    policy = LinearPolicy(8, 2)
    policy.fill(0.3)
    with Plotter(env,
                 policy,
                 max_path_length=STEPS,
                 video_dir=str(tmp_path / "during"),
                 priority="normal") as plotter:
        returns = {}
        for iteration in (0, 1):
            env.mode = ("easy", "hard")[iteration]  # a string: travels
            returns[iteration] = shown_return_of(plotter, policy, iteration)
        assert returns[1] == pytest.approx(2 * returns[0], rel=1e-6), returns

        env.modes = ("easy", "hard", "harder")
        with pytest.raises(EnvMismatchError) as raised:
            plotter.update_plot(policy, iteration=2)
        message = str(raised.value)
        assert message.startswith("the setting Mode.modes of the env Swimmer-v5 is now "
                                  "('easy', 'hard', 'harder'), which cannot travel to the plot "
                                  "worker"), message
        assert "(it was ('easy', 'hard'))" in message
        assert plotter.stats["updates_sent"] == 2  # the refused one is not sent

        env.modes = ("easy", "hard")
        env.mode = "very hard " * 7
        with pytest.raises(EnvMismatchError, match="longer than the 64 bytes"):
            plotter.update_plot(policy, iteration=2)
        env.mode = "easy"
        env.unwrapped.init_qpos = np.zeros(3)  # another shape
        with pytest.raises(EnvMismatchError) as raised:
            plotter.update_plot(policy, iteration=2)
        assert "SwimmerEnv.init_qpos" in str(raised.value)
        assert "no longer a number (or a tuple or array of them" in str(raised.value)


def test_a_model_changed_in_what_does_not_travel_refuses_the_update(tmp_path, monkeypatch,
                                                                    no_leftovers):
    """A body's geometry is drawn from the render process's own model: changed while training,
    it would have been shown as it was."""
    from async_plotter.trainer import model_check

    monkeypatch.setattr(model_check, "_SPACING", 0.0)  # every update checked
    env = gymnasium.make("Swimmer-v5")
    policy = LinearPolicy(8, 2)
    with Plotter(env, policy, video_dir=str(tmp_path)) as plotter:
        plotter.update_plot(policy, iteration=0)
        env.unwrapped.model.opt.gravity[2] = -5.0  # physics: travels
        env.unwrapped.model.body_mass[1] *= 2
        plotter.update_plot(policy, iteration=1)
        env.unwrapped.model.geom_size[1, 0] *= 2  # geometry: does not
        with pytest.raises(EnvMismatchError) as raised:
            plotter.update_plot(policy, iteration=2)
        message = str(raised.value)
        assert message.startswith("since Plotter() was built, your env's MuJoCo model changed "
                                  "in what does not travel to the plot worker (geom_size[1, 0]: ")
        assert "gravity" not in message.split("(")[1].split(")")[0]  # what travels not named
        assert "close this Plotter and start one" in message
        assert plotter.stats["updates_sent"] == 2  # the refused one is not sent


def test_settings_find_their_layer_in_a_copy_with_other_layers():
    """A gym 0.26 env's copy in the worker has a layer more on top (the adapter to Gymnasium's
    API) and none of gym's passive checker: each setting goes to the layer of its class, not to
    the layer at its place (where gym's env had no checker, the base env was one place off)."""
    import gym

    from async_plotter.env.recipe import build_env, describe_env
    from async_plotter.env.layers import env_layers

    for checked in (True, False):
        env = gym.make("Pendulum-v1", disable_env_checker=not checked)
        copy = build_env(describe_env(env), render_mode=None)
        names = [type(layer).__name__ for layer in env_layers(copy)]
        assert names == ["GymCompat", "TimeLimit", "OrderEnforcing", "PendulumEnv"], names
        trainer = TrainerEnvState(env, "Pendulum-v1", settings=True)
        state = WorkerEnvState(copy, trainer.layout, "Pendulum-v1")
        state.apply(trainer.read(np.float32))
        env.unwrapped.g = 2.0  # a constructor parameter of gym's PendulumEnv, while training
        state.apply(trainer.read(np.float32))
        assert copy.unwrapped.g == 2.0, checked


def test_a_copy_keeps_an_object_where_the_trainer_s_env_holds_plain_data():
    """A renderer the worker's copy made where the trainer's env holds None is not replaced."""
    env = Paced(gymnasium.make("Swimmer-v5"))
    env.viewer = None
    trainer = TrainerEnvState(env, "Swimmer-v5", settings=True, extra=[("Paced", 0, "viewer")])
    assert "viewer" in [field.name for field in trainer.layout.settings]
    copy = Paced(gymnasium.make("Swimmer-v5"))
    copy.viewer = viewer = object()
    WorkerEnvState(copy, trainer.layout, "Swimmer-v5").apply(trainer.read(np.float32))
    assert copy.viewer is viewer
