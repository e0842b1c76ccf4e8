"""What a setting of an env is: an attribute that a constructor parameter of the layer's class
names (the whole class hierarchy's, with leading underscores stripped: ``frame_skip``, or
``_ctrl_cost_weight`` for ``ctrl_cost_weight``), and MuJoCo's start state ``init_qpos`` and
``init_qvel``; drawing settings (size, camera, render mode) are not, they are the worker's own.
Its value is a number, a string, None, a short tuple of them or a numeric array; a dict of them
(``self.config = {"scale": 1.0}``) is a setting per entry (``config['scale']``). Read by the
check that the worker's copy has the trainer's settings (``settings_check.py``) and by their
travel with every update (``settings_travel.py``).

A layer of the user's own (an env class or wrapper not from Gymnasium, gym or this library) may
keep a setting in an attribute no constructor parameter names (``self.target_speed = 1.0`` in
``__init__``, raised by a curriculum): its plain data (``user_data``) that a fresh copy keeps as
it resets and steps is taken for settings too (``trainer/preflight.py`` finds which).

A MuJoCo env's model holds settings too: its physics parameters (``model_settings``: the options,
masses, inertias, friction, damping, stiffness, actuator gains...), which a transfer experiment
or a curriculum changes in place (``env.unwrapped.model.opt.gravity[2] = -5``). They travel as
the others do. Its geometry and looks do not: the render process draws with its own copy of
the model (``trainer/model_check.py`` names a change of those).
"""
import functools
import inspect
import re
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from async_plotter.env.layers import LINKS, from_a_library, own

#: set where the env is drawn, not how it plays: the worker chooses its own
_DRAWING = frozenset({
    "render_mode", "width", "height", "camera_id", "camera_name", "default_camera_config",
    "max_geom", "visual_options"
})
#: records of how a layer was made or is drawn, not how it plays: Gymnasium's constructor
#: arguments (``_saved_kwargs``, ``_ezpickle_kwargs``) and its ``metadata`` (render modes, fps)
_RECORDS = frozenset({"_saved_kwargs", "_ezpickle_args", "_ezpickle_kwargs", "metadata"})
#: a dict is a setting per entry, to this depth (``config['reward']['ctrl']``) and this size
_DICT_DEPTH, _DICT_ENTRIES = 3, 64
#: one key of a dict entry's name: ``['scale']`` or ``[3]``
_KEY = re.compile(r"\['([^'\[\]]*)'\]|\[(-?\d+)\]")
#: MuJoCo envs' start pose and velocity: read at every reset, never a constructor parameter
START_STATE = ("init_qpos", "init_qvel")
#: arrays larger than this are not a setting anyone types in
_LARGEST_ARRAY = 10_000
#: the ``MjModel`` arrays that are physics parameters, not geometry or looks (the render
#: process draws with its own model), and what ``mj_setConst`` derives from them after a
#: change of masses: among those, the offsets of tracking cameras and lights from the centre of
#: mass, which the render process's model then lacks (a framing difference of millimetres)
MODEL_PHYSICS = ("body_mass", "body_inertia", "body_gravcomp", "body_subtreemass",
                 "body_invweight0", "geom_friction", "geom_solref", "geom_solimp", "geom_solmix",
                 "geom_margin", "geom_gap", "dof_damping", "dof_armature", "dof_frictionloss",
                 "dof_invweight0", "dof_M0", "jnt_stiffness", "jnt_range", "jnt_solref",
                 "jnt_solimp", "qpos_spring", "actuator_gear", "actuator_gainprm",
                 "actuator_biasprm", "actuator_dynprm", "actuator_ctrlrange", "actuator_forcerange",
                 "actuator_acc0", "tendon_stiffness", "tendon_damping", "tendon_invweight0",
                 "cam_poscom0", "light_poscom0")
#: where a model's settings are, below the layer that holds it
MODEL, OPTIONS = "model.", "model.opt."


def user_data(layer: Any) -> Dict[str, Any]:
    """The plain data (as ``setting_value`` keeps it) of a layer of the user's own that is no
    setting by name already: candidates for settings, by attribute name; none for a library's
    layer."""
    if from_a_library(layer):
        return {}
    named = layer_settings(layer)
    found = {}
    for name, value in _entries(own(layer)):
        if name in named or name.startswith("__"):
            continue
        value = setting_value(value)
        if value is not None:
            found[name] = value
    return found


def layer_settings(layer: Any) -> Dict[str, Any]:
    """``layer``'s own settings, by attribute name, as compared (arrays copied, None as a
    setting's value kept apart from no setting)."""
    parameters = _constructor_parameters(type(layer))
    found = {}
    for name, value in _entries(own(layer)):  # slots: nothing a user sets that we can see
        attribute = _attribute(name)
        if not (attribute.lstrip("_") in parameters or attribute in START_STATE):
            continue
        value = setting_value(value)
        if value is not None:
            found[name] = value
    return found


def _entries(attributes: Dict[str, Any]) -> Iterator[Tuple[str, Any]]:
    """A layer's attributes that could be settings, by name, each entry of a dict of them on its
    own (``config['scale']``): not the links to the envs it wraps, its drawing or its records."""
    for name, value in attributes.items():
        if name in LINKS or name in _RECORDS or name.lstrip("_") in _DRAWING:
            continue
        yield from _dict_entries(name, value, 0)


def _dict_entries(name: str, value: Any, depth: int) -> Iterator[Tuple[str, Any]]:
    """``(name, value)``, or for a plain dict (string or integer keys a name can hold, at most
    ``_DICT_ENTRIES``) each of its entries, named by their key."""
    if type(value) is not dict or depth >= _DICT_DEPTH or len(value) > _DICT_ENTRIES:
        yield name, value
        return
    for key, item in value.items():
        if isinstance(key, str) and repr(key) == f"'{key}'" and not any(m in key for m in "[]"):
            yield from _dict_entries(f"{name}[{key!r}]", item, depth + 1)
        elif isinstance(key, int) and not isinstance(key, bool):
            yield from _dict_entries(f"{name}[{key}]", item, depth + 1)


def _attribute(name: str) -> str:
    """The attribute a setting's name starts at (``config`` for ``config['scale']``)."""
    return name.split("[", 1)[0]


def dict_keys(name: str) -> List[Union[str, int]]:
    """The keys of a dict entry's name (``['reward', 3]`` for ``config['reward'][3]``)."""
    return [text if number == "" else int(number) for text, number in _KEY.findall(name)]


@functools.lru_cache(maxsize=256)
def _constructor_parameters(cls: type) -> frozenset:
    """The parameter names of ``cls``'s constructors, its bases' included (read once a class:
    ``inspect.signature`` over a Hopper's stack took ~1 ms of each ``Plotter()``)."""
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


def setting_value(value: Any) -> Optional[Any]:
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


def same_setting(mine: Any, theirs: Any) -> bool:
    """Whether two settings' values are the same (arrays: of one shape, equal, NaN as NaN)."""
    if isinstance(mine, np.ndarray) or isinstance(theirs, np.ndarray):
        return (isinstance(mine, np.ndarray) and isinstance(theirs, np.ndarray)
                and mine.shape == theirs.shape
                and np.array_equal(mine, theirs, equal_nan=mine.dtype.kind == "f"))
    try:
        return bool(mine == theirs)
    except Exception:  # noqa: BLE001 - a value whose == is odd is not one we can tell apart
        return True


def model_settings(layer: Any) -> Dict[str, Any]:
    """The physics parameters of the MuJoCo model ``layer`` holds (none if it holds none), by
    their path below it (``model.body_mass``, ``model.opt.gravity``): arrays as views of the
    model, every numeric option (``MjOption``: gravity, wind, timestep, viscosity, solver...)."""
    model = own(layer).get("model")
    if type(model).__name__ != "MjModel":
        return {}
    found: Dict[str, Any] = {}
    for name in MODEL_PHYSICS:
        value = getattr(model, name, None)
        if isinstance(value, np.ndarray) and 0 < value.size <= _LARGEST_ARRAY:
            found[MODEL + name] = value
    options = model.opt
    for name in dir(options):
        value = getattr(options, name) if not name.startswith("_") else None
        if isinstance(value, (int, float, np.ndarray)) and not isinstance(value, bool):
            found[OPTIONS + name] = value
    return found


def read_setting(layer: Any, name: str, missing: Any = None) -> Any:
    """``layer``'s setting ``name``: its own attribute, an entry of a dict it holds
    (``config['scale']``), or a path below it (``model.opt.x``); ``missing`` where a dict has no
    such entry, None where there is no such attribute."""
    if "[" in name:
        value = own(layer).get(_attribute(name))
        for key in dict_keys(name):
            value = value.get(key, missing) if type(value) is dict else missing
        return value
    if "." not in name:
        return own(layer).get(name)
    owner = layer
    for part in name.split("."):
        owner = getattr(owner, part, None)
    return owner


def write_setting(layer: Any, name: str, value: Any) -> None:
    """Give ``layer``'s setting ``name`` ``value``: a model's array in place (the model owns
    its memory), anything else by assignment (a dict's entry into that dict)."""
    if "[" in name:
        *keys, last = dict_keys(name)
        owner = own(layer)[_attribute(name)]
        for key in keys:
            owner = owner[key]
        owner[last] = value
        return
    *path, last = name.split(".")
    owner = layer
    for part in path:
        owner = getattr(owner, part)
    current = getattr(owner, last, None)
    if path and isinstance(current, np.ndarray):
        current[...] = value
    else:
        setattr(owner, last, value)
