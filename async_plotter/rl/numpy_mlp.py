"""The MLP policies' numpy copy: the same network and distribution, with no TensorFlow.

The samplers and the plotter's worker act with this copy (``MLPPolicy.numpy_copy``) instead of
the TensorFlow policy: their processes then never import TensorFlow (a few CPU-seconds and ~500
MB less each), and one step costs ~20x less CPU than the policy's concrete function
(``benchmarks/policy_step.py``). It takes the same flat parameter vector and reports the same
``info`` (to float32 rounding); the trainer-side check compares it with the trainer's policy like
any worker copy, and the algorithms' gradients still go through the TensorFlow policy.

Nothing here imports TensorFlow: keep it so.
"""
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from async_plotter.policy.numpy_layers import ACTIVATIONS as _NUMPY_ACTIVATIONS, split_flat
from async_plotter.rl.envs import flatten_observation

#: The hidden nonlinearities the MLPs take by name (``rl/policies._activation``), as numpy
#: computes them (float32 in, float32 out); None is none.
ACTIVATIONS: Dict[Optional[str], Callable[[np.ndarray], np.ndarray]] = {
    None: _NUMPY_ACTIVATIONS["linear"],
    **{
        name: _NUMPY_ACTIVATIONS[name]
        for name in ("tanh", "relu", "elu", "softplus")
    },
}


def sample_gaussian(info: Dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """One action per row of a diagonal Gaussian's ``mean`` and ``log_std``."""
    noise = rng.standard_normal(info["mean"].shape)
    return (info["mean"] + np.exp(info["log_std"]) * noise).astype(np.float32)


def sample_categorical(info: Dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """One index per row of ``prob``, every row at once by its inverse CDF."""
    cdf = np.cumsum(info["prob"], axis=-1)
    u = rng.random((cdf.shape[0], 1)) * cdf[:, -1:]
    return np.minimum((cdf < u).sum(axis=-1), cdf.shape[-1] - 1).astype(np.int64)


class ActsOnDistInfo:
    """rllab's acting methods, from ``dist_info_np``, ``_sample`` and the ``_rng`` used when the
    caller brings no generator."""

    _rng: np.random.Generator
    #: the env's observation space, where known: one observation of a ``Dict`` or ``Tuple``
    #: space (the plotter's env gives them as they are) is flattened as the samplers flatten it
    observation_space: Any = None

    def dist_info_np(self, observations: np.ndarray) -> Dict[str, np.ndarray]:
        """Distribution parameters for a batch of observations, as numpy arrays."""
        raise NotImplementedError

    def _sample(self, info: Dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def get_actions(
            self,
            observations: np.ndarray,
            rng: Optional[np.random.Generator] = None) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        """Sample one action per observation; returns ``(actions, agent_infos)`` (batched)."""
        info = self.dist_info_np(observations)
        return self._sample(info, self._rng if rng is None else rng), info

    def get_action(self,
                   observation: np.ndarray,
                   rng: Optional[np.random.Generator] = None) -> Tuple[Any, Dict[str, np.ndarray]]:
        """Sample an action for one observation; returns ``(action, agent_info)``."""
        actions, info = self.get_actions(self._vector(observation)[None], rng)
        return actions[0], {key: value[0] for key, value in info.items()}

    def deterministic_output(self, observation: np.ndarray) -> np.ndarray:
        """What the plotter shows of this policy acting deterministically on one observation:
        the Gaussian's ``mean``, or the categorical's ``prob`` (the env gets its argmax), as
        ``get_action``'s info has them, without drawing an action: a third less CPU a step of
        the numpy copy, where the history records every update (``policy/adapters.py``)."""
        info = self.dist_info_np(self._vector(observation)[None])
        return (info["mean"] if "mean" in info else info["prob"])[0]

    def _vector(self, observation: Any) -> np.ndarray:
        """One observation as the network takes it: a dict or tuple one flattened by its space,
        as the samplers flatten theirs."""
        if isinstance(observation, (dict, tuple)) and self.observation_space is not None:
            return flatten_observation(self.observation_space, observation)
        return np.asarray(observation)

    def reset(self, dones: Optional[np.ndarray] = None) -> None:
        """Start of a new path; feed-forward policies keep no state."""


class NumpyMLPPolicy(ActsOnDistInfo):
    """An MLP policy's network and distribution head in numpy, with its flat parameter layout:
    each layer's weights then biases, then the log standard deviation where it is trained.

    Args:
        sizes: the layer widths, observation first, action last.
        activation: a key of ``ACTIVATIONS``.
        head: ``"gaussian"`` (``mean`` and ``log_std``) or ``"categorical"`` (``prob``).
        log_std: the Gaussian's log standard deviation while no parameters have come, and for
            good where it is not a parameter.
        learn_std: whether the log standard deviation is in the flat vector.
        min_log_std: the floor the Gaussian's log standard deviation is held to.
        seed: the seed of the sampling noise.
        observation_space: the env's, to flatten a dict or tuple observation by.
    """

    #: how the plot worker calls it, for ``stats["policy_call"]``
    plot_call_path = "numpy"

    def __init__(self,
                 sizes: Sequence[int],
                 activation: Optional[str],
                 head: str,
                 log_std: Optional[np.ndarray] = None,
                 learn_std: bool = False,
                 min_log_std: float = -np.inf,
                 seed: int = 0,
                 observation_space: Any = None) -> None:
        if head not in ("gaussian", "categorical"):
            raise ValueError(f"head must be 'gaussian' or 'categorical', got {head!r}")
        self.sizes = tuple(int(size) for size in sizes)
        self.activation = activation
        self.head = head
        self.learn_std = bool(learn_std)
        self.min_log_std = np.float32(min_log_std)
        self._act = ACTIVATIONS[activation]
        self._shapes = [
            shape for fan_in, fan_out in zip(self.sizes[:-1], self.sizes[1:])
            for shape in ((fan_in, fan_out), (fan_out, ))
        ]
        if head == "gaussian" and learn_std:
            self._shapes.append((self.sizes[-1], ))
        self._layers = [(np.zeros(w, np.float32), np.zeros(b, np.float32))
                        for w, b in zip(self._shapes[0::2], self._shapes[1::2])]
        self._log_std = (np.zeros(self.sizes[-1], np.float32) if log_std is None else np.asarray(
            log_std, np.float32))
        self._rng = np.random.default_rng(seed)
        self.observation_space = observation_space

    @property
    def num_params(self) -> int:
        """Length of the flat parameter vector."""
        return int(sum(int(np.prod(shape)) for shape in self._shapes))

    def get_param_values(self) -> np.ndarray:
        """The parameters as one 1-D float32 vector, in the TensorFlow policy's order."""
        pieces = [array for pair in self._layers for array in pair]
        if self.head == "gaussian" and self.learn_std:
            pieces.append(self._log_std)
        return np.concatenate([piece.ravel() for piece in pieces]).astype(np.float32)

    def set_param_values(self, flat: np.ndarray) -> None:
        """Load a vector of the TensorFlow policy's ``get_param_values``."""
        flat = np.asarray(flat, np.float32).ravel()
        if flat.size != self.num_params:
            raise ValueError(f"this MLP has {self.num_params} parameters, got a vector of "
                             f"{flat.size}")
        pieces = split_flat(flat, self._shapes)
        self._layers = list(
            zip(pieces[0:len(self._layers) * 2:2], pieces[1:len(self._layers) * 2:2]))
        if self.head == "gaussian" and self.learn_std:
            self._log_std = pieces[-1]

    def dist_info_np(self, observations: np.ndarray) -> Dict[str, np.ndarray]:
        x = np.asarray(observations, np.float32).reshape(-1, self.sizes[0])
        last = len(self._layers) - 1
        for index, (weights, biases) in enumerate(self._layers):
            x = x @ weights + biases
            if index < last:
                x = self._act(x)
        if self.head == "categorical":
            exp = np.exp(x - x.max(axis=-1, keepdims=True))
            return {"prob": exp / exp.sum(axis=-1, keepdims=True)}
        return {
            "mean": x,
            "log_std": np.zeros_like(x) + np.maximum(self._log_std, self.min_log_std)
        }

    def _sample(self, info: Dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        if self.head == "categorical":
            return sample_categorical(info, rng)
        return sample_gaussian(info, rng)
