"""An adapter that gives old ``gym``-style envs (and rllab's) the Gymnasium API the worker uses.

Old API: ``reset() -> obs``, ``step(a) -> (obs, reward, done, info)``, ``render(mode=...)``.
"""
from typing import Any, Optional, Tuple

import gymnasium
import numpy as np


def uses_old_gym_api(env: Any) -> bool:
    """True for envs that are not Gymnasium envs (their wrappers included)."""
    return not isinstance(env, gymnasium.Env)


class GymCompat:
    """Wraps an old-API env; exposes ``reset``/``step``/``render`` the Gymnasium way."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.observation_space = getattr(env, "observation_space", None)
        self.action_space = getattr(env, "action_space", None)
        self.render_mode = "rgb_array"

    @property
    def unwrapped(self) -> Any:
        return getattr(self.env, "unwrapped", self.env)

    def reset(self, seed: Optional[int] = None) -> Tuple[Any, dict]:
        if seed is not None and hasattr(self.env, "seed"):
            self.env.seed(seed)
        result = self.env.reset()
        if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
            return result  # a gym 0.26 env: already (obs, info)
        return result, {}

    def step(self, action: Any) -> Tuple[Any, float, bool, bool, dict]:
        result = tuple(self.env.step(action))
        if len(result) == 5:
            return result  # gym 0.26 already split terminated / truncated
        observation, reward, done, info = result
        info = dict(info or {})
        truncated = bool(info.get("TimeLimit.truncated", False))
        return observation, float(reward), bool(done) and not truncated, truncated, info

    def render(self) -> Optional[np.ndarray]:
        for call in (lambda: self.env.render(mode="rgb_array"), lambda: self.env.render()):
            try:
                frame = call()
            except TypeError:
                continue
            return None if frame is None else np.asarray(frame)
        return None

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()
