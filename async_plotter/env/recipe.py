"""Turning the trainer's environment argument into a recipe the worker rebuilds its own env from.

The trainer's env object is never shared: the worker builds a fresh one (a shared env would have
its state stepped by two processes, and a window opened on it would duplicate the trainer's).
Accepted: a Gymnasium id (``"Swimmer-v5"``: its registration travels, so an id the user's script
or a package registered is made in the worker too), an ``EnvSpec``, a zero-argument factory, an env class
(old-gym or Gymnasium, e.g. ``HopperEnv``: a factory called with no arguments), or an env instance
(rebuilt from its spec when it has one, else copied by cloudpickle). A factory that accepts
``render_mode`` gets ``"rgb_array"`` in the worker. Old ``gym``-style envs work through
``GymCompat``.
"""
import copy
import dataclasses
import functools
import inspect
import pickle
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import cloudpickle
import gymnasium

from async_plotter.errors import EnvSpecError
from async_plotter.env.gym_compat import GymCompat, uses_old_gym_api, without_passive_checker
from async_plotter.env.layers import shows_only
from async_plotter.env.recipe_record import EnvRecipe

#: a wrapper to apply in the worker: its class (or a ``CopiedWrapper``) and keyword arguments
#: (besides the env)
WrapperRecord = Tuple[Callable[..., Any], Dict[str, Any]]


class CopiedWrapper:
    """A wrapper of the user's that did not record its constructor's arguments, rebuilt in the
    worker as a copy of the trainer's layer (its own attributes, such as a scale it was given)
    put over the worker's env. The env beneath is never copied: it is built fresh from the
    spec, as for any made env."""

    def __init__(self, layer: Any) -> None:
        clone = copy.copy(layer)
        vars(clone)["env"] = None  # the link down, set again to the worker's env
        self.layer = clone

    def __call__(self, env: Any) -> Any:
        layer = copy.copy(self.layer)
        layer.env = env
        return layer


def factory_label(factory: Callable[..., Any]) -> str:
    """How the library's lines name an env's factory: an object that names itself by a ``label``
    string (``async_plotter.rl``'s ``EnvMaker``: its id), a ``functools.partial`` by what it
    wraps and an id it is given (``make('Hopper-v5')``), a function or class by its name, any
    other object by its class."""
    label = getattr(factory, "label", None)
    if isinstance(label, str) and label:
        return label
    if isinstance(factory, functools.partial):
        first = factory.args[0] if factory.args else None
        given = f"{first!r}" if isinstance(first, str) and len(first) <= 40 else "..."
        return f"{factory_label(factory.func)}({given})"
    name = getattr(factory, "__name__", None)
    return name if isinstance(name, str) else type(factory).__name__


def chain_recipe(base: EnvRecipe, wrappers: List[WrapperRecord], label: str = "") -> EnvRecipe:
    """``base`` with ``wrappers`` applied on top, innermost first."""
    return EnvRecipe("chain", _dumps((base, wrappers), base.label), label or base.label)


def describe_env(env: Any) -> EnvRecipe:
    """Build the recipe in the trainer; an unknown id or an unshippable env fails here, clearly."""
    if isinstance(env, str):
        # The worker neither runs the user's script nor imports what registered the id (a
        # gymnasium.register call in the script, a package such as gymnasium_robotics): the
        # registration travels, with what makes the env.
        return EnvRecipe("spec", _dumps(travelling_spec(_registered(env)), env), env)
    if isinstance(env, gymnasium.envs.registration.EnvSpec):
        return EnvRecipe("spec", _dumps(travelling_spec(env), env.id), env.id)
    if isinstance(env, gymnasium.vector.VectorEnv):
        return describe_vector_env(env)
    spec = getattr(env, "spec", None)
    if isinstance(env, gymnasium.Env) and isinstance(spec, gymnasium.envs.registration.EnvSpec):
        # Rebuilding from the spec re-applies the recorded wrappers; it never shares the object.
        # Wrappers added after make() are re-applied by class (cloudpickled, so a wrapper
        # defined in the user's script travels too) with the arguments they recorded.
        wrappers = _added_wrappers(env, spec)
        if wrappers is not None and spec.additional_wrappers:
            # Also where every added one is left out (a RecordVideo alone): the spec would
            # have the worker's make() apply them again.
            base = dataclasses.replace(travelling_spec(spec), additional_wrappers=())
            recipe = EnvRecipe("spec", _dumps(base, spec.id), spec.id)
            return chain_recipe(recipe, wrappers) if wrappers else recipe
        return EnvRecipe("spec", _dumps(travelling_spec(spec), spec.id), spec.id)
    if inspect.isclass(env):
        # An env class is a factory: it has ``step``, but as an unbound function, so copying it
        # as an env object made the worker call ``reset()`` without ``self``.
        _check_buildable_without_arguments(env)
        return EnvRecipe("factory", _dumps(env, env.__qualname__), env.__qualname__)
    if callable(env) and not hasattr(env, "step"):
        label = factory_label(env)
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


def _registered(env_id: str) -> Any:
    """The ``EnvSpec`` registered under ``env_id``; ``EnvSpecError`` where there is none."""
    try:
        return gymnasium.spec(env_id)
    except gymnasium.error.Error as error:
        raise EnvSpecError(f"unknown env id {env_id!r}: {error}") from error


def travelling_spec(spec: Any) -> Any:
    """``spec`` as a process that never ran the user's script can make it: an entry point named
    in ``__main__`` (``entry_point="__main__:MyEnv"``) is replaced by what it names, which
    cloudpickle sends by value (as it does a class given as the entry point)."""
    entry_point = spec.entry_point
    if isinstance(entry_point, str) and entry_point.split(":")[0] == "__main__":
        try:
            creator = gymnasium.envs.registration.load_env_creator(entry_point)
        except (AttributeError, ValueError) as error:
            raise EnvSpecError(f"the env {spec.id!r} is registered with entry_point="
                               f"{entry_point!r}, which names nothing in your script: "
                               f"{error}") from error
        return dataclasses.replace(spec, entry_point=creator)
    return spec


def _dumps(obj: Any, label: str) -> bytes:
    try:
        return cloudpickle.dumps(obj)
    except Exception as error:  # noqa: BLE001 - pickling fails in many ways
        raise EnvSpecError(
            f"the env {label} cannot be sent to the plot worker ({error}); pass its Gymnasium id "
            "or a zero-argument function that builds it instead") from error


def build_env(recipe: EnvRecipe, render_mode: Optional[str], quiet: bool = False) -> Any:
    """Build a fresh env from ``recipe`` in this process (Gymnasium API, old gym envs adapted);
    with ``quiet``, without showing the warnings building it gives (a trainer-side copy would
    repeat on the user's terminal what making their own env said)."""
    if quiet:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return build_env(recipe, render_mode)
    if recipe.kind == "spec":
        env = gymnasium.make(pickle.loads(recipe.payload), render_mode=render_mode)
    elif recipe.kind == "factory":
        factory = pickle.loads(recipe.payload)
        if render_mode is not None and _accepts_render_mode(factory):
            env = factory(render_mode=render_mode)
        else:
            env = factory()
    elif recipe.kind == "chain":
        base, wrappers = pickle.loads(recipe.payload)
        env = build_env(base, render_mode)
        for wrapper, kwargs in wrappers:
            env = wrapper(env, **kwargs)
        return env
    else:
        env = pickle.loads(recipe.payload)
    if uses_old_gym_api(env):
        env = GymCompat(without_passive_checker(env))
    return env


def factory_accepts_render_mode(recipe: EnvRecipe) -> bool:
    """Whether a ``"factory"`` recipe's callable takes ``render_mode`` (then it gets
    ``"rgb_array"`` in the worker)."""
    if recipe.kind == "chain":
        return factory_accepts_render_mode(pickle.loads(recipe.payload)[0])
    return recipe.kind == "factory" and _accepts_render_mode(pickle.loads(recipe.payload))


def builds_from_registry(recipe: EnvRecipe) -> bool:
    """Whether the env is made by ``gymnasium.make`` (which passes ``render_mode`` on)."""
    if recipe.kind == "chain":
        return builds_from_registry(pickle.loads(recipe.payload)[0])
    return recipe.kind == "spec"


def _added_wrappers(env: Any, spec: Any) -> Optional[List[WrapperRecord]]:
    """The wrappers added to a made env (``spec.additional_wrappers``, outermost last), each as
    its class and recorded arguments, or for a wrapper that recorded none, as ``_unrecorded``
    says; those that only show left out. None where the layers are not those the spec
    describes: the env is then rebuilt from the spec as it is."""
    count = len(spec.additional_wrappers)
    layers, outer = [], env
    for _ in range(count):
        if not isinstance(outer, gymnasium.Wrapper):
            return None  # not the layers the spec describes
        layers.append(outer)
        outer = outer.env
    records = []
    for layer, recorded in zip(reversed(layers), spec.additional_wrappers):
        if type(layer).__name__ != recorded.name:
            return None
        if shows_only(layer):
            continue
        if recorded.kwargs is not None:
            records.append((type(layer), dict(recorded.kwargs)))
        else:
            records.append(_unrecorded(layer))
    return records


def _required_arguments(cls: type) -> List[str]:
    """The arguments besides the env that building ``cls`` needs."""
    try:
        parameters = list(inspect.signature(cls).parameters.values())[1:]
    except (TypeError, ValueError):
        parameters = []
    return [
        p.name for p in parameters
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def _unrecorded(layer: Any) -> WrapperRecord:
    """A wrapper that recorded no arguments: a copy of it (its attributes are what it was given,
    optional arguments too: built afresh, ``Scale(env, k=0.5)`` would be ``Scale(env)``), else,
    where it cannot be pickled, built with the env alone if it needs nothing more; refused by
    name otherwise."""
    try:
        copied = CopiedWrapper(layer)
        cloudpickle.dumps(copied)
        return copied, {}
    except Exception as error:  # noqa: BLE001 - pickling fails in many ways
        required = _required_arguments(type(layer))
        if not required:
            return type(layer), {}
        raise EnvSpecError(
            f"the wrapper {type(layer).__qualname__} cannot be rebuilt in the plot worker: it "
            f"needs {', '.join(required)}, which it did not record, and it cannot be copied "
            f"({type(error).__name__}: {error}). Subclass gymnasium.utils.RecordConstructorArgs "
            "and call RecordConstructorArgs.__init__(self, "
            f"{', '.join(f'{n}={n}' for n in required)}) in its __init__, or pass a "
            "zero-argument function that builds the wrapped env") from error


# What a vector env's wrappers become on the one env the worker plots. The normalizing ones
# become their single-env forms, their statistics travel (``env/state.py``); the ones that
# only bookkeep are left out; any other is refused by name.
_VECTOR_TO_SINGLE = {
    "NormalizeObservation": ("NormalizeObservation", ("epsilon", )),
    "NormalizeReward": ("NormalizeReward", ("gamma", "epsilon")),
}
_VECTOR_BOOKKEEPING = ("RecordEpisodeStatistics", "DictInfoToList", "VectorListInfo")


def describe_vector_env(env: Any) -> EnvRecipe:
    """One env of a vector env, with the single-env forms of its normalizing wrappers."""
    layers, inner = [], env
    while isinstance(inner, gymnasium.vector.VectorWrapper):
        layers.append(inner)
        inner = inner.env
    base = _one_env_of(inner)
    wrappers: List[WrapperRecord] = []
    for layer in reversed(layers):
        name = type(layer).__name__
        if name in _VECTOR_BOOKKEEPING:
            continue
        if name not in _VECTOR_TO_SINGLE or not type(layer).__module__.startswith("gymnasium."):
            raise EnvSpecError(
                f"the vector wrapper {name} cannot be applied to the one env the plot worker "
                "shows: apply it inside each env instead (gymnasium.make_vec(..., "
                f"wrappers=[...]) or your env factory), or pass Plotter a zero-argument function "
                "that builds one env as you want it shown")
        single, arguments = _VECTOR_TO_SINGLE[name]
        wrappers.append((getattr(gymnasium.wrappers, single), {
            argument: getattr(layer, argument)
            for argument in arguments
        }))
    label = f"{base.label} (one env of the {type(inner).__name__})"
    return chain_recipe(base, wrappers, label) if wrappers else dataclasses.replace(base,
                                                                                    label=label)


def _one_env_of(vector_env: Any) -> EnvRecipe:
    envs = getattr(vector_env, "envs", None)
    if envs:
        # SyncVectorEnv keeps its envs: the first one is described as any env object is
        # (from its spec and wrappers, so that it can be made again with render_mode).
        return describe_env(envs[0])
    env_fns = getattr(vector_env, "env_fns", None)
    if env_fns:
        label = getattr(getattr(vector_env, "spec", None), "id", None) or "env_fns[0]"
        return EnvRecipe("factory", _dumps(env_fns[0], label), label)
    spec = getattr(vector_env, "spec", None)
    if isinstance(spec, gymnasium.envs.registration.EnvSpec):
        # make_vec's own vectorised env (CartPoleVectorEnv): the same id, made as one env
        kwargs = {
            key: value
            for key, value in spec.kwargs.items()
            if key not in ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers",
                           "max_episode_steps")
        }
        single = dataclasses.replace(spec,
                                     kwargs=kwargs,
                                     max_episode_steps=spec.kwargs.get(
                                         "max_episode_steps", spec.max_episode_steps))
        return EnvRecipe("spec", _dumps(single, spec.id), spec.id)
    raise EnvSpecError(
        f"cannot tell which env the vector env {type(vector_env).__qualname__} steps: pass "
        "Plotter a zero-argument function that builds one of its envs")


def _accepts_render_mode(factory: Any) -> bool:
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return "render_mode" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
