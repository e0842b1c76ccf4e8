"""Small optimisation pieces shared by the algorithms: flat vectors, Adam, conjugate gradient."""
from typing import Any, Callable, Dict, List, Sequence

import numpy as np
import tensorflow as tf

from async_plotter.rl import interrupts


def flatten_tensors(tensors: Sequence[tf.Tensor], variables: Sequence[tf.Variable]) -> tf.Tensor:
    """Concatenate per-variable tensors (e.g. gradients) into one vector; None counts as zeros."""
    parts = [
        tf.reshape(tf.zeros_like(v) if t is None else t, [-1]) for t, v in zip(tensors, variables)
    ]
    return tf.concat(parts, axis=0)


def unflatten_tensor(flat: tf.Tensor, variables: Sequence[tf.Variable]) -> List[tf.Tensor]:
    """Split a flat vector into tensors shaped like ``variables``."""
    sizes = [int(np.prod(v.shape)) for v in variables]
    return [tf.reshape(part, v.shape) for part, v in zip(tf.split(flat, sizes), variables)]


class Adam:
    """Adam (Kingma & Ba 2015) over a fixed list of ``tf.Variable``; its update runs in a graph.

    Written out rather than taken from Keras: it is a few lines, works on plain variables, and keeps
    Keras (and its ``~/.keras`` folder) out of the training process.
    """

    def __init__(self,
                 variables: Sequence[tf.Variable],
                 learning_rate: float = 1e-3,
                 beta1: float = 0.9,
                 beta2: float = 0.999,
                 epsilon: float = 1e-8) -> None:
        self.variables = list(variables)
        self.learning_rate = float(learning_rate)
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)
        self._m = [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.variables]
        self._v = [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.variables]
        self._t = tf.Variable(0.0, trainable=False)

    def state(self) -> Dict[str, Any]:
        """Its moments and step count, as numpy (what a snapshot keeps to resume exactly)."""
        return {
            "m": [m.numpy() for m in self._m],
            "v": [v.numpy() for v in self._v],
            "t": float(self._t.numpy())
        }

    def restore(self, state: Dict[str, Any]) -> None:
        """Take ``state()`` of an Adam over variables of the same shapes; ``ValueError``
        naming the difference otherwise (nothing changed)."""
        ours = [tuple(m.shape) for m in self._m]
        theirs = [tuple(np.shape(m)) for m in state["m"]]
        if theirs != ours or [tuple(np.shape(v)) for v in state["v"]] != ours:
            raise ValueError(f"the optimizer's moments are of variables shaped {theirs}, and "
                             f"this one's are {ours}")
        for slot, value in zip(self._m + self._v, list(state["m"]) + list(state["v"])):
            slot.assign(value)
        self._t.assign(float(state["t"]))

    def apply(self, gradients: Sequence[tf.Tensor]) -> None:
        """One update step; call inside or outside ``tf.function``."""
        t = self._t.assign_add(1.0)
        correction = tf.sqrt(1.0 - self.beta2**t) / (1.0 - self.beta1**t)
        for var, grad, m, v in zip(self.variables, gradients, self._m, self._v):
            if grad is None:
                continue
            m.assign(self.beta1 * m + (1.0 - self.beta1) * grad)
            v.assign(self.beta2 * v + (1.0 - self.beta2) * tf.square(grad))
            var.assign_sub(self.learning_rate * correction * m / (tf.sqrt(v) + self.epsilon))


def conjugate_gradient(matrix_vector: Callable[[np.ndarray], np.ndarray],
                       b: np.ndarray,
                       iterations: int = 10,
                       residual_tol: float = 1e-10) -> np.ndarray:
    """Approximately solve ``A x = b`` for symmetric positive definite ``A``, given only
    ``A @ v``."""
    x = np.zeros_like(b)
    residual = b.copy()
    direction = b.copy()
    residual_sq = residual @ residual
    for _ in range(iterations):
        interrupts.raise_if_lost()  # a solve takes seconds on a large batch
        if residual_sq < residual_tol:
            break
        a_direction = matrix_vector(direction)
        alpha = residual_sq / (direction @ a_direction)
        x += alpha * direction
        residual -= alpha * a_direction
        new_residual_sq = residual @ residual
        direction = residual + (new_residual_sq / residual_sq) * direction
        residual_sq = new_residual_sq
    return x
