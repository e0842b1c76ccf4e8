"""A Keras model whose layers numpy computes (``Dense``, normalizations, rectifiers, merges),
computed in numpy: what the plot worker acts with for such a model, so that its rollout process
never imports TensorFlow.

TensorFlow's import is most of a worker's boot (3.4 of 4.8 CPU-seconds for a 2x64 Keras MLP on
Swimmer, taken while the trainer's first iterations want every core), and a traced call costs
~0.2-0.7 ms a step against ~0.01 ms in numpy, which was most of a history recording's CPU
(``benchmarks/policy_step.py``; whole runs in ``benchmarks/plot_overhead.py``'s Keras env). The
RL host's MLP policies have their own numpy twin (``rl/numpy_mlp.py``); this one is for the Keras
models users write.

Taken only where numpy computes what Keras does: a ``Sequential`` or functional model with one
input of shape ``(batch, n)`` and one output, all in float32 or all in float64, whose layers are
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

Nothing here imports TensorFlow or Keras at module level: the rollout process unpickles a
``LayerGraph`` with numpy alone.
"""
import functools
import logging
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

logger = logging.getLogger(__name__)

# Keras's nonlinearities with Keras's default arguments, in the input's dtype (Python scalars
# do not widen a float32 array).


def _linear(x: np.ndarray) -> np.ndarray:
    return x


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


def _relu6(x: np.ndarray) -> np.ndarray:
    return np.clip(x, 0, 6)


def _leaky_relu(x: np.ndarray, negative_slope: float = 0.2) -> np.ndarray:
    return np.where(x >= 0, x, x.dtype.type(negative_slope) * x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-log(1 + exp(-x))): no overflow for large negative x
    return np.exp(-np.logaddexp(0, -x))


def _hard_sigmoid(x: np.ndarray) -> np.ndarray:
    return np.clip(x + 3, 0, 6) / 6


def _silu(x: np.ndarray) -> np.ndarray:
    return x * _sigmoid(x)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)


def _softsign(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.abs(x))


def _elu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    return np.where(x > 0, x, x.dtype.type(alpha) * np.expm1(np.minimum(x, 0)))


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def _selu(x: np.ndarray) -> np.ndarray:
    return _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(np.minimum(x, 0)))


#: ``math.erf`` elementwise: numpy has no erf, and a hidden layer's few dozen values take
#: microseconds this way, exactly
_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(x: np.ndarray, approximate: bool = False) -> np.ndarray:
    # The activation's default is exact, x * P(X <= x) for a standard normal X;
    # ``keras.ops.gelu``'s is the tanh approximation.
    if approximate:
        cubic = x + x.dtype.type(0.044715) * x**3
        return 0.5 * x * (1 + np.tanh(x.dtype.type(math.sqrt(2 / math.pi)) * cubic))
    return 0.5 * x * (1 + _erf(x / np.sqrt(x.dtype.type(2))).astype(x.dtype))


def _celu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    alpha = x.dtype.type(alpha)
    return np.maximum(x, 0) + alpha * np.expm1(np.minimum(x, 0) / alpha)


def _squareplus(x: np.ndarray, b: float = 4.0) -> np.ndarray:
    return (x + np.sqrt(np.square(x) + x.dtype.type(b))) / 2


def _soft_shrink(x: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    edge = x.dtype.type(threshold)
    return np.where(x > edge, x - edge, np.where(x < -edge, x + edge, 0)).astype(x.dtype)


def _hard_shrink(x: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    return np.where(np.abs(x) > threshold, x, 0).astype(x.dtype)


def _tanh_shrink(x: np.ndarray) -> np.ndarray:
    return x - np.tanh(x)


def _sparse_plus(x: np.ndarray) -> np.ndarray:
    return np.where(x <= -1, 0, np.where(x < 1, np.square(x + 1) / 4, x)).astype(x.dtype)


def _sparse_sigmoid(x: np.ndarray) -> np.ndarray:
    return np.clip((x + 1) / 2, 0, 1)


def _mish(x: np.ndarray) -> np.ndarray:
    return x * np.tanh(_softplus(x))


def _hard_silu(x: np.ndarray) -> np.ndarray:
    return x * _hard_sigmoid(x)


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0, -x)


def _hard_tanh(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -1, 1)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _softmax(x: np.ndarray) -> np.ndarray:
    return np.exp(_log_softmax(x))


def _threshold(x: np.ndarray, threshold: float, default_value: float) -> np.ndarray:
    return np.where(x > threshold, x, x.dtype.type(default_value))


def _clip(x: np.ndarray, x_min: float, x_max: float) -> np.ndarray:
    return np.clip(x, x.dtype.type(x_min), x.dtype.type(x_max))


#: Keras's nonlinearities, by their Keras name, that numpy computes to float rounding
#: (with Keras's default arguments)
ACTIVATIONS: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": _linear,
    "relu": _relu,
    "relu6": _relu6,
    "leaky_relu": _leaky_relu,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "hard_sigmoid": _hard_sigmoid,
    "silu": _silu,
    "gelu": _gelu,
    "mish": _mish,
    "hard_silu": _hard_silu,
    "log_sigmoid": _log_sigmoid,
    "hard_tanh": _hard_tanh,
    "softplus": _softplus,
    "softsign": _softsign,
    "squareplus": _squareplus,
    "sparse_plus": _sparse_plus,
    "sparse_sigmoid": _sparse_sigmoid,
    "soft_shrink": _soft_shrink,
    "hard_shrink": _hard_shrink,
    "tanh_shrink": _tanh_shrink,
    "celu": _celu,
    "elu": _elu,
    "selu": _selu,
    "exponential": np.exp,
    "softmax": _softmax,
    "log_softmax": _log_softmax,
}

#: what the copy must give on random inputs, against the model, to be taken
_RTOL, _ATOL_OF_SCALE = 1e-4, 1e-5
#: the call() of Keras's models that compute what their layers' graph says
_GRAPH_CALLS = ("Sequential.call", "Functional.call")

#: a layer's value: its place in the model's flat layout, a constant, or None (not there)
Ref = Union[int, np.ndarray, None]


def _value(ref: Ref, pieces: Sequence[np.ndarray]) -> Any:
    return pieces[ref] if isinstance(ref, int) else ref


class Dense:
    """``x @ kernel + bias``, then a nonlinearity of ``ACTIVATIONS`` (``Dense``; ``Activation``
    and ``Softmax`` are the same without kernel and bias)."""

    def __init__(self, kernel: Optional[int], bias: Optional[int], activation: str) -> None:
        self.kernel, self.bias, self.activation = kernel, bias, activation

    def __call__(self, x: np.ndarray, pieces: Sequence[np.ndarray]) -> np.ndarray:
        if self.kernel is not None:
            x = x @ pieces[self.kernel]
        if self.bias is not None:
            x = x + pieces[self.bias]
        return ACTIVATIONS[self.activation](x)


class Rectifier:
    """Keras's ``relu`` with its arguments (the ``ReLU`` and ``LeakyReLU`` layers)."""

    def __init__(self, negative_slope: float, max_value: Optional[float], threshold: float) -> None:
        self.negative_slope, self.max_value, self.threshold = negative_slope, max_value, threshold

    def __call__(self, x: np.ndarray, pieces: Sequence[np.ndarray]) -> np.ndarray:
        below = np.maximum(self.threshold - x, 0) if self.negative_slope else None
        # Keras: x where x > threshold else 0 (a threshold of 0 is the plain rectifier).
        out = np.where(x > self.threshold, x, 0).astype(x.dtype, copy=False)
        if self.max_value is not None:
            out = np.clip(out, 0, x.dtype.type(self.max_value))
        if below is not None:
            out = out - x.dtype.type(self.negative_slope) * below
        return out


class Parametric:
    """``max(x, 0) - alpha * max(-x, 0)`` with a learned ``alpha`` per unit (``PReLU``)."""

    def __init__(self, alpha: int) -> None:
        self.alpha = alpha

    def __call__(self, x: np.ndarray, pieces: Sequence[np.ndarray]) -> np.ndarray:
        return np.maximum(x, 0) - pieces[self.alpha] * np.maximum(-x, 0)


class Normalize:
    """``(x - mean) / max(sqrt(variance), epsilon)``, or its inverse (``Normalization``)."""

    def __init__(self, mean: Ref, variance: Ref, invert: bool, epsilon: float) -> None:
        self.mean, self.variance, self.invert, self.epsilon = mean, variance, invert, epsilon

    def __call__(self, x: np.ndarray, pieces: Sequence[np.ndarray]) -> np.ndarray:
        mean, variance = _value(self.mean, pieces), _value(self.variance, pieces)
        spread = np.maximum(np.sqrt(variance), x.dtype.type(self.epsilon))
        return mean + x * spread if self.invert else (x - mean) / spread


class Standardize:
    """``(x - mean) / sqrt(variance + epsilon) * gamma + beta`` over the last axis, with a fixed
    mean and variance (``BatchNormalization`` at inference, its moving statistics) or each
    row's own (``LayerNormalization``: ``mean`` and ``variance`` None)."""

    def __init__(self, mean: Ref, variance: Ref, gamma: Ref, beta: Ref, epsilon: float) -> None:
        self.mean, self.variance, self.epsilon = mean, variance, epsilon
        self.gamma, self.beta = gamma, beta

    def __call__(self, x: np.ndarray, pieces: Sequence[np.ndarray]) -> np.ndarray:
        # sum() / n rather than mean(): a few microseconds less a call, at these sizes most of it
        if self.mean is None:
            width = x.shape[-1]
            centred = x - x.sum(axis=-1, keepdims=True) / width
            variance = np.square(centred).sum(axis=-1, keepdims=True) / width
        else:
            centred = x - _value(self.mean, pieces)
            variance = _value(self.variance, pieces)
        scale = 1 / np.sqrt(variance + x.dtype.type(self.epsilon))
        gamma, beta = _value(self.gamma, pieces), _value(self.beta, pieces)
        if gamma is not None:
            scale = scale * gamma
        centred = centred * scale
        return centred if beta is None else centred + beta


class Rescale:
    """``x * scale + offset`` (``Rescaling``)."""

    def __init__(self, scale: np.ndarray, offset: np.ndarray) -> None:
        self.scale, self.offset = scale, offset

    def __call__(self, x: np.ndarray, pieces: Sequence[np.ndarray]) -> np.ndarray:
        return x * self.scale + self.offset


class UnitNormalize:
    """``x / max(|x|, 1e-12)`` over the last axis (``UnitNormalization``, Keras's epsilon)."""

    def __call__(self, x: np.ndarray, pieces: Sequence[np.ndarray]) -> np.ndarray:
        square_sum = np.square(x).sum(axis=-1, keepdims=True)
        return x / np.sqrt(np.maximum(square_sum, x.dtype.type(1e-24)))


def _erf_of(x: np.ndarray) -> np.ndarray:
    return _erf(x).astype(x.dtype)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


#: Keras ops without arguments a functional model applies to a tensor (``keras.ops.tanh(x)``,
#: ``-x``), by their op's class: what numpy computes for each
ELEMENTWISE: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Tanh": np.tanh,
    "Relu": _relu,
    "Relu6": _relu6,
    "Sigmoid": _sigmoid,
    "HardSigmoid": _hard_sigmoid,
    "LogSigmoid": _log_sigmoid,
    "Softplus": _softplus,
    "Softsign": _softsign,
    "Silu": _silu,
    "HardSilu": _hard_silu,
    "HardTanh": _hard_tanh,
    "TanhShrink": _tanh_shrink,
    "SparsePlus": _sparse_plus,
    "SparseSigmoid": _sparse_sigmoid,
    "Selu": _selu,
    "Exp": np.exp,
    "Expm1": np.expm1,
    "Log": np.log,
    "Log1p": np.log1p,
    "Negative": np.negative,
    "Absolute": np.abs,
    "Sign": np.sign,
    "Square": np.square,
    "Sqrt": np.sqrt,
    "Rsqrt": _rsqrt,
    "Reciprocal": np.reciprocal,
    "Sin": np.sin,
    "Cos": np.cos,
    "Erf": _erf_of,
}

#: Keras ops with arguments a functional model applies to a tensor
#: (``keras.ops.leaky_relu(x, negative_slope=0.3)``), by their op's class: the arguments, read
#: from the op, and what numpy computes with them (``softmax`` and ``log_softmax`` over the last
#: axis only)
OPS_WITH_ARGUMENTS: Dict[str, Tuple[Tuple[str, ...], Callable[..., np.ndarray]]] = {
    "LeakyRelu": (("negative_slope", ), _leaky_relu),
    "Elu": (("alpha", ), _elu),
    "Celu": (("alpha", ), _celu),
    "Gelu": (("approximate", ), _gelu),
    "Squareplus": (("b", ), _squareplus),
    "SoftShrink": (("threshold", ), _soft_shrink),
    "HardShrink": (("threshold", ), _hard_shrink),
    "Threshold": (("threshold", "default_value"), _threshold),
    "Clip": (("x_min", "x_max"), _clip),
    "Softmax": ((), _softmax),
    "LogSoftmax": ((), _log_softmax),
}


class Elementwise:
    """One of ``ELEMENTWISE`` applied to a value, or one of ``OPS_WITH_ARGUMENTS`` with its
    arguments."""

    def __init__(self,
                 kind: str,
                 arguments: Optional[Dict[str, Union[float, bool]]] = None) -> None:
        self.kind = kind
        self.arguments = dict(arguments or {})

    def __call__(self, x: np.ndarray, pieces: Sequence[np.ndarray]) -> np.ndarray:
        if self.kind in ELEMENTWISE:
            return ELEMENTWISE[self.kind](x)
        return OPS_WITH_ARGUMENTS[self.kind][1](x, **self.arguments)


def _concatenate(values: Sequence[Any]) -> np.ndarray:
    return np.concatenate(values, axis=-1)


def _average(values: Sequence[Any]) -> np.ndarray:
    return functools.reduce(np.add, values) / len(values)


#: what a merge does with its values, in their order
MERGES: Dict[str, Callable[[Sequence[Any]], np.ndarray]] = {
    "add": lambda values: functools.reduce(np.add, values),
    "subtract": lambda values: values[0] - values[1],
    "divide": lambda values: values[0] / values[1],
    "multiply": lambda values: functools.reduce(np.multiply, values),
    "average": _average,
    "maximum": lambda values: functools.reduce(np.maximum, values),
    "minimum": lambda values: functools.reduce(np.minimum, values),
    "power": lambda values: np.power(values[0], values[1]),
    "concatenate": _concatenate,
}


class Merge:
    """Several values made one (``Add``, ``Subtract``, ``Multiply``, ``Average``, ``Maximum``,
    ``Minimum``, ``Concatenate`` over the last axis, and ``+``, ``-``, ``*``, ``/``,
    ``keras.ops.maximum``, ``minimum`` and ``power`` of a functional model's tensors, a number or
    an array of one value per unit among them)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(self, values: Sequence[Any], pieces: Sequence[np.ndarray]) -> np.ndarray:
        return MERGES[self.kind](values)


Step = Union[Dense, Rectifier, Parametric, Normalize, Standardize, Rescale, UnitNormalize,
             Elementwise, Merge]
#: what a node computes from: a value's place (0: the observations; ``k``: node ``k - 1``'s
#: output), a number (``x * 0.5``) or a constant array, one value per unit (``x * scale``)
Operand = Union[int, float, np.ndarray]


class LayerGraph:
    """The model's layers as nodes computed in order, each from earlier values (a chain's node
    from the one before), taking the Keras model's flat parameter vector (every weight in
    ``model.weights`` order, as ``KerasAdapter.flat`` gives it).

    Args:
        nodes: each a step above (whose weights are places in the flat layout) and the
            ``Operand`` s it computes from: one, or a ``Merge`` 's several.
        output: the place of the value the model outputs.
        shapes: the shape of every piece of the flat layout.
        dtype: the model's compute dtype, ``"float32"`` or ``"float64"``.
        inputs: how many values one observation has.
    """

    #: how the plot worker calls it, for ``stats["policy_call"]``
    plot_call_path = "numpy"

    def __init__(self, nodes: Sequence[Tuple[Step, Sequence[Operand]]], output: int,
                 shapes: Sequence[Tuple[int, ...]], dtype: str, inputs: int) -> None:
        self.dtype = np.dtype(dtype)
        # A constant array computes in the model's dtype (as a number does: numpy keeps an
        # array's dtype against a Python scalar, not against another array).
        self.nodes = [
            (step,
             tuple(np.asarray(o, self.dtype) if isinstance(o, np.ndarray) else o for o in operands))
            for step, operands in nodes
        ]
        self.output = int(output)
        self.shapes = [tuple(int(size) for size in shape) for shape in shapes]
        self.inputs = int(inputs)
        self._pieces = [np.zeros(shape, self.dtype) for shape in self.shapes]

    @property
    def num_params(self) -> int:
        """Length of the flat parameter vector."""
        return int(sum(int(np.prod(shape)) for shape in self.shapes))

    def get_flat(self) -> np.ndarray:
        """The parameters as one 1-D vector, in the model's order."""
        return np.concatenate([piece.ravel() for piece in self._pieces])

    def set_flat(self, flat: np.ndarray) -> None:
        """Load a vector of the model's flat layout."""
        flat = np.asarray(flat).ravel()
        if flat.size != self.num_params:
            raise ValueError(f"this Keras model's numpy copy has {self.num_params} parameters, "
                             f"got a vector of {flat.size}")
        self._pieces = [piece.astype(self.dtype) for piece in split_flat(flat, self.shapes)]

    def forward(self, batch: np.ndarray) -> np.ndarray:
        """The model's output for a batch of observations, shape ``(batch, inputs)``."""
        values = [np.asarray(batch, self.dtype).reshape(-1, self.inputs)]
        pieces = self._pieces
        for step, operands in self.nodes:
            if isinstance(step, Merge):
                merged = [values[o] if isinstance(o, int) else o for o in operands]
                values.append(step(merged, pieces))
            else:
                values.append(step(values[operands[0]], pieces))
        return values[self.output]

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The output for one observation."""
        return self.forward(np.asarray(observation)[None])[0]


def split_flat(flat: np.ndarray, shapes: Sequence[Tuple[int, ...]]) -> List[np.ndarray]:
    """A flat parameter vector cut into pieces of ``shapes``, in order (views of ``flat``)."""
    pieces, offset = [], 0
    for shape in shapes:
        count = int(np.prod(shape))
        pieces.append(flat[offset:offset + count].reshape(shape))
        offset += count
    return pieces


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

    def __init__(self, model: Any, keras: Any) -> None:
        self.keras = keras
        self.shapes = [tuple(weight.shape) for weight in model.weights]
        self.weights = _Weights(model)
        self.steps = _layer_steps(keras)
        self.nodes: List[Tuple[Step, Tuple[Operand, ...]]] = []
        self.dtypes: Set[str] = set()

    def model(self, model: Any, operand: Operand) -> int:
        """Add the layer calls of ``model`` (the one copied, or a model it uses as a layer)
        computed from the value at ``operand``; the place of its output."""
        call = type(model).call
        if (getattr(call, "__qualname__", None) not in _GRAPH_CALLS
                or not getattr(call, "__module__", "").startswith("keras.")):
            raise _NotTaken(f"a subclassed model ({type(model).__name__}) computes what its own "
                            "call() says")
        inputs, outputs = list(getattr(model, "inputs", None) or []), list(model.outputs or [])
        if len(inputs) != 1 or len(outputs) != 1 or len(inputs[0].shape) != 2:
            raise _NotTaken("not one input of shape (batch, n) and one output")
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
        return len(self.nodes)

    def graph(self, output: int, inputs: int) -> LayerGraph:
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
    builder = _Builder(model, keras)
    output = builder.model(model, 0)
    return builder.graph(output, int(model.inputs[0].shape[-1]))


def _layer_calls_by_depth(model: Any) -> Optional[Dict[int, List[Any]]]:
    """The graph Keras 3's ``Functional`` runs (private to Keras: None where it has none)."""
    by_depth = getattr(model, "_nodes_by_depth", None)
    return by_depth if isinstance(by_depth, dict) else None


def _walk_graph(model: Any, by_depth: Dict[int, List[Any]], builder: _Builder, operand: int) -> int:
    """Add a functional model's layer calls, computed from the value at ``operand``, to
    ``builder`` in an order where each comes after the calls it reads: Keras's own, deepest
    first. The output's place."""
    places = {id(model.inputs[0]): operand}  # a Keras tensor's place among the values
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
    if kind in ("Softmax", "LogSoftmax"):
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
    batch = np.random.default_rng(0).normal(0.0, 2.0, (8, graph.inputs)).astype(graph.dtype)
    expected = np.asarray(keras.ops.convert_to_numpy(model(batch, training=False)), np.float64)
    actual = np.asarray(graph.forward(batch), np.float64)
    scale = max(1.0, float(np.abs(expected).max())) if expected.size else 1.0
    if expected.shape == actual.shape and np.allclose(
            actual, expected, rtol=_RTOL, atol=_ATOL_OF_SCALE * scale):
        return None
    return "its numpy copy does not give its output on random inputs"
