"""What a setting of an env is: an attribute that a constructor parameter of the layer's class
names (the whole class hierarchy's, with leading underscores stripped: ``frame_skip``, or
``_ctrl_cost_weight`` for ``ctrl_cost_weight``), and MuJoCo's start state ``init_qpos`` and
``init_qvel``; drawing settings (size, camera, render mode) are not, they are the worker's own.
Its value is a number, a string, None, a short tuple of them or a numeric array. Read by the
check that the worker's copy has the trainer's settings (``settings_check.py``) and by their
travel with every update (``settings_travel.py``).
"""
import inspect
from typing import Any, Dict, Optional

import numpy as np

#: set where the env is drawn, not how it plays: the worker chooses its own
_DRAWING = frozenset({
    "render_mode", "width", "height", "camera_id", "camera_name", "default_camera_config",
    "max_geom", "visual_options"
})
#: MuJoCo envs' start pose and velocity: read at every reset, never a constructor parameter
START_STATE = ("init_qpos", "init_qvel")
#: arrays larger than this are not a setting anyone types in
_LARGEST_ARRAY = 10_000


def layer_settings(layer: Any) -> Dict[str, Any]:
    """``layer``'s own settings, by attribute name, as compared (arrays copied, None as a
    setting's value kept apart from no setting)."""
    try:
        attributes = vars(layer)
    except TypeError:  # slots: nothing a user sets after construction that we can see
        return {}
    parameters = _constructor_parameters(type(layer))
    found = {}
    for name, value in attributes.items():
        key = name.lstrip("_")
        if key in _DRAWING or not (key in parameters or name in START_STATE):
            continue
        value = setting_value(value)
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
