"""Dict and tuple observations (goal-conditioned envs, a wrapper that splits what the policy sees)
are shown to Keras models with an input a part, and checked as arrays are: a wrapper's running statistics kept in a dict are refused unless they
travel, state carried across episodes in a dict is named, a wrapper whose state travels compares
equal to the trainer's, and a wrapper that changes outside what travels is refused at
``update_plot`` (``env/check.py``, ``env/carried_state.py``, ``env/drift.py``)."""
import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.wrappers import TransformObservation

from async_plotter import EnvMismatchError, Plotter, PolicyShapeError, Serializable
from async_plotter.env.check import compare_observation_wrappers
from async_plotter.env.state import TrainerEnvState, WorkerEnvState
from tests.conftest import wait_for
from tests.test_observation_drift import checking_every_update


class Split(gymnasium.ObservationWrapper):
    """Swimmer's observation as a dict (``"angles"``, ``"rest"``) or, with ``as_tuple``, a
    tuple of the same two parts."""

    def __init__(self, env, as_tuple=False):
        super().__init__(env)
        self.as_tuple = as_tuple
        parts = (spaces.Box(-np.inf, np.inf, (3, )), spaces.Box(-np.inf, np.inf, (5, )))
        self.observation_space = (spaces.Tuple(parts)
                                  if as_tuple else spaces.Dict({
                                      "angles": parts[0],
                                      "rest": parts[1]
                                  }))

    def observation(self, observation):
        angles, rest = observation[:3], observation[3:]
        return (angles, rest) if self.as_tuple else {"angles": angles, "rest": rest}


def _keys(observation):
    return range(len(observation)) if isinstance(observation, tuple) else observation.keys()


def _rebuilt(observation, parts):
    return tuple(parts[key]
                 for key in _keys(observation)) if isinstance(observation, tuple) else parts


class PartsMean(gymnasium.ObservationWrapper):
    """A user's normalizer of each part: subtracts a running mean, kept in a dict, that it
    updates with every observation."""

    def __init__(self, env):
        super().__init__(env)
        parts = env.observation_space.spaces
        self.mean = {key: np.zeros(parts[key].shape) for key in _keys(parts)}
        self.seen = 0

    def observation(self, observation):
        self.seen += 1
        for key in _keys(observation):
            self.mean[key] = self.mean[key] + (observation[key] - self.mean[key]) / self.seen
        return _rebuilt(observation,
                        {key: observation[key] - self.mean[key]
                         for key in _keys(observation)})


class TravellingPartsMean(PartsMean):
    """``PartsMean`` whose statistics travel (the documented method pair), with Gymnasium's
    switch that freezes them (the worker's copy is given the trainer's at every update)."""

    def __init__(self, env):
        super().__init__(env)
        self.update_running_mean = True

    def get_wrapper_state(self):
        state = {f"mean_{key}": value for key, value in self.mean.items()}
        state["seen"] = np.array(self.seen)
        return state

    def set_wrapper_state(self, state):
        self.seen = int(state["seen"])
        self.mean = {key[5:]: np.array(value) for key, value in state.items() if key != "seen"}

    def observation(self, observation):
        if self.update_running_mean:
            return super().observation(observation)
        return {key: observation[key] - self.mean[key] for key in observation}


class Goals(gymnasium.Wrapper):
    """Moves its goal (a dict of arrays) further at every reset: state carried from one episode
    to the next, subtracted from what the policy sees."""

    def __init__(self, env):
        super().__init__(env)
        self.goal = {"angles": np.zeros(3)}

    def reset(self, **kwargs):
        self.goal = {"angles": self.goal["angles"] + 0.5}
        observation, info = self.env.reset(**kwargs)
        return self._shifted(observation), info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return self._shifted(observation), reward, terminated, truncated, info

    def _shifted(self, observation):
        return {"angles": observation["angles"] - self.goal["angles"], "rest": observation["rest"]}


class PartsPolicy(Serializable):
    """A linear policy of both parts of a split observation."""

    def __init__(self):
        Serializable.quick_init(self, locals())
        self.weights = np.full((8, 2), 0.1)

    def get_param_values(self):
        return self.weights.ravel().copy()

    def set_param_values(self, flat):
        self.weights = np.array(flat, dtype=np.float64).reshape(8, 2)

    def get_action(self, observation):
        flat = np.concatenate([observation[key] for key in _keys(observation)])
        mean = np.tanh(flat @ self.weights)
        return mean, {"mean": mean}


def _trained(env, steps=200):
    """``env`` after ``steps`` random steps, as a training loop leaves it."""
    env.reset(seed=1)
    env.action_space.seed(1)
    for _ in range(steps):
        if any(env.step(env.action_space.sample())[2:4]):
            env.reset()
    return env


@pytest.mark.parametrize("as_tuple", [False, True], ids=["dict", "tuple"])
def test_running_statistics_of_each_part_are_refused_unless_they_travel(as_tuple, tmp_path):
    videos = tmp_path / "videos"
    env = _trained(PartsMean(Split(gymnasium.make("Swimmer-v5"), as_tuple=as_tuple)))
    with pytest.raises(EnvMismatchError) as error:
        Plotter(env, PartsPolicy(), video_dir=str(videos))
    message = str(error.value)
    assert "PartsMean in the env Swimmer-v5 holds state that changes as it transforms " \
        "observations (mean, seen)" in message, message
    assert not videos.exists()


def test_state_carried_across_episodes_in_a_dict_is_named(tmp_path):
    with pytest.raises(EnvMismatchError) as error:
        Plotter(Goals(Split(gymnasium.make("Swimmer-v5"))),
                PartsPolicy(),
                video_dir=str(tmp_path / "videos"))
    assert "Goals (goal) in the env Swimmer-v5 carries state from one episode to the next" in str(
        error.value), error.value


def test_each_part_is_compared_and_statistics_that_travel_make_the_copies_agree():
    trainer_env = _trained(TravellingPartsMean(Split(gymnasium.make("Swimmer-v5"))))
    trainer = TrainerEnvState(trainer_env, "Swimmer-v5")
    copy = TravellingPartsMean(Split(gymnasium.make("Swimmer-v5")))
    worker = WorkerEnvState(copy, trainer.layout, "Swimmer-v5")
    seen, mean = trainer_env.seen, dict(trainer_env.mean)
    # Fresh statistics: the part whose mean differs is named, with the wrapper.
    with pytest.raises(EnvMismatchError, match="after TravellingPartsMean"):
        compare_observation_wrappers(copy, trainer_env, "Swimmer-v5")
    worker.apply(trainer.read())
    assert compare_observation_wrappers(copy, trainer_env, "Swimmer-v5")
    # The trainer's statistics are left as training left them.
    assert trainer_env.seen == seen and trainer_env.update_running_mean
    for key, value in mean.items():
        np.testing.assert_array_equal(trainer_env.mean[key], value)


@pytest.mark.slow
def test_a_dict_wrapper_changed_outside_what_travels_is_refused_at_update_plot(
        tmp_path, monkeypatch, no_leftovers):
    goal = {"angles": np.zeros(3)}
    inner = Split(gymnasium.make("Swimmer-v5"))
    env = TransformObservation(
        inner, lambda observation: {
            "angles": observation["angles"] - goal["angles"],
            "rest": observation["rest"]
        }, inner.observation_space)
    policy = PartsPolicy()
    plotter = checking_every_update(env, policy, tmp_path / "videos", monkeypatch)
    try:
        plotter.update_plot(policy, iteration=0)
        goal["angles"] = np.array([1.0, 0.0, 0.0])  # the training loop moves the goal
        with pytest.raises(EnvMismatchError) as error:
            plotter.update_plot(policy, iteration=1)
        assert "after TransformObservation (observation wrapper 2 of 2" in str(error.value)
        assert plotter.stats["updates_sent"] == 1
    finally:
        plotter.close()


def _parts_model(as_tuple):
    """A Keras model of both parts of a split Swimmer observation: named inputs for a dict,
    inputs in order for a tuple."""
    import keras

    angles = keras.Input((3, ), name="angles")
    rest = keras.Input((5, ), name="rest")
    hidden = keras.layers.Dense(16, activation="tanh")(keras.layers.Concatenate()([angles, rest]))
    action = keras.layers.Dense(2, activation="tanh")(hidden)
    return keras.Model([angles, rest] if as_tuple else {"angles": angles, "rest": rest}, action)


def _models_return(model, env, steps):
    """The return of ``model``'s actions from the reset of seed 0 (the history's start)."""
    observation, _ = env.reset(seed=0)
    total = 0.0
    for _ in range(steps):
        batch = ([part[None] for part in observation] if isinstance(observation, tuple) else {
            key: part[None]
            for key, part in observation.items()
        })
        action = np.clip(np.asarray(model(batch, training=False))[0], -1, 1)
        observation, reward, terminated, truncated, _ = env.step(action)
        total += reward
        if terminated or truncated:
            break
    return total


@pytest.mark.slow
@pytest.mark.parametrize("as_tuple", [False, True], ids=["dict", "tuple"])
def test_a_keras_model_with_an_input_a_part_is_shown_acting_on_each_part(
        as_tuple, tmp_path, no_leftovers):
    """Before, a ``PolicyShapeError``: "Keras models and tf.Modules are fed one array"."""
    model = _parts_model(as_tuple)
    env = Split(gymnasium.make("Swimmer-v5"), as_tuple=as_tuple)
    with Plotter(env, model, max_path_length=40, video_dir=str(tmp_path),
                 priority="normal") as plotter:
        plotter.update_plot(model, iteration=0)
        wait_for(lambda: plotter.stats["history"], 120, message="the history of iteration 0")
    shown = plotter.stats["history"][0]["return"]
    # Its numpy copy, an input a part: no TensorFlow in the worker.
    assert plotter.stats["policy_call"] == "numpy", plotter.stats["policy_call"]
    expected = _models_return(model, Split(gymnasium.make("Swimmer-v5"), as_tuple=as_tuple), 40)
    assert shown == pytest.approx(expected, rel=1e-3, abs=1e-4)
    assert plotter.stats["final_video"].endswith("iter_0000.mp4")


def test_a_keras_model_whose_inputs_are_not_the_parts_is_told_how_to_name_them(tmp_path):
    import keras

    angles, rest = keras.Input((3, ), name="joints"), keras.Input((5, ), name="rest")
    action = keras.layers.Dense(2)(keras.layers.Concatenate()([angles, rest]))
    model = keras.Model({"joints": angles, "rest": rest}, action)
    with pytest.raises(PolicyShapeError) as refused:
        Plotter(Split(gymnasium.make("Swimmer-v5")), model, video_dir=str(tmp_path / "v"))
    message = str(refused.value)
    assert "it was given a dict of batches of one ('angles': shape (3,), 'rest': shape (5,))" in (
        message), message
    assert "keras.Input(shape=(3,), name='angles'), keras.Input(shape=(5,), name='rest')" in message
    assert not (tmp_path / "v").exists()


def test_our_mlp_policies_and_their_numpy_copy_flatten_a_dict_observation_as_the_samplers_do():
    from async_plotter.rl import GaussianMLPPolicy
    from async_plotter.rl.envs import EnvSpec, flatten_observation

    env = Split(gymnasium.make("Swimmer-v5"))
    policy = GaussianMLPPolicy(EnvSpec.from_env(env), seed=1)
    observation, _ = env.reset(seed=0)
    flat = flatten_observation(env.observation_space, observation)
    expected = policy.get_action(flat)[1]["mean"]
    for acting in (policy, policy.numpy_copy()):
        np.testing.assert_allclose(acting.get_action(observation)[1]["mean"], expected, rtol=1e-5)
        np.testing.assert_allclose(acting.deterministic_output(observation), expected, rtol=1e-5)


@pytest.mark.slow
def test_a_trpo_run_on_dict_observations_plots_its_final_policy(tmp_path, no_leftovers):
    """Before, ``run_experiment_lite(..., plot=True)`` failed at once: the plotter gave the
    policy the env's dict, which only the samplers flattened."""
    from async_plotter.rl import TRPO, GaussianMLPPolicy, ZeroBaseline, run_experiment_lite
    from async_plotter.rl.envs import EnvSpec

    def make():
        return Split(gymnasium.make("Swimmer-v5"))

    algo = TRPO(make,
                GaussianMLPPolicy(EnvSpec.from_env(make())),
                ZeroBaseline(),
                batch_size=400,
                max_path_length=40,
                n_itr=2)
    result = run_experiment_lite(algo, plot=True, seed=1, log_dir=str(tmp_path), tensorboard=False)
    assert result.final_video == str(tmp_path / "videos" / "iter_0001.mp4")
