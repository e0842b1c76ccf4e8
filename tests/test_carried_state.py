"""State an env carries from one episode to the next, outside what travels to the worker, is found
in the trainer (``env/carried_state.py``): a wrapper that normalizes in its own ``step()``, an
env whose episodes harden with their count. Bookkeeping that changes nothing the policy sees,
state that resets with each episode and state that travels are let through."""
import collections
import logging
import random
import time

import gymnasium
import numpy as np
import pytest

from async_plotter import EnvMismatchError, Plotter
from async_plotter.env import carried_state
from async_plotter.env.carried_state import (MAX_BUILD_SECONDS, MAX_PLAY_SECONDS,
                                             check_no_carried_state)
from async_plotter.env.state import TrainerEnvState, WorkerEnvState
from async_plotter.env.stepper import EnvStepper
from tests import env_state_helpers as helpers


class TravellingStepNormalizer(helpers.StepNormalizer):

    def get_wrapper_state(self):
        return {"mean": self.mean, "seen": self.seen}

    def set_wrapper_state(self, state):
        self.mean, self.seen = np.array(state["mean"]), int(state["seen"])


class ForgetfulStepNormalizer(helpers.StepNormalizer):
    """Sends its mean but not the count it divides by."""

    def get_wrapper_state(self):
        return {"mean": self.mean}

    def set_wrapper_state(self, state):
        self.mean = np.array(state["mean"])


class Curriculum(gymnasium.Env):
    """A user's env whose start moves further out with every episode it has played."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2, ), np.float64)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1, ), np.float32)

    def __init__(self):
        self.episodes = 0
        self.position = np.zeros(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.episodes += 1
        self.position = np.array([0.1 * self.episodes, 0.0])
        return self.position.copy(), {}

    def step(self, action):
        self.position = self.position + [0.0, float(action[0])]
        return self.position.copy(), 0.0, False, False, {}


class TravellingCurriculum(Curriculum):

    def get_wrapper_state(self):
        return {"episodes": self.episodes}

    def set_wrapper_state(self, state):
        self.episodes = int(state["episodes"])


class Bookkeeping(gymnasium.Wrapper):
    """Counts every step of the run (never reset) and keeps the episode's last observations, as
    a frame stack does: neither carries anything the policy sees into the next episode."""

    def __init__(self, env):
        super().__init__(env)
        self.total_steps = 0
        self.recent = []

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        self.recent = [observation]
        return np.concatenate([observation, observation]), info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.total_steps += 1
        self.recent = (self.recent + [observation])[-2:]
        return np.concatenate(self.recent[-2:]), reward, terminated, truncated, info


class NoisyObservations(gymnasium.Wrapper):
    """Adds noise from a generator of its own, never reseeded: a difference after a few
    episodes that no array or number explains."""

    def __init__(self, env):
        super().__init__(env)
        self.noise = np.random.default_rng(1)

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation + self.noise.normal(size=observation.shape), reward, terminated, \
            truncated, info


class QueueDrift(gymnasium.Wrapper):
    """Shifts each observation by how many steps a queue of its own has held, never cleared:
    state in an object the plotter does not copy."""

    def __init__(self, env):
        super().__init__(env)
        self.queue = collections.deque(maxlen=1000)

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.queue.append(action)
        return observation + len(self.queue), reward, terminated, truncated, info


class Unrepeatable(gymnasium.Wrapper):
    """Shifts each observation by Python's global generator, which no seed of the env's sets."""

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation + random.random(), reward, terminated, truncated, info


def _copies(trainer_env, make):
    """Copies of ``trainer_env`` as the worker builds them (``make``), given its state as it
    travels."""
    trainer = TrainerEnvState(trainer_env, "env")
    state = trainer.read()

    def build():
        env = make()
        worker = WorkerEnvState(env, trainer.layout, "env")
        stepper = EnvStepper(env, worker)
        worker.apply(state)
        return stepper

    return build


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Swimmer-v5"])
def test_a_wrapper_that_normalizes_in_its_own_step_is_refused_by_name(env_id, tmp_path):
    videos = tmp_path / "videos"
    with pytest.raises(EnvMismatchError) as error:
        Plotter(helpers.StepNormalizer(gymnasium.make(env_id)),
                _policy_for(env_id),
                video_dir=str(videos))
    message = str(error.value)
    assert "StepNormalizer (mean, seen)" in message, message
    assert "get_wrapper_state" in message and "set_wrapper_state" in message
    assert not videos.exists()


def test_a_hook_that_leaves_out_part_of_the_state_is_refused_naming_that_part(tmp_path):
    with pytest.raises(EnvMismatchError) as error:
        Plotter(ForgetfulStepNormalizer(gymnasium.make("CartPole-v1")),
                helpers.CartPositionPolicy(),
                video_dir=str(tmp_path / "videos"))
    assert "ForgetfulStepNormalizer.get_wrapper_state() leaves out seen: return it too" in str(
        error.value)


def test_an_env_whose_episodes_change_with_their_count_is_refused_by_name(tmp_path):
    with pytest.raises(EnvMismatchError, match=r"Curriculum \(episodes\)") as error:
        Plotter(Curriculum(), _LinearPolicy(2, 1), video_dir=str(tmp_path / "videos"))
    assert "[0.1 0. ]" in str(error.value)  # what a fresh copy, the worker's, starts from


class CountingStepNormalizer(helpers.StepNormalizer):
    """Also counts its steps in six counters the observations never see."""

    def step(self, action):
        for counter in range(6):
            vars(self)[f"count{counter}"] = vars(self).get(f"count{counter}", 0) + counter + 1
        return super().step(action)


def test_the_attributes_named_are_narrowed_for_a_bounded_time(monkeypatch, caplog):
    env = CountingStepNormalizer(gymnasium.make("CartPole-v1"))
    with pytest.raises(EnvMismatchError, match=r"CountingStepNormalizer \(mean, seen\) in"):
        check_no_carried_state(
            _copies(env, lambda: CountingStepNormalizer(gymnasium.make("CartPole-v1"))), env,
            "CartPole-v1")
    # Each attribute left out costs a copy and an episode: past the bound, all are named.
    monkeypatch.setattr(carried_state, "MAX_NARROWING_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        with pytest.raises(EnvMismatchError) as error:
            check_no_carried_state(
                _copies(env, lambda: CountingStepNormalizer(gymnasium.make("CartPole-v1"))), env,
                "CartPole-v1")
    assert str(error.value).startswith("CountingStepNormalizer (mean, seen, count0, count1, "
                                       "count2, count3, count4, count5) in the env CartPole-v1")
    assert "naming all 8 attributes in which a played copy of CartPole-v1 differs" in caplog.text


def test_state_that_travels_resets_or_is_not_seen_passes_and_leaves_training_alone(caplog):
    makes = [
        lambda: TravellingStepNormalizer(gymnasium.make("CartPole-v1")),
        lambda: Bookkeeping(gymnasium.make("CartPole-v1")),
        TravellingCurriculum,
    ]
    generator_before = np.random.get_state()[1].copy()
    for make in makes:
        trainer_env = make()
        trainer_env.reset(seed=3)
        for _ in range(30):  # the trainer's own state, which the copies are given
            if trainer_env.step(trainer_env.action_space.sample())[2]:
                trainer_env.reset()
        with caplog.at_level(logging.INFO, logger="async_plotter"):
            check_no_carried_state(_copies(trainer_env, make), trainer_env, "env")
    assert not [
        r for r in caplog.records if "carries" in r.getMessage() or "cannot send" in r.getMessage()
        or "not checking" in r.getMessage()
    ], caplog.text
    np.testing.assert_array_equal(np.random.get_state()[1], generator_before)


def test_a_difference_no_data_explains_is_a_warning_and_an_unrepeatable_env_is_skipped(caplog):

    def check(wrap, env_id):
        caplog.clear()
        env = wrap(gymnasium.make(env_id))
        with caplog.at_level(logging.INFO, logger="async_plotter"):
            check_no_carried_state(_copies(env, lambda: wrap(gymnasium.make(env_id))), env, env_id)
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    noisy = check(NoisyObservations, "Swimmer-v5")
    assert len(noisy) == 1 and "NoisyObservations.noise, a random generator that " \
        "reset(seed=...) does not reseed" in noisy[0], noisy
    queued = check(QueueDrift, "CartPole-v1")
    assert len(queued) == 1 and "state the plotter cannot send" in queued[0], queued
    assert check(Unrepeatable, "CartPole-v1") == []
    assert "two fresh copies give different observations" in caplog.text


def test_an_env_slow_to_build_is_let_through_with_a_line(caplog):

    class SlowToBuild(helpers.StepNormalizer):

        def __init__(self, env):
            time.sleep(MAX_BUILD_SECONDS + 0.1)
            super().__init__(env)

    env = SlowToBuild(gymnasium.make("CartPole-v1"))
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        check_no_carried_state(_copies(env, lambda: SlowToBuild(gymnasium.make("CartPole-v1"))),
                               env, "CartPole-v1")
    assert "a copy took" in caplog.text


def test_an_env_slow_to_step_is_let_through_with_a_line(caplog):

    class SlowToStep(helpers.StepNormalizer):

        def step(self, action):
            time.sleep(MAX_PLAY_SECONDS / 20)
            return super().step(action)

    env = SlowToStep(gymnasium.make("CartPole-v1"))
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        check_no_carried_state(_copies(env, lambda: SlowToStep(gymnasium.make("CartPole-v1"))), env,
                               "CartPole-v1")
    assert "short episodes took" in caplog.text


def test_the_trainers_env_is_never_stepped_by_the_check(tmp_path):
    env = TravellingStepNormalizer(gymnasium.make("CartPole-v1"))
    env.reset(seed=0)
    env.step(0)
    mean, seen = env.mean.copy(), env.seen
    check_no_carried_state(
        _copies(env, lambda: TravellingStepNormalizer(gymnasium.make("CartPole-v1"))), env,
        "CartPole-v1")
    np.testing.assert_array_equal(env.mean, mean)
    assert env.seen == seen


class _LinearPolicy(helpers.Serializable):

    def __init__(self, n_in, n_out):
        helpers.Serializable.quick_init(self, locals())
        self.weights = np.zeros((n_in, n_out))

    def get_param_values(self):
        return self.weights.ravel().copy()

    def set_param_values(self, flat):
        self.weights = np.array(flat, dtype=np.float64).reshape(self.weights.shape)

    def get_action(self, observation):
        mean = np.tanh(np.asarray(observation, np.float64) @ self.weights)
        return mean, {"mean": mean}


def _policy_for(env_id):
    return helpers.CartPositionPolicy() if env_id == "CartPole-v1" else _LinearPolicy(8, 2)
