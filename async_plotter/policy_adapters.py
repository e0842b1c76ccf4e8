"""One adapter per kind of policy: how to read its flat parameters, apply them, and act.

* ``ProtocolAdapter``: rllab's protocol (``get_param_values``, ``set_param_values``,
  ``get_action``); the structure travels by ``cloudpickle`` (a ``Serializable`` policy pickles as
  its constructor arguments, so TensorFlow objects inside it are rebuilt, not copied).
* ``KerasAdapter``: a built ``keras.Model``; the structure travels as its Keras config, the
  parameters are all its weights (trainable or not) flattened in ``get_weights()`` order.
* ``ModuleAdapter``: a callable ``tf.Module`` mapping a batch of observations to a batch of
  actions; it travels by ``cloudpickle``, the parameters are ``module.variables``.

``adapter_for(policy)`` classifies a trainer's policy once; the worker finds the same adapter from
the recipe's ``kind`` with ``adapter_named``. Nothing else branches on the kind of policy.
"""
import sys
from typing import Any, Dict, List, Optional, Tuple, Type

import numpy as np

from async_plotter.errors import PolicyNotRebuildableError, PolicyProtocolError

PROTOCOL_METHODS = ("get_param_values", "set_param_values", "get_action")


class PolicyAdapter:
    """How this library treats one kind of policy. A fresh instance per policy object: it may
    remember the weights' shapes."""

    #: the name recorded in ``PolicyRecipe.kind`` and shown in messages
    kind = ""
    #: whether it may be called in a trainer that runs TensorFlow in graph mode
    acts_in_graph_mode = False

    def __init__(self) -> None:
        self._shapes: Optional[List[Tuple[int, ...]]] = None

    @staticmethod
    def matches(policy: Any) -> bool:
        """Whether ``policy`` is of this kind."""
        raise NotImplementedError

    def structure(self, policy: Any) -> Tuple[str, Any]:
        """What travels to the worker to rebuild the policy: ``("object", policy)`` by default
        (cloudpickled by the caller), checked here so that errors appear in the trainer."""
        return ("object", policy)

    def rebuild(self, how: str, value: Any) -> Any:
        """The worker's side of ``structure``."""
        return value

    def flat(self, policy: Any) -> np.ndarray:
        """The parameters as one 1-D array (a copy, or a fresh array from TensorFlow)."""
        raise NotImplementedError

    def set_flat(self, policy: Any, flat: np.ndarray) -> None:
        """Apply a flat parameter vector."""
        raise NotImplementedError

    def act(self, policy: Any, observation: np.ndarray, deterministic: bool) -> np.ndarray:
        """The action for one observation."""
        raise NotImplementedError

    def _pieces(self, weights: List[Any], flat: np.ndarray) -> List[np.ndarray]:
        if self._shapes is None:
            self._shapes = [tuple(w.shape) for w in weights]
        pieces, offset = [], 0
        for shape in self._shapes:
            count = int(np.prod(shape))
            pieces.append(flat[offset:offset + count].reshape(shape))
            offset += count
        return pieces


class ProtocolAdapter(PolicyAdapter):
    kind = "protocol"
    acts_in_graph_mode = True  # its own code knows where its session is

    @staticmethod
    def matches(policy: Any) -> bool:
        return all(callable(getattr(policy, name, None)) for name in PROTOCOL_METHODS)

    def flat(self, policy: Any) -> np.ndarray:
        return np.asarray(policy.get_param_values())

    def set_flat(self, policy: Any, flat: np.ndarray) -> None:
        policy.set_param_values(flat)

    def act(self, policy: Any, observation: np.ndarray, deterministic: bool) -> np.ndarray:
        action, info = policy.get_action(observation)
        if deterministic and isinstance(info, dict) and "mean" in info:
            return np.asarray(info["mean"])
        return np.asarray(action)


class KerasAdapter(PolicyAdapter):
    kind = "keras"

    @staticmethod
    def matches(policy: Any) -> bool:
        keras = sys.modules.get("keras")
        return keras is not None and isinstance(policy, keras.Model)

    def structure(self, policy: Any) -> Tuple[str, Any]:
        import keras  # only reached for Keras models, so keras is already imported

        if not policy.weights:
            raise PolicyNotRebuildableError(
                f"the Keras model {policy.name!r} has no weights yet, so its structure is "
                "unknown; build it first (give it a keras.Input or call it once on an "
                "observation batch)")
        try:
            config = keras.saving.serialize_keras_object(policy)
            # Rebuilding here proves the worker can do it, and makes the error appear here.
            keras.saving.deserialize_keras_object(config)
        except Exception as error:  # Keras raises TypeError, ValueError, NotImplementedError...
            raise PolicyNotRebuildableError(
                f"the Keras model {policy.name!r} ({type(policy).__qualname__}) cannot be rebuilt "
                f"from its config: {error}. Register the custom classes with "
                "@keras.saving.register_keras_serializable(), or pass "
                "policy_factory=<zero-argument function that builds the same model>.") from error
        return ("keras_config", config)

    def rebuild(self, how: str, value: Any) -> Any:
        import keras

        return keras.saving.deserialize_keras_object(value)

    def flat(self, policy: Any) -> np.ndarray:
        return _concat([np.asarray(w) for w in policy.get_weights()])

    def set_flat(self, policy: Any, flat: np.ndarray) -> None:
        policy.set_weights(self._pieces(policy.get_weights(), flat))

    def act(self, policy: Any, observation: np.ndarray, deterministic: bool) -> np.ndarray:
        output = policy(np.asarray(observation, np.float32)[None], training=False)
        return np.asarray(output)[0]


class ModuleAdapter(PolicyAdapter):
    kind = "module"

    @staticmethod
    def matches(policy: Any) -> bool:
        tf = sys.modules.get("tensorflow")
        return tf is not None and isinstance(policy, tf.Module) and callable(policy)

    def flat(self, policy: Any) -> np.ndarray:
        return _concat([v.numpy() for v in policy.variables])

    def set_flat(self, policy: Any, flat: np.ndarray) -> None:
        variables = policy.variables
        for variable, piece in zip(variables, self._pieces(variables, flat)):
            variable.assign(piece.astype(variable.dtype.as_numpy_dtype))

    def act(self, policy: Any, observation: np.ndarray, deterministic: bool) -> np.ndarray:
        return np.asarray(policy(np.asarray(observation, np.float32)[None]))[0]


#: in the order they are tried: a Keras model with rllab's methods is used through them
ADAPTERS: Tuple[Type[PolicyAdapter], ...] = (ProtocolAdapter, KerasAdapter, ModuleAdapter)
_BY_KIND: Dict[str, Type[PolicyAdapter]] = {adapter.kind: adapter for adapter in ADAPTERS}


def adapter_for(policy: Any) -> PolicyAdapter:
    """The adapter for ``policy``, or ``PolicyProtocolError`` saying what it lacks."""
    for adapter in ADAPTERS:
        if adapter.matches(policy):
            return adapter()
    missing = [name for name in PROTOCOL_METHODS if not callable(getattr(policy, name, None))]
    raise PolicyProtocolError(
        f"cannot plot a policy of type {type(policy).__module__}.{type(policy).__qualname__}: it "
        f"lacks rllab's policy protocol (missing: {', '.join(missing)}) and is neither a "
        "keras.Model nor a tf.Module. Give it get_param_values() -> 1-D array, "
        "set_param_values(flat) and get_action(obs) -> (action, info), or pass a Keras model.")


def adapter_named(kind: str) -> PolicyAdapter:
    """A fresh adapter for a recipe's ``kind``."""
    try:
        return _BY_KIND[kind]()
    except KeyError:
        raise ValueError(f"unknown policy kind {kind!r}; known: {', '.join(_BY_KIND)}") from None


def _concat(arrays: List[np.ndarray]) -> np.ndarray:
    if not arrays:
        return np.zeros(0, np.float32)
    return np.concatenate([a.ravel() for a in arrays])
