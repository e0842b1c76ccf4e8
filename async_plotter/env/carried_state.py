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
MuJoCo env, three copies, one more per candidate attribute where they differ (for at most
``MAX_NARROWING_SECONDS``); an env whose copy takes over ``MAX_BUILD_SECONDS`` to build, or
``MAX_PLAY_SECONDS`` to play the warm-up, is let through with one log line. No TensorFlow.
"""
import copy
import dataclasses
import logging
import pickle
import random
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import gymnasium
import numpy as np

from async_plotter.env.check import copied_data, is_plain_data, same_data
from async_plotter.env.observations import flat_observation
from async_plotter.env.layers import LINKS, env_layers, from_a_library
from async_plotter.env.state import HOOK, layer_kind
from async_plotter.env.stepper import EnvStepper
from async_plotter.errors import EnvMismatchError
from async_plotter.policy.random_state import random_state_kept

logger = logging.getLogger("async_plotter")

#: the episodes a copy plays before it is compared, and the steps each may take
WARM_UP_EPISODES, WARM_UP_STEPS = 3, 20
#: the steps of the episode compared
COMPARED_STEPS = 10
#: an env slower to build than this, or to play the warm-up episodes, is not checked (the check
#: builds three copies or more, and plays more episodes)
MAX_BUILD_SECONDS = MAX_PLAY_SECONDS = 0.5
#: narrowing the attributes an error names down to those needed (a copy and an episode each)
#: stops after this; the error then names all that are left
MAX_NARROWING_SECONDS = 1.0
#: the seed of the compared episode (the warm-up episodes take the next ones)
SEED = 0

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
    started = time.perf_counter()
    played = fresh()
    took = time.perf_counter() - started
    if took > MAX_BUILD_SECONDS:
        logger.info(
            "Plotter: not checking whether %s carries state across episodes: a copy took %.1f s "
            "to build, and the check builds three or more", label, took)
        return
    first, second = fresh(), fresh()
    actions = _actions(played.env)
    if actions is None:
        return
    try:
        started = time.perf_counter()
        _warm_up(played, actions)
        took = time.perf_counter() - started
        if took > MAX_PLAY_SECONDS:
            logger.info(
                "Plotter: not checking whether %s carries state across episodes: %d short "
                "episodes took %.1f s to play, and the check plays more", label, WARM_UP_EPISODES,
                took)
            return
        kept = _suspect_data(played.env)
        ours, theirs, again = (_episode(stepper, actions) for stepper in (played, first, second))
    except Exception as error:  # noqa: BLE001 - the step check (preflight) names step failures
        logger.info("Plotter: not checking whether %s carries state across episodes (%s: %s)",
                    label,
                    type(error).__name__, error)
        return
    if not _same_episode(theirs.observations, again.observations):
        logger.info(
            "Plotter: not checking whether %s carries state across episodes: two fresh copies "
            "give different observations from the same seed and actions", label)
        return
    if _same_episode(ours.observations, theirs.observations):
        return
    where = _first_difference(ours.observations, theirs.observations)
    layers = env_layers(played.env)

    def explains(keys: _Keys) -> bool:
        moved = fresh()
        moved_layers = env_layers(moved.env)
        for index, key in keys:
            vars(moved_layers[index])[key] = copied_data(kept[index][key])
        try:
            return _same_episode(_episode(moved, actions).observations, ours.observations)
        except Exception:  # noqa: BLE001 - moved alone, the state broke the env
            return False

    # What survives a reset differently is the candidate; the fewest of it that, moved into a
    # fresh copy, makes it act as the played one is named.
    keys = [(index, key) for index, data in ours.data.items() for key in data
            if not same_data(data[key], theirs.data[index].get(key))]
    if keys and explains(keys):
        _narrow(keys, explains, label)
        raise EnvMismatchError(
            f"{_by_layer(keys, layers)} in the env {label} carries state from one episode to "
            "the next, outside the state that travels to the plot worker, and it changes what "
            f"the policy sees: after {WARM_UP_EPISODES} episodes a copy of your env gives "
            f"{where}, so the worker's copy, which starts that state fresh, would show the "
            f"policy acting on other observations. {_advice(keys, layers)}")
    generators = [
        key for key, state in ours.generators.items() if theirs.generators.get(key) != state
    ]
    if generators:
        logger.warning(
            "Plotter: the env %s gives the policy other observations after a few episodes than "
            "fresh (%s), and %s, a random generator that reset(seed=...) does not reseed, drew "
            "other numbers: the plot worker's copy draws its own. Reseed it in reset() if its "
            "numbers should repeat", label, where,
            " and ".join(f"{type(layers[index]).__name__}.{key}" for index, key in generators))
        return
    logger.warning(
        "Plotter: the env %s gives the policy other observations after a few episodes than "
        "fresh (%s), from state the plotter cannot send (not plain arrays or numbers): the "
        "plot worker's copy starts it fresh", label, where)


def _narrow(keys: _Keys, explains: Callable[[_Keys], bool], label: str) -> None:
    """Leave out of ``keys``, in place, each that the others explain the difference without,
    until ``MAX_NARROWING_SECONDS`` have passed."""
    deadline = time.perf_counter() + MAX_NARROWING_SECONDS
    for key in list(keys):
        if time.perf_counter() > deadline:
            logger.info(
                "Plotter: naming all %d attributes in which a played copy of %s differs: "
                "finding which of them it needs took over %g s", len(keys), label,
                MAX_NARROWING_SECONDS)
            return
        if len(keys) > 1 and explains([other for other in keys if other != key]):
            keys.remove(key)


def _suspect(layer: Any) -> bool:
    """Whether ``layer`` could hold state across episodes that does not travel: one of the
    user's, with no state that travels or with its own ``get_wrapper_state()``, which may leave
    some out."""
    return layer_kind(layer) in (None, HOOK) and not from_a_library(layer)


def _actions(env: Any) -> Optional[List[Any]]:
    """The same actions for every copy, drawn from a seeded copy of the action space."""
    space = getattr(env, "action_space", None)
    if not isinstance(space, (gymnasium.spaces.Box, gymnasium.spaces.Discrete)):
        return None
    space = copy.deepcopy(space)
    space.seed(SEED)
    return [space.sample() for _ in range(max(WARM_UP_STEPS, COMPARED_STEPS))]


def _warm_up(stepper: EnvStepper, actions: Sequence[Any]) -> None:
    for episode in range(WARM_UP_EPISODES):
        np.random.seed(SEED + 1 + episode)  # envs that draw from the global generator
        stepper.reset(seed=SEED + 1 + episode)
        for action in actions[:WARM_UP_STEPS]:
            if stepper.step(action).ended:
                break


@dataclasses.dataclass
class _Played:
    """One episode from the fixed start with the fixed actions."""

    observations: List[np.ndarray]
    #: the suspect layers' plain data right after the reset, by their place in the stack
    data: Dict[int, Dict[str, Any]]
    #: the state of the suspect layers' random generators right after the reset
    generators: Dict[Tuple[int, str], bytes]


def _episode(stepper: EnvStepper, actions: Sequence[Any]) -> _Played:
    np.random.seed(SEED)
    observations = [flat_observation(stepper.reset(seed=SEED))]
    played = _Played(observations, _suspect_data(stepper.env), _generators(stepper.env))
    for action in actions[:COMPARED_STEPS]:
        step = stepper.step(action)
        observations.append(flat_observation(step.observation))
        if step.ended:
            break
    return played


def _same_step(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def _same_episode(a: List[np.ndarray], b: List[np.ndarray]) -> bool:
    return len(a) == len(b) and all(_same_step(x, y) for x, y in zip(a, b))


def _first_difference(played: List[np.ndarray], fresh: List[np.ndarray]) -> str:
    for step, (ours, theirs) in enumerate(zip(played, fresh)):
        if not _same_step(ours, theirs):
            return (f"{_show(ours)} at step {step} of an episode where a fresh copy gives "
                    f"{_show(theirs)} from the same start and actions")
    return f"an episode of {len(played)} observations where a fresh copy's has {len(fresh)}"


def _suspect_layers(env: Any) -> Iterator[Tuple[int, Any]]:
    """The suspect layers of ``env`` with their place in the stack, outermost first."""
    return ((index, layer) for index, layer in enumerate(env_layers(env)) if _suspect(layer))


def _suspect_data(env: Any) -> Dict[int, Dict[str, Any]]:
    """A copy of the plain data of each suspect layer, by its place in the stack."""
    return {
        index: {
            key: copied_data(value)
            for key, value in vars(layer).items() if key not in LINKS and is_plain_data(value)
        }
        for index, layer in _suspect_layers(env)
    }


def _generators(env: Any) -> Dict[Tuple[int, str], bytes]:
    """The state of each random generator the suspect layers hold, comparable by equality."""
    states = {}
    for index, layer in _suspect_layers(env):
        for key, value in vars(layer).items():
            if isinstance(value, np.random.Generator):
                states[(index, key)] = pickle.dumps(value.bit_generator.state)
            elif isinstance(value, np.random.RandomState):
                states[(index, key)] = pickle.dumps(value.get_state())
            elif isinstance(value, random.Random):
                states[(index, key)] = pickle.dumps(value.getstate())
    return states


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
