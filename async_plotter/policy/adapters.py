"""One adapter per kind of policy: how to read its flat parameters, apply them, ship it and act.

* ``ProtocolAdapter``: rllab's protocol (``get_param_values``, ``set_param_values``,
  ``get_action``), shipped by ``cloudpickle`` (a ``Serializable`` as its constructor arguments);
* ``KerasAdapter``: a built ``keras.Model``, shipped as its Keras config with its custom classes
  (``keras_support``); its parameters are all its weights in ``get_weights()`` order;
* ``ModuleAdapter``: a callable ``tf.Module``, shipped by ``cloudpickle``; its parameters are its
  variables, those of objects it holds from ``tf.saved_model.load`` included;
* ``NumpyCopyAdapter``: the worker's side of a policy shipped as its numpy copy
  (``numpy_copy``: a Keras model whose layers numpy computes), which takes the same flat vector.

Keras models and modules act through one traced function per observation shape
(``compiled_call``); ``reference_act`` calls the trainer's object the plain way. ``adapter_for``
classifies a trainer's policy once, ``adapter_named`` finds it from a recipe's ``kind``; nothing
else branches on the kind of policy.
"""
import copy
import sys
from typing import Any, Dict, List, Optional, Tuple, Type

import numpy as np

from async_plotter.policy.compiled_call import CompiledCall
from async_plotter.policy.numpy_copy import keras_layer_graph
from async_plotter.policy.numpy_layers import batch_of_one, split_flat
from async_plotter.errors import (ParameterMismatchError, PolicyNotRebuildableError,
                                  PolicyProtocolError, PolicyShapeError)

PROTOCOL_METHODS = ("get_param_values", "set_param_values", "get_action")
#: the entries of an rllab policy's ``info`` that describe its action distribution
DISTRIBUTION_KEYS = ("mean", "log_std", "std", "prob", "logits")


class PolicyAdapter:
    """How this library treats one kind of policy. A fresh instance per policy object: it may
    remember the weights' shapes."""

    #: the name recorded in ``PolicyRecipe.kind`` and shown in messages
    kind = ""
    #: whether it may be called in a trainer that runs TensorFlow in graph mode
    acts_in_graph_mode = False

    def __init__(self) -> None:
        self._shapes: Optional[List[Tuple[int, ...]]] = None
        self._observation_dtype: Any = None

    def _dtype(self, policy: Any) -> Any:
        """The dtype observations are fed in, found once (finding a module's walks its
        variables, too slow for every step)."""
        if self._observation_dtype is None:
            self._observation_dtype = self._find_dtype(policy)
        return self._observation_dtype

    def _find_dtype(self, policy: Any) -> Any:
        return np.float32

    @staticmethod
    def matches(policy: Any) -> bool:
        """Whether ``policy`` is of this kind."""
        raise NotImplementedError

    def structure(self, policy: Any) -> Tuple[str, Any]:
        """What travels to the worker to rebuild the policy: ``("object", policy)`` by default
        (cloudpickled by the caller), checked here so that errors appear in the trainer."""
        self.check_built(policy)
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
        """The action for one observation, the way the worker computes it."""
        raise NotImplementedError

    def reference_act(self, policy: Any, observation: np.ndarray,
                      deterministic: bool) -> np.ndarray:
        """The action for one observation, computed the plain way (what the trainer's own
        object does); the trainer-side check compares the worker's ``act`` with it."""
        return self.act(policy, observation, deterministic)

    def comparable_output(self, policy: Any, observation: np.ndarray,
                          reference: bool) -> Optional[np.ndarray]:
        """What two copies of the policy must agree on for one observation (None: nothing
        deterministic to compare): its deterministic action, by ``reference_act`` (the plain
        call) or ``act`` (the worker's path)."""
        if reference:
            return self.reference_act(policy, observation, deterministic=True)
        return self.act(policy, observation, deterministic=True)

    def check_built(self, policy: Any) -> None:
        """Raise ``PolicyNotRebuildableError`` if the policy's structure is not known yet."""

    def numpy_copy(self, policy: Any) -> Optional[Any]:
        """A copy of the built ``policy`` that acts in numpy and takes the same flat vector
        (``NumpyCopyAdapter``'s kind), so that the worker never imports TensorFlow; None where
        there is none."""
        return None

    def call_path(self) -> str:
        """How ``act`` reaches the policy: ``"xla"``, ``"graph"``, ``"eager"`` (traced or not,
        ``compiled_call``), or ``"get_action"`` (the policy's own method)."""
        return "get_action"

    def rebuild_advice(self) -> str:
        """What to do when the worker cannot rebuild this kind of policy."""
        return ("make its class derive from async_plotter.Serializable (it then travels as its "
                "constructor arguments), or pass policy_factory=<zero-argument function that "
                "builds the same policy>")

    def _pieces(self, weights: List[Any], flat: np.ndarray) -> List[np.ndarray]:
        if self._shapes is None:
            self._shapes = [tuple(w.shape) for w in weights]
        return split_flat(flat, self._shapes)


class ProtocolAdapter(PolicyAdapter):
    kind = "protocol"
    acts_in_graph_mode = True  # its own code knows where its session is

    @staticmethod
    def matches(policy: Any) -> bool:
        return all(callable(getattr(policy, name, None)) for name in PROTOCOL_METHODS)

    def structure(self, policy: Any) -> Tuple[str, Any]:
        # The trainer-side check compares the copy with the policy like any other.
        return ("object", acting_copy(policy))

    def flat(self, policy: Any) -> np.ndarray:
        values = policy.get_param_values()
        if isinstance(values, (list, tuple)) and any(np.ndim(value) > 0 for value in values):
            # Keras's get_weights() shape: a list of arrays, not rllab's one vector.
            shapes = ", ".join(str(np.shape(value)) for value in values[:4])
            raise ParameterMismatchError(
                f"{type(policy).__name__}.get_param_values() returned a {type(values).__name__} "
                f"of {len(values)} arrays (shapes {shapes}{', ...' if len(values) > 4 else ''}), "
                "not one flat vector: return np.concatenate([p.ravel() for p in params]) and cut "
                "it back into its pieces in set_param_values(flat).")
        return np.asarray(values)

    def set_flat(self, policy: Any, flat: np.ndarray) -> None:
        policy.set_param_values(flat)

    def act(self, policy: Any, observation: np.ndarray, deterministic: bool) -> np.ndarray:
        if deterministic:
            # The RL host's policies give the distribution's own without drawing an action
            # (``rl/numpy_mlp.ActsOnDistInfo``); below is what it equals.
            direct = getattr(policy, "deterministic_output", None)
            if callable(direct):
                return np.asarray(direct(observation))
        action, info = _action_and_info(policy, observation)
        if deterministic and isinstance(info, dict):
            if "mean" in info:
                return np.asarray(info["mean"])
            if np.size(action) == 1:
                # A categorical policy's index: its probabilities (or logits) instead, whose
                # argmax the env gets (``env/spaces.py``), the greedy action.
                for key in ("prob", "logits"):
                    if key in info and np.ndim(info[key]) == 1 and np.size(info[key]) > 1:
                        return np.asarray(info[key])
        return np.asarray(action)

    def comparable_output(self, policy: Any, observation: np.ndarray,
                          reference: bool) -> Optional[np.ndarray]:
        # The action may be sampled; the distribution it reports is not (other entries of info
        # may be: the noise drawn, a step counter).
        _, info = _action_and_info(policy, observation)
        if not isinstance(info, dict):
            return None
        numbers = [
            np.asarray(info[key], np.float64).ravel() for key in DISTRIBUTION_KEYS if key in info
        ]
        return np.concatenate(numbers) if numbers else None


class KerasAdapter(PolicyAdapter):
    kind = "keras"

    def __init__(self) -> None:
        super().__init__()
        self._compiled: Optional[CompiledCall] = None
        self._stateful: Optional[List[Any]] = None  # layers with state made from weights

    @staticmethod
    def matches(policy: Any) -> bool:
        keras = sys.modules.get("keras")
        return keras is not None and isinstance(policy, keras.Model)

    def check_built(self, policy: Any) -> None:
        from async_plotter.policy import keras_support

        if not policy.weights:
            raise PolicyNotRebuildableError(
                f"the Keras model {policy.name!r} has no weights yet, so its structure is "
                "unknown; build it first (give it a keras.Input or call it once on an "
                "observation batch)")
        stateful = keras_support.stateful_layers(policy)
        if stateful:
            raise PolicyNotRebuildableError(
                f"the Keras model {policy.name!r} has stateful=True layers ({', '.join(stateful)}):"
                " their state lives between calls and is neither sent nor reset per episode, so "
                "the worker could not show what the trainer computes. Plot a copy built with "
                "stateful=False (policy_factory= can build it).")

    def structure(self, policy: Any) -> Tuple[str, Any]:
        import keras

        from async_plotter.policy import keras_support

        self.check_built(policy)
        try:
            config = keras.saving.serialize_keras_object(policy)
        except Exception as error:  # Keras raises TypeError, ValueError, NotImplementedError...
            raise PolicyNotRebuildableError(
                f"the Keras model {policy.name!r} ({type(policy).__qualname__}) cannot be "
                f"serialized: {error}. {self.rebuild_advice()}.") from error
        return ("keras_config", {
            "config": config,
            "custom_objects": keras_support.custom_objects(policy, config)
        })

    def numpy_copy(self, policy: Any) -> Optional[Any]:
        return keras_layer_graph(policy, self.flat(policy))

    def rebuild(self, how: str, value: Any) -> Any:
        import keras

        # deserialize_keras_object empties a functional model's config in place: use a copy.
        config = copy.deepcopy(value["config"])
        return keras.saving.deserialize_keras_object(config, custom_objects=value["custom_objects"])

    def rebuild_advice(self) -> str:
        return ("Register its custom classes with @keras.saving.register_keras_serializable() "
                "and give them get_config(), or pass policy_factory=<zero-argument function "
                "that builds the same model>")

    def flat(self, policy: Any) -> np.ndarray:
        return _concat([np.asarray(w) for w in policy.get_weights()])

    def set_flat(self, policy: Any, flat: np.ndarray) -> None:
        from async_plotter.policy import keras_support

        if self._stateful is None:
            self._stateful = keras_support.layers_with_derived_state(policy)
        before = [w for layer in self._stateful for w in layer.get_weights()]
        policy.set_weights(self._pieces(policy.weights, flat))
        after = [w for layer in self._stateful for w in layer.get_weights()]
        if any(not np.array_equal(old, new) for old, new in zip(before, after)):
            # Their derived tensors were made from the old weights, and traced calls hold them.
            keras_support.finalize(self._stateful)
            if self._compiled is not None:
                self._compiled.forget()

    def act(self, policy: Any, observation: np.ndarray, deterministic: bool) -> np.ndarray:
        if self._compiled is None:
            label = f"{policy.name!r}"
            self._compiled = CompiledCall(
                lambda batch: _one_output(policy(batch, training=False), label), label)
        return self._compiled(batch_of_one(observation, self._dtype(policy)))[0]

    def reference_act(self, policy: Any, observation: np.ndarray,
                      deterministic: bool) -> np.ndarray:
        batch = batch_of_one(observation, self._dtype(policy))
        return np.asarray(_one_output(policy(batch, training=False), f"{policy.name!r}"))[0]

    def call_path(self) -> str:
        return self._compiled.path if self._compiled is not None else "eager"

    def _find_dtype(self, policy: Any) -> Any:
        return _input_dtype(policy)


class ModuleAdapter(PolicyAdapter):
    kind = "module"

    def __init__(self) -> None:
        super().__init__()
        self._compiled: Optional[CompiledCall] = None
        self._variables_of: Optional[Tuple[Any, List[Any]]] = None

    @staticmethod
    def matches(policy: Any) -> bool:
        tf = sys.modules.get("tensorflow")
        return tf is not None and isinstance(policy, tf.Module) and callable(policy)

    def check_built(self, policy: Any) -> None:
        if not module_variables(policy):
            raise PolicyNotRebuildableError(
                f"the tf.Module {type(policy).__qualname__} has no variables yet, so there is "
                "nothing to send and nothing would ever change on screen; build it first (call "
                "it once on an observation batch, as with an unbuilt Keras model)")

    def flat(self, policy: Any) -> np.ndarray:
        return _concat([v.numpy() for v in self._variables(policy)])

    def set_flat(self, policy: Any, flat: np.ndarray) -> None:
        variables = self._variables(policy)
        for variable, piece in zip(variables, self._pieces(variables, flat)):
            variable.assign(piece.astype(variable.dtype.as_numpy_dtype))

    def act(self, policy: Any, observation: np.ndarray, deterministic: bool) -> np.ndarray:
        if self._compiled is None:
            label = type(policy).__qualname__
            self._compiled = CompiledCall(lambda batch: _one_output(policy(batch), label), label)
        return self._compiled(batch_of_one(observation, self._dtype(policy)))[0]

    def reference_act(self, policy: Any, observation: np.ndarray,
                      deterministic: bool) -> np.ndarray:
        batch = batch_of_one(observation, self._dtype(policy))
        return np.asarray(_one_output(policy(batch), type(policy).__qualname__))[0]

    def call_path(self) -> str:
        return self._compiled.path if self._compiled is not None else "eager"

    def _find_dtype(self, policy: Any) -> Any:
        return _module_dtype(policy)

    def _variables(self, policy: Any) -> List[Any]:
        # Walking the trackable graph costs more than copying a small policy's values, and
        # update_plot() reads them on every call: once per module object.
        if self._variables_of is None or self._variables_of[0] is not policy:
            self._variables_of = (policy, module_variables(policy))
        return self._variables_of[1]


def module_variables(module: Any) -> List[Any]:
    """A module's variables in a fixed order: ``module.variables``, then those of objects it
    holds that ``tf.Module`` does not look into (a ``tf.saved_model.load`` result)."""
    import tensorflow as tf

    found = list(module.variables)
    seen = {id(variable) for variable in found}
    # tf.Module.variables walks only tf.Module attributes; the trackable graph reaches every
    # object a checkpoint of the module would save, in a deterministic order.
    for trackable in tf.train.TrackableView(module).descendants():
        if isinstance(trackable, tf.Variable) and id(trackable) not in seen:
            seen.add(id(trackable))
            found.append(trackable)
    return found


class NumpyCopyAdapter(PolicyAdapter):
    """The worker's side of a policy that travels as its numpy copy (``numpy_copy``, a
    ``LayerGraph``): never chosen for a trainer's policy, only from a recipe."""

    kind = "numpy"

    @staticmethod
    def matches(policy: Any) -> bool:
        return False

    def flat(self, policy: Any) -> np.ndarray:
        return policy.get_flat()

    def set_flat(self, policy: Any, flat: np.ndarray) -> None:
        policy.set_flat(flat)

    def act(self, policy: Any, observation: np.ndarray, deterministic: bool) -> np.ndarray:
        return policy.act(observation)

    def call_path(self) -> str:
        return "numpy"


def acting_copy(policy: Any) -> Any:
    """What acts for ``policy`` outside the trainer (the plot worker, the samplers): its
    ``numpy_copy()`` where it offers one that takes the same parameters (the RL host's MLPs: the
    same network in numpy, so those processes need no TensorFlow), else the policy itself."""
    numpy_copy = getattr(policy, "numpy_copy", None)
    copy = numpy_copy() if callable(numpy_copy) else None
    return policy if copy is None else copy


def _one_output(output: Any, label: str) -> Any:
    """The model's one action output; a model with several (actor-critic heads) is refused by
    name rather than acting with whichever comes first."""
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        if len(output) == 1:
            return output[0]
        raise PolicyShapeError(
            f"the policy {label} returns {len(output)} outputs; the plotter acts with one "
            "action output. Plot a model of the actor alone, e.g. keras.Model(model.inputs, "
            "model.outputs[0]) (it shares the weights), or a module that returns the action.")
    return output


def _action_and_info(policy: Any, observation: Any) -> Tuple[Any, Any]:
    """``policy.get_action(observation)``, rllab's pair; ``PolicyProtocolError`` where it gave
    something else (a bare action, whose two values would be taken for an action and an info)."""
    result = policy.get_action(observation)
    if isinstance(result, tuple) and len(result) == 2:
        return result
    shape = f" of shape {np.shape(result)}" if hasattr(result, "shape") else ""
    raise PolicyProtocolError(
        f"{type(policy).__name__}.get_action(obs) returned a {type(result).__name__}{shape}, "
        "not the pair (action, info) of rllab's protocol: return the action with a dict, e.g. "
        "`return action, {}` (or {'mean': mean} for deterministic=True to show the mean).")


#: in the order they are tried: a Keras model with rllab's methods is used through them
ADAPTERS: Tuple[Type[PolicyAdapter], ...] = (ProtocolAdapter, KerasAdapter, ModuleAdapter)
_BY_KIND: Dict[str, Type[PolicyAdapter]] = {
    adapter.kind: adapter
    for adapter in ADAPTERS + (NumpyCopyAdapter, )
}


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


def _input_dtype(model: Any) -> Any:
    """The dtype the model's input expects (float32 unless it was built for another)."""
    inputs = getattr(model, "inputs", None)
    try:
        dtype = np.dtype(inputs[0].dtype) if inputs else np.float32
    except (TypeError, AttributeError, IndexError, ValueError):
        return np.float32
    return dtype if np.issubdtype(dtype, np.floating) else np.float32


def _module_dtype(module: Any) -> Any:
    """A module is fed observations of the dtype its ``__call__``'s input signature names, else
    of its first floating variable's dtype (float64 weights cannot multiply float32
    observations)."""
    signature = getattr(module.__call__, "input_signature", None)
    if signature:
        import tensorflow as tf

        first = tf.nest.flatten(signature[0])[0]  # a dict or list of specs: the first's
        return np.dtype(first.dtype.as_numpy_dtype)
    for variable in module_variables(module):
        dtype = np.dtype(variable.dtype.as_numpy_dtype)
        if np.issubdtype(dtype, np.floating):
            return dtype
    return np.float32


def _concat(arrays: List[np.ndarray]) -> np.ndarray:
    """One vector in the floating weights' dtype: integer weights (a Normalization layer's
    sample count) are cast into it, rather than turning every update into float64."""
    if not arrays:
        return np.zeros(0, np.float32)
    floating = [a.dtype for a in arrays if np.issubdtype(a.dtype, np.floating)]
    dtype = np.result_type(*floating) if floating else np.float32
    return np.concatenate([a.ravel().astype(dtype, copy=False) for a in arrays])
