"""Env classes are zero-argument factories: ``Plotter(OldPointEnv, policy)`` and
``Plotter(HopperEnv, policy)`` used to be pickled as env "copies", and the worker failed with
``TypeError: reset() missing 1 required positional argument: 'self'``."""
import threading

import gymnasium
import imageio.v2 as imageio
import numpy as np
import pytest
from gymnasium.envs.mujoco.hopper_v5 import HopperEnv
from gymnasium.wrappers import HumanRendering, NormalizeObservation, RenderCollection

from async_plotter import EnvSpecError, Plotter
from async_plotter.env.layers import env_layers
from async_plotter.env.recipe import build_env, describe_env
from tests.conftest import wait_for
from tests.policies import LinearPolicy

pytestmark = pytest.mark.slow


class OldPointEnv:
    """An old-gym-style env class: reset() -> obs, step() -> 4-tuple, render(mode)."""

    def __init__(self):
        import gymnasium

        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2, ), np.float32)
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (2, ), np.float32)
        self.position = np.zeros(2, np.float32)

    def reset(self):
        self.position = np.array([0.5, -0.5], np.float32)
        return self.position.copy()

    def step(self, action):
        self.position = np.clip(self.position + 0.1 * np.asarray(action, np.float32), -1, 1)
        return self.position.copy(), -float(np.sum(self.position**2)), False, {}

    def render(self, mode="human"):
        assert mode == "rgb_array", mode
        frame = np.zeros((48, 48, 3), np.uint8)
        x, y = ((self.position + 1) * 20).astype(int)
        frame[y:y + 8, x:x + 8] = (255, 255, 0)
        return frame


class NeedsArguments(OldPointEnv):

    def __init__(self, size):
        super().__init__()


def test_old_gym_env_class_is_a_factory(tmp_path, no_leftovers):
    policy = LinearPolicy(2, 2)
    policy.set_param_values(np.array([1.0, 0.0, 0.0, 1.0], np.float32))  # drifts outwards
    with Plotter(OldPointEnv, policy, max_path_length=12, video_dir=str(tmp_path),
                 fps=200) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 60, message="a video of OldPointEnv")
        stats = plotter.stats
    assert stats["restarts"] == 0 and stats["last_error"] is None
    frames = [frame for frame in imageio.get_reader(str(tmp_path / "update_0000.mp4"))]
    assert frames[0].shape == (48, 48, 3)
    assert any(not np.array_equal(frames[0], frame) for frame in frames[1:]), "the point moves"


def test_gymnasium_env_class_is_a_factory_and_gets_rgb_array(tmp_path, no_leftovers):
    recipe = describe_env(HopperEnv)
    assert recipe.kind == "factory" and recipe.label == "HopperEnv"
    env = build_env(recipe, render_mode="rgb_array")
    assert env.unwrapped.render_mode == "rgb_array"
    env.close()

    with Plotter(HopperEnv,
                 LinearPolicy(11, 3),
                 max_path_length=20,
                 video_dir=str(tmp_path),
                 fps=200) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 60, message="a video of HopperEnv")
        stats = plotter.stats
    assert stats["restarts"] == 0 and stats["last_error"] is None
    frames = [frame for frame in imageio.get_reader(stats["last_video"])]
    assert frames and frames[0].shape == (320, 320, 3) and frames[0].std() > 20  # cheap preset


def test_env_class_that_needs_arguments_is_named_in_the_trainer(tmp_path):
    with pytest.raises(EnvSpecError) as raised:
        Plotter(NeedsArguments, LinearPolicy(2, 2), video_dir=str(tmp_path / "videos"))
    assert "requires size" in str(raised.value) and "lambda: NeedsArguments(size=...)" in str(
        raised.value)
    assert not (tmp_path / "videos").exists()


def test_a_made_envs_step_limit_still_ends_the_workers_episodes(tmp_path, no_leftovers):
    """The rollout process steps past gymnasium.make's bookkeeping wrappers (a quarter of a
    Hopper step's CPU) and keeps their TimeLimit itself: max_episode_steps=30 under a
    max_path_length of 1000 still ends each episode after 30 steps."""
    import gymnasium

    from async_plotter.render.recording import read_recording

    env = gymnasium.make("Swimmer-v5", max_episode_steps=30)
    policy = LinearPolicy(8, 2)
    policy.fill(0.3)
    with Plotter(env,
                 policy,
                 max_path_length=1000,
                 video_dir=str(tmp_path),
                 seed=0,
                 priority="normal") as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 90, message="a video")
        path = plotter.stats["video_log"][0]["path"]
    recording = read_recording(path[:-len(".mp4")] + ".npz")
    rows = np.bincount(recording.episodes)
    # Swimmer shows every step: the reset state and 30 steps per episode, chained to 2 s.
    assert len(rows) >= 2 and (rows == 31).all(), rows


class ScaledObservation(gymnasium.ObservationWrapper):
    """A wrapper of the user's as most are written: its argument is not recorded (no
    ``RecordConstructorArgs``), so Gymnasium's spec cannot rebuild it."""

    def __init__(self, env, scale):
        super().__init__(env)
        self.scale = scale

    def observation(self, observation):
        return observation * self.scale


class LockedObservation(ScaledObservation):
    """The same, holding what cannot be copied to another process."""

    def __init__(self, env, scale):
        super().__init__(env, scale)
        self.lock = threading.Lock()


class ScaledAction(gymnasium.ActionWrapper):
    """An action wrapper of the user's with an optional argument, recorded nowhere."""

    def __init__(self, env, scale=1.0):
        super().__init__(env)
        self.scale = scale

    def action(self, action):
        return action * self.scale


#: steps of the episodes whose returns are compared
STEPS = 80


def shown_return(env, folder):
    """The return of the initial policy's history episode on ``env`` (one deterministic
    episode from the start state, in the worker), and that policy."""
    policy = LinearPolicy(8, 2)
    policy.fill(0.3)
    with Plotter(env, policy, max_path_length=STEPS, video_dir=str(folder),
                 priority="normal") as plotter:
        wait_for(lambda: plotter.stats["history"], 90, message="the initial policy's history")
        return plotter.stats["history"][0]["return"], policy


def deterministic_return(env, policy, steps=STEPS):
    """The return of ``policy``'s actions over ``steps`` steps from the reset of seed 0 (the
    history's start state)."""
    observation, _ = env.reset(seed=0)
    total = 0.0
    for _ in range(steps):
        observation, reward, terminated, truncated, _ = env.step(policy.get_action(observation)[0])
        total += reward
        if terminated or truncated:
            break
    env.close()
    return total


def test_a_wrapper_that_records_no_arguments_is_shown_as_a_copy_of_yours(tmp_path, no_leftovers):
    """Before, ``EnvSpecError``: "cannot be rebuilt in the plot worker: it needs scale"."""
    env = ScaledObservation(gymnasium.make("Swimmer-v5"), scale=3.0)
    copied = build_env(describe_env(env), render_mode=None)
    assert isinstance(copied, ScaledObservation) and copied.scale == 3.0
    assert copied.unwrapped is not env.unwrapped  # the env beneath is built afresh
    copied.close()

    # The worker's episode is the one a scale of 3 gives, not the plain env's.
    shown, policy = shown_return(env, tmp_path)
    scaled = ScaledObservation(gymnasium.make("Swimmer-v5"), scale=3.0)
    assert shown == pytest.approx(deterministic_return(scaled, policy), rel=1e-3, abs=1e-3)
    plain = deterministic_return(gymnasium.make("Swimmer-v5"), policy)
    assert shown != pytest.approx(plain, rel=1e-2, abs=1e-2)


def test_a_wrapper_that_can_be_neither_rebuilt_nor_copied_is_named_in_the_trainer(tmp_path):
    env = LockedObservation(gymnasium.make("Swimmer-v5"), scale=3.0)
    with pytest.raises(EnvSpecError) as raised:
        Plotter(env, LinearPolicy(8, 2), video_dir=str(tmp_path / "videos"))
    message = str(raised.value)
    assert "LockedObservation cannot be rebuilt" in message and "needs scale" in message
    assert "RecordConstructorArgs.__init__(self, scale=scale)" in message
    assert not (tmp_path / "videos").exists()


def test_an_action_wrapper_given_an_optional_argument_is_shown_as_given(tmp_path, no_leftovers):
    """Before, the worker built ``ScaledAction(env)`` afresh, with the default scale of 1, and
    showed other actions than the trainer's silently (no check compares action wrappers)."""
    shown, policy = shown_return(ScaledAction(gymnasium.make("Swimmer-v5"), scale=0.2), tmp_path)
    given = ScaledAction(gymnasium.make("Swimmer-v5"), scale=0.2)
    assert shown == pytest.approx(deterministic_return(given, policy), rel=1e-3, abs=1e-3)
    default = ScaledAction(gymnasium.make("Swimmer-v5"))
    assert shown != pytest.approx(deterministic_return(default, policy), rel=1e-2, abs=1e-2)


@pytest.mark.parametrize("wrapper", [HumanRendering, RenderCollection])
def test_wrappers_that_only_show_are_left_out_of_the_workers_copy(wrapper, tmp_path, no_leftovers):
    """A trainer's env under Gymnasium's ``HumanRendering`` (its own window) or ``RenderCollection``
    (``RecordVideo`` alike, which needs moviepy): before, ``Plotter()`` rebuilt them on the copy
    it builds without rendering and failed with an ``EnvBuildError`` blaming the env; in the
    worker a ``HumanRendering`` would have opened a second window, a ``RecordVideo`` written the
    worker's episodes into your folder."""
    env = NormalizeObservation(wrapper(gymnasium.make("Swimmer-v5", render_mode="rgb_array")))
    copied = build_env(describe_env(env), render_mode=None)
    assert [type(layer).__name__
            for layer in env_layers(copied)][:2] == ["NormalizeObservation", "TimeLimit"]
    copied.close()
    # Alone above make(), it was made again by the spec, which records it.
    alone = build_env(describe_env(wrapper(gymnasium.make("Swimmer-v5", render_mode="rgb_array"))),
                      render_mode=None)
    assert type(alone).__name__ == "TimeLimit", env_layers(alone)
    alone.close()
    shown, _ = shown_return(env, tmp_path / "shown")
    # As the same env without it shows (the statistics travel, frozen, in both).
    plain, _ = shown_return(NormalizeObservation(gymnasium.make("Swimmer-v5")), tmp_path / "plain")
    assert shown == pytest.approx(plain, rel=1e-6)


class EpisodeLog(gymnasium.Wrapper):
    """A wrapper of the user's that logs each episode the trainer begins, to a file."""

    def __init__(self, env, path):
        super().__init__(env)
        self.path = path

    def reset(self, **kwargs):
        with open(self.path, "a") as log:
            log.write("an episode\n")
        return super().reset(**kwargs)


class TrainerEpisodeLog(EpisodeLog):
    async_plotter_leave_out = True  # the plotter's copy leaves it out


@pytest.mark.parametrize("wrapper", [EpisodeLog, TrainerEpisodeLog])
def test_a_wrapper_of_yours_that_only_logs_can_be_left_out_of_the_workers_copy(
        wrapper, tmp_path, no_leftovers):
    """Rebuilt in the worker, a wrapper that logs the trainer's episodes logs the plotter's
    too, into the same file; its class's ``async_plotter_leave_out = True`` leaves it out."""
    log = tmp_path / "episodes.txt"
    shown, _ = shown_return(wrapper(gymnasium.make("Swimmer-v5"), str(log)), tmp_path / "shown")
    plain, _ = shown_return(gymnasium.make("Swimmer-v5"), tmp_path / "plain")
    assert shown == pytest.approx(plain, rel=1e-6)
    logged = log.read_text().splitlines() if log.exists() else []
    if wrapper is TrainerEpisodeLog:
        assert logged == [], logged  # the trainer began no episode
    else:
        assert logged, "the worker's episodes, logged with the trainer's"


def test_an_id_registered_with_an_entry_point_the_script_lacks_is_named(tmp_path):
    gymnasium.register("TypoSwimmer-v0", entry_point="__main__:NoSuchSwimmer")
    try:
        with pytest.raises(EnvSpecError) as refused:
            Plotter("TypoSwimmer-v0", LinearPolicy(8, 2), video_dir=str(tmp_path / "v"))
    finally:
        del gymnasium.registry["TypoSwimmer-v0"]
    assert "entry_point='__main__:NoSuchSwimmer', which names nothing in your script" in str(
        refused.value)
    assert not (tmp_path / "v").exists()
