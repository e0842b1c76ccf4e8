"""Multi-layer perceptron policies in TensorFlow 2 that follow rllab's policy protocol.

The protocol, which the samplers, the algorithms and the plotter rely on:

* ``get_param_values() -> 1-D float32 array`` and ``set_param_values(flat)``;
* ``get_action(obs) -> (action, agent_info)`` and ``get_actions(obs_batch)``;
* pickling stores only the constructor arguments (``Serializable``), so the same structure can be
  rebuilt in another process, where the parameters then arrive as a flat vector.

Constructor arguments must therefore be picklable: an :class:`~async_plotter.rl.envs.EnvSpec`, a
gymnasium id, or explicit ``obs_dim``/``action_dim`` (never a live environment).
"""
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
import tensorflow as tf

from async_plotter.rl.distributions import Categorical, DiagGaussian, Distribution
from async_plotter.rl.envs import EnvSpec, as_env_spec
from async_plotter.rl.numpy_mlp import (ActsOnDistInfo, NumpyMLPPolicy, sample_categorical,
                                        sample_gaussian)
from async_plotter.policy.serializable import Serializable

Activation = Union[str, Callable[[tf.Tensor], tf.Tensor], None]

_ACTIVATIONS: Dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "tanh": tf.tanh,
    "relu": tf.nn.relu,
    "elu": tf.nn.elu,
    "softplus": tf.nn.softplus,
}


def _activation(name: Activation) -> Callable[[tf.Tensor], tf.Tensor]:
    if name is None:
        return tf.identity
    if callable(name):
        return name
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown hidden_nonlinearity {name!r}; use one of "
                         f"{sorted(_ACTIVATIONS)}, None or a callable") from None


def _resolve_seed(seed: Optional[int]) -> int:
    # Without an explicit seed, draw from numpy's global generator rather than the OS, so that
    # run_experiment_lite(seed=...) (which seeds numpy) makes the initial weights reproducible.
    return int(np.random.randint(2**31 - 1)) if seed is None else int(seed)


class _MLP:
    """Dense layers as plain ``tf.Variable`` pairs, in a fixed order (that order is the flat
    one)."""

    def __init__(self, sizes: Sequence[int], activation: Activation, output_scale: float,
                 rng: np.random.Generator, name: str) -> None:
        self.activation = _activation(activation)
        self.sizes = tuple(sizes)
        #: the nonlinearity as given: a name (or None) the numpy copy computes too, or a callable
        self.activation_given = activation
        self.weights: List[tf.Variable] = []
        self.biases: List[tf.Variable] = []
        n_layers = len(sizes) - 1
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            limit = np.sqrt(6.0 / (fan_in + fan_out))  # Glorot uniform
            w = rng.uniform(-limit, limit, size=(fan_in, fan_out))
            if i == n_layers - 1:
                # A small output layer starts the policy near zero mean / uniform probabilities,
                # so early exploration comes from the (learned) noise, not from random weights.
                w = w * output_scale
            self.weights.append(tf.Variable(w.astype(np.float32), name=f"{name}/W{i}"))
            self.biases.append(tf.Variable(np.zeros(fan_out, dtype=np.float32),
                                           name=f"{name}/b{i}"))

    @property
    def variables(self) -> List[tf.Variable]:
        return [v for pair in zip(self.weights, self.biases) for v in pair]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = tf.matmul(x, w) + b
            if i < last:
                x = self.activation(x)
        return x


class MLPPolicy(Serializable, ActsOnDistInfo):
    """Shared machinery of the MLP policies: flat parameters, batched numpy inference, sampling.

    Subclasses build ``self._variables`` and implement :meth:`dist_info`, :meth:`_sample` and
    :meth:`_numpy_layout`.
    """

    recurrent = False
    vectorized = True
    distribution: Distribution

    def __init__(self, env_spec: Any, obs_dim: Optional[int], action_dim: Optional[int],
                 seed: Optional[int]) -> None:
        if env_spec is not None:
            spec = as_env_spec(env_spec)
            if spec is not env_spec and isinstance(self, Serializable):
                # Rebuilt elsewhere (a sampler, the plot worker, a snapshot loaded later), the
                # policy needs only the spaces: an id the training script registered is unknown
                # in a process that never ran it.
                self.record_argument("env_spec", spec)
            self.env_spec: Optional[EnvSpec] = spec
            self.observation_space = spec.observation_space
            self.obs_dim = spec.observation_dim
            self.action_dim = spec.action_dim
        elif obs_dim is None or action_dim is None:
            raise ValueError("pass env_spec, or both obs_dim and action_dim")
        else:
            self.env_spec = None
            self.obs_dim = int(obs_dim)
            self.action_dim = int(action_dim)
        if self.obs_dim <= 0 or self.action_dim <= 0:
            raise ValueError(f"obs_dim and action_dim must be positive, got {self.obs_dim} and "
                             f"{self.action_dim}")
        self.seed = _resolve_seed(seed)
        self._init_rng = np.random.default_rng(self.seed)
        # Sampling noise when the caller brings no generator of its own (samplers always do).
        self._rng = np.random.default_rng(self._init_rng.integers(2**63))
        self._variables: List[tf.Variable] = []
        self._inference: Optional[Callable[[tf.Tensor], tf.Tensor]] = None

    # ---- parameters -----------------------------------------------------------------------------

    @property
    def trainable_variables(self) -> List[tf.Variable]:
        """The variables the algorithms optimise, in flat-vector order."""
        return [v for v in self._variables if v.trainable]

    def get_params(self) -> List[tf.Variable]:
        """rllab name for :attr:`trainable_variables`."""
        return self.trainable_variables

    @property
    def num_params(self) -> int:
        """Length of the flat parameter vector."""
        return int(sum(int(np.prod(v.shape)) for v in self.trainable_variables))

    def get_param_values(self) -> np.ndarray:
        """All trainable parameters as one 1-D float32 vector."""
        return np.concatenate([v.numpy().ravel()
                               for v in self.trainable_variables]).astype(np.float32, copy=False)

    def set_param_values(self, flat: np.ndarray) -> None:
        """Load a vector produced by :meth:`get_param_values` (of a policy built the same way)."""
        flat = np.asarray(flat, dtype=np.float32).ravel()
        if flat.size != self.num_params:
            raise ValueError(f"{type(self).__name__} has {self.num_params} parameters, got a "
                             f"vector of {flat.size}")
        offset = 0
        for v in self.trainable_variables:
            # A tuple of ints, not the TensorShape: reshape converts a TensorShape by calling back
            # into Python and replaces whatever is raised there, a Ctrl-C's KeyboardInterrupt
            # included, with "TypeError: expected a sequence of integers" (TRPO's line search
            # calls this in a loop, so that is where a Ctrl-C often lands).
            shape = tuple(v.shape.as_list())
            size = int(np.prod(shape))
            v.assign(flat[offset:offset + size].reshape(shape))
            offset += size

    # ---- inference ----------------------------------------------------------------------------

    def dist_info(self, observations: tf.Tensor) -> Dict[str, tf.Tensor]:
        """Distribution parameters for a batch of observations, as differentiable tensors."""
        raise NotImplementedError

    def dist_info_np(self, observations: np.ndarray) -> Dict[str, np.ndarray]:
        """Distribution parameters for a batch of observations, as numpy arrays."""
        if self._inference is None:
            self._inference = self._build_inference()
        obs = np.asarray(observations, dtype=np.float32).reshape(-1, self.obs_dim)
        packed = self._inference(tf.constant(obs)).numpy()
        sizes = [shape[-1] for shape in self.distribution.info_shapes.values()]
        parts = np.split(packed, np.cumsum(sizes)[:-1], axis=-1)
        return dict(zip(self.distribution.info_shapes, parts))

    def _build_inference(self) -> Callable[[tf.Tensor], tf.Tensor]:
        # The sampler calls this once per environment step, and TensorFlow's per-call overhead is
        # what it costs: a concrete function skips tf.function's argument matching, and one packed
        # output instead of a dict saves a further ~50 us (measured ~370 -> ~205 us a call).
        keys = list(self.distribution.info_shapes)

        def packed(observations: tf.Tensor) -> tf.Tensor:
            info = self.dist_info(observations)
            return tf.concat([info[key] for key in keys], axis=-1)

        spec = tf.TensorSpec([None, self.obs_dim], tf.float32)
        # The MLPs' own network is straight-line TensorFlow: AutoGraph's rewrite of it took half
        # of Plotter()'s 0.18 s in a TRPO trainer (its trainer-side check calls this first). A
        # subclass's dist_info, or a callable nonlinearity, may branch on tensors, and keeps it.
        autograph = self._plain_network() is None
        return tf.function(packed, autograph=autograph).get_concrete_function(spec)

    def numpy_copy(self) -> Optional[NumpyMLPPolicy]:
        """The same network and distribution in numpy (``rl/numpy_mlp.py``) at the current
        parameters, taking the same flat vector: what the samplers and the plotter's worker act
        with, so that their processes never import TensorFlow. None where numpy would compute
        something else: a TensorFlow callable as nonlinearity, or a subclass with its own
        ``dist_info``."""
        network = self._plain_network()
        if network is None:
            return None
        _, head = self._numpy_layout()
        copy = NumpyMLPPolicy(network.sizes,
                              network.activation_given,
                              seed=self.seed,
                              observation_space=self.observation_space,
                              **head)
        copy.set_param_values(self.get_param_values())
        return copy

    def _numpy_layout(self) -> Tuple["_MLP", Dict[str, Any]]:
        """The network, and ``NumpyMLPPolicy``'s arguments for the distribution's head."""
        raise NotImplementedError

    def _plain_network(self) -> Optional["_MLP"]:
        """The network where ``dist_info`` is the MLPs' own and the nonlinearity a name: plain
        matrix products and named functions, which numpy computes too; None otherwise."""
        defined_by = next(cls for cls in type(self).__mro__ if "_numpy_layout" in vars(cls))
        if type(self).dist_info is not vars(defined_by).get("dist_info"):
            return None
        network, _ = self._numpy_layout()
        return None if callable(network.activation_given) else network

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(obs_dim={self.obs_dim}, action_dim={self.action_dim}, "
                f"params={self.num_params})")


class GaussianMLPPolicy(MLPPolicy):
    """Diagonal Gaussian policy for Box actions: an MLP gives the mean, and a learned,
    state-independent vector gives the log standard deviation.

    Args:
        env_spec: an :class:`EnvSpec`, a gymnasium id, a gymnasium ``EnvSpec`` or the env's
            factory, as the algorithm takes it (or None when ``obs_dim`` and ``action_dim`` are
            given); the policy keeps only the spaces.
        hidden_sizes: widths of the hidden layers.
        learn_std: whether the log standard deviation is trained.
        init_std: initial standard deviation of every action dimension.
        hidden_nonlinearity: ``"tanh"``, ``"relu"``, ``"elu"``, ``"softplus"`` or a callable.
        min_std: lower bound on the standard deviation (keeps the log-likelihood finite).
        obs_dim, action_dim: sizes, when no ``env_spec`` is given.
        seed: seed of the initial weights and of the policy's own sampling noise.
    """

    def __init__(self,
                 env_spec: Any = None,
                 hidden_sizes: Sequence[int] = (32, 32),
                 learn_std: bool = True,
                 init_std: float = 1.0,
                 hidden_nonlinearity: Activation = "tanh",
                 min_std: float = 1e-6,
                 obs_dim: Optional[int] = None,
                 action_dim: Optional[int] = None,
                 seed: Optional[int] = None) -> None:
        Serializable.quick_init(self, locals())
        super().__init__(env_spec, obs_dim, action_dim, seed)
        if self.env_spec is not None and not isinstance(self.env_spec.action_space, gym.spaces.Box):
            raise TypeError(f"GaussianMLPPolicy needs a Box action space, got "
                            f"{self.env_spec.action_space}; use CategoricalMLPPolicy")
        if init_std <= 0 or min_std <= 0:
            raise ValueError(f"init_std and min_std must be positive, got {init_std}, {min_std}")
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.distribution = DiagGaussian(self.action_dim)
        self._mean_network = _MLP((self.obs_dim, ) + self.hidden_sizes + (self.action_dim, ),
                                  hidden_nonlinearity,
                                  output_scale=0.01,
                                  rng=self._init_rng,
                                  name="mean")
        self._log_std = tf.Variable(np.full(self.action_dim, np.log(init_std), dtype=np.float32),
                                    trainable=bool(learn_std),
                                    name="log_std")
        self._min_log_std = float(np.log(min_std))
        self._variables = self._mean_network.variables + [self._log_std]

    def dist_info(self, observations: tf.Tensor) -> Dict[str, tf.Tensor]:
        mean = self._mean_network(observations)
        log_std = tf.maximum(self._log_std, self._min_log_std)
        return {"mean": mean, "log_std": tf.zeros_like(mean) + log_std}

    def _sample(self, info: Dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        return sample_gaussian(info, rng)

    def _numpy_layout(self) -> Tuple[_MLP, Dict[str, Any]]:
        return self._mean_network, {
            "head": "gaussian",
            "log_std": self._log_std.numpy(),
            "learn_std": self._log_std.trainable,
            "min_log_std": self._min_log_std,
        }


class CategoricalMLPPolicy(MLPPolicy):
    """Policy for Discrete actions: an MLP followed by a softmax gives the action probabilities.

    Arguments as for :class:`GaussianMLPPolicy` (no standard deviation). Actions are integers.
    """

    def __init__(self,
                 env_spec: Any = None,
                 hidden_sizes: Sequence[int] = (32, 32),
                 hidden_nonlinearity: Activation = "tanh",
                 obs_dim: Optional[int] = None,
                 action_dim: Optional[int] = None,
                 seed: Optional[int] = None) -> None:
        Serializable.quick_init(self, locals())
        super().__init__(env_spec, obs_dim, action_dim, seed)
        if self.env_spec is not None and not isinstance(self.env_spec.action_space,
                                                        gym.spaces.Discrete):
            raise TypeError(f"CategoricalMLPPolicy needs a Discrete action space, got "
                            f"{self.env_spec.action_space}; use GaussianMLPPolicy")
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.distribution = Categorical(self.action_dim)
        self._logits_network = _MLP((self.obs_dim, ) + self.hidden_sizes + (self.action_dim, ),
                                    hidden_nonlinearity,
                                    output_scale=0.01,
                                    rng=self._init_rng,
                                    name="logits")
        self._variables = self._logits_network.variables

    def dist_info(self, observations: tf.Tensor) -> Dict[str, tf.Tensor]:
        return {"prob": tf.nn.softmax(self._logits_network(observations), axis=-1)}

    def _sample(self, info: Dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        return sample_categorical(info, rng)

    def _numpy_layout(self) -> Tuple[_MLP, Dict[str, Any]]:
        return self._logits_network, {"head": "categorical"}
