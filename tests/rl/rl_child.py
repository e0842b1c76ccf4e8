"""Functions that the tests run in spawned child processes (importable by name, see conftest)."""
import os
import threading
import time
from typing import Any, Dict, Optional, Tuple

import cloudpickle
import gymnasium
import numpy as np
from gymnasium.wrappers import NormalizeObservation


def rebuild_policy_and_act(conn: Any, policy_bytes: bytes, params: np.ndarray, obs: np.ndarray,
                           rng_seed: int) -> None:
    """Unpickle a policy in a fresh interpreter, load ``params`` and answer with its outputs."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import sys
    policy = cloudpickle.loads(policy_bytes)
    policy.set_param_values(params)
    info = policy.dist_info_np(obs)
    actions, _ = policy.get_actions(obs, np.random.default_rng(rng_seed))
    conn.send({
        "info": info,
        "actions": actions,
        "params": policy.get_param_values(),
        "type": type(policy).__name__,
        "main_file": getattr(sys.modules["__main__"], "__file__", None),
        "tensorflow_loaded": "tensorflow" in sys.modules,
    })
    conn.close()


class NumpyLinearPolicy:
    """A TensorFlow-free Gaussian policy, for sampler tests that only care about processes."""

    def __init__(self, obs_dim: int, action_dim: int) -> None:
        self.w = np.zeros((obs_dim, action_dim), dtype=np.float32)

    def get_param_values(self) -> np.ndarray:
        return self.w.ravel().copy()

    def set_param_values(self, flat: np.ndarray) -> None:
        self.w = np.asarray(flat, dtype=np.float32).reshape(self.w.shape)

    def reset(self) -> None:
        pass

    def get_actions(self,
                    obs: np.ndarray,
                    rng: Optional[np.random.Generator] = None) -> Tuple[np.ndarray, Dict]:
        mean = obs @ self.w
        rng = rng or np.random.default_rng()
        return (mean + rng.standard_normal(mean.shape)).astype(np.float32), {"mean": mean}


def start_sampler_then_wait(conn: Any, env_id: str) -> None:
    """Start a ParallelSampler, report its worker pids, then idle until killed."""
    from async_plotter.rl.samplers import ParallelSampler
    sampler = ParallelSampler(2)
    sampler.start(env_id, NumpyLinearPolicy(4, 1), seed=0)
    conn.send(sampler.worker_pids)
    while True:
        time.sleep(1.0)


def failing_env():
    """An env factory that fails inside the worker."""
    raise RuntimeError("this env cannot be built (on purpose)")


def action_echo_env():
    """``ActionEcho`` under ``NormalizeObservation``, and an outer wrapper whose reward is the
    size of the normalized observation the policy sees: a shown episode's return says which
    statistics normalized it. The samplers' policy takes both actions, so their statistics have
    a mean near 0 and a deviation near 5, and a deterministic episode returns about 10; statistics
    learned from deterministic episodes alone (one action: the observation is their mean) give
    about 0."""
    return RewardIsObservationSize(NormalizeObservation(ActionEcho()))


class ActionEcho(gymnasium.Env):
    """Observes +5 after action 1 and -5 after action 0 (0 at reset); 10 steps an episode."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, render_mode="rgb_array"):
        self.observation_space = gymnasium.spaces.Box(-10.0, 10.0, (1, ), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.render_mode = render_mode
        self._steps = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self._steps += 1
        return np.array([5.0 if action else -5.0], np.float32), 0.0, self._steps >= 10, False, {}

    def render(self):
        return np.zeros((32, 32, 3), np.uint8)


class RewardIsObservationSize(gymnasium.Wrapper):

    def step(self, action):
        observation, _, terminated, truncated, info = self.env.step(action)
        return observation, float(abs(observation[0])), terminated, truncated, info


def cartpole_with_a_broken_hook():
    """CartPole under a wrapper whose ``get_wrapper_state()`` returns no arrays."""
    return BrokenHook(gymnasium.make("CartPole-v1"))


class BrokenHook(gymnasium.Wrapper):

    def get_wrapper_state(self):
        return ["not", "a", "dict"]

    def set_wrapper_state(self, state):
        pass


def normalized_cartpole():
    return NormalizeObservation(gymnasium.make("CartPole-v1"))


def unpicklable_normalized_env():
    """``action_echo_env`` whose base env holds a lock: the factory travels, a copy does not."""
    env = ActionEcho()
    env.lock = threading.Lock()
    return RewardIsObservationSize(NormalizeObservation(env))
