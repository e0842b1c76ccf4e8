"""Turning the trainer's environment argument into a recipe the worker rebuilds its own env from.

The trainer's env object is never shared: the worker builds a fresh one (a shared env would have
its state stepped by two processes, and opening a window on it duplicated windows in a peer).
Accepted: a Gymnasium id (``"Swimmer-v5"``), an ``EnvSpec``, a zero-argument factory (a class
counts), or an env instance (rebuilt from its spec when it has one, else copied by cloudpickle).
Old ``gym``-style envs work through ``GymCompat``.
"""
import dataclasses
import inspect
import pickle
from typing import Any, Optional

import cloudpickle
import gymnasium

from async_plotter.errors import EnvSpecError
from async_plotter.gym_compat import GymCompat, uses_old_gym_api


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
        env = GymCompat(env)
    return env


def _accepts_render_mode(factory: Any) -> bool:
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return "render_mode" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
