"""Turning the trainer's environment argument into a recipe the worker rebuilds its own env from.

The trainer's env object is never shared: the worker builds a fresh one (a shared env would have
its state stepped by two processes, and a window opened on it would duplicate the trainer's).
Accepted: a Gymnasium id (``"Swimmer-v5"``), an ``EnvSpec``, a zero-argument factory, an env class
(old-gym or Gymnasium, e.g. ``HopperEnv``: a factory called with no arguments), or an env instance
(rebuilt from its spec when it has one, else copied by cloudpickle). A factory that accepts
``render_mode`` gets ``"rgb_array"`` in the worker. Old ``gym``-style envs work through
``GymCompat``.
"""
import dataclasses
import inspect
import pickle
from typing import Any, Optional

import cloudpickle
import gymnasium

from async_plotter.errors import EnvSpecError
from async_plotter.gym_compat import GymCompat, uses_old_gym_api, without_passive_checker


@dataclasses.dataclass(frozen=True)
class EnvRecipe:
    """How to build the environment again in another process."""

    kind: str  # "id" | "spec" | "factory" | "copy"
    payload: bytes
    label: str


def describe_env(env: Any) -> EnvRecipe:
    """Build the recipe in the trainer; an unknown id or an unshippable env fails here, clearly."""
    if isinstance(env, str):
        _check_registered(env)
        return EnvRecipe("id", env.encode(), env)
    if isinstance(env, gymnasium.envs.registration.EnvSpec):
        return EnvRecipe("spec", _dumps(env, env.id), env.id)
    spec = getattr(env, "spec", None)
    if isinstance(env, gymnasium.Env) and isinstance(spec, gymnasium.envs.registration.EnvSpec):
        # Rebuilding from the spec re-applies the recorded wrappers; it never shares the object.
        return EnvRecipe("spec", _dumps(spec, spec.id), spec.id)
    if inspect.isclass(env):
        # An env class is a factory: it has ``step``, but as an unbound function, so copying it
        # as an env object made the worker call ``reset()`` without ``self``.
        _check_buildable_without_arguments(env)
        return EnvRecipe("factory", _dumps(env, env.__qualname__), env.__qualname__)
    if callable(env) and not hasattr(env, "step"):
        label = getattr(env, "__qualname__", type(env).__qualname__)
        return EnvRecipe("factory", _dumps(env, label), label)
    if hasattr(env, "step") and hasattr(env, "reset"):
        label = type(env).__qualname__
        return EnvRecipe("copy", _dumps(env, label), label)
    raise EnvSpecError(
        f"cannot plot env {env!r} of type {type(env).__qualname__}: pass a Gymnasium id such as "
        "'Swimmer-v5', an EnvSpec, a zero-argument function that builds the env, or an env object "
        "with reset() and step()")


def _check_buildable_without_arguments(env_class: type) -> None:
    try:
        parameters = inspect.signature(env_class).parameters.values()
    except (TypeError, ValueError):
        return  # a C extension type or similar: building it will tell
    required = [
        p.name for p in parameters
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                               p.KEYWORD_ONLY)
    ]
    if required:
        raise EnvSpecError(
            f"the env class {env_class.__qualname__} is built with no arguments in the plot "
            f"worker, but it requires {', '.join(required)}; pass a factory instead, e.g. "
            f"lambda: {env_class.__name__}({', '.join(f'{n}=...' for n in required)})")


def _check_registered(env_id: str) -> None:
    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error as error:
        raise EnvSpecError(f"unknown env id {env_id!r}: {error}") from error


def _dumps(obj: Any, label: str) -> bytes:
    try:
        return cloudpickle.dumps(obj)
    except Exception as error:  # noqa: BLE001 - pickling fails in many ways
        raise EnvSpecError(
            f"the env {label} cannot be sent to the plot worker ({error}); pass its Gymnasium id "
            "or a zero-argument function that builds it instead") from error


def build_env(recipe: EnvRecipe, render_mode: Optional[str]) -> Any:
    """Build a fresh env from ``recipe`` in this process (Gymnasium API, old gym envs adapted)."""
    if recipe.kind == "id":
        env = gymnasium.make(recipe.payload.decode(), render_mode=render_mode)
    elif recipe.kind == "spec":
        env = gymnasium.make(pickle.loads(recipe.payload), render_mode=render_mode)
    elif recipe.kind == "factory":
        factory = pickle.loads(recipe.payload)
        if render_mode is not None and _accepts_render_mode(factory):
            env = factory(render_mode=render_mode)
        else:
            env = factory()
    else:
        env = pickle.loads(recipe.payload)
    if uses_old_gym_api(env):
        env = GymCompat(without_passive_checker(env))
    return env


def factory_accepts_render_mode(recipe: EnvRecipe) -> bool:
    """Whether a ``"factory"`` recipe's callable takes ``render_mode`` (then it gets
    ``"rgb_array"`` in the worker)."""
    return recipe.kind == "factory" and _accepts_render_mode(pickle.loads(recipe.payload))


def _accepts_render_mode(factory: Any) -> bool:
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return "render_mode" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
