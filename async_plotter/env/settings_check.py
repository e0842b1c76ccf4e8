"""The worker's env has the trainer's settings: a setting changed on the env after it was made
(``env.unwrapped.frame_skip = 2``, ``env.unwrapped._ctrl_cost_weight = 0``, a start pose put
into ``init_qpos``, ``TimeLimit``'s ``_max_episode_steps``) does not travel, because the worker
builds its env afresh from the recipe. Its videos and returns would then show another env than
training's (twice the speed, other rewards, another start), with no word. ``Plotter()``
compares the two and names the difference.

A setting is an attribute that a constructor parameter of the env's (or wrapper's) class names
(``frame_skip``, or ``_ctrl_cost_weight`` for ``ctrl_cost_weight``), and MuJoCo's start state
``init_qpos``/``init_qvel``; drawing settings (size, camera, render mode) are the worker's own.
Only settings that stay put are compared: one that a fresh copy changes by itself as it resets
and steps, or that differs between two fresh copies (drawn at random when built), is state, not
a setting. Runs in the trainer, in ``Plotter()``; needs neither GL nor TensorFlow.
"""
import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from async_plotter.env.state import env_layers
from async_plotter.errors import EnvMismatchError

#: set where the env is drawn, not how it plays: the worker chooses its own
_DRAWING = frozenset({
    "render_mode", "width", "height", "camera_id", "camera_name", "default_camera_config",
    "max_geom", "visual_options"
})
#: MuJoCo envs' start pose and velocity: read at every reset, never a constructor parameter
_START_STATE = ("init_qpos", "init_qvel")
#: arrays larger than this are not a setting anyone types in
_LARGEST_ARRAY = 10_000
#: differences named in the error at most
_NAMED = 4

#: one layer's settings: its class's name, and the settings by attribute name
Settings = Tuple[str, Dict[str, Any]]


def settings_of(env: Any) -> List[Settings]:
    """Each layer's settings, outermost wrapper first, down to the base env."""
    return [(type(layer).__name__, _layer_settings(layer)) for layer in env_layers(env)]


def steady(before: List[Settings], after: List[Settings]) -> List[Settings]:
    """The settings of ``after`` that a copy kept as it reset and stepped since ``before``."""
    return [(kind, {
        name: value
        for name, value in later.items() if name in earlier and _same(earlier[name], value)
    }) for (_, earlier), (kind, later) in zip(before, after)]


def check_same_settings(trainer_env: Any, worker: List[Settings], another_copy: Callable[[], Any],
                        label: str) -> None:
    """Raise ``EnvMismatchError`` if ``trainer_env``'s settings differ from ``worker`` (a fresh
    copy's steady settings, ``steady``); ``another_copy`` builds one more fresh copy, only where
    they differ, to leave out what two fresh copies do not share."""
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
        "env was made (by you, or by the env as it played), and the worker builds its env "
        "afresh, so its videos and returns would show another env than training's. Set them "
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
            if name in mine and not _same(mine[name], value):
                text = difference(("env.unwrapped." if base else f"{kind}.") + name, mine[name],
                                  value)
                argument = (name
                            if name in _START_STATE else f"{name.lstrip('_')}={_show(mine[name])}")
                found.append((text, taker, argument))
    return found


def _how(differences: List[Tuple[str, str, str]]) -> str:
    """``gymnasium.make(..., frame_skip=2) records them in the env's spec, and they travel``."""
    said = []
    by_taker: Dict[str, List[str]] = {}
    starts = []
    for _, taker, argument in differences:
        if argument in _START_STATE:
            starts.append(argument)
        else:
            by_taker.setdefault(taker, []).append(argument)
    for taker, arguments in by_taker.items():
        call = (f"gymnasium.make(..., {', '.join(arguments)})"
                if taker == "make" else f"{taker}(env, {', '.join(arguments)})")
        said.append(f"{call} records {'them' if len(arguments) > 1 else 'it'}, and "
                    f"{'they travel' if len(arguments) > 1 else 'it travels'}")
    names = sorted(set(starts))
    if len(names) == 1:
        said.append(f"{names[0]} is no argument: set it in a function that makes the env")
    elif names:
        said.append(f"{' and '.join(names)} are no arguments: set them in a function that makes "
                    "the env")
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


def _layer_settings(layer: Any) -> Dict[str, Any]:
    try:
        attributes = vars(layer)
    except TypeError:  # slots: nothing a user sets after construction that we can see
        return {}
    parameters = _constructor_parameters(type(layer))
    found = {}
    for name, value in attributes.items():
        key = name.lstrip("_")
        if key in _DRAWING or not (key in parameters or name in _START_STATE):
            continue
        value = _setting_value(value)
        if value is not None:
            found[name] = value
    return found


def _constructor_parameters(cls: type) -> frozenset:
    names = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            names.update(inspect.signature(init).parameters)
        except (TypeError, ValueError):  # a builtin's: it says nothing
            continue
    return frozenset(names - {"self", "env", "args", "kwargs"})


def _setting_value(value: Any) -> Optional[Any]:
    """``value`` as compared (a copy of an array), or None where it is not a setting's kind
    (an object, a space, a callable, a large array)."""
    if value is None or isinstance(value, (bool, int, float, str, np.number, np.bool_)):
        return value if value is not None else _NONE
    if isinstance(value, (tuple, list)) and len(value) <= 64 and all(
            isinstance(item, (bool, int, float, str, np.number)) for item in value):
        return tuple(value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and (value.size
                                                                         <= _LARGEST_ARRAY):
        return value.copy()
    return None


class _NoneSetting:
    """A setting whose value is None (``None`` itself means "not a setting")."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NoneSetting)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "None"


_NONE = _NoneSetting()


def _same(mine: Any, theirs: Any) -> bool:
    if isinstance(mine, np.ndarray) or isinstance(theirs, np.ndarray):
        return (isinstance(mine, np.ndarray) and isinstance(theirs, np.ndarray)
                and mine.shape == theirs.shape
                and np.array_equal(mine, theirs, equal_nan=mine.dtype.kind == "f"))
    try:
        return bool(mine == theirs)
    except Exception:  # noqa: BLE001 - a value whose == is odd is not one we can tell apart
        return True
