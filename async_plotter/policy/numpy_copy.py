"""A Keras model that is a chain of ``Dense`` layers, computed in numpy: what the plot worker acts
with for such a model, so that its rollout process never imports TensorFlow.

TensorFlow's import is most of a worker's boot (3.4 of 4.8 CPU-seconds for a 2x64 Keras MLP on
Swimmer, taken while the trainer's first iterations want every core), and a traced call costs
~0.2-0.7 ms a step against ~0.01 ms in numpy, which was most of a history recording's CPU
(``benchmarks/policy_step.py``; whole runs in ``benchmarks/plot_overhead.py``'s Keras env). The RL host's MLP policies have
their own numpy twin (``rl/numpy_mlp.py``); this one is for the Keras models users write.

Taken only where numpy computes what Keras does: a ``Sequential`` or functional model with one
input of shape ``(batch, n)`` and one output, whose layers are exactly ``Dense`` (no LoRA, not
quantized), ``Activation`` with a nonlinearity of ``ACTIVATIONS``, ``Dropout`` (nothing at
inference) or the input, all in float32 or all in float64; and only once the chain, applied to
random inputs, gives the model's own output (a functional model with a skip connection does
not). Anything else travels as its Keras config and acts through TensorFlow, as before. The
trainer-side check then compares the copy with the model like any worker copy.

Nothing here imports TensorFlow or Keras at module level: the rollout process unpickles a
``DenseChain`` with numpy alone.
"""
import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

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
#: one step of the chain: the kernel's and the bias's places in the flat layout (None where the
#: step has none) and the nonlinearity's name
Step = Tuple[Optional[int], Optional[int], str]


class DenseChain:
    """``Dense`` layers and nonlinearities applied in order, taking the Keras model's flat
    parameter vector (every weight in ``model.weights`` order, as ``KerasAdapter.flat`` gives
    it).

    Args:
        steps: per step, the places of its kernel and bias in the flat layout, and its
            nonlinearity (a key of ``ACTIVATIONS``).
        shapes: the shape of every piece of the flat layout.
        dtype: the model's compute dtype, ``"float32"`` or ``"float64"``.
        inputs: how many values one observation has.
    """

    #: how the plot worker calls it, for ``stats["policy_call"]``
    plot_call_path = "numpy"

    def __init__(self, steps: Sequence[Step], shapes: Sequence[Tuple[int, ...]], dtype: str,
                 inputs: int) -> None:
        self.steps = [(kernel, bias, activation) for kernel, bias, activation in steps]
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
            raise ValueError(f"this chain of Dense layers has {self.num_params} parameters, got "
                             f"a vector of {flat.size}")
        self._pieces = [piece.astype(self.dtype) for piece in split_flat(flat, self.shapes)]

    def forward(self, batch: np.ndarray) -> np.ndarray:
        """The model's output for a batch of observations, shape ``(batch, inputs)``."""
        x = np.asarray(batch, self.dtype).reshape(-1, self.inputs)
        for kernel, bias, activation in self.steps:
            if kernel is not None:
                x = x @ self._pieces[kernel]
            if bias is not None:
                x = x + self._pieces[bias]
            x = ACTIVATIONS[activation](x)
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


def keras_dense_chain(model: Any, flat: np.ndarray) -> Optional[DenseChain]:
    """``model`` (a built Keras model whose flat parameter vector is ``flat``) as a
    ``DenseChain``, or None where numpy would not compute what it does (the reason at DEBUG)."""
    import keras

    try:
        chain, why = _chain_of(model, keras)
        if chain is not None:
            chain.set_flat(flat)
            why = _differs(chain, model, keras)
    except Exception as error:  # noqa: BLE001 - whatever an unusual model raises: not taken
        chain, why = None, f"{type(error).__name__}: {error}"
    if why is not None:
        logger.debug("the Keras model %r acts through TensorFlow in the plot worker: %s",
                     getattr(model, "name", "?"), why)
        return None
    return chain


def _chain_of(model: Any, keras: Any) -> Tuple[Optional[DenseChain], Optional[str]]:
    """The chain ``model``'s layers make in order, or None and why not."""
    call = type(model).call
    if (getattr(call, "__qualname__", None) not in _GRAPH_CALLS
            or not getattr(call, "__module__", "").startswith("keras.")):
        return None, "a subclassed model computes what its own call() says"
    inputs, outputs = list(getattr(model, "inputs", None) or []), list(model.outputs or [])
    if len(inputs) != 1 or len(outputs) != 1 or len(inputs[0].shape) != 2:
        return None, "not one input of shape (batch, n) and one output"
    places = {id(weight): place for place, weight in enumerate(model.weights)}
    steps: List[Step] = []
    dtypes = set()
    for layer in model.layers:
        kind = type(layer)
        if kind is keras.layers.InputLayer or kind is keras.layers.Dropout:
            continue  # a Dropout does nothing at inference
        if kind not in (keras.layers.Dense, keras.layers.Activation):
            return None, f"layer {layer.name!r} is {kind.__name__}, not Dense, Activation or Dropout"
        dtypes.add(layer.dtype_policy.name)
        activation = _activation_name(layer.activation, keras)
        if activation is None:
            return None, (f"layer {layer.name!r}'s nonlinearity "
                          f"{getattr(layer.activation, '__name__', layer.activation)!r} has no "
                          "numpy twin here")
        if kind is keras.layers.Activation:
            steps.append((None, None, activation))
            continue
        if layer.lora_enabled or getattr(layer, "quantization_mode", None):
            return None, f"layer {layer.name!r} is LoRA-enabled or quantized"
        kernel = places.get(id(layer.kernel))
        bias = places.get(id(layer.bias)) if layer.use_bias else None
        if kernel is None or (layer.use_bias and bias is None):
            return None, f"layer {layer.name!r}'s weights are not the model's own"
        steps.append((kernel, bias, activation))
    used = sorted(place for step in steps for place in step[:2] if place is not None)
    if used != list(range(len(model.weights))):
        return None, "the model has weights besides its Dense layers' kernels and biases"
    if len(dtypes) != 1 or not dtypes <= {"float32", "float64"}:
        return None, f"its layers compute in {', '.join(sorted(dtypes)) or 'no dtype'}"
    shapes = [tuple(weight.shape) for weight in model.weights]
    return DenseChain(steps, shapes, dtypes.pop(), int(inputs[0].shape[-1])), None


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


def _differs(chain: DenseChain, model: Any, keras: Any) -> Optional[str]:
    """Why the chain does not give the model's output on random inputs, or None."""
    batch = np.random.default_rng(0).normal(0.0, 2.0, (8, chain.inputs)).astype(chain.dtype)
    expected = np.asarray(keras.ops.convert_to_numpy(model(batch, training=False)), np.float64)
    actual = np.asarray(chain.forward(batch), np.float64)
    scale = max(1.0, float(np.abs(expected).max())) if expected.size else 1.0
    if expected.shape == actual.shape and np.allclose(
            actual, expected, rtol=_RTOL, atol=_ATOL_OF_SCALE * scale):
        return None
    return "its layers in order do not give its output (a skip connection, a shared layer?)"
