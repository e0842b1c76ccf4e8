"""The worker's env has the trainer's settings (``settings.py`` says what one is). Most travel
with every update (``settings_travel.py``); one of another kind (a tuple holding a string) does
not, because the worker builds its env afresh from the recipe. Changed on the env after it was
made, it would have the worker show another env than training's, with no word: ``Plotter()``
compares the trainer's env with a copy given what travels and names the difference.

Only settings that stay put are compared: one that a fresh copy changes by itself as it resets
and steps, or that differs between two fresh copies (drawn at random when built), is state, not
a setting. Runs in the trainer, in ``Plotter()``; needs neither GL nor TensorFlow.
"""
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

from async_plotter.env.settings import layer_settings, same_setting
from async_plotter.env.layers import env_layers, shows_only
from async_plotter.errors import EnvMismatchError

#: differences named in the error at most
_NAMED = 4

#: one layer's settings: its class's name, and the settings by attribute name
Settings = Tuple[str, Dict[str, Any]]


def settings_of(env: Any) -> List[Settings]:
    """Each layer's settings, outermost wrapper first, down to the base env (not the wrappers
    that only show, which the worker's copy leaves out)."""
    return [(type(layer).__name__, layer_settings(layer)) for layer in env_layers(env)
            if not shows_only(layer)]


def steady(before: List[Settings], after: List[Settings]) -> List[Settings]:
    """The settings of ``after`` that a copy kept as it reset and stepped since ``before``."""
    return [(kind, {
        name: value
        for name, value in later.items() if name in earlier and same_setting(earlier[name], value)
    }) for (_, earlier), (kind, later) in zip(before, after)]


def check_same_settings(trainer_env: Any, worker: List[Settings], another_copy: Callable[[], Any],
                        label: str) -> None:
    """Raise ``EnvMismatchError`` if ``trainer_env``'s settings differ from ``worker`` (the
    steady settings of a fresh copy given what travels, ``steady``); ``another_copy`` builds one
    more fresh copy, only where they differ, to leave out what two fresh copies do not share."""
    if trainer_env is None:
        return
    trainer = settings_of(trainer_env)
    if [kind for kind, _ in trainer] != [kind for kind, _ in worker]:
        return  # another stack of wrappers: the observation checks name those
    if not _differences(trainer, worker):
        return
    differences = _differences(trainer, steady(worker, settings_of(another_copy())))
    if not differences:
        return
    named = "; ".join(text for text, _, _ in differences[:_NAMED])
    raise EnvMismatchError(
        f"your env's settings differ from those of the env the plot worker builds for {label} "
        f"({named}{'; ...' if len(differences) > _NAMED else ''}). They were changed after the "
        "env was made (by you, or by the env as it played), and only numbers, strings, None, "
        "tuples of numbers and numeric arrays travel to the worker, which builds its env "
        "afresh: its videos and returns would show another env than training's. Set them "
        f"where the env is made ({_how(differences)}), or pass Plotter a zero-argument function "
        "that makes the env and sets them.")


def _differences(trainer: List[Settings], worker: List[Settings]) -> List[Tuple[str, str, str]]:
    """Each setting that differs: named, and as the argument that sets it with the class that
    takes it (``make`` for the env's and ``TimeLimit``'s, which make() passes on)."""
    found = []
    for layer, ((kind, mine), (_, theirs)) in enumerate(zip(trainer, worker)):
        base = layer == len(worker) - 1
        taker = "make" if base or kind == "TimeLimit" else kind
        for name, value in theirs.items():
            if name in mine and not same_setting(mine[name], value):
                text = difference(("env.unwrapped." if base else f"{kind}.") + name, mine[name],
                                  value)
                found.append((text, taker, f"{name.lstrip('_')}={_show(mine[name])}"))
    return found


def _how(differences: List[Tuple[str, str, str]]) -> str:
    """``gymnasium.make(..., mode='hard') records it, and it travels``."""
    by_taker: Dict[str, List[str]] = {}
    for _, taker, argument in differences:
        by_taker.setdefault(taker, []).append(argument)
    said = []
    for taker, arguments in by_taker.items():
        call = (f"gymnasium.make(..., {', '.join(arguments)})"
                if taker == "make" else f"{taker}(env, {', '.join(arguments)})")
        said.append(f"{call} records {'them' if len(arguments) > 1 else 'it'}, and "
                    f"{'they travel' if len(arguments) > 1 else 'it travels'}")
    return "; ".join(said)


def difference(name: str, mine: Any, theirs: Any) -> str:
    """``name: 2 in yours, 4 in the worker's``; for arrays of one shape, at the first index
    where they differ: ``init_qpos[1]: 1.5 in yours, 1.25 in the worker's`` (also the MuJoCo
    model check's words, ``trainer/model_check.py``)."""
    if isinstance(mine, np.ndarray) and isinstance(theirs, np.ndarray) and (mine.shape
                                                                            == theirs.shape):
        index = tuple(int(i) for i in np.argwhere(mine != theirs)[0])
        name = f"{name}[{', '.join(str(i) for i in index)}]"
        mine, theirs = mine[index], theirs[index]
    return f"{name}: {_show(mine)} in yours, {_show(theirs)} in the worker's"


def _show(value: Any) -> str:
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{value:g}"
    if isinstance(value, np.ndarray):
        return np.array2string(value, threshold=6, precision=4)
    return repr(value)
