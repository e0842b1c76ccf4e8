"""One traced TensorFlow function per observation shape, for Keras models and ``tf.Module``s: an
eager call for one observation costs more CPU than drawing and encoding its frame
(docs/design.md, "Compiled steps"). The worker traces with XLA where the policy compiles, else as a
plain graph, else calls it eagerly, and says which in one log line. Variables are captured by
reference, so new parameters need no new trace; ``forget()`` drops the traces where a policy keeps
constants computed from its weights (Keras's adapted ``Normalization``).
"""
import contextlib
import logging
import threading
from typing import Any, Callable, Dict, Iterator

import numpy as np

logger = logging.getLogger("async_plotter")

#: how a policy is called: through XLA, through a plain traced graph, or eagerly
XLA, GRAPH, EAGER = "xla", "graph", "eager"

_local = threading.local()


@contextlib.contextmanager
def without_xla() -> Iterator[None]:
    """Trace without XLA in this thread for the block: the trainer-side check calls a copy of
    the policy twice and throws it away, and XLA's compile was half of ``Plotter()``'s time for
    a 2x64 MLP (the traced graph is the same, so what the check is for shows all the same)."""
    previous = getattr(_local, "without_xla", False)
    _local.without_xla = True
    try:
        yield
    finally:
        _local.without_xla = previous


class CompiledCall:
    """``call(batch) -> batch`` of a policy, traced per (shape, dtype) of the batch (of each of
    its parts, for a dict or list of arrays: a multi-input model's)."""

    def __init__(self, call: Callable[[Any], Any], label: str) -> None:
        self._call = call
        self._label = label
        self._traced: Dict[Any, Callable[[Any], Any]] = {}
        #: how the last traced shape is called (``XLA``, ``GRAPH`` or ``EAGER``); None before
        self.path = None

    def __call__(self, batch: Any) -> np.ndarray:
        key = _signature(batch)
        function = self._traced.get(key)
        if function is None:
            function = self._traced[key] = self._trace(batch)
        return np.asarray(function(batch))

    def forget(self) -> None:
        """Trace again on the next call (the policy's captured constants changed)."""
        self._traced.clear()

    def _trace(self, batch: Any) -> Callable[[Any], Any]:
        import tensorflow as tf

        spec = tf.nest.map_structure(
            lambda part: tf.TensorSpec(part.shape, tf.as_dtype(part.dtype)), batch)
        failures = []
        # Without autograph first: converting the call's Python source took ~0.4 s of a 2x64
        # MLP's ~0.6 s trace, and a Keras model needs it only for Python control flow on
        # tensors, which then fails to trace and is retried with it.
        for path, jit, autograph in ((XLA, True, False), (XLA, True, True), (GRAPH, False, False),
                                     (GRAPH, False, True)):
            if jit and getattr(_local, "without_xla", False):
                continue
            try:
                concrete = tf.function(self._call, jit_compile=jit,
                                       autograph=autograph).get_concrete_function(spec)
                result = concrete(_tensors(batch))  # XLA compiles on the first call
                np.asarray(result)
            except Exception as error:  # noqa: BLE001 - tracing fails in many ways
                failures.append(f"{path}: {type(error).__name__}: {_first_line(error)}")
                continue
            if self.path != path:
                logger.info("policy %s: one traced TensorFlow function per step (%s)", self._label,
                            "XLA" if jit else "graph")
            self.path = path
            return lambda values, f=concrete: f(_tensors(values))
        if self.path != EAGER:
            logger.info(
                "policy %s cannot be traced into one TensorFlow function (%s); calling it "
                "eagerly, which costs several times more CPU per step", self._label, failures[-1])
        self.path = EAGER
        return self._call


def _signature(batch: Any) -> Any:
    """What a trace is kept for: each part's shape and dtype, with its key or place."""
    if isinstance(batch, dict):
        return tuple((key, _signature(part)) for key, part in sorted(batch.items()))
    if isinstance(batch, (list, tuple)):
        return tuple(_signature(part) for part in batch)
    return (batch.shape, batch.dtype.str)


def _tensors(batch: Any) -> Any:
    import tensorflow as tf

    return tf.nest.map_structure(tf.constant, batch)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else ""
