"""CartPole envs whose wrappers hold running observation statistics, and a numpy policy that
pushes the cart right exactly when the *normalized* cart position is above 1, so a test can tell
from a video which statistics the worker used.

With the trainer's statistics centred at cart position -2 (``RIGHT_STATS``) the policy pushes
right; centred at +2 (``LEFT_STATS``) it pushes left; with fresh statistics (mean 0) it pushes
left too. Importable by worker processes; imports no TensorFlow."""
import gymnasium
import numpy as np

from async_plotter import Serializable

RIGHT_STATS = -2.0
LEFT_STATS = 2.0


class CartPositionPolicy(Serializable):
    """Pushes right while ``gain * (observation[0] - threshold) > 0``."""

    def __init__(self, gain=1.0, threshold=1.0):
        Serializable.quick_init(self, locals())
        self.params = np.array([gain, threshold], dtype=np.float64)

    def get_param_values(self):
        return self.params.copy()

    def set_param_values(self, flat):
        self.params = np.array(flat, dtype=np.float64)

    def get_action(self, observation):
        score = self.params[0] * (float(np.asarray(observation)[0]) - self.params[1])
        return int(score > 0), {"logits": np.array([-score, score])}


def with_mean(stats, cart_position):
    """Statistics centred at ``cart_position`` (unit variance, a long history)."""
    stats.mean = np.array([cart_position, 0.0, 0.0, 0.0])
    stats.var = np.ones(4)
    stats.count = 1e4


def cartpole(render_mode="rgb_array"):
    return gymnasium.make("CartPole-v1", render_mode=render_mode)


class RunningMean(gymnasium.ObservationWrapper):
    """A user's own normalizer: subtracts a running mean it updates with every observation. With
    ``hook=True`` it has the documented method pair, so its state travels."""

    def __init__(self, env):
        super().__init__(env)
        self.mean = np.zeros(env.observation_space.shape)
        self.seen = 0

    def observation(self, observation):
        self.seen += 1
        self.mean = self.mean + (observation - self.mean) / self.seen
        return (observation - self.mean).astype(np.float32)


class TravellingRunningMean(RunningMean):
    """``RunningMean`` whose state travels through ``get_wrapper_state``/``set_wrapper_state``."""

    def get_wrapper_state(self):
        return {"mean": self.mean, "seen": self.seen}

    def set_wrapper_state(self, state):
        self.mean = np.array(state["mean"])
        self.seen = int(state["seen"])


class RllabNormalizedEnv:
    """rllab's ``normalize(env, normalize_obs=True)`` as old rllab code has it: the old gym API
    (``reset() -> obs``, 4-tuple ``step``), running ``_obs_mean``/``_obs_var`` updated by every
    observation it returns."""

    def __init__(self, env, obs_alpha=0.001):
        self._wrapped_env = env
        self._obs_alpha = obs_alpha
        self._obs_mean = np.zeros(env.observation_space.shape)
        self._obs_var = np.ones(env.observation_space.shape)
        self.observation_space = env.observation_space
        self.action_space = env.action_space

    def _apply_normalize_obs(self, obs):
        self._obs_mean = (1 - self._obs_alpha) * self._obs_mean + self._obs_alpha * obs
        self._obs_var = (
            1 - self._obs_alpha) * self._obs_var + self._obs_alpha * np.square(obs - self._obs_mean)
        return (obs - self._obs_mean) / (np.sqrt(self._obs_var) + 1e-8)

    def reset(self):
        observation, _ = self._wrapped_env.reset()
        return self._apply_normalize_obs(observation)

    def step(self, action):
        observation, reward, terminated, truncated, info = self._wrapped_env.step(action)
        return self._apply_normalize_obs(observation), reward, terminated or truncated, info

    def render(self, mode="rgb_array"):
        return self._wrapped_env.render()

    def close(self):
        self._wrapped_env.close()


class StepNormalizer(gymnasium.Wrapper):
    """Subtracts a running mean it updates in its own ``step()`` (not ``observation()``)."""

    def __init__(self, env):
        super().__init__(env)
        self.mean = np.zeros(env.observation_space.shape)
        self.seen = 0

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return (observation - self.mean).astype(np.float32), info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.seen += 1
        self.mean = self.mean + (observation - self.mean) / self.seen
        return (observation - self.mean).astype(np.float32), reward, terminated, truncated, info
