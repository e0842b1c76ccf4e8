"""Environment recipes: what crosses process boundaries instead of live environments."""
import cloudpickle
import gymnasium as gym
import pytest

from async_plotter.rl.envs import EnvMaker, EnvSpec, as_env_spec


def test_env_maker_from_id_live_env_and_factory():
    assert EnvMaker.from_env("CartPole-v1") == EnvMaker(env_id="CartPole-v1")
    assert EnvMaker.from_env("CartPole-v1").plotter_env == "CartPole-v1"

    live = gym.make("CartPole-v1", render_mode="human")  # never rendered here
    maker = EnvMaker.from_env(live)
    assert maker.env_id == "CartPole-v1" and "render_mode" not in maker.kwargs
    env = cloudpickle.loads(cloudpickle.dumps(maker))()
    assert env.render_mode is None and env.spec.id == "CartPole-v1"

    def make_pendulum():
        return gym.make("InvertedPendulum-v5")

    factory = EnvMaker.from_env(make_pendulum)
    assert factory.plotter_env is make_pendulum  # the user's own: the plotter's lines name it
    assert factory.label.endswith("make_pendulum") and maker.label == "CartPole-v1"
    assert cloudpickle.loads(cloudpickle.dumps(factory))().spec.id == "InvertedPendulum-v5"


def test_a_factory_is_named_by_what_it_makes_in_the_trainers_and_the_plotters_lines():
    """A ``functools.partial`` was named by its repr (``functools.partial(<function make at
    0x7f...>, 'CartPole-v1')``) in the training line, and ``partial`` in the plotter's."""
    import functools

    from async_plotter.env.recipe import describe_env

    class Factory:

        def __call__(self):
            return gym.make("CartPole-v1")

    named = [
        (functools.partial(gym.make, "CartPole-v1", max_episode_steps=50), "make('CartPole-v1')"),
        (functools.partial(gym.make, id="CartPole-v1"), "make(...)"),
        (EnvMaker(env_id="CartPole-v1", kwargs={"max_episode_steps": 50}), "CartPole-v1"),
        (Factory(), "Factory"),
    ]
    for factory, label in named:
        assert EnvMaker.from_env(factory).label == label
        assert describe_env(EnvMaker.from_env(factory).plotter_env).label == label


def test_env_maker_errors_are_specific():
    with pytest.raises(TypeError,
                       match="env must be a gymnasium id, a gymnasium.Env or a "
                       "zero-argument factory, got int"):
        EnvMaker.from_env(3)
    unregistered = gym.make("CartPole-v1").unwrapped
    unregistered.spec = None
    with pytest.raises(ValueError, match="was not made with gymnasium.make"):
        EnvMaker.from_env(unregistered)


def test_env_spec_forms():
    spec = as_env_spec("Swimmer-v5")
    assert (spec.observation_dim, spec.action_dim, spec.id) == (8, 2, "Swimmer-v5")
    assert as_env_spec(gym.spec("CartPole-v1")).action_dim == 2
    assert as_env_spec(spec) is spec
    assert EnvSpec.from_env(gym.make("CartPole-v1")).observation_dim == 4
    made = as_env_spec(lambda: gym.make("Hopper-v5"))  # a factory, as the algorithms take
    assert (made.observation_dim, made.action_dim, made.id) == (11, 3, "Hopper-v5")
    with pytest.raises(
            TypeError,
            match=r"<lambda>\(\) returned int, not a gymnasium Env: pass a factory of one"):
        as_env_spec(lambda: 3)
