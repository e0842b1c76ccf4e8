"""The one rule for the env, checked in the trainer: what reaches the policy in the worker is what
reaches it in the trainer.

Observations may be arrays or, as goal-conditioned envs give them, dicts and tuples of arrays
(``observations.py``): every part is fed, shifted and compared alike.

The worker's copy of the env is built from its recipe and given the state that travels
(``env/state.py``). Then both envs' observation wrappers are fed the same raw observations (the
env's first observation and a few shifted ones) on copies of them that share nothing with the
trainer's env, whose statistics therefore stay untouched. What each wrapper gives must agree; a
wrapper whose attributes change while it transforms observations holds running state, and must
be one whose state travels. A difference is an ``EnvMismatchError`` naming the wrapper.

Runs in the trainer, inside ``Plotter(...)``'s checks (``trainer/preflight.py``); needs no
TensorFlow.
"""
import copy
import logging
from typing import Any, Callable, List, Optional, Tuple

import gymnasium
import numpy as np

from async_plotter.env.layers import LINKS, env_layers
from async_plotter.env.observations import (Observation, batch_of_one, each_part, first_of_batch,
                                            flat_observation, parts)
from async_plotter.env.state import RLLAB, freezes, layer_kind
from async_plotter.errors import EnvMismatchError
from async_plotter.policy.random_state import random_state_kept

logger = logging.getLogger("async_plotter")

# The worker's state travels in the policy's dtype (float32 for most): its rounding is allowed.
_RTOL = 1e-4
_ATOL = 1e-4
_PROBES = 3

Stage = Tuple[str, Callable[[Observation], Observation]]


def check_worker_env(worker_env: Any, trainer_env: Any, label: str) -> None:
    """Raise ``EnvMismatchError`` unless ``worker_env`` (built as the worker builds it, and
    already given the state as it travels, ``travelled``) transforms observations as
    ``trainer_env`` does. ``trainer_env`` is None when the user gave no env object (an id, a
    factory): then only a warning that running statistics will start fresh."""
    worker_layers = env_layers(worker_env)
    if trainer_env is None:
        _warn_fresh_statistics(worker_layers, label)
        return
    compare_observation_wrappers(worker_env, trainer_env, label)
    _refuse_untravelled_state(trainer_env, label)


def compare_observation_wrappers(worker_env: Any,
                                 trainer_env: Any,
                                 label: str,
                                 raw: Optional[Observation] = None,
                                 advice: Optional[str] = None) -> bool:
    """Raise ``EnvMismatchError`` if ``worker_env``'s observation wrappers transform a few
    observations otherwise than ``trainer_env``'s, on detached copies of the wrappers; whether
    they could be compared (both have some, and they take observations of the base env's kind).
    ``raw``: the base env's first observation (``raw_observation``), else it is reset for one;
    ``advice``: what the error says to do, else what fits the wrapper that differs."""
    trainer_stages = _stages(env_layers(trainer_env))
    if not trainer_stages:
        return False
    worker_layers = env_layers(worker_env)
    worker_stages = _stages(worker_layers)
    raw = raw_observation(worker_env) if raw is None else raw
    if raw is None:
        logger.info(
            "Plotter: not comparing %s's observation wrappers (no raw observation to feed "
            "them)", label)
        return False
    # A vector env's wrappers stand on top of the one env's own: compare them on what that
    # env's inner wrappers give.
    inner = worker_stages[:len(worker_stages) - len(trainer_stages)]
    outer = worker_stages[len(inner):]
    # The wrappers' functions may draw random numbers (observation noise): the numbers training
    # draws afterwards must be the ones it would have drawn.
    with random_state_kept(*env_layers(trainer_env)):
        for probe in _probes(raw):
            try:
                start = _through(inner, probe)
                _compare(trainer_stages, outer, start, label, advice)
            except EnvMismatchError:
                raise
            except _Unrepeatable as unrepeatable:
                logger.info(
                    "Plotter: not comparing %s's observation wrappers: %s gives other "
                    "observations for the same one each time (random noise), so the worker's "
                    "copy cannot be told apart from it", label, unrepeatable)
                return False
            except Exception as error:  # noqa: BLE001 - a wrapper between them changes the shape
                logger.info(
                    "Plotter: not comparing %s's observation wrappers (%s: %s; a wrapper that is "
                    "not an observation wrapper, such as a frame stack, stands between them)",
                    label,
                    type(error).__name__, error)
                return False
    return True


class _Unrepeatable(Exception):
    """A wrapper whose transform gives two outputs for one input."""


def _stages(layers: List[Any]) -> List[Stage]:
    """The observation transforms of an env's layers, innermost first, on detached copies; the
    copies of layers whose state travels are frozen where they can be, as in the worker (the
    same statistics must give the same observations)."""
    stages = []
    for layer in reversed(layers):
        name, kind = type(layer).__name__, layer_kind(layer)
        vector = isinstance(layer, gymnasium.vector.VectorObservationWrapper)
        rllab = kind == RLLAB and callable(getattr(layer, "_apply_normalize_obs", None))
        if not (isinstance(layer, gymnasium.ObservationWrapper) or vector or rllab):
            continue
        clone = _detached(layer)
        if kind is not None:
            freezes(clone)
        if vector:
            stages.append(
                (name, lambda o, clone=clone: first_of_batch(clone.observations(batch_of_one(o)))))
        else:
            stages.append((name, clone._apply_normalize_obs if rllab else clone.observation))
    return stages


def _detached(layer: Any) -> Any:
    """A copy of a layer whose state is its own: transforming with it changes nothing of the
    original. Only plain data is copied (arrays, numbers, containers and objects made of them,
    such as a ``RunningMeanStd``); anything else (the env it wraps, pipes, files) stays shared
    and is never called: copying a vector env's pipes closed the originals when the copies
    were collected."""
    clone = copy.copy(layer)
    for key, value in vars(layer).items():
        if key not in LINKS:
            vars(clone)[key] = copied_data(value)
    return clone


def copied_data(value: Any, depth: int = 0) -> Any:
    """``value`` with its plain data copied (arrays, containers, objects made of them); anything
    else is the same object."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if depth > 4 or value is None or isinstance(
            value, (bool, int, float, complex, str, bytes, np.generic)):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(copied_data(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return {key: copied_data(item, depth + 1) for key, item in value.items()}
    if not _made_of_data(value):
        return value
    clone = copy.copy(value)
    for key, item in vars(value).items():
        vars(clone)[key] = copied_data(item, depth + 1)
    return clone


def is_plain_data(value: Any) -> bool:
    """Whether ``copied_data`` copies ``value`` whole: arrays, numbers, strings, containers, and
    objects made only of those (a ``RunningMeanStd``)."""
    return _is_data(value) or (_made_of_data(value) and not callable(value))


def _made_of_data(value: Any) -> bool:
    """An object whose fields are all data (not a Gymnasium space, which is shared, not state)."""
    fields = getattr(value, "__dict__", None)
    return (fields is not None and not type(value).__module__.startswith("gymnasium.spaces")
            and all(_is_data(item) for item in fields.values()))


def _is_data(value: Any) -> bool:
    return value is None or isinstance(
        value, (np.ndarray, np.generic, bool, int, float, str, tuple, list, dict))


def raw_observation(env: Any) -> Optional[Observation]:
    """The first observation of ``env``'s base env from seed 0, its parts as arrays (None where
    it has none); resets that base env."""
    base = env_layers(env)[-1]
    try:
        result = base.reset(seed=0)
    except TypeError:
        result = base.reset()
    observation = result[0] if isinstance(result, tuple) and len(result) == 2 else result
    return None if observation is None else each_part(np.asarray, observation)


def _probes(raw: Observation) -> List[Observation]:
    """The first observation and a few shifted ones (a statistic that matters shows on some)."""

    def shifted(k: int) -> Callable[[np.ndarray], np.ndarray]:

        def shift(part: np.ndarray) -> np.ndarray:
            step = 0.25 * (np.abs(part) + 1.0)
            return (part + k * step * (-1)**k).astype(part.dtype)

        return shift

    return [raw] + [each_part(shifted(k), raw) for k in range(1, _PROBES + 1)]


def _through(stages: List[Stage], observation: Observation) -> Observation:
    for _, transform in stages:
        observation = each_part(np.asarray, transform(observation))
    return observation


def _compare(trainer: List[Stage], worker: List[Stage], observation: Observation, label: str,
             advice: Optional[str]) -> None:
    ours, theirs = observation, observation
    for index, ((name, transform), (worker_name,
                                    worker_transform)) in enumerate(zip(trainer, worker)):
        given = ours
        ours = each_part(np.asarray, transform(given))
        if not _same(transform(given), ours):
            raise _Unrepeatable(name)
        theirs = each_part(np.asarray, worker_transform(theirs))
        if _same(theirs, ours):
            continue
        raise EnvMismatchError(
            f"the plot worker's copy of the env {label} would not give the policy what your env "
            f"gives it: after {name} (observation wrapper {index + 1} of {len(trainer)}, "
            f"innermost first), yours gives {_show(ours)} and the worker's {worker_name} "
            f"{_show(theirs)}, so the videos would show the policy acting on other "
            f"observations. {_advice(name) if advice is None else advice}")
    if len(trainer) != len(worker):
        raise EnvMismatchError(
            f"the plot worker's copy of the env {label} has {len(worker)} observation wrappers "
            f"where yours has {len(trainer)} ({', '.join(n for n, _ in trainer)}): pass a "
            "zero-argument function that builds the env with the same wrappers")


def _same(a: Observation, b: Observation) -> bool:
    """Whether two observations have the same parts, of the same shapes and close values."""
    ours, theirs = parts(a), parts(b)
    return len(ours) == len(theirs) and all(
        where == their_where and np.shape(part) == np.shape(their_part)
        and np.allclose(np.asarray(part, np.float64),
                        np.asarray(their_part, np.float64),
                        rtol=_RTOL,
                        atol=_ATOL)
        for (where, part), (their_where, their_part) in zip(ours, theirs))


def _refuse_untravelled_state(trainer_env: Any, label: str) -> None:
    """A wrapper that changes its own attributes as it transforms observations holds running
    state; unless that state travels, the worker's copy would drift from the trainer's."""
    for layer in env_layers(trainer_env):
        if layer_kind(layer) is not None or not isinstance(
                layer, (gymnasium.ObservationWrapper, gymnasium.vector.VectorObservationWrapper)):
            continue
        changed = _changed_attributes(layer)
        if changed:
            name = type(layer).__name__
            raise EnvMismatchError(
                f"{name} in the env {label} holds state that changes as it transforms "
                f"observations ({', '.join(changed)}) and that state does not travel to the "
                f"plot worker, whose copy would start from fresh values. Give {name} the "
                "methods get_wrapper_state() -> dict of arrays and set_wrapper_state(state) "
                "(the plotter sends the state with every update_plot), or normalise inside the "
                "policy (a keras.layers.Normalization layer) instead.")


def _changed_attributes(layer: Any) -> List[str]:
    """The attributes a detached copy of ``layer`` changes while it transforms a few
    observations of its input space."""
    vector = isinstance(layer, gymnasium.vector.VectorObservationWrapper)
    space = getattr(layer.env, "single_observation_space" if vector else "observation_space", None)
    zeros = _zeros(space)
    if zeros is None:
        return []
    probe = _detached(layer)
    before = {k: copied_data(v) for k, v in vars(probe).items() if k not in LINKS}
    try:
        for observation in _probes(zeros):
            if vector:
                probe.observations(batch_of_one(observation))
            else:
                probe.observation(observation)
    except Exception:  # noqa: BLE001 - a wrapper that cannot take these: nothing to learn
        return []
    return [key for key in before if not same_data(before[key], vars(probe).get(key))]


def _zeros(space: Any) -> Optional[Observation]:
    """An observation of ``space`` made of zeros (None where it has no fixed shape)."""
    if isinstance(space, gymnasium.spaces.Dict):
        parts = {key: _zeros(item) for key, item in space.spaces.items()}
        return None if any(part is None for part in parts.values()) else parts
    if isinstance(space, gymnasium.spaces.Tuple):
        items = tuple(_zeros(item) for item in space.spaces)
        return None if any(item is None for item in items) else items
    shape = getattr(space, "shape", None)
    return None if shape is None else np.zeros(shape, dtype=space.dtype or np.float32)


def same_data(a: Any, b: Any) -> bool:
    """Whether two values of an attribute hold the same data (arrays element by element,
    containers item by item, objects field by field); values that cannot be compared count as
    the same."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_data(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(
            same_data(x, y) for x, y in zip(a, b))
    if hasattr(a, "__dict__") and type(a) is type(b) and not callable(a):
        return all(same_data(value, vars(b).get(key)) for key, value in vars(a).items())
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - incomparable: not state we can judge
        return True


def _warn_fresh_statistics(worker_layers: List[Any], label: str) -> None:
    stateful = [type(layer).__name__ for layer in worker_layers if layer_kind(layer) is not None]
    if stateful:
        logger.warning(
            "Plotter: the env %s has wrappers with running statistics (%s) that start fresh in "
            "the plot worker, since it builds its own env: if you train on such an env, pass "
            "that env object to Plotter so that its statistics travel with every update_plot "
            "(run_experiment_lite and plot=True pass theirs where cloudpickle can copy the env "
            "and the sampler reports env_state())", label, ", ".join(stateful))


def _advice(name: str) -> str:
    if name.startswith("Normalize"):
        return (f"{name} holds running statistics that must reach the worker: pass the env "
                "object you train on (not an id or a factory), so that its statistics travel "
                "with every update_plot.")
    return (f"{name} holds state that is not rebuilt in the worker: give it get_wrapper_state() "
            "and set_wrapper_state(state) methods, or pass a zero-argument function that "
            "builds the env as you train on it.")


def _show(observation: Observation) -> str:
    return np.array2string(flat_observation(observation)[:6], precision=4)
