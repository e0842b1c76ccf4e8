"""The env the trainer steps is the env shown: the state of its wrappers (running observation
statistics) travels with every update, and the trainer-side check covers env and policy.

Each video test uses a policy that pushes CartPole's cart right exactly when the *normalized*
cart position is above 1 (``tests/env_state_helpers.py``): with the trainer's statistics it
pushes right in the first video; once the trainer's statistics move, the final video pushes
left. A worker with fresh statistics would push left in both."""
import logging
import os
import signal
import subprocess
import sys

import gymnasium
import numpy as np
import pytest
from gymnasium.wrappers import NormalizeObservation

from async_plotter import EnvMismatchError, EnvSpecError, Plotter
from async_plotter.env.state import TrainerEnvState, WorkerEnvState
from tests import env_state_helpers as helpers
from tests.cart_video import cart_moves
from tests.conftest import wait_for
from tests.redis_server import redis_server  # noqa: F401

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _single():
    env = NormalizeObservation(helpers.cartpole())
    return env, lambda position: helpers.with_mean(env.obs_rms, position)


def _vector():
    from gymnasium.wrappers.vector import NormalizeObservation as VectorNormalizeObservation

    env = VectorNormalizeObservation(
        gymnasium.vector.SyncVectorEnv([helpers.cartpole, helpers.cartpole]))
    return env, lambda position: helpers.with_mean(env.obs_rms, position)


def _rllab():
    env = helpers.RllabNormalizedEnv(helpers.cartpole())

    def move(position):
        env._obs_mean = np.array([position, 0.0, 0.0, 0.0])
        env._obs_var = np.ones(4)

    return env, move


def _custom():
    env = helpers.TravellingRunningMean(helpers.cartpole())

    def move(position):
        # A mean of -p makes the normalized position x + p: the same as the others' statistics.
        env.mean = np.array([position, 0.0, 0.0, 0.0])
        env.seen = 10**6

    return env, move


ENVS = {"gymnasium": _single, "vector": _vector, "rllab": _rllab, "custom-hook": _custom}


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(ENVS))
def test_the_videos_follow_the_trainers_statistics(form, tmp_path, no_leftovers):
    env, move = ENVS[form]()
    move(helpers.RIGHT_STATS)
    policy = helpers.CartPositionPolicy()
    videos = tmp_path / "videos"
    with Plotter(env,
                 policy,
                 max_path_length=40,
                 video_dir=str(videos),
                 min_video_seconds=0,
                 deterministic=True) as plotter:
        plotter.update_plot(policy, iteration=0)
        wait_for(lambda: any(v["iteration"] == 0 for v in plotter.stats["video_log"]),
                 120,
                 message="the video of iteration 0")
        move(helpers.LEFT_STATS)  # training moved the statistics; the parameters stay
        plotter.update_plot(policy, iteration=1)
    stats = plotter.stats
    assert stats["last_error"] is None and stats["restarts"] == 0, stats["last_error"]
    assert cart_moves(str(videos / "iter_0000.mp4")) == 1, "the first video should push right"
    assert stats["final_video"].endswith("iter_0001.mp4")
    assert cart_moves(stats["final_video"]) == -1, "the final video should push left"


@pytest.mark.slow
def test_a_mujoco_env_with_normalized_observations_plots_through_the_defaults(
        tmp_path, no_leftovers):
    import imageio

    env = NormalizeObservation(gymnasium.make("HalfCheetah-v5"))
    rng = np.random.default_rng(3)
    env.reset(seed=0)
    for _ in range(50):  # statistics from a few random steps, as early training has them
        env.step(env.action_space.sample())
    policy = LinearPolicy(rng.normal(0, 0.5, (17, 6)))
    with Plotter(env, policy, max_path_length=60, video_dir=str(tmp_path)) as plotter:
        plotter.update_plot(policy, iteration=0)
    stats = plotter.stats
    assert stats["last_error"] is None, stats["last_error"]
    frames = imageio.mimread(stats["final_video"], memtest=False)
    assert len(frames) > 10
    assert np.std(frames[-1]) > 5, "the frame is blank"
    assert np.abs(frames[-1].astype(int) - frames[0].astype(int)).mean() > 1, "nothing moved"


class LinearPolicy:
    """A numpy linear Gaussian-mean policy (rllab's protocol, rebuilt by pickle)."""

    def __init__(self, weights):
        self.weights = np.asarray(weights, np.float64)

    def get_param_values(self):
        return self.weights.ravel().copy()

    def set_param_values(self, flat):
        self.weights = np.asarray(flat, np.float64).reshape(self.weights.shape)

    def get_action(self, observation):
        mean = np.tanh(np.asarray(observation) @ self.weights)
        return mean, {"mean": mean}


def test_a_stateful_wrapper_whose_state_cannot_travel_is_refused_and_nothing_is_created(tmp_path):
    videos = tmp_path / "videos"
    with pytest.raises(EnvMismatchError) as error:
        Plotter(helpers.RunningMean(helpers.cartpole()),
                helpers.CartPositionPolicy(),
                video_dir=str(videos))
    message = str(error.value)
    assert "RunningMean" in message and "mean" in message
    assert "get_wrapper_state" in message and "set_wrapper_state" in message
    assert not videos.exists()


def test_statistics_that_do_not_reach_the_worker_are_named(tmp_path, monkeypatch):
    """Re-creates the reported bug by itself: state read from the trainer but never applied."""
    monkeypatch.setattr(WorkerEnvState, "apply", lambda self, flat: None)
    env, move = _single()
    move(helpers.RIGHT_STATS)
    with pytest.raises(EnvMismatchError, match="NormalizeObservation holds running statistics"):
        Plotter(env, helpers.CartPositionPolicy(), video_dir=str(tmp_path / "videos"))
    assert not (tmp_path / "videos").exists()


def test_a_hook_that_returns_no_arrays_is_refused_by_name(tmp_path):

    class Broken(helpers.TravellingRunningMean):

        def get_wrapper_state(self):
            return ["not", "a", "dict"]

    with pytest.raises(EnvMismatchError, match=r"Broken.get_wrapper_state\(\) returned list"):
        Plotter(Broken(helpers.cartpole()), helpers.CartPositionPolicy(), video_dir=str(tmp_path))


def test_a_vector_wrapper_that_cannot_be_shown_on_one_env_is_refused_by_name(tmp_path):
    from gymnasium.wrappers.vector import TransformObservation

    vector = gymnasium.vector.SyncVectorEnv([helpers.cartpole, helpers.cartpole])
    env = TransformObservation(vector, lambda o: o * 2, vector.observation_space)
    with pytest.raises(EnvSpecError, match="the vector wrapper TransformObservation"):
        Plotter(env, helpers.CartPositionPolicy(), video_dir=str(tmp_path))


def test_the_state_is_read_at_every_update_and_the_workers_copy_never_updates_it():
    env, move = _single()
    move(helpers.RIGHT_STATS)
    trainer = TrainerEnvState(env, "CartPole-v1")
    assert trainer.layout.size == 9  # mean (4), var (4), count
    copy = NormalizeObservation(helpers.cartpole())
    worker = WorkerEnvState(copy, trainer.layout, "CartPole-v1")
    worker.apply(trainer.read())
    copy.reset(seed=0)
    copy.action_space.seed(0)
    for _ in range(20):
        worker.hold()
        if any(copy.step(copy.action_space.sample())[2:4]):
            worker.hold()
            copy.reset()
    np.testing.assert_allclose(copy.obs_rms.mean, [helpers.RIGHT_STATS, 0, 0, 0])
    assert copy.obs_rms.count == 1e4
    move(helpers.LEFT_STATS)
    worker.apply(trainer.read())
    np.testing.assert_allclose(copy.obs_rms.mean, [helpers.LEFT_STATS, 0, 0, 0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_update_is_the_policy_then_the_env_state_and_splits_back_into_both(dtype):
    """One module owns the vector (``worker/parameters.py``): what the trainer encodes, the
    worker splits into the same two parts, in the policy's dtype as they travel."""
    from async_plotter.worker.parameters import ParameterLayout

    env, move = _single()
    move(helpers.RIGHT_STATS)
    state = TrainerEnvState(env, "CartPole-v1")
    policy = (np.arange(5) / 3).astype(dtype)
    layout = ParameterLayout(policy.size, np.dtype(dtype), state.layout)
    flat = layout.encode(policy, state)
    assert flat.dtype == dtype and flat.size == layout.size == 5 + 9
    policy_part, env_part = layout.split(flat)
    assert policy_part.dtype == dtype and env_part.dtype == dtype
    np.testing.assert_array_equal(policy_part, policy)
    np.testing.assert_array_equal(env_part, state.read().astype(dtype))
    copy = NormalizeObservation(helpers.cartpole())
    WorkerEnvState(copy, state.layout, "CartPole-v1").apply(env_part)
    np.testing.assert_allclose(copy.obs_rms.mean, [helpers.RIGHT_STATS, 0, 0, 0])
    assert copy.obs_rms.count == 1e4
    alone = ParameterLayout(policy.size, np.dtype(dtype))  # an env without wrapper state
    assert alone.encode(policy) is policy and alone.split(policy)[1].size == 0


def test_a_factory_whose_env_normalizes_is_warned_about(tmp_path, caplog):

    def make(render_mode=None):
        return NormalizeObservation(helpers.cartpole(render_mode))

    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        Plotter(make, helpers.CartPositionPolicy(), video_dir=str(tmp_path))
    assert any("start fresh in the plot worker" in r.getMessage() for r in caplog.records)


def test_a_numpy_policy_leaves_tensorflow_unimported():
    script = ("import sys, numpy as np\n"
              "from async_plotter import Plotter\n"
              "from tests.test_env_state import LinearPolicy\n"
              "Plotter('Swimmer-v5', LinearPolicy(np.zeros((8, 2))), video_dir=sys.argv[1])\n"
              "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", script, "/tmp/async_plotter_no_tf_videos"],
                            cwd=REPOSITORY,
                            capture_output=True,
                            text=True,
                            timeout=120,
                            check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr


@pytest.mark.slow
def test_gyms_pendulum_gets_the_policys_float64_actions_and_plots(tmp_path, no_leftovers):
    import gym

    policy = LinearPolicy(np.full((3, 1), 0.3))
    with Plotter(lambda: gym.make("Pendulum-v1", render_mode="rgb_array"),
                 policy,
                 max_path_length=30,
                 video_dir=str(tmp_path),
                 min_video_seconds=0) as plotter:
        plotter.update_plot(policy, iteration=0)
    stats = plotter.stats
    assert stats["last_error"] is None, stats["last_error"]
    assert stats["final_video"] and os.path.getsize(stats["final_video"]) > 0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_statistics_travel_through_redis_to_a_viewer(redis_server, tmp_path):
    """A publish-only trainer on one side, ``async-plotter view`` on the other: the statistics
    ride in the signed update, and the viewer's videos follow them."""
    from tests.redis_helpers import start_viewer

    env, move = _single()
    move(helpers.RIGHT_STATS)
    policy = helpers.CartPositionPolicy()
    secret = "a shared secret of decent length"
    videos, log = tmp_path / "videos", str(tmp_path / "viewer.log")
    plotter = Plotter(env,
                      policy,
                      max_path_length=40,
                      deterministic=True,
                      min_video_seconds=0,
                      channel=redis_server.url,
                      experiment="normalized-cartpole",
                      secret=secret)
    viewer = start_viewer(redis_server.url,
                          "normalized-cartpole",
                          log,
                          "--video-dir",
                          str(videos),
                          "--priority",
                          "normal",
                          ASYNC_PLOTTER_SECRET=secret)
    try:
        plotter.update_plot(policy, iteration=0)
        wait_for(lambda: (videos / "iter_0000.mp4").exists(),
                 90,
                 message=f"the viewer's first video (its log: {log})")
        move(helpers.LEFT_STATS)
        plotter.update_plot(policy, iteration=1)
        wait_for(lambda: (videos / "iter_0001.mp4").exists(),
                 60,
                 message=f"the viewer's second video (its log: {log})")
    finally:
        plotter.close()
        viewer.send_signal(signal.SIGINT)
        viewer.wait(20)
    assert cart_moves(str(videos / "iter_0000.mp4")) == 1
    assert cart_moves(str(videos / "iter_0001.mp4")) == -1


def test_an_async_vector_env_is_plotted_as_one_env_and_keeps_working(tmp_path):
    """Its statistics travel, and the check copies none of its pipes (copies that closed the
    originals' file descriptors when they were collected)."""
    from gymnasium.wrappers.vector import NormalizeObservation as VectorNormalizeObservation

    vector = gymnasium.vector.AsyncVectorEnv([helpers.cartpole, helpers.cartpole], context="spawn")
    env = VectorNormalizeObservation(vector)
    try:
        env.reset(seed=0)
        env.step(env.action_space.sample())
        plotter = Plotter(env, helpers.CartPositionPolicy(), video_dir=str(tmp_path))
        assert plotter._config.worker.parameters.env_state.describe().startswith(
            "NormalizeObservation")
        np.testing.assert_allclose(plotter._config.env_state.read()[:4], env.obs_rms.mean)
        env.step(env.action_space.sample())  # its pipes still work
    finally:
        env.close()
