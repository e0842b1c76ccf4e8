"""Turning a trainer's policy into something a worker can rebuild, and reading its flat parameters.

Three kinds of policy are understood:

* ``protocol``: rllab's protocol (``get_param_values``, ``set_param_values``, ``get_action``). The
  structure travels by ``cloudpickle``; a ``Serializable`` policy pickles as its constructor
  arguments, so TensorFlow objects inside it are rebuilt, not copied.
* ``keras``: a built ``keras.Model``; the structure travels as its Keras config, the parameters as
  all its weights (trainable or not) flattened in ``get_weights()`` order.
* ``module``: a ``tf.Module`` mapping a batch of observations to a batch of actions; it travels by
  ``cloudpickle`` (TensorFlow variables pickle by value), the parameters are ``module.variables``.

Graph-mode policies (TF1-style, variables living in a ``tf.compat.v1.Session``) are detected in the
trainer and rebuilt by the worker inside its own ``tf.Graph`` and ``tf.compat.v1.Session``.
"""
import dataclasses
import io
import pickle
import sys
from typing import Any, Callable, List, Optional, Tuple

import cloudpickle
import numpy as np

from async_plotter.errors import PolicyNotRebuildableError, PolicyProtocolError

PROTOCOL_METHODS = ("get_param_values", "set_param_values", "get_action")


@dataclasses.dataclass(frozen=True)
class PolicyRecipe:
    """Everything a worker needs to rebuild a policy; parameters are sent separately."""

    kind: str  # "protocol" | "keras" | "module"
    payload: bytes
    graph_mode: bool
    description: str


def policy_kind(policy: Any) -> str:
    """Classify a policy, or raise ``PolicyProtocolError`` saying what it lacks."""
    present = [name for name in PROTOCOL_METHODS if callable(getattr(policy, name, None))]
    if len(present) == len(PROTOCOL_METHODS):
        return "protocol"
    if _is_keras_model(policy):
        return "keras"
    if _is_tf_module(policy):
        return "module"
    missing = [name for name in PROTOCOL_METHODS if name not in present]
    raise PolicyProtocolError(
        f"cannot plot a policy of type {type(policy).__module__}.{type(policy).__qualname__}: it "
        f"lacks rllab's policy protocol (missing: {', '.join(missing)}) and is neither a "
        "keras.Model nor a tf.Module. Give it get_param_values() -> 1-D array, "
        "set_param_values(flat) and get_action(obs) -> (action, info), or pass a Keras model.")


def flat_params(policy: Any, kind: str) -> np.ndarray:
    """The policy's parameters as one 1-D array (a copy, or a fresh array from TensorFlow)."""
    if kind == "protocol":
        return np.asarray(policy.get_param_values())
    if kind == "keras":
        return _concat([np.asarray(w) for w in policy.get_weights()])
    return _concat([v.numpy() for v in policy.variables])


def describe_policy(policy: Any, factory: Optional[Callable[[], Any]] = None) -> PolicyRecipe:
    """Build the recipe for ``policy`` in the trainer, raising a named error if it cannot travel."""
    kind = policy_kind(policy)
    graph_mode = _trainer_in_graph_mode()
    description = f"{type(policy).__module__}.{type(policy).__qualname__} ({kind})"
    if factory is not None:
        if not callable(factory):
            raise PolicyNotRebuildableError(
                f"policy_factory must be a zero-argument callable, got {type(factory).__name__}")
        return PolicyRecipe(kind, _dumps(("factory", factory), factory), graph_mode, description)
    if kind == "keras":
        return PolicyRecipe(kind, _keras_payload(policy), graph_mode, description)
    return PolicyRecipe(kind, _dumps(("object", policy), policy), graph_mode, description)


def _keras_payload(model: Any) -> bytes:
    import keras  # only reached for Keras models, so keras is already imported

    if not model.weights:
        raise PolicyNotRebuildableError(
            f"the Keras model {model.name!r} has no weights yet, so its structure is unknown; "
            "build it first (give it a keras.Input or call it once on an observation batch)")
    try:
        config = keras.saving.serialize_keras_object(model)
        # Rebuilding here proves the worker can do it, and makes the error appear in the trainer.
        keras.saving.deserialize_keras_object(config)
    except Exception as error:  # Keras raises TypeError, ValueError, NotImplementedError, ...
        raise PolicyNotRebuildableError(
            f"the Keras model {model.name!r} ({type(model).__qualname__}) cannot be rebuilt from "
            f"its config: {error}. Register the custom classes with "
            "@keras.saving.register_keras_serializable(), or pass "
            "policy_factory=<zero-argument function that builds the same model>.") from error
    return cloudpickle.dumps(("keras_config", config))


def _dumps(recipe: Tuple[str, Any], obj: Any) -> bytes:
    try:
        return cloudpickle.dumps(recipe)
    except Exception as error:  # pickling raises TypeError, PicklingError, AttributeError, ...
        culprit = _find_unpicklable(obj)
        where = f" (the attribute {culprit})" if culprit else ""
        raise PolicyNotRebuildableError(
            f"the policy {type(obj).__qualname__} cannot be sent to the plot worker: pickling it "
            f"failed{where}: {error}. Make its class derive from async_plotter.Serializable "
            "(it then travels as its constructor arguments), or pass "
            "policy_factory=<zero-argument function that builds the same policy>.") from error


def _find_unpicklable(obj: Any, path: str = "", depth: int = 0) -> Optional[str]:
    """The dotted path of the first attribute that does not pickle, to name it in the error."""
    attributes = getattr(obj, "__dict__", None)
    if not isinstance(attributes, dict) or depth > 3:
        return None
    for name, value in attributes.items():
        try:
            cloudpickle.dump(value, io.BytesIO())
        except Exception:  # noqa: BLE001 - any failure means "this one"
            deeper = _find_unpicklable(value, f"{path}.{name}", depth + 1)
            return deeper or f"{path}.{name}".lstrip(".") + f" of type {type(value).__qualname__}"
    return None


def _trainer_in_graph_mode() -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and not tf.executing_eagerly()


def _is_keras_model(obj: Any) -> bool:
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(obj, keras.Model)


def _is_tf_module(obj: Any) -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(obj, tf.Module) and callable(obj)


def _concat(arrays: List[np.ndarray]) -> np.ndarray:
    if not arrays:
        return np.zeros(0, np.float32)
    return np.concatenate([a.ravel() for a in arrays])


# ----------------------------------------------------------------------------- worker side


class PolicyRuntime:
    """The rebuilt policy in the worker: applies flat parameters and picks actions."""

    def __init__(self, recipe: PolicyRecipe, deterministic: bool) -> None:
        self.kind = recipe.kind
        self.deterministic = deterministic
        self._session = None
        self._contexts = []
        if recipe.graph_mode:
            self._enter_own_graph_and_session()
        how, value = pickle.loads(recipe.payload)
        if how == "factory":
            self.policy = value()
        elif how == "keras_config":
            import keras

            self.policy = keras.saving.deserialize_keras_object(value)
        else:
            self.policy = value
        if self._session is not None:
            import tensorflow as tf

            self._session.run(tf.compat.v1.global_variables_initializer())
        self._shapes = None

    def _enter_own_graph_and_session(self) -> None:
        import tensorflow as tf

        graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=graph,
                                             config=tf.compat.v1.ConfigProto(
                                                 intra_op_parallelism_threads=1,
                                                 inter_op_parallelism_threads=1))
        # Entered for the worker's lifetime: every policy call runs in this graph and session.
        for context in (graph.as_default(), self._session.as_default()):
            context.__enter__()
            self._contexts.append(context)

    def param_count(self) -> int:
        """Number of parameters the rebuilt policy holds."""
        return flat_params(self.policy, self.kind).size

    def set_params(self, flat: np.ndarray) -> None:
        """Apply a flat parameter vector."""
        if self.kind == "protocol":
            self.policy.set_param_values(flat)
            return
        weights = self.policy.get_weights() if self.kind == "keras" else self.policy.variables
        if self._shapes is None:
            self._shapes = [tuple(w.shape) for w in weights]
        pieces, offset = [], 0
        for shape in self._shapes:
            count = int(np.prod(shape))
            pieces.append(flat[offset:offset + count].reshape(shape))
            offset += count
        if self.kind == "keras":
            self.policy.set_weights(pieces)
        else:
            for variable, piece in zip(weights, pieces):
                variable.assign(piece.astype(variable.dtype.as_numpy_dtype))

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The action for one observation (the mean, if deterministic and the policy reports one)."""
        if self.kind == "protocol":
            action, info = self.policy.get_action(observation)
            if self.deterministic and isinstance(info, dict) and "mean" in info:
                return np.asarray(info["mean"])
            return np.asarray(action)
        batch = np.asarray(observation, np.float32)[None]
        if self.kind == "keras":
            output = self.policy(batch, training=False)
        else:
            output = self.policy(batch)
        return np.asarray(output)[0]

    def close(self) -> None:
        """Leave the graph and session contexts."""
        for context in reversed(self._contexts):
            context.__exit__(None, None, None)
        self._contexts = []
        if self._session is not None:
            self._session.close()
