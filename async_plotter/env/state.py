"""The state an env's wrappers hold (running observation statistics), read from the trainer's env
and applied to the worker's copy with every update: a rebuilt env re-applies its wrappers but not
what they learned (docs/design.md, "the worker's copy of the env acts like yours").

The *stateful layers* of the trainer's env are found (outermost first) when the ``Plotter`` is
built, read at ``start()`` and every ``update_plot`` as one small float vector behind the
parameters, and written into the same layers of the worker's copy, which never update them. The
kinds: ``running_stats`` (a ``RunningMeanStd`` as ``obs_rms``/``return_rms``), ``hook``
(``get_wrapper_state()``/``set_wrapper_state()``) and ``rllab`` (its normalized env's means and
variances); those without an ``update_running_mean`` switch are written back before every step.
The env's settings travel behind them (``settings_travel.py``), for the env object a ``Plotter``
is given.
Runs in the trainer (``TrainerEnvState``) and in the rollout process (``WorkerEnvState``).
"""
import dataclasses
from typing import Any, Collection, Dict, List, Optional, Sequence, Tuple

import numpy as np

from async_plotter.env.layers import env_layers, own as _own, shown_env
from async_plotter.env.settings_travel import (Extra, SettingField, TrainerSettings, WorkerSettings,
                                               size_of)
from async_plotter.errors import EnvMismatchError

RUNNING_STATS = "running_stats"
HOOK = "hook"
RLLAB = "rllab"

_RUNNING_STATS_ATTRIBUTES = ("obs_rms", "return_rms")
_RLLAB_PAIRS = (("_obs_mean", "_obs_var"), ("obs_mean", "obs_var"), ("_reward_mean", "_reward_var"),
                ("reward_mean", "reward_var"))


@dataclasses.dataclass(frozen=True)
class LayerState:
    """What one stateful layer sends: its class name (for messages), its kind and its fields."""

    wrapper: str
    kind: str
    #: (name, shape) of each field, in the order they travel
    fields: Tuple[Tuple[str, Tuple[int, ...]], ...]

    @property
    def size(self) -> int:
        return sum(int(np.prod(shape, dtype=np.int64)) for _, shape in self.fields)


@dataclasses.dataclass(frozen=True)
class EnvStateLayout:
    """The stateful layers of an env, outermost first, then its settings
    (``env/settings_travel.py``): what travels behind the parameters."""

    layers: Tuple[LayerState, ...] = ()
    settings: Tuple[SettingField, ...] = ()

    @property
    def wrappers_size(self) -> int:
        return sum(layer.size for layer in self.layers)

    @property
    def size(self) -> int:
        return self.wrappers_size + size_of(self.settings)

    def describe(self) -> str:
        return ", ".join(f"{layer.wrapper} ({', '.join(name for name, _ in layer.fields)})"
                         for layer in self.layers) or "none"


def layer_kind(layer: Any) -> Optional[str]:
    """Which known kind of stateful layer ``layer`` is, or None (its own attributes and methods
    only: gym's old wrappers forward unknown attributes to the env inside them)."""
    cls = type(layer)
    if callable(getattr(cls, "get_wrapper_state", None)) and callable(
            getattr(cls, "set_wrapper_state", None)):
        return HOOK
    own = _own(layer)
    if any(_is_running_stats(own.get(name)) for name in _RUNNING_STATS_ATTRIBUTES):
        return RUNNING_STATS
    if any(mean in own and var in own for mean, var in _RLLAB_PAIRS):
        return RLLAB
    return None


def read_layer(layer: Any, kind: str) -> Dict[str, np.ndarray]:
    """The state of one layer as named float64 arrays."""
    if kind == RUNNING_STATS:
        state = {}
        for name in _RUNNING_STATS_ATTRIBUTES:
            stats = _own(layer).get(name)
            if _is_running_stats(stats):
                for part in ("mean", "var", "count"):
                    state[f"{name}.{part}"] = _float_array(getattr(stats, part))
        return state
    if kind == RLLAB:
        own = _own(layer)
        return {
            name: _float_array(own[name])
            for pair in _RLLAB_PAIRS if pair[0] in own and pair[1] in own for name in pair
        }
    return _hook_state(layer)


def write_layer(layer: Any, kind: str, state: Dict[str, np.ndarray]) -> None:
    """Give one layer ``state`` (as read by ``read_layer``), each value in its own dtype."""
    if kind == RUNNING_STATS:
        for key, value in state.items():
            name, part = key.split(".")
            stats = _own(layer)[name]
            old = getattr(stats, part)
            setattr(
                stats, part,
                type(old)(value) if np.ndim(old) == 0 and not isinstance(old, np.ndarray) else
                np.asarray(value, dtype=np.asarray(old).dtype).reshape(np.shape(old)))
    elif kind == RLLAB:
        for name, value in state.items():
            old = _own(layer)[name]
            setattr(layer, name,
                    np.asarray(value, dtype=np.asarray(old).dtype).reshape(np.shape(old)))
    else:
        layer.set_wrapper_state({name: np.array(value) for name, value in state.items()})


def freezes(layer: Any) -> bool:
    """Stop ``layer`` from updating its own state where it has Gymnasium's switch for that;
    False where it has none (its state must then be written back before every step)."""
    if not isinstance(getattr(type(layer), "update_running_mean", None), property) and \
            "update_running_mean" not in _own(layer):
        return False
    try:
        layer.update_running_mean = False
    except AttributeError:  # a read-only property
        return False
    return True


class TrainerEnvState:
    """The stateful layers of the trainer's own env object, and with ``settings`` its settings,
    read at every ``update_plot``."""

    def __init__(self,
                 env: Any,
                 label: str,
                 settings: bool = False,
                 extra: Collection[Extra] = ()) -> None:
        every = env_layers(env)
        found = [(layer, layer_kind(layer)) for layer in every]
        self._layers = [(layer, kind) for layer, kind in found if kind is not None]
        self.label = label
        layouts = []
        for layer, kind in self._layers:
            state = read_layer(layer, kind)
            layouts.append(
                LayerState(
                    type(layer).__name__, kind,
                    tuple((name, tuple(np.shape(value))) for name, value in state.items())))
        self._settings = (TrainerSettings(_with_the_shown_env(every), label, extra)
                          if settings else None)
        self.layout = EnvStateLayout(tuple(layouts), self._settings.fields if self._settings else
                                     ())

    def read(self, dtype: Any = np.float64) -> np.ndarray:
        """The state now, flat, in ``dtype`` (the settings exactly, ``settings_travel.encode``);
        the layout is checked on every read, since a layer's arrays can be replaced (a hook
        that returns new fields)."""
        wrappers = self._read_wrappers().astype(dtype, copy=False)
        if self._settings is None or not self.layout.settings:
            return wrappers
        return np.concatenate([wrappers, self._settings.read(np.dtype(dtype))])

    def write(self, flat: np.ndarray) -> None:
        """Give the layers the state ``read()`` gave (a run resumed from its snapshot goes on
        from what its wrappers had learned); ``EnvMismatchError`` where it is not this layout's."""
        size = self.layout.wrappers_size
        if np.size(flat) < size:
            raise EnvMismatchError(f"the state given to the wrappers of the env {self.label} "
                                   f"holds {np.size(flat)} numbers, and they hold {size}")
        _write_layers(self._layers, self.layout.layers, np.ravel(flat)[:size])

    def _read_wrappers(self) -> np.ndarray:
        parts = []
        for (layer, kind), expected in zip(self._layers, self.layout.layers):
            state = read_layer(layer, kind)
            shapes = tuple((name, tuple(np.shape(value))) for name, value in state.items())
            if shapes != expected.fields:
                raise EnvMismatchError(
                    f"the state of {expected.wrapper} in the env {self.label} changed its shape "
                    f"since Plotter() was built (was {expected.fields}, now {shapes}), so it "
                    "cannot travel to the plot worker: keep its fields and their shapes fixed")
            parts.extend(np.ravel(value) for value in state.values())
        return np.concatenate(parts) if parts else np.zeros(0)


class WorkerEnvState:
    """The same layers in the worker's copy of the env: given the travelled state, never updating
    it themselves; and its settings, given the trainer's."""

    def __init__(self, env: Any, layout: EnvStateLayout, label: str) -> None:
        every = env_layers(env)
        found = [(layer, layer_kind(layer)) for layer in every]
        # Nothing travels from an id or a factory: the layers its env has keep their own,
        # fresh statistics (the trainer-side check warns about it once).
        layers = [(layer, kind) for layer, kind in found if kind is not None and layout.layers]
        names = [type(layer).__name__ for layer, _ in layers]
        expected = [layer.wrapper for layer in layout.layers]
        if [kind for _, kind in layers] != [layer.kind for layer in layout.layers]:
            raise EnvMismatchError(
                f"the plot worker's copy of the env {label} has the stateful layers {names}, but "
                f"the trainer's env has {expected}: its wrappers are not rebuilt as they are in "
                "the trainer. Pass a zero-argument function that builds the env with the same "
                "wrappers, in the same order.")
        self._layers = layers
        self._layout = layout
        self._held = [not freezes(layer) for layer, _ in layers]
        self._state: List[Dict[str, np.ndarray]] = []
        self._settings = WorkerSettings(every, layout.settings, label) if layout.settings else None

    def apply(self, flat: np.ndarray) -> None:
        """Write the travelled state (``TrainerEnvState.read``'s vector) into the layers, and
        the settings that changed."""
        wrappers = self._layout.wrappers_size
        if self._settings is not None:
            self._settings.apply(flat[wrappers:])
        self._state = _write_layers(self._layers, self._layout.layers, flat[:wrappers])

    def hold(self) -> None:
        """Before a step or reset: write the state back into layers that would have updated it."""
        for (layer, kind), state, held in zip(self._layers, self._state, self._held):
            if held:
                write_layer(layer, kind, state)


def _with_the_shown_env(layers: List[Any]) -> List[Any]:
    """``layers``, and where the innermost is a ``SyncVectorEnv``, the layers of the env the
    worker shows (``layers.shown_env``), whose settings travel too."""
    shown = shown_env(layers[-1]) if layers else None
    return layers + env_layers(shown) if shown is not None else layers


def _write_layers(layers: List[Tuple[Any, str]], layout: Sequence[LayerState],
                  flat: np.ndarray) -> List[Dict[str, np.ndarray]]:
    """Write the wrappers' part of a travelled state into ``layers`` (each with its kind, as
    ``layout`` lists them); the state each was given."""
    states = _split(flat, layout)
    for (layer, kind), state in zip(layers, states):
        write_layer(layer, kind, state)
    return states


def _split(flat: np.ndarray, layers: Sequence[LayerState]) -> List[Dict[str, np.ndarray]]:
    flat = np.asarray(flat, dtype=np.float64)
    states, offset = [], 0
    for layer in layers:
        state = {}
        for name, shape in layer.fields:
            size = int(np.prod(shape, dtype=np.int64))
            state[name] = flat[offset:offset + size].reshape(shape)
            offset += size
        states.append(state)
    return states


def _hook_state(layer: Any) -> Dict[str, np.ndarray]:
    name = type(layer).__name__
    state = layer.get_wrapper_state()
    if not isinstance(state, dict) or not all(isinstance(key, str) for key in state):
        raise EnvMismatchError(
            f"{name}.get_wrapper_state() returned {type(state).__name__}; it must return a dict "
            "of named numeric arrays (e.g. {'mean': self.mean, 'var': self.var, 'count': "
            "self.count}), which set_wrapper_state(state) takes back")
    arrays = {}
    for key, value in state.items():
        try:
            arrays[key] = _float_array(value)
        except (TypeError, ValueError) as error:
            raise EnvMismatchError(
                f"{name}.get_wrapper_state()[{key!r}] is {type(value).__name__}, not numbers "
                f"({error}); the plot worker gets the state as numeric arrays") from error
    return arrays


def _float_array(value: Any) -> np.ndarray:
    array = np.array(value, dtype=np.float64)
    if array.dtype.kind != "f":
        raise TypeError(f"not a numeric array: {value!r}")
    return array


def _is_running_stats(value: Any) -> bool:
    return value is not None and all(hasattr(value, part) for part in ("mean", "var", "count"))
