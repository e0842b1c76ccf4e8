"""The env's settings travel with every update: a setting changed on the trainer's env, before
``Plotter()`` or while it trains (a curriculum that raises a target speed or lowers a pendulum's
gravity, a start pose put into ``init_qpos``, ``frame_skip = 2``), is set on the worker's copies
of the env too, so their videos, history and returns show the env training has now. The worker
builds its env afresh from the recipe, so without this it would show the settings the env was
made with.

A setting is what ``env/settings_check.py`` calls one: an attribute that a constructor parameter
of a layer's class names, and MuJoCo's ``init_qpos``/``init_qvel``. Numbers, booleans, None,
tuples and lists of them and numeric arrays travel, behind the wrappers' state, in the policy's
dtype: each value as three parts (three float32s hold a float64 exactly: 3 x 24 bits >= 53) and
each scalar with its kind (float, int, bool, None), so the worker's copy gets the trainer's
value and type exactly. A setting of another kind (a string) does not travel: ``Plotter()``'s
check names one that differs, and one changed while training, like an array that changes its
shape, is an ``EnvMismatchError`` at ``update_plot``.

Setting an attribute on a fresh copy is what the user did to their env after it was made, so the
copy then is their env. The worker writes a setting only where it changed since the update
before (at the first, where it differs from the copy's own): a value the copy changes by itself
as it plays is left to it until training changes it. Runs in the trainer (``TrainerSettings``,
at every ``update_plot``) and wherever a copy is given the state (``WorkerSettings``).
"""
import dataclasses
import logging
import math
from typing import Any, List, Optional, Tuple

import numpy as np

from async_plotter.env.settings import layer_settings, same_setting, setting_value
from async_plotter.errors import EnvMismatchError

logger = logging.getLogger("async_plotter")

#: the parts a float64 travels as: exact in float32 (and in float64, where two are zero)
PARTS = 3
#: a scalar's kind, travelling beside its value
FLOAT, INT, BOOL, NONE = 0, 1, 2, 3
#: how a setting's value is held: a Python scalar, a tuple or list of them, a numpy array or
#: numpy scalar (its dtype kept)
SCALAR, TUPLE, LIST, ARRAY, NUMPY = "scalar", "tuple", "list", "array", "numpy"
_SEQUENCES = {TUPLE: tuple, LIST: list}


@dataclasses.dataclass(frozen=True)
class SettingField:
    """One setting that travels: where it is, and its form."""

    #: its layer's place in the env's stack (``env_layers``, outermost first)
    layer: int
    #: that layer's class name (messages; the worker's layer must have the same)
    wrapper: str
    name: str
    form: str
    #: () for a scalar, (n,) for a sequence of n, an array's shape
    shape: Tuple[int, ...]
    #: an array's (or numpy scalar's) dtype; "" otherwise
    dtype: str = ""

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def kinds(self) -> int:
        """How many kinds travel with it (one a Python scalar)."""
        return 0 if self.form in (ARRAY, NUMPY) else self.elements

    @property
    def label(self) -> str:
        return f"{self.wrapper}.{self.name}"


def size_of(fields: Tuple[SettingField, ...]) -> int:
    """The values ``fields`` take in an update."""
    return sum(PARTS * field.elements + field.kinds for field in fields)


def field_of(place: int, layer: Any, name: str, value: Any) -> Optional[SettingField]:
    """The travelling form of ``value`` (``layer``'s setting ``name``), or None where it cannot
    travel (a string, an object)."""
    wrapper = type(layer).__name__
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            return None
        return SettingField(place, wrapper, name, ARRAY, tuple(value.shape), value.dtype.str)
    if isinstance(value, np.generic):
        if value.dtype.kind not in "biuf":
            return None
        return SettingField(place, wrapper, name, NUMPY, (), value.dtype.str)
    if isinstance(value, (tuple, list)):
        if not all(_scalar_kind(item) is not None for item in value):
            return None
        return SettingField(place, wrapper, name, TUPLE if isinstance(value, tuple) else LIST,
                            (len(value), ))
    if _scalar_kind(value) is None:
        return None
    return SettingField(place, wrapper, name, SCALAR, ())


class TrainerSettings:
    """The settings of the trainer's env object: which travel, read at every update."""

    def __init__(self, env: Any, layers: List[Any], label: str) -> None:
        self._layers = layers
        self.label = label
        fields, fixed = [], []
        for place, layer in enumerate(layers):
            for name, kept in layer_settings(layer).items():
                field = field_of(place, layer, name, vars(layer)[name])
                if field is not None:
                    fields.append(field)
                else:
                    fixed.append((place, name, kept))
        self.fields: Tuple[SettingField, ...] = tuple(fields)
        #: settings that cannot travel, as they were: a change is refused
        self._fixed = fixed

    def read(self, dtype: np.dtype) -> np.ndarray:
        """The travelling settings now, in ``dtype`` (``size_of(fields)`` values); an
        ``EnvMismatchError`` where a setting changed in a way that cannot travel."""
        values: List[float] = []
        kinds: List[int] = []
        for field in self.fields:
            value = vars(self._layers[field.layer]).get(field.name)
            if not _fits(field, value):
                self._refuse(field.label, value, "its form or shape changed")
            if field.form in (ARRAY, NUMPY):
                values.extend(np.asarray(value, dtype=np.float64).ravel().tolist())
            else:
                for item in (value if field.form in _SEQUENCES else (value, )):
                    kind = _scalar_kind(item)
                    kinds.append(kind)
                    values.append(0.0 if kind == NONE else float(item))
        for place, name, was in self._fixed:
            now = vars(self._layers[place]).get(name)
            if not same_setting(setting_value(now), was):
                self._refuse(
                    f"{type(self._layers[place]).__name__}.{name}", now,
                    "only numbers, None, tuples of them and numeric arrays travel "
                    f"(it was {was!r})")
        flat = np.array(values, dtype=np.float64)
        too_large = np.flatnonzero(np.isfinite(flat) & (np.abs(flat) > np.finfo(dtype).max))
        if too_large.size:
            field = self._field_at(int(too_large[0]))
            self._refuse(field.label,
                         vars(self._layers[field.layer]).get(field.name),
                         f"a value is too large for the policy's dtype, {np.dtype(dtype)}")
        return encode(flat, np.array(kinds), dtype)

    def _field_at(self, index: int) -> SettingField:
        """The field whose elements hold value ``index``."""
        for field in self.fields:
            if index < field.elements:
                return field
            index -= field.elements
        raise IndexError(index)

    def _refuse(self, name: str, value: Any, why: str) -> None:
        raise EnvMismatchError(
            f"the setting {name} of the env {self.label} is now {value!r}, which cannot travel "
            f"to the plot worker: {why}. Its videos would show the env with the setting as it "
            "was. Keep the setting a number (or an array of one shape), or make the env anew "
            "with a new Plotter.")


class WorkerSettings:
    """The same settings of a copy of the env: written where the trainer's changed."""

    def __init__(self, layers: List[Any], fields: Tuple[SettingField, ...], label: str) -> None:
        self._fields = fields
        self._targets: List[Optional[Any]] = []
        for field in fields:
            layer = layers[field.layer] if field.layer < len(layers) else None
            self._targets.append(layer if type(layer).__name__ == field.wrapper else None)
        if fields and not all(target is not None for target in self._targets):
            # Another stack of wrappers: Plotter()'s observation checks name it.
            logger.debug("%s: some settings do not travel (another stack of layers)", label)
        self._last: List[Any] = [_UNSET] * len(fields)

    def apply(self, flat: np.ndarray) -> None:
        """Write the settings in ``flat`` (``TrainerSettings.read``'s) that changed."""
        values = decode(flat, self._fields)
        for index, (field, target, value) in enumerate(zip(self._fields, self._targets, values)):
            if target is None:
                continue
            before = self._last[index]
            if before is _UNSET:
                before = vars(target).get(field.name, _UNSET)
            if before is _UNSET or not same_setting(before, value):
                setattr(target, field.name, value)
            self._last[index] = value


def encode(values: np.ndarray, kinds: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``values`` (float64, none too large for ``dtype``) as ``PARTS`` parts in ``dtype`` whose
    sum is exactly each value (an infinity or NaN: itself, then zeros), then ``kinds``."""
    first = values.astype(dtype)
    with np.errstate(invalid="ignore"):  # inf - inf: an infinity's rest is 0
        rest = values - first.astype(np.float64)
    rest[~np.isfinite(values)] = 0.0
    parts = [first]
    for _ in range(PARTS - 1):
        part = rest.astype(dtype)
        parts.append(part)
        rest = rest - part.astype(np.float64)
    return np.concatenate(parts + [kinds.astype(dtype)])


def decode(flat: np.ndarray, fields: Tuple[SettingField, ...]) -> List[Any]:
    """Each field's value, in its own form, from ``encode``'s vector."""
    count = sum(field.elements for field in fields)
    parts = np.asarray(flat, dtype=np.float64)
    values = parts[:count].copy()
    for part in range(1, PARTS):
        values += parts[part * count:(part + 1) * count]
    kinds = parts[PARTS * count:].astype(np.int64)
    decoded, offset, kind_offset = [], 0, 0
    for field in fields:
        chunk = values[offset:offset + field.elements]
        offset += field.elements
        if field.form == ARRAY:
            decoded.append(chunk.astype(np.dtype(field.dtype)).reshape(field.shape))
        elif field.form == NUMPY:
            decoded.append(np.dtype(field.dtype).type(chunk[0]))
        else:
            items = [
                _scalar(value, kind)
                for value, kind in zip(chunk, kinds[kind_offset:kind_offset + field.elements])
            ]
            kind_offset += field.elements
            decoded.append(_SEQUENCES[field.form](items) if field.form in _SEQUENCES else items[0])
    return decoded


def _fits(field: SettingField, value: Any) -> bool:
    """Whether ``value`` still has ``field``'s form (``field_of``'s, more cheaply)."""
    if field.form == ARRAY:
        return (isinstance(value, np.ndarray) and value.shape == field.shape
                and value.dtype.str == field.dtype)
    if field.form == NUMPY:
        return isinstance(value, np.generic) and value.dtype.str == field.dtype
    if field.form == SCALAR:
        return _scalar_kind(value) is not None
    return (isinstance(value, _SEQUENCES[field.form]) and len(value) == field.shape[0]
            and all(_scalar_kind(item) is not None for item in value))


def _scalar_kind(value: Any) -> Optional[int]:
    if value is None:
        return NONE
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, (int, np.integer)):
        return INT if abs(int(value)) <= 2**53 else None
    if isinstance(value, (float, np.floating)):
        return FLOAT
    return None


def _scalar(value: float, kind: int) -> Any:
    if kind == NONE:
        return None
    if kind == BOOL:
        return bool(value)
    if kind == INT:
        return int(value)
    return float(value)


_UNSET = object()
