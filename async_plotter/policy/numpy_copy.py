"""A Keras model that is a chain of layers numpy computes (``Dense``, normalizations, rectifiers),
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
with nonlinearities of ``ACTIVATIONS``; and only once the chain, applied to random inputs, gives
the model's own output (a functional model with a skip connection does not). Anything else
travels as its Keras config and acts through TensorFlow, as before. The trainer-side check then
compares the copy with the model like any worker copy.

A layer's weights are read from the model's flat vector at every update, as the trainer sends it;
an adapted ``Normalization`` computes from its ``adapt_mean`` and ``adapt_variance`` as Keras does
after ``finalize_state()``, which the Keras path in the worker calls after every update.

Nothing here imports TensorFlow or Keras at module level: the rollout process unpickles a
``LayerChain`` with numpy alone.
"""
import logging
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

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


def _leaky_relu(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, x, 0.2 * x)  # Keras's negative_slope


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


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def _selu(x: np.ndarray) -> np.ndarray:
    return _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(np.minimum(x, 0)))


#: ``math.erf`` elementwise: numpy has no erf, and a hidden layer's few dozen values take
#: microseconds this way, exactly
_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(x: np.ndarray) -> np.ndarray:
    # Keras's default, approximate=False: x * P(X <= x) for a standard normal X
    return 0.5 * x * (1 + _erf(x / np.sqrt(x.dtype.type(2))).astype(x.dtype))


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


#: Keras's nonlinearities, by their Keras name, that numpy computes to float rounding
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


class Exponential:
    """``x`` where positive, else ``alpha * (exp(x) - 1)`` (the ``ELU`` layer)."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha

    def __call__(self, x: np.ndarray, pieces: Sequence[np.ndarray]) -> np.ndarray:
        return np.where(x > 0, x, x.dtype.type(self.alpha) * np.expm1(np.minimum(x, 0)))


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


Step = Union[Dense, Rectifier, Parametric, Exponential, Normalize, Standardize, Rescale]


class LayerChain:
    """Layers applied in order, taking the Keras model's flat parameter vector (every weight in
    ``model.weights`` order, as ``KerasAdapter.flat`` gives it).

    Args:
        steps: the layers, each a step above whose weights are places in the flat layout.
        shapes: the shape of every piece of the flat layout.
        dtype: the model's compute dtype, ``"float32"`` or ``"float64"``.
        inputs: how many values one observation has.
    """

    #: how the plot worker calls it, for ``stats["policy_call"]``
    plot_call_path = "numpy"

    def __init__(self, steps: Sequence[Step], shapes: Sequence[Tuple[int, ...]], dtype: str,
                 inputs: int) -> None:
        self.steps = list(steps)
        self.shapes = [tuple(int(size) for size in shape) for shape in shapes]
        self.dtype = np.dtype(dtype)
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
            raise ValueError(f"this chain of Keras layers has {self.num_params} parameters, got "
                             f"a vector of {flat.size}")
        self._pieces = [piece.astype(self.dtype) for piece in split_flat(flat, self.shapes)]

    def forward(self, batch: np.ndarray) -> np.ndarray:
        """The model's output for a batch of observations, shape ``(batch, inputs)``."""
        x = np.asarray(batch, self.dtype).reshape(-1, self.inputs)
        for step in self.steps:
            x = step(x, self._pieces)
        return x

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


def keras_layer_chain(model: Any, flat: np.ndarray) -> Optional[LayerChain]:
    """``model`` (a built Keras model whose flat parameter vector is ``flat``) as a
    ``LayerChain``, or None where numpy would not compute what it does (the reason at DEBUG)."""
    import keras

    try:
        chain = _chain_of(model, keras)
        chain.set_flat(flat)
        why = _differs(chain, model, keras)
    except _NotTaken as reason:
        why = str(reason)
    except Exception as error:  # noqa: BLE001 - whatever an unusual model raises: not taken
        why = f"{type(error).__name__}: {error}"
    if why is not None:
        logger.debug("the Keras model %r acts through TensorFlow in the plot worker: %s",
                     getattr(model, "name", "?"), why)
        return None
    return chain


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


def _chain_of(model: Any, keras: Any) -> LayerChain:
    """The chain ``model``'s layers make in order; ``_NotTaken`` where there is none."""
    call = type(model).call
    if (getattr(call, "__qualname__", None) not in _GRAPH_CALLS
            or not getattr(call, "__module__", "").startswith("keras.")):
        raise _NotTaken("a subclassed model computes what its own call() says")
    inputs, outputs = list(getattr(model, "inputs", None) or []), list(model.outputs or [])
    if len(inputs) != 1 or len(outputs) != 1 or len(inputs[0].shape) != 2:
        raise _NotTaken("not one input of shape (batch, n) and one output")
    weights = _Weights(model)
    steps: List[Step] = []
    dtypes = set()
    builders = _layer_steps(keras)
    for layer in model.layers:
        kind = type(layer)
        if kind not in builders:
            raise _NotTaken(f"layer {layer.name!r} is {kind.__name__}, which the numpy copy "
                            "does not compute")
        if kind is not keras.layers.InputLayer:
            dtypes.add(layer.dtype_policy.name)
        step = builders[kind](layer, weights, keras)
        if step is not None:
            steps.append(step)
    if sorted(weights.used) != list(range(weights.count)):
        raise _NotTaken("the model has weights its layers' steps here do not read")
    if len(dtypes) > 1 or not dtypes <= {"float32", "float64"}:
        raise _NotTaken(f"its layers compute in {', '.join(sorted(dtypes))}")
    dtype = dtypes.pop() if dtypes else "float32"
    shapes = [tuple(weight.shape) for weight in model.weights]
    return LayerChain(steps, shapes, dtype, int(inputs[0].shape[-1]))


def _layer_steps(keras: Any) -> Dict[type, Callable[[Any, _Weights, Any], Optional[Step]]]:
    """What each layer class the numpy copy computes becomes (None: nothing at inference)."""
    layers = keras.layers
    nothing = (layers.InputLayer, layers.Dropout, layers.GaussianNoise, layers.GaussianDropout,
               layers.AlphaDropout, layers.Identity, layers.ActivityRegularization, layers.Flatten)
    return {
        **{
            kind: lambda layer, weights, keras: None
            for kind in nothing
        },
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
    return Exponential(float(layer.alpha))


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


def _differs(chain: LayerChain, model: Any, keras: Any) -> Optional[str]:
    """Why the chain does not give the model's output on random inputs, or None."""
    batch = np.random.default_rng(0).normal(0.0, 2.0, (8, chain.inputs)).astype(chain.dtype)
    expected = np.asarray(keras.ops.convert_to_numpy(model(batch, training=False)), np.float64)
    actual = np.asarray(chain.forward(batch), np.float64)
    scale = max(1.0, float(np.abs(expected).max())) if expected.size else 1.0
    if expected.shape == actual.shape and np.allclose(
            actual, expected, rtol=_RTOL, atol=_ATOL_OF_SCALE * scale):
        return None
    return "its layers in order do not give its output (a skip connection, a shared layer?)"
