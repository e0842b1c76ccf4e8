"""State an env carries from one episode to the next outside the layers whose state travels: a
wrapper that updates running statistics in its own ``step()`` or ``reset()``, a curriculum that
hardens with the episodes, an env of the user's that counts what it saw. The worker's copy starts
that state fresh and never learns it, so its videos would show the policy on other observations
than the ones it trains on; ``env/check.py`` sees such state only where it changes inside
``observation()``.

Checked in the trainer, on copies built as the worker builds them (the trainer's env is never
stepped): a copy played for a few episodes, then one more episode from a fixed start with fixed
actions, must give the observations a fresh copy gives. Two fresh copies are compared first: an
env that is not repeatable from its seed cannot be judged, and is let through with one log line.
Where they differ, the plain data (arrays, numbers) in which the played copy's suspect layers (not
made by Gymnasium or this library, with no state that travels or with their own
``get_wrapper_state()``, which may leave some out) differ from a fresh copy's
right after the same reset is the candidate: if moving it into another fresh copy makes that copy
act as the played one, those of them it still needs (each left out in turn) are named in an
``EnvMismatchError``; if not, the cause is state the plotter cannot send (a random generator, an
object), and a warning says so.

Runs only where the trainer gave an env object with such a layer: ~5 ms a copy of a Gymnasium
MuJoCo env, three copies, one more per candidate attribute where they differ. No TensorFlow.
"""
import copy
import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium
import numpy as np

from async_plotter.env.check import copied_data, is_plain_data, same_data
from async_plotter.env.state import HOOK, env_layers, layer_kind
from async_plotter.env.stepper import EnvStepper
from async_plotter.errors import EnvMismatchError
from async_plotter.policy.random_state import random_state_kept

logger = logging.getLogger("async_plotter")

#: the episodes a copy plays before it is compared, and the steps each may take
WARM_UP_EPISODES, WARM_UP_STEPS = 3, 20
#: the steps of the episode compared
COMPARED_STEPS = 10
_SEED = 0
# Modules whose layers hold no state across episodes beyond what env/state.py carries.
_KNOWN_MODULES = ("gymnasium", "gym", "async_plotter")
_LINKS = ("env", "_wrapped_env", "wrapped_env")

Build = Callable[[], EnvStepper]
#: attributes of a stack's layers: (the layer's place, outermost first; the attribute's name)
_Keys = List[Tuple[int, str]]


def check_no_carried_state(build: Build, trainer_env: Any, label: str) -> None:
    """Raise ``EnvMismatchError`` if copies of the env, built by ``build`` as the worker builds
    them (the travelled state applied), give the policy other observations after a few episodes
    than fresh: a layer carries state that does not travel. ``trainer_env`` (None for an id or
    a factory, whose copies start fresh in the trainer too) says whether there is such a layer
    to suspect."""
    if trainer_env is None or isinstance(trainer_env, gymnasium.vector.VectorEnv):
        return
    if not any(_suspect(layer) for layer in env_layers(trainer_env)):
        return
    opened: List[EnvStepper] = []

    def fresh() -> EnvStepper:
        opened.append(build())
        return opened[-1]

    try:
        with random_state_kept(None):
            _check(fresh, label)
    finally:
        for stepper in opened:
            try:
                stepper.env.close()
            except Exception:  # noqa: BLE001 - closing a copy must not fail the check
                pass


def _check(fresh: Callable[[], EnvStepper], label: str) -> None:
    played, first, second = fresh(), fresh(), fresh()
    actions = _actions(played.env)
    if actions is None:
        return
    try:
        _warm_up(played, actions)
        kept = _suspect_data(played.env)
        (seen, played_reset), (fresh_seen,
                               fresh_reset), (again, _) = (_episode(stepper, actions)
                                                           for stepper in (played, first, second))
    except Exception as error:  # noqa: BLE001 - the step check (preflight) names step failures
        logger.info("Plotter: not checking whether %s carries state across episodes (%s: %s)",
                    label,
                    type(error).__name__, error)
        return
    if not _same_episode(fresh_seen, again):
        logger.info(
            "Plotter: not checking whether %s carries state across episodes: two fresh copies "
            "give different observations from the same seed and actions", label)
        return
    if _same_episode(seen, fresh_seen):
        return
    where = _first_difference(seen, fresh_seen)

    def explains(keys: _Keys) -> bool:
        moved = fresh()
        layers = env_layers(moved.env)
        for index, key in keys:
            vars(layers[index])[key] = copied_data(kept[index][key])
        try:
            return _same_episode(_episode(moved, actions)[0], seen)
        except Exception:  # noqa: BLE001 - moved alone, the state broke the env
            return False

    # What survives a reset differently is the candidate; the fewest of it that, moved into a
    # fresh copy, makes it act as the played one is named.
    keys = [(index, key) for index, data in played_reset.items() for key in data
            if not same_data(data[key], fresh_reset[index].get(key))]
    if keys and explains(keys):
        for key in list(keys):
            if len(keys) > 1 and explains([other for other in keys if other != key]):
                keys.remove(key)
        names = _by_layer(keys, env_layers(played.env))
        raise EnvMismatchError(
            f"{names} in the env {label} carries state from one episode to the "
            "next, outside the state that travels to the plot worker, and it changes what the "
            f"policy sees: after {WARM_UP_EPISODES} episodes a copy of your env gives {where}, "
            "so the worker's copy, which starts that state fresh, would show the policy acting "
            f"on other observations. {_advice(keys, env_layers(played.env))}")
    logger.warning(
        "Plotter: the env %s gives the policy other observations after a few episodes than "
        "fresh (%s), from state the plotter cannot send (not plain arrays or numbers: a random "
        "generator, an object): the plot worker's copy starts it fresh", label, where)


def _suspect(layer: Any) -> bool:
    """Whether ``layer`` could hold state across episodes that does not travel: one of the
    user's, with no state that travels or with its own ``get_wrapper_state()``, which may leave
    some out."""
    module = type(layer).__module__.split(".")[0]
    return layer_kind(layer) in (None, HOOK) and module not in _KNOWN_MODULES


def _actions(env: Any) -> Optional[List[Any]]:
    """The same actions for every copy, drawn from a seeded copy of the action space."""
    space = getattr(env, "action_space", None)
    if not isinstance(space, (gymnasium.spaces.Box, gymnasium.spaces.Discrete)):
        return None
    space = copy.deepcopy(space)
    space.seed(_SEED)
    return [space.sample() for _ in range(max(WARM_UP_STEPS, COMPARED_STEPS))]


def _warm_up(stepper: EnvStepper, actions: Sequence[Any]) -> None:
    for episode in range(WARM_UP_EPISODES):
        np.random.seed(_SEED + 1 + episode)  # envs that draw from the global generator
        stepper.reset(seed=_SEED + 1 + episode)
        for action in actions[:WARM_UP_STEPS]:
            if stepper.step(action).ended:
                break


def _episode(stepper: EnvStepper,
             actions: Sequence[Any]) -> Tuple[List[np.ndarray], Dict[int, Dict[str, Any]]]:
    """The observations of one episode from the fixed start with the fixed actions, and the
    suspect layers' data right after its reset."""
    np.random.seed(_SEED)
    observations = [_flat(stepper.reset(seed=_SEED))]
    after_reset = _suspect_data(stepper.env)
    for action in actions[:COMPARED_STEPS]:
        step = stepper.step(action)
        observations.append(_flat(step.observation))
        if step.ended:
            break
    return observations, after_reset


def _flat(observation: Any) -> np.ndarray:
    if isinstance(observation, dict):
        observation = [observation[key] for key in sorted(observation)]
    if isinstance(observation, (list, tuple)):
        return np.concatenate([_flat(part) for part in observation]) if observation else \
            np.zeros(0)
    return np.ravel(np.asarray(observation, dtype=np.float64))


def _same_episode(a: List[np.ndarray], b: List[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y, equal_nan=True)
                                    for x, y in zip(a, b))


def _first_difference(played: List[np.ndarray], fresh: List[np.ndarray]) -> str:
    for step, (ours, theirs) in enumerate(zip(played, fresh)):
        if ours.shape != theirs.shape or not np.array_equal(ours, theirs, equal_nan=True):
            return (f"{_show(ours)} at step {step} of an episode where a fresh copy gives "
                    f"{_show(theirs)} from the same start and actions")
    return f"an episode of {len(played)} observations where a fresh copy's has {len(fresh)}"


def _suspect_data(env: Any) -> Dict[int, Dict[str, Any]]:
    """A copy of the plain data of each suspect layer, by its place in the stack."""
    return {
        index: {
            key: copied_data(value)
            for key, value in vars(layer).items() if key not in _LINKS and is_plain_data(value)
        }
        for index, layer in enumerate(env_layers(env)) if _suspect(layer)
    }


def _by_layer(keys: _Keys, layers: List[Any]) -> str:
    named: Dict[str, List[str]] = {}
    for index, key in keys:
        named.setdefault(type(layers[index]).__name__, []).append(key)
    return ", ".join(f"{name} ({', '.join(names)})" for name, names in named.items())


def _advice(keys: _Keys, layers: List[Any]) -> str:
    missing: Dict[str, List[str]] = {}
    without: List[str] = []
    for index, key in keys:
        name = type(layers[index]).__name__
        if layer_kind(layers[index]) == HOOK:
            missing.setdefault(name, []).append(key)
        elif name not in without:
            without.append(name)
    advice = [
        f"{name}.get_wrapper_state() leaves out {', '.join(keys)}: return {_them(keys)} too, "
        f"and take {_them(keys)} back in set_wrapper_state(state)."
        for name, keys in missing.items()
    ]
    if without:
        advice.append(
            f"Give {' and '.join(without)} the methods get_wrapper_state() -> dict of arrays "
            "and set_wrapper_state(state) (the plotter sends the state with every "
            "update_plot), or keep that state in the policy.")
    return " ".join(advice)


def _them(keys: List[str]) -> str:
    return "it" if len(keys) == 1 else "them"


def _show(values: np.ndarray) -> str:
    return np.array2string(values.ravel()[:6], precision=4)
