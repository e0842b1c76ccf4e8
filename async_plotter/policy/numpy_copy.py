"""A Keras model whose layers numpy computes (``Dense``, normalizations, rectifiers, merges),
computed in numpy: what the plot worker acts with for such a model, so that its rollout process
never imports TensorFlow.

TensorFlow's import is most of a worker's boot (3.4 of 4.8 CPU-seconds for a 2x64 Keras MLP on
Swimmer, taken while the trainer's first iterations want every core), and a traced call costs
~0.2-0.7 ms a step against ~0.01 ms in numpy, which was most of a history recording's CPU
(``benchmarks/policy_step.py``; whole runs in ``benchmarks/plot_overhead.py``'s Keras env). The
RL host's MLP policies have their own numpy twin (``rl/numpy_mlp.py``); this one is for the Keras
models users write.

Taken only where numpy computes what Keras does: a ``Sequential`` or functional model with
inputs of shape ``(batch, n)`` (several, for a dict or tuple observation: named by its keys, or in
its order) and one output, all in float32 or all in float64, whose layers are
each of a class ``_layer_steps`` names (at inference ``Dropout`` and the noise layers do nothing)
with nonlinearities of ``ACTIVATIONS``. A functional model is computed as its graph: skip
connections (``Add``, ``Concatenate``, ... or ``+``, ``-``, ``*``, ``/`` of its tensors, with
numbers, or arrays or constant backend tensors of one value per unit), the ``keras.ops`` of ``ELEMENTWISE``
(``keras.ops.tanh(x)``) and of ``OPS_WITH_ARGUMENTS`` (``keras.ops.leaky_relu(x, 0.3)``), a model
used as a layer and a layer called twice included. And only once the copy, applied to random
inputs, gives the model's own output. Anything else travels as its Keras config and acts through
TensorFlow, as before. The trainer-side check then compares the copy with the model like any
worker copy.

A layer's weights are read from the model's flat vector at every update, as the trainer sends it;
an adapted ``Normalization`` computes from its ``adapt_mean`` and ``adapt_variance`` as Keras does
after ``finalize_state()``, which the Keras path in the worker calls after every update.

This module reads the model, in the trainer; what the worker runs is in ``policy/numpy_layers.py``
(numpy alone: nothing here imports TensorFlow or Keras at module level either)."""
import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from async_plotter.policy.numpy_layers import (ACTIVATIONS, ELEMENTWISE, OPS_WITH_ARGUMENTS, Dense,
                                               Elementwise, LayerGraph, Merge, Normalize, Operand,
                                               Parametric, Rectifier, Ref, Rescale, Standardize,
                                               Step, UnitNormalize)

logger = logging.getLogger(__name__)

#: what the copy must give on random inputs, against the model, to be taken
_RTOL, _ATOL_OF_SCALE = 1e-4, 1e-5
#: the call() of Keras's models that compute what their layers' graph says
_GRAPH_CALLS = ("Sequential.call", "Functional.call")


def keras_layer_graph(model: Any, flat: np.ndarray) -> Optional[LayerGraph]:
    """``model`` (a built Keras model whose flat parameter vector is ``flat``) as a
    ``LayerGraph``, or None where numpy would not compute what it does (the reason at DEBUG)."""
    import keras

    try:
        graph = _graph_of(model, keras)
        graph.set_flat(flat)
        why = _differs(graph, model, keras)
    except _NotTaken as reason:
        why = str(reason)
    except Exception as error:  # noqa: BLE001 - whatever an unusual model raises: not taken
        why = f"{type(error).__name__}: {error}"
    if why is not None:
        logger.debug("the Keras model %r acts through TensorFlow in the plot worker: %s",
                     getattr(model, "name", "?"), why)
        return None
    return graph


class _NotTaken(Exception):
    """Why numpy would not compute what the model does."""


class _Weights:
    """The model's weights by their places in its flat layout; which ones the steps read."""

    def __init__(self, model: Any) -> None:
        self._places = {id(weight): place for place, weight in enumerate(model.weights)}
        self.count = len(model.weights)
        self.used: List[int] = []

    def place(self, layer: Any, weight: Any) -> int:
        place = self._places.get(id(weight))
        if place is None:
            raise _NotTaken(f"layer {layer.name!r}'s weights are not the model's own")
        self.used.append(place)
        return place

    def optional(self, layer: Any, weight: Any, present: bool) -> Optional[int]:
        return self.place(layer, weight) if present else None


class _Builder:
    """The nodes of a ``LayerGraph``, added one layer call at a time."""

    def __init__(self, model: Any, keras: Any, inputs: int = 1) -> None:
        self.keras = keras
        #: the values the observation gives, before any node's
        self.inputs = inputs
        self.shapes = [tuple(weight.shape) for weight in model.weights]
        self.weights = _Weights(model)
        self.steps = _layer_steps(keras)
        self.nodes: List[Tuple[Step, Tuple[Operand, ...]]] = []
        self.dtypes: Set[str] = set()

    def model(self, model: Any, operand: Operand, root: bool = False) -> int:
        """Add the layer calls of ``model`` (the one copied, ``root``, or a model it uses as a
        layer) computed from the value at ``operand`` (the root's inputs: the first
        ``self.inputs`` values); the place of its output."""
        call = type(model).call
        if (getattr(call, "__qualname__", None) not in _GRAPH_CALLS
                or not getattr(call, "__module__", "").startswith("keras.")):
            raise _NotTaken(f"a subclassed model ({type(model).__name__}) computes what its own "
                            "call() says")
        inputs, outputs = list(getattr(model, "inputs", None) or []), list(model.outputs or [])
        several = root and len(inputs) == self.inputs > 1
        if not (len(inputs) == 1 or several) or len(outputs) != 1 or any(
                len(tensor.shape) != 2 for tensor in inputs):
            raise _NotTaken("not inputs of shape (batch, n) (one, where it is used as a layer) "
                            "and one output")
        if several:
            by_depth = _layer_calls_by_depth(model)
            if by_depth is None:
                raise _NotTaken("a model of several inputs keeps no graph here")
            return _walk_graph(model, by_depth, self, list(range(self.inputs)))
        if not isinstance(operand, int):
            raise _NotTaken(f"model {model.name!r} is called on a number")
        # A Keras that keeps no graph still gets a functional chain computed, as the layers in
        # order (``_differs`` checks it).
        by_depth = _layer_calls_by_depth(model)
        if isinstance(model, self.keras.Sequential) or by_depth is None:
            output = operand
            for layer in model.layers:  # each layer takes the one before's output
                output = self.call(layer, [output])
            return output
        return _walk_graph(model, by_depth, self, operand)

    def call(self, operation: Any, operands: Sequence[Operand]) -> int:
        """Add ``operation`` (a layer, a model used as one, or a Keras op of ``_OPERATORS``,
        ``ELEMENTWISE`` or ``OPS_WITH_ARGUMENTS``) computed from ``operands``; the place of its
        output."""
        if isinstance(operation, self.keras.Model):  # its layer calls, inlined
            if len(operands) != 1:
                raise _NotTaken(f"model {operation.name!r} is called on {len(operands)} values")
            return self.model(operation, operands[0])
        kind, op = type(operation), _keras_op(operation)
        if op in _OPERATORS:
            step: Optional[Step] = Merge(_OPERATORS[op])
        elif op in ELEMENTWISE:
            step = Elementwise(op)
        elif op in OPS_WITH_ARGUMENTS:
            step = _op_with_arguments(op, operation)
        elif kind in self.steps:
            if kind is not self.keras.layers.InputLayer:
                self.dtypes.add(operation.dtype_policy.name)
            step = self.steps[kind](operation, self.weights, self.keras)
        else:
            raise _NotTaken(f"{getattr(operation, 'name', kind.__name__)!r} is "
                            f"{kind.__name__}, which the numpy copy does not compute")
        if isinstance(step, Merge):
            fits = len(operands) >= 2
        else:  # any other layer reads one tensor
            fits = len(operands) == 1 and isinstance(operands[0], int)
        if not fits:
            raise _NotTaken(f"{type(operation).__name__} is called on {len(operands)} values")
        if step is None:
            return int(operands[0])  # nothing at inference: its output is its input
        self.nodes.append((step, tuple(operands)))
        return self.inputs + len(self.nodes) - 1

    def graph(self, output: int, inputs: Sequence[Tuple[str, int]]) -> LayerGraph:
        weights = self.weights
        if set(weights.used) != set(range(weights.count)):
            raise _NotTaken("the model has weights its layers' steps here do not read")
        dtypes = self.dtypes
        if len(dtypes) > 1 or not dtypes <= {"float32", "float64"}:
            raise _NotTaken(f"its layers compute in {', '.join(sorted(dtypes))}")
        dtype = dtypes.pop() if dtypes else "float32"
        return LayerGraph(self.nodes, output, self.shapes, dtype, inputs)


def _graph_of(model: Any, keras: Any) -> LayerGraph:
    """The graph of ``model``'s layers; ``_NotTaken`` where numpy does not compute it."""
    inputs = _inputs_of(model)
    builder = _Builder(model, keras, len(inputs))
    output = builder.model(model, 0, root=True)
    return builder.graph(output, inputs)


def _inputs_of(model: Any) -> List[Tuple[str, int]]:
    """Each input's key in an observation (its name, where the model takes a dict; "" where it
    takes an array, or a list in order) and size, in ``model.inputs``' order."""
    tensors = list(getattr(model, "inputs", None) or [])
    by_name = isinstance(getattr(model, "input", None), dict)
    return [((_input_name(tensor) if by_name else ""), int(tensor.shape[-1])) for tensor in tensors]


def _input_name(tensor: Any) -> str:
    """The name a dict observation's part is given by: the ``keras.Input``'s."""
    history = getattr(tensor, "_keras_history", None)
    layer = getattr(history, "operation", None)
    return str(getattr(layer, "name", None) or tensor.name)


def _layer_calls_by_depth(model: Any) -> Optional[Dict[int, List[Any]]]:
    """The graph Keras 3's ``Functional`` runs (private to Keras: None where it has none)."""
    by_depth = getattr(model, "_nodes_by_depth", None)
    return by_depth if isinstance(by_depth, dict) else None


def _walk_graph(model: Any, by_depth: Dict[int, List[Any]], builder: _Builder,
                operand: Union[int, List[int]]) -> int:
    """Add a functional model's layer calls, computed from the value at ``operand`` (a list:
    one for each of its inputs), to ``builder`` in an order where each comes after the calls it
    reads: Keras's own, deepest first. The output's place."""
    operands = operand if isinstance(operand, list) else [operand]
    # A Keras tensor's place among the values.
    places = {id(tensor): place for tensor, place in zip(model.inputs, operands)}
    for depth in sorted(by_depth, reverse=True):
        for node in by_depth[depth]:
            if node.is_input:
                continue
            # Keras records ``training=False`` and ``mask=None`` itself: inference, no mask.
            given = {name: value for name, value in node.arguments.kwargs.items() if value}
            if len(node.outputs) != 1 or given:
                raise _NotTaken(f"{type(node.operation).__name__} is called with {given} or "
                                "gives several outputs")
            operands = _operands(node.arguments.args, places, builder.keras)
            places[id(node.outputs[0])] = builder.call(node.operation, operands)
    output = places.get(id(model.outputs[0]))
    if output is None:
        raise _NotTaken("its output is not computed from its input")
    return output


def _operands(args: Sequence[Any], places: Dict[int, int], keras: Any) -> List[Operand]:
    """A layer call's arguments as operands: one tensor, a list of tensors (a merge layer's), or
    two tensors, numbers or arrays of one value per unit (``+``, ``-``, ``*``, ``/``, ...)."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = args[0]
    operands: List[Operand] = []
    for arg in args:
        if isinstance(arg, keras.KerasTensor):
            if id(arg) not in places:
                raise _NotTaken("a layer reads a tensor that is not computed from the input")
            operands.append(places[id(arg)])
        elif isinstance(arg, (int, float, np.integer, np.floating)) and not isinstance(arg, bool):
            operands.append(float(arg))
        else:
            operands.append(_constant(arg, keras))
    return operands


def _constant(arg: Any, keras: Any) -> np.ndarray:
    """An operand that is neither a tensor of the model nor a number: a numpy array, or a backend
    tensor (``keras.ops.convert_to_tensor``, ``tf.constant``), of one value per unit. A variable
    is not: its value may change, and it is not among the weights the trainer sends."""
    if not isinstance(arg, np.ndarray) and keras.ops.is_tensor(arg) \
            and not hasattr(arg, "assign"):
        arg = np.asarray(keras.ops.convert_to_numpy(arg))
    if isinstance(arg, np.ndarray) and arg.dtype.kind in "iuf" \
            and (arg.ndim <= 1 or arg.shape[:-1] == (1, )):
        return arg.copy()  # taken as it is now, as Keras took it into the graph
    raise _NotTaken(f"a layer call reads a {type(arg).__name__}, not a tensor, a number, or an "
                    "array or constant tensor of one value per unit")


#: Keras ops of two values that a functional model's ``+``, ``-``, ``*`` and ``/`` record (and
#: ``keras.ops.maximum``, ``minimum``, ``power``), and the merge each is
_OPERATORS = {
    "Add": "add",
    "Subtract": "subtract",
    "Multiply": "multiply",
    "TrueDivide": "divide",
    "Divide": "divide",
    "Maximum": "maximum",
    "Minimum": "minimum",
    "Power": "power",
}


def _keras_op(operation: Any) -> Optional[str]:
    """The class name of a Keras op (``keras.ops``' ``Add``, ``Tanh``, ...), else None."""
    kind = type(operation)
    return kind.__name__ if kind.__module__ in _OP_MODULES else None


_OP_MODULES = ("keras.src.ops.numpy", "keras.src.ops.nn", "keras.src.ops.math")


def _op_with_arguments(kind: str, operation: Any) -> Step:
    """A Keras op of ``OPS_WITH_ARGUMENTS`` with the arguments it was called with."""
    names, _ = OPS_WITH_ARGUMENTS[kind]
    if kind in ("Softmax", "LogSoftmax", "Glu"):
        _last_axis(operation, operation.axis)
    arguments = {name: getattr(operation, name, None) for name in names}
    if not all(isinstance(value, (int, float)) for value in arguments.values()):
        raise _NotTaken(f"{kind} is called with {arguments}, not numbers")
    return Elementwise(kind, arguments)


def _layer_steps(keras: Any) -> Dict[type, Callable[[Any, _Weights, Any], Optional[Step]]]:
    """What each layer class the numpy copy computes becomes (None: nothing at inference)."""
    layers = keras.layers
    nothing = (layers.InputLayer, layers.Dropout, layers.GaussianNoise, layers.GaussianDropout,
               layers.AlphaDropout, layers.Identity, layers.ActivityRegularization, layers.Flatten)
    merges = {
        layers.Add: "add",
        layers.Subtract: "subtract",
        layers.Multiply: "multiply",
        layers.Average: "average",
        layers.Maximum: "maximum",
        layers.Minimum: "minimum",
    }
    return {
        **{
            kind: lambda layer, weights, keras: None
            for kind in nothing
        },
        **{
            kind: lambda layer, weights, keras, merge=merge: Merge(merge)
            for kind, merge in merges.items()
        },
        layers.Concatenate: _concatenate_step,
        layers.Dense: _dense_step,
        layers.Activation: _activation_step,
        layers.Softmax: _softmax_step,
        layers.ReLU: _relu_step,
        layers.LeakyReLU: _leaky_relu_step,
        layers.PReLU: _prelu_step,
        layers.ELU: _elu_step,
        layers.Normalization: _normalization_step,
        layers.LayerNormalization: _layer_normalization_step,
        layers.BatchNormalization: _batch_normalization_step,
        layers.UnitNormalization: _unit_normalization_step,
        layers.Rescaling: _rescaling_step,
    }


def _nonlinearity(layer: Any, keras: Any) -> str:
    name = _activation_name(layer.activation, keras)
    if name is None:
        raise _NotTaken(f"layer {layer.name!r}'s nonlinearity "
                        f"{getattr(layer.activation, '__name__', layer.activation)!r} has no "
                        "numpy twin here")
    return name


def _dense_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    if layer.lora_enabled or getattr(layer, "quantization_mode", None):
        raise _NotTaken(f"layer {layer.name!r} is LoRA-enabled or quantized")
    activation = _nonlinearity(layer, keras)
    return Dense(weights.place(layer, layer.kernel),
                 weights.optional(layer, layer.bias, layer.use_bias), activation)


def _activation_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    return Dense(None, None, _nonlinearity(layer, keras))


def _last_axis(layer: Any, axis: Any) -> None:
    axes = [axis] if isinstance(axis, int) else list(axis or [])
    if axes not in ([-1], [1]):
        raise _NotTaken(f"layer {layer.name!r} works over axis {axis!r}, not the last one")


def _softmax_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    _last_axis(layer, layer.axis)
    return Dense(None, None, "softmax")


def _relu_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    maximum = None if layer.max_value is None else float(layer.max_value)
    return Rectifier(float(layer.negative_slope), maximum, float(layer.threshold))


def _leaky_relu_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    return Rectifier(float(layer.negative_slope), None, 0.0)


def _prelu_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    # Its alpha broadcasts over the batch as numpy broadcasts it (shared axes leave ones).
    return Parametric(weights.place(layer, layer.alpha))


def _elu_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    # The layer computes what ``keras.ops.elu`` does.
    return Elementwise("Elu", {"alpha": float(layer.alpha)})


def _normalization_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    # Its statistics broadcast as numpy broadcasts them over the last axis, or are one scalar.
    if getattr(layer, "input_mean", None) is not None:  # given, not adapted: constants
        mean: Ref = np.asarray(keras.ops.convert_to_numpy(layer.mean))
        variance: Ref = np.asarray(keras.ops.convert_to_numpy(layer.variance))
    else:
        mean = weights.place(layer, layer.adapt_mean)
        variance = weights.place(layer, layer.adapt_variance)
        weights.place(layer, layer.count)  # only adapt() reads it
    return Normalize(mean, variance, bool(layer.invert), float(keras.config.epsilon()))


def _layer_normalization_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    _last_axis(layer, layer.axis)
    if getattr(layer, "rms_scaling", False):
        raise _NotTaken(f"layer {layer.name!r} scales by RMS")
    return Standardize(None, None, weights.optional(layer, layer.gamma, layer.scale),
                       weights.optional(layer, layer.beta, layer.center), float(layer.epsilon))


def _batch_normalization_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    _last_axis(layer, layer.axis)
    if getattr(layer, "renorm", False):
        raise _NotTaken(f"layer {layer.name!r} renormalizes")
    return Standardize(weights.place(layer, layer.moving_mean),
                       weights.place(layer, layer.moving_variance),
                       weights.optional(layer, layer.gamma, layer.scale),
                       weights.optional(layer, layer.beta, layer.center), float(layer.epsilon))


def _unit_normalization_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    _last_axis(layer, layer.axis)
    return UnitNormalize()


def _concatenate_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    _last_axis(layer, layer.axis)
    return Merge("concatenate")


def _rescaling_step(layer: Any, weights: _Weights, keras: Any) -> Step:
    dtype = layer.dtype_policy.compute_dtype
    return Rescale(np.asarray(layer.scale, dtype), np.asarray(layer.offset, dtype))


def _activation_name(function: Any, keras: Any) -> Optional[str]:
    """The name of ``ACTIVATIONS`` that is exactly Keras's ``function``, else None."""
    name = getattr(function, "__name__", None)
    if name == "swish":
        name = "silu"
    if name not in ACTIVATIONS:
        return None
    try:
        return name if keras.activations.get(name) is function else None
    except (ValueError, TypeError):
        return None


def _differs(graph: LayerGraph, model: Any, keras: Any) -> Optional[str]:
    """Why the copy does not give the model's output on random inputs, or None."""
    random = np.random.default_rng(0)
    parts = [
        random.normal(0.0, 2.0, (8, size)).astype(graph.dtype) for _, size in graph.input_parts
    ]
    keys = [key for key, _ in graph.input_parts]
    batch = (parts[0] if len(parts) == 1 else dict(zip(keys, parts)) if all(keys) else parts
             )  # as the adapter feeds the model
    expected = np.asarray(keras.ops.convert_to_numpy(model(batch, training=False)), np.float64)
    actual = np.asarray(graph.forward(batch), np.float64)
    scale = max(1.0, float(np.abs(expected).max())) if expected.size else 1.0
    if expected.shape == actual.shape and np.allclose(
            actual, expected, rtol=_RTOL, atol=_ATOL_OF_SCALE * scale):
        return None
    return "its numpy copy does not give its output on random inputs"
