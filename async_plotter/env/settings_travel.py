"""The env's settings travel with every update: a setting changed on the trainer's env, before
``Plotter()`` or while it trains (a curriculum that raises a target speed or lowers a pendulum's
gravity, a start pose put into ``init_qpos``, ``frame_skip = 2``), is set on the worker's copies
of the env too, so their videos, history and returns show the env training has now. The worker
builds its env afresh from the recipe, so without this it would show the settings the env was
made with.

A setting is what ``env/settings.py`` says: an attribute that a constructor parameter of a
layer's class names, MuJoCo's ``init_qpos``/``init_qvel``, and the physics parameters of a MuJoCo
model (``model.opt.gravity``, ``model.body_mass``: written in place). Numbers, booleans, None,
tuples and lists of them, numeric arrays and strings travel, behind the wrappers' state, in the
policy's dtype: each value as three parts (three float32s hold a float64 exactly: 3 x 24 bits
>= 53), each scalar with its kind (float, int, bool, None), a string as its UTF-8 bytes in a
slot of at least ``STRING_BYTES``, so the worker's copy gets the trainer's value and type
exactly. A setting of another kind (a tuple holding a string) does not travel: ``Plotter()``'s
check names one that differs, and one changed while training, like an array that changes its
shape or a string too long for its slot, is an ``EnvMismatchError`` at ``update_plot``.

Setting an attribute on a fresh copy is what the user did to their env after it was made, so the
copy then is their env. The worker writes a setting only where it changed since the update
before (at the first, where it differs from the copy's own): a value the copy changes by itself
as it plays is left to it until training changes it. A Hopper's 69 settings (1,196 values in
an update) read in ~70 us at every ``update_plot`` (``TrainerSettings``); a copy given them
(``WorkerSettings``) spends ~9 us where none changed.
"""
import dataclasses
import functools
import logging
import math
from typing import Any, Callable, Collection, Dict, List, Optional, Tuple

import numpy as np

from async_plotter.env.layers import shows_only
from async_plotter.env.settings import (layer_settings, model_settings, read_setting, same_setting,
                                        setting_value, user_data, write_setting)
from async_plotter.errors import EnvMismatchError

logger = logging.getLogger("async_plotter")

#: the parts a float64 travels as: exact in float32 (and in float64, where two are zero)
PARTS = 3
#: a scalar's kind, travelling beside its value
FLOAT, INT, BOOL, NONE = 0, 1, 2, 3
#: how a setting's value is held: a Python scalar, a tuple or list of them, a numpy array or
#: numpy scalar (its dtype kept), a string (its UTF-8 bytes, as numbers)
SCALAR, TUPLE, LIST, ARRAY, NUMPY, STRING = "scalar", "tuple", "list", "array", "numpy", "string"
#: the bytes a string's slot holds at least (a longer one at Plotter(): its own length)
STRING_BYTES = 64
#: forms whose values travel with no kind beside them
_KINDLESS = (ARRAY, NUMPY, STRING)
_SEQUENCES = {TUPLE: tuple, LIST: list}
#: a setting of a user's layer that no constructor parameter names, found by the trainer-side
#: check (``steady_user_data``): its layer's class name and rank, and its name
Extra = Tuple[str, int, str]
#: the largest finite value that travels: float32's
_LARGEST = float(np.finfo(np.float32).max)


@dataclasses.dataclass(frozen=True)
class SettingField:
    """One setting that travels: where it is, and its form."""

    #: which layer of its class it belongs to, counted from the base env (0: the innermost):
    #: a worker's copy may have other layers on top or between (an old gym env's adapter,
    #: gym's passive checker taken out), never others of the same class
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
        return 0 if self.form in _KINDLESS else self.elements

    @property
    def label(self) -> str:
        return f"{self.wrapper}.{self.name}"


def size_of(fields: Tuple[SettingField, ...]) -> int:
    """The values ``fields`` take in an update."""
    return sum(PARTS * field.elements + field.kinds for field in fields)


def field_of(rank: int, layer: Any, name: str, value: Any) -> Optional[SettingField]:
    """The travelling form of ``value`` (``layer``'s setting ``name``; ``rank``: the layer's,
    ``SettingField.layer``), or None where it cannot travel (an object, a tuple holding a
    string, a value beyond float32's range)."""
    wrapper = type(layer).__name__
    if isinstance(value, str):
        room = max(STRING_BYTES, len(value.encode("utf-8")))
        return SettingField(rank, wrapper, name, STRING, (room + 1, ))  # its length, its bytes
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf" or not _in_range(value):
            return None
        return SettingField(rank, wrapper, name, ARRAY, tuple(value.shape), value.dtype.str)
    if isinstance(value, np.generic):
        if value.dtype.kind not in "biuf" or not _in_range(value):
            return None
        return SettingField(rank, wrapper, name, NUMPY, (), value.dtype.str)
    if isinstance(value, (tuple, list)):
        if not all(_scalar_kind(item) is not None for item in value):
            return None
        return SettingField(rank, wrapper, name, TUPLE if isinstance(value, tuple) else LIST,
                            (len(value), ))
    if _scalar_kind(value) is None:
        return None
    return SettingField(rank, wrapper, name, SCALAR, ())


class TrainerSettings:
    """The settings of the trainer's env object (its ``layers``, ``env_layers``): which travel,
    read at every update."""

    def __init__(self, layers: List[Any], label: str, extra: Collection[Extra] = ()) -> None:
        self._layers = layers
        self.label = label
        fields, places, fixed = [], [], []
        for place, (layer, rank) in enumerate(zip(layers, ranks(layers))):
            if shows_only(layer):
                continue  # the worker's copy leaves it out
            more = {
                name: kept
                for name, kept in user_data(layer).items()
                if (type(layer).__name__, rank, name) in extra
            }
            for name, kept in {**layer_settings(layer), **model_settings(layer), **more}.items():
                field = field_of(rank, layer, name, read_setting(layer, name))
                if field is not None:
                    fields.append(field)
                    places.append(place)
                else:
                    fixed.append((place, name, kept))
        self.fields: Tuple[SettingField, ...] = tuple(fields)
        #: each field's layer in ``layers``
        self._places = places
        #: settings that cannot travel, as they were: a change is refused
        self._fixed = fixed
        self._readers = [_reader(layers[place], field.name) for field, place in zip(fields, places)]
        #: the dicts whose entries are settings, with their keys (None: no longer watched): an
        #: entry added later does not travel (the worker's copy keeps those it has), which one
        #: warning says
        named = [(place, field.name) for field, place in zip(fields, places)]
        self._dicts = {
            (place, parent): _entries_in(read_setting(layers[place], parent))
            for place, name in named + [(place, name) for place, name, _ in fixed]
            for parent in _dicts_above(name)
        }

    def read(self, dtype: np.dtype) -> np.ndarray:
        """The travelling settings now, in ``dtype`` (``size_of(fields)`` values); an
        ``EnvMismatchError`` where a setting changed in a way that cannot travel."""
        pieces: List[np.ndarray] = []
        scalars: List[float] = []  # the values of Python scalars since the last array
        kinds: List[int] = []
        for field, (reader, fixed_form) in zip(self.fields, self._readers):
            value = reader()
            if value is _REMOVED:
                self._refuse(field.label, value, "an entry taken out of a dict does not travel")
            if not fixed_form and not _fits(field, value):
                self._refuse(
                    field.label, value, "it is no longer a number (or a tuple or array of them, "
                    "within float32's range) of the form and shape it had at Plotter()")
            if field.form in _KINDLESS:
                if scalars:
                    pieces.append(np.array(scalars, dtype=np.float64))
                    scalars = []
                pieces.append(
                    np.ravel(value) if field.form != STRING else self._bytes(field, value))
                continue
            for item in (value if field.form in _SEQUENCES else (value, )):
                kind = _scalar_kind(item)
                kinds.append(kind)
                scalars.append(0.0 if kind == NONE else float(item))
        if scalars:
            pieces.append(np.array(scalars, dtype=np.float64))
        for (place, parent), entries in self._dicts.items():
            self._note_new_entries(place, parent, entries)
        for place, name, was in self._fixed:
            now = read_setting(self._layers[place], name, _REMOVED)
            if not same_setting(setting_value(now), was):
                self._refuse(
                    f"{type(self._layers[place]).__name__}.{name}", now,
                    "only numbers, strings, None, tuples of numbers and numeric arrays travel "
                    f"(it was {was!r})")
        flat = np.concatenate(pieces).astype(np.float64, copy=False) if pieces else np.zeros(0)
        too_large = np.flatnonzero(np.isfinite(flat) & (np.abs(flat) > np.finfo(dtype).max))
        if too_large.size:
            field, place = self._field_at(int(too_large[0]))
            self._refuse(field.label, read_setting(self._layers[place], field.name),
                         f"a value is too large for the policy's dtype, {np.dtype(dtype)}")
        return encode(flat, np.array(kinds), dtype)

    def _note_new_entries(self, place: int, parent: str, entries: Optional[frozenset]) -> None:
        """Warn where the dict ``parent`` of layer ``place`` got entries since (once a dict:
        one that keeps growing, a cache, is then no longer watched)."""
        if entries is None:
            return
        now = _entries_in(read_setting(self._layers[place], parent))
        if now is None or now <= entries:
            return
        self._dicts[(place, parent)] = None
        logger.warning(
            "Plotter: %s.%s of the env %s has entries it did not have at Plotter() (%s): "
            "they do not travel to the plot worker, whose copy keeps the entries it was built "
            "with. Give the dict every entry before Plotter()",
            type(self._layers[place]).__name__, parent, self.label,
            ", ".join(repr(key) for key in sorted(now - entries, key=repr)))

    def _bytes(self, field: SettingField, value: str) -> np.ndarray:
        """A string's slot: its length in bytes, then its UTF-8 bytes, then zeros."""
        encoded = value.encode("utf-8")
        if len(encoded) >= field.elements:
            self._refuse(
                field.label, value, f"it is longer than the {field.elements - 1} bytes its "
                f"place in an update holds (the longer of {STRING_BYTES} and its length at "
                "Plotter())")
        slot = np.zeros(field.elements)
        slot[0] = len(encoded)
        slot[1:1 + len(encoded)] = np.frombuffer(encoded, np.uint8)
        return slot

    def _field_at(self, index: int) -> Tuple[SettingField, int]:
        """The field whose elements hold value ``index``, and its layer's place."""
        for field, place in zip(self.fields, self._places):
            if index < field.elements:
                return field, place
            index -= field.elements
        raise IndexError(index)

    def _refuse(self, name: str, value: Any, why: str) -> None:
        raise EnvMismatchError(
            f"the setting {name} of the env {self.label} is now {value!r}, which cannot travel "
            f"to the plot worker: {why}. Its videos would show the env with the setting as it "
            "was. Keep the setting of the kind and shape it had, or make the env anew with a new "
            "Plotter.")


class WorkerSettings:
    """The same settings of a copy of the env: written where the trainer's changed."""

    def __init__(self, layers: List[Any], fields: Tuple[SettingField, ...], label: str) -> None:
        self._fields, self._label = fields, label
        by_rank = {
            (type(layer).__name__, rank): layer
            for layer, rank in zip(layers, ranks(layers))
        }
        self._targets: List[Optional[Any]] = [
            by_rank.get((field.wrapper, field.layer)) for field in fields
        ]
        if fields and not all(target is not None for target in self._targets):
            # Another stack of wrappers: Plotter()'s observation checks name it.
            logger.debug("%s: some settings do not travel (another stack of layers)", label)
        self._last: List[Any] = [_UNSET] * len(fields)
        self._last_flat: Optional[np.ndarray] = None

    def apply(self, flat: np.ndarray) -> None:
        """Write the settings in ``flat`` (``TrainerSettings.read``'s) that changed."""
        if self._last_flat is not None and np.array_equal(flat, self._last_flat, equal_nan=True):
            return  # the usual update: no setting changed
        self._last_flat = np.array(flat)
        values = decode(flat, self._fields)
        for index, (field, target, value) in enumerate(zip(self._fields, self._targets, values)):
            if target is None:
                continue
            before = self._last[index]
            if before is _UNSET:
                before = read_setting(target, field.name)
            # An object where the trainer's has plain data (a renderer the worker's copy made,
            # where the trainer's holds None) is the copy's own: never replaced.
            if not same_setting(before, value) and _fits(field, read_setting(target, field.name)):
                try:
                    write_setting(target, field.name, value)
                except Exception as error:  # noqa: BLE001 - a viewer's other MuJoCo version
                    logger.warning(
                        "%s: the setting %s cannot be given to the worker's copy (%s: %s)",
                        self._label, field.label,
                        type(error).__name__, error)
                    self._targets[index] = None
            self._last[index] = value


def steady_user_data(before: List[Any], after: List[Any]) -> Tuple[Extra, ...]:
    """The plain data of the user's layers that a copy kept from ``before`` to ``after``
    (``user_data`` of each of its layers, ``env_layers``, as it reset and stepped): settings
    no constructor parameter names (what changed is state)."""
    return tuple((kind, rank, name) for (kind, rank, earlier), (_, _, later) in zip(before, after)
                 for name, value in later.items()
                 if name in earlier and same_setting(earlier[name], value))


def user_data_of(layers: List[Any]) -> List[Any]:
    """``user_data`` of each of ``layers``, with its class name and rank, for
    ``steady_user_data``."""
    return [(type(layer).__name__, rank, user_data(layer))
            for layer, rank in zip(layers, ranks(layers))]


def ranks(layers: List[Any]) -> List[int]:
    """Each layer's rank among the layers of its class, counted from the base env (0: the
    innermost), as ``SettingField.layer`` names it."""
    seen: Dict[str, int] = {}
    found = []
    for layer in reversed(layers):
        name = type(layer).__name__
        found.append(seen.get(name, 0))
        seen[name] = found[-1] + 1
    return found[::-1]


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
        elif field.form == STRING:
            length = int(chunk[0])
            decoded.append(bytes(chunk[1:1 + length].astype(np.uint8)).decode("utf-8"))
        else:
            items = [
                _scalar(value, kind)
                for value, kind in zip(chunk, kinds[kind_offset:kind_offset + field.elements])
            ]
            kind_offset += field.elements
            decoded.append(_SEQUENCES[field.form](items) if field.form in _SEQUENCES else items[0])
    return decoded


def _dicts_above(name: str) -> List[str]:
    """The dicts a dict entry's name goes through (``config``, ``config['reward']`` for
    ``config['reward']['ctrl']``); none for another setting."""
    marks = [index for index, mark in enumerate(name) if mark == "["]
    return [name[:index] for index in marks]


def _entries_in(value: Any) -> Optional[frozenset]:
    return frozenset(value) if type(value) is dict else None


def _reader(layer: Any, name: str) -> Tuple[Callable[[], Any], bool]:
    """A call that reads ``layer``'s setting ``name`` cheaply (it runs at every update), and
    whether what it reads keeps its form by itself: a model's array is a view of the model's
    own memory, which keeps its shape."""
    if "[" in name:  # a dict's entry: one taken out of the dict is refused (no longer fits)
        return functools.partial(read_setting, layer, name, _REMOVED), False
    if "." not in name:
        return functools.partial(layer.__dict__.get, name), False
    *path, last = name.split(".")
    owner = read_setting(layer, ".".join(path))
    value = getattr(owner, last)
    if isinstance(value, np.ndarray) and value.base is not None:
        return (lambda: value), True
    # A model's option (MjOption's number) is always a number of its one type.
    return functools.partial(getattr, owner, last), type(owner).__name__ == "MjOption"


def _fits(field: SettingField, value: Any) -> bool:
    """Whether ``value`` still has ``field``'s form (``field_of``'s, more cheaply)."""
    if field.form == ARRAY:
        return (isinstance(value, np.ndarray) and value.shape == field.shape
                and value.dtype.str == field.dtype)
    if field.form == NUMPY:
        return isinstance(value, np.generic) and value.dtype.str == field.dtype
    if field.form == STRING:
        return isinstance(value, str)
    if field.form == SCALAR:
        return _scalar_kind(value) is not None
    return (isinstance(value, _SEQUENCES[field.form]) and len(value) == field.shape[0]
            and all(_scalar_kind(item) is not None for item in value))


def _in_range(values: Any) -> bool:
    """Whether ``values`` travel exactly in every dtype a policy has: integers a float64 holds,
    finite numbers a float32 holds (a "no limit" of ``sys.float_info.max`` does not)."""
    array = np.asarray(values)
    if array.dtype.kind in "iu":
        return not array.size or int(np.abs(array.astype(np.int64)).max()) <= 2**53
    finite = array[np.isfinite(array)]
    return not finite.size or float(np.abs(finite).max()) <= _LARGEST


def _scalar_kind(value: Any) -> Optional[int]:
    if value is None:
        return NONE
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, (int, np.integer)):
        return INT if abs(int(value)) <= 2**53 else None
    if isinstance(value, (float, np.floating)):
        return FLOAT if not (math.isfinite(value) and abs(value) > _LARGEST) else None
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


class _Removed:
    """A dict's entry that is no longer there."""

    def __repr__(self) -> str:
        return "<taken out of its dict>"


_REMOVED = _Removed()
