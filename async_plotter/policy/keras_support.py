"""What a Keras model needs besides its config and weights to act the same in another process: the
trainer's Keras settings (``trainer_settings``, ``apply_settings``), its custom classes
(``custom_objects``, which travel by cloudpickle), and state computed from weights
(``finalize(layers_with_derived_state(model))``, as Keras's own loading does); and
``first_layer_that_differs``, for the check's error. The traps behind each: docs/design.md
("Keras specifics").
"""
import warnings
from typing import Any, Dict, List, Optional

import numpy as np

_SAFE_MODE = "safe_mode"

#: Keras's own settings in a fresh process; only settings that differ travel
_DEFAULTS = {
    "floatx": "float32",
    "epsilon": 1e-7,
    "image_data_format": "channels_last",
    "dtype_policy": "float32",
}


def trainer_settings() -> Dict[str, Any]:
    """The trainer's Keras settings that change how a model is rebuilt or what it computes and
    differ from a fresh process's (empty: the worker need not import Keras for them)."""
    import keras

    settings: Dict[str, Any] = {
        "floatx": keras.config.floatx(),
        "epsilon": keras.config.epsilon(),
        "image_data_format": keras.config.image_data_format(),
        "dtype_policy": keras.config.dtype_policy().name,
    }
    changed = {key: value for key, value in settings.items() if value != _DEFAULTS[key]}
    in_safe_mode = _safe_mode_reader()
    if in_safe_mode is not None and in_safe_mode() is False:
        changed[_SAFE_MODE] = False
    return changed


def apply_settings(settings: Dict[str, Any]) -> None:
    """Make this process's Keras behave as the trainer's did (``trainer_settings()``)."""
    import keras

    setters = {
        "floatx": keras.config.set_floatx,
        "epsilon": keras.config.set_epsilon,
        "image_data_format": keras.config.set_image_data_format,
        "dtype_policy": keras.config.set_dtype_policy,
    }
    for key, value in settings.items():
        if key == _SAFE_MODE:
            keras.config.enable_unsafe_deserialization()
        else:
            setters[key](value)


def custom_objects(model: Any, config: Dict[str, Any]) -> Dict[str, Any]:
    """What ``config`` refers to that is not Keras's own, by the name it refers to it with: the
    classes of ``model`` and its layers, and registered functions (activations, initializers,
    losses) named in the config."""
    import keras

    found: Dict[str, Any] = {}
    for layer in [model] + list(_layers(model)):
        cls = type(layer)
        if not cls.__module__.startswith("keras."):
            found[keras.saving.get_registered_name(cls)] = cls
    for name in _registered_names(config):
        obj = keras.saving.get_registered_object(name)
        if obj is not None and not getattr(obj, "__module__", "keras.").startswith("keras."):
            found.setdefault(name, obj)
    return found


def _registered_names(config: Any) -> List[str]:
    names: List[str] = []
    if isinstance(config, dict):
        name = config.get("registered_name")
        if isinstance(name, str):
            names.append(name)
        for value in config.values():
            names.extend(_registered_names(value))
    elif isinstance(config, (list, tuple)):
        for value in config:
            names.extend(_registered_names(value))
    return names


def stateful_layers(model: Any) -> List[str]:
    """Names of the model's recurrent layers built with ``stateful=True``."""
    return [layer.name for layer in _layers(model) if getattr(layer, "stateful", False) is True]


def layers_with_derived_state(model: Any) -> List[Any]:
    """The model's layers whose state is computed from their weights (``finalize_state``)."""
    return [layer for layer in _layers(model) if callable(getattr(layer, "finalize_state", None))]


def finalize(layers: List[Any]) -> None:
    """Rebuild the state of ``layers`` from their weights (after ``set_weights``)."""
    for layer in layers:
        layer.finalize_state()


def first_layer_that_differs(trainer_model: Any, worker_model: Any,
                             batch: np.ndarray) -> Optional[str]:
    """The name of the first layer whose output differs between the two copies on ``batch``
    (Sequential and functional models), or None where it cannot be told."""
    import keras

    try:
        probes = []
        for model in (trainer_model, worker_model):
            outputs = [layer.output for layer in model.layers]
            probes.append(keras.Model(model.inputs, outputs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Keras warns about a tensor given for a list
            trainer_outputs, worker_outputs = [probe(batch, training=False) for probe in probes]
        for layer, ours, theirs in zip(trainer_model.layers, trainer_outputs, worker_outputs):
            ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
            if ours.shape != theirs.shape or not np.allclose(ours, theirs, rtol=1e-2, atol=1e-3):
                return layer.name
    except Exception:  # noqa: BLE001 - a subclassed model has no symbolic outputs, an LSTM
        return None  # with return_state several
    return None


def _layers(model: Any) -> List[Any]:
    flatten = getattr(model, "_flatten_layers", None)
    if callable(flatten):
        return list(flatten(include_self=False))
    return list(getattr(model, "layers", []))


def _safe_mode_reader() -> Any:
    try:
        from keras.src.saving import serialization_lib
    except ImportError:
        return None
    return getattr(serialization_lib, "in_safe_mode", None)
