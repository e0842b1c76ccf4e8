"""The numpy copy of a Keras model, as the plot worker runs it: the steps its layers are computed
with (``Dense``, the normalizations, rectifiers, ``keras.ops`` and merges), Keras's
nonlinearities in numpy (``ACTIVATIONS``, ``ELEMENTWISE``, ``OPS_WITH_ARGUMENTS``), and the
``LayerGraph`` that runs them in order from the model's flat parameter vector.

``policy/numpy_copy.py`` reads a Keras model into a ``LayerGraph`` in the trainer. This module
needs numpy alone: the rollout process unpickles a ``LayerGraph`` without TensorFlow or Keras,
and the RL host's MLPs (``rl/numpy_mlp.py``) share its nonlinearities.
"""
import functools
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

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


def _glu(x: np.ndarray) -> np.ndarray:
    # The last axis's first half gated by the sigmoid of its second half: half as many values.
    gated, gate = np.split(x, 2, axis=-1)
    return gated * _sigmoid(gate)


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
    # Not sparsemax: Keras 3.15's thresholds wrongly where more than one value is kept
    # (keras-team/keras#23425), and the copy must compute what the trainer's model does.
    "Glu": ((), _glu),
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
        inputs: each input's key in an observation and its size, in the model's order: one
            ``("", n)`` for an array; for a dict observation, the parts' keys (the inputs'
            names); for a tuple, ``""`` each (taken in order). They are the first values.
    """

    #: how the plot worker calls it, for ``stats["policy_call"]``
    plot_call_path = "numpy"

    def __init__(self, nodes: Sequence[Tuple[Step, Sequence[Operand]]], output: int,
                 shapes: Sequence[Tuple[int, ...]], dtype: str,
                 inputs: Union[int, Sequence[Tuple[str, int]]]) -> None:
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
        #: each input's key and size
        self.input_parts = _input_parts(inputs)
        self._pieces = [np.zeros(shape, self.dtype) for shape in self.shapes]

    @property
    def num_params(self) -> int:
        """Length of the flat parameter vector."""
        return int(sum(int(np.prod(shape)) for shape in self.shapes))

    @property
    def inputs(self) -> int:
        """How many values one observation has (all its parts')."""
        return sum(size for _, size in self.input_parts)

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

    def forward(self, batch: Any) -> np.ndarray:
        """The model's output for a batch of observations: an array of shape ``(batch, n)``,
        or for several inputs a dict of them by key (or a list, in order)."""
        if isinstance(batch, dict):
            parts = [batch[key] for key, _ in self.input_parts]
        elif len(self.input_parts) == 1:
            parts = [batch]
        else:
            parts = list(batch)
        values = [
            np.asarray(part, self.dtype).reshape(-1, size)
            for part, (_, size) in zip(parts, self.input_parts)
        ]
        pieces = self._pieces
        for step, operands in self.nodes:
            if isinstance(step, Merge):
                merged = [values[o] if isinstance(o, int) else o for o in operands]
                values.append(step(merged, pieces))
            else:
                values.append(step(values[operands[0]], pieces))
        return values[self.output]

    def act(self, observation: Any) -> np.ndarray:
        """The output for one observation (an array, or a dict or tuple of its parts)."""
        return self.forward(batch_of_one(observation, self.dtype))[0]


def batch_of_one(observation: Any, dtype: Any) -> Any:
    """A batch of one observation in ``dtype``: an array, or for a dict or tuple observation (a
    ``Dict`` or ``Tuple`` space's) a dict or list of batches, as a model of an input a part
    takes them (by its inputs' names, or in their order): the Keras model, its traced call and
    its numpy copy alike."""
    if isinstance(observation, dict):
        return {key: batch_of_one(part, dtype) for key, part in observation.items()}
    if isinstance(observation, tuple):
        return [batch_of_one(part, dtype) for part in observation]
    return np.asarray(observation, dtype)[None]


def _input_parts(inputs: Union[int, Sequence[Tuple[str, int]]]) -> List[Tuple[str, int]]:
    """``LayerGraph``'s ``inputs`` as (key, size) pairs (an int: one array of that size)."""
    if isinstance(inputs, (int, np.integer)):
        return [("", int(inputs))]
    return [(str(key), int(size)) for key, size in inputs]


def split_flat(flat: np.ndarray, shapes: Sequence[Tuple[int, ...]]) -> List[np.ndarray]:
    """A flat parameter vector cut into pieces of ``shapes``, in order (views of ``flat``)."""
    pieces, offset = [], 0
    for shape in shapes:
        count = int(np.prod(shape))
        pieces.append(flat[offset:offset + count].reshape(shape))
        offset += count
    return pieces
