"""An adapter that gives old ``gym``-style envs (and rllab's) the Gymnasium API the worker uses.

Old API: ``reset() -> obs``, ``step(a) -> (obs, reward, done, info)``, ``render(mode=...)``.
gym 0.26 already returns ``(obs, info)`` and five-tuples, and renders in the ``render_mode`` it was
built with. Its passive env checker (a wrapper that only checks) calls ``np.bool8``, gone in
numpy 2, on the first ``step()``; ``without_passive_checker`` takes it out of the worker's copy,
so an env that works in the trainer works there too.
"""
import inspect
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
        if seed is not None and _takes(self.env, "reset", "seed"):
            result = self.env.reset(seed=seed)  # gym >= 0.22 has no env.seed()
        else:
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
        # gym >= 0.26 envs render in the mode they were built with, older ones take it per
        # call. Telling them apart by the env's signature, not by catching TypeError, lets a
        # real error inside render() show as itself.
        if _takes(self.env, "render", "mode"):
            frame = self.env.render(mode="rgb_array")
        else:
            frame = self.env.render()
        return None if frame is None else np.asarray(frame)

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def _takes(env: Any, method: str, argument: str) -> bool:
    """Whether the env's ``method`` takes ``argument`` (wrappers forward ``**kwargs``: the env
    underneath them says)."""
    try:
        parameters = inspect.signature(getattr(getattr(env, "unwrapped", env), method)).parameters
    except (TypeError, ValueError, AttributeError):
        return False
    return argument in parameters


def without_passive_checker(env: Any) -> Any:
    """``env`` without gym's ``PassiveEnvChecker`` wrapper (it checks, and changes nothing)."""
    if _is_gym_passive_checker(env):
        return env.env
    outer = env
    while hasattr(outer, "env"):
        inner = outer.env
        if _is_gym_passive_checker(inner):
            outer.env = inner.env
            break
        outer = inner
    return env


def _is_gym_passive_checker(env: Any) -> bool:
    cls = type(env)
    return cls.__name__ == "PassiveEnvChecker" and cls.__module__.startswith("gym.")


#: Gymnasium's wrappers that ``gymnasium.make`` adds and that only keep books (a step limit, the
#: call order, a check of the first calls): the worker may step past them
_BOOKKEEPING = frozenset(("TimeLimit", "OrderEnforcing", "PassiveEnvChecker"))


def direct_step(env: Any) -> Tuple[Any, Optional[int]]:
    """``(step, limit)``: ``env.step``, or, where every wrapper of ``env`` is bookkeeping, the
    bare env's ``step`` and ``TimeLimit``'s step limit, which the caller then keeps (the episode
    is truncated at ``limit`` steps; None: no limit). Going through the three wrappers was a
    quarter of a Hopper step's CPU (56 of 214 us) in the rollout process, paid at every step
    whether shown or not. ``reset`` still goes through them."""
    layer, limit = env, None
    while isinstance(layer, gymnasium.Wrapper):
        kind = type(layer)
        if kind.__name__ not in _BOOKKEEPING or not kind.__module__.startswith("gymnasium."):
            return env.step, None
        if kind.__name__ == "TimeLimit":
            limit = getattr(layer, "_max_episode_steps", None)
        layer = layer.env
    if layer is env:
        return env.step, None
    return layer.step, limit
