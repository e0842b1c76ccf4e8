"""Action distributions: log-likelihood, KL divergence, entropy and likelihood ratio.

Each distribution is described by a dict of parameters (its "info"), exactly what a policy returns
as ``agent_info`` and what samplers store per step: ``{"mean", "log_std"}`` for
:class:`DiagGaussian`, ``{"prob"}`` for :class:`Categorical`. Every quantity comes in two flavours:
TensorFlow (differentiable, used inside losses) and numpy (``*_np``, used for statistics and tests).
Both reduce over the last axis, so any leading batch shape works.
"""
from typing import Dict, Mapping, Tuple

import numpy as np
import tensorflow as tf

Info = Mapping[str, tf.Tensor]
InfoNp = Mapping[str, np.ndarray]

_LOG_2PI = float(np.log(2.0 * np.pi))
# Probabilities are clipped away from zero before taking logs; a policy can put (numerically) zero
# mass on an action that the old policy sampled.
_TINY = 1e-8


class Distribution:
    """Common interface; ``dim`` is the action dimension (Box) or the number of actions
    (Discrete)."""

    #: numpy dtype of a sampled action, and per-step action shape (without the batch axis).
    action_dtype = "float32"

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)

    @property
    def action_shape(self) -> Tuple[int, ...]:
        return (self.dim, )

    @property
    def info_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """Per-step shape of each info entry (without the batch axis)."""
        raise NotImplementedError

    def likelihood_ratio(self, x: tf.Tensor, old: Info, new: Info) -> tf.Tensor:
        """``p_new(x) / p_old(x)``, computed from log-likelihoods for stability."""
        return tf.exp(self.log_likelihood(x, new) - self.log_likelihood(x, old))

    def likelihood_ratio_np(self, x: np.ndarray, old: InfoNp, new: InfoNp) -> np.ndarray:
        """numpy version of :meth:`likelihood_ratio`."""
        return np.exp(self.log_likelihood_np(x, new) - self.log_likelihood_np(x, old))

    def log_likelihood(self, x: tf.Tensor, info: Info) -> tf.Tensor:
        raise NotImplementedError

    def log_likelihood_np(self, x: np.ndarray, info: InfoNp) -> np.ndarray:
        raise NotImplementedError

    def kl(self, old: Info, new: Info) -> tf.Tensor:
        """``KL(old || new)`` per sample."""
        raise NotImplementedError

    def kl_np(self, old: InfoNp, new: InfoNp) -> np.ndarray:
        raise NotImplementedError

    def entropy(self, info: Info) -> tf.Tensor:
        raise NotImplementedError

    def entropy_np(self, info: InfoNp) -> np.ndarray:
        raise NotImplementedError


class DiagGaussian(Distribution):
    """Gaussian with diagonal covariance, parametrised by ``mean`` and ``log_std``."""

    @property
    def info_shapes(self) -> Dict[str, Tuple[int, ...]]:
        return {"mean": (self.dim, ), "log_std": (self.dim, )}

    def log_likelihood(self, x: tf.Tensor, info: Info) -> tf.Tensor:
        mean, log_std = info["mean"], info["log_std"]
        z = (x - mean) / tf.exp(log_std)
        return (-0.5 * tf.reduce_sum(tf.square(z), axis=-1) - tf.reduce_sum(log_std, axis=-1) -
                0.5 * self.dim * _LOG_2PI)

    def log_likelihood_np(self, x: np.ndarray, info: InfoNp) -> np.ndarray:
        mean, log_std = np.asarray(info["mean"]), np.asarray(info["log_std"])
        z = (np.asarray(x) - mean) / np.exp(log_std)
        return (-0.5 * np.sum(np.square(z), axis=-1) - np.sum(log_std, axis=-1) -
                0.5 * self.dim * _LOG_2PI)

    def kl(self, old: Info, new: Info) -> tf.Tensor:
        old_mean, old_log_std = old["mean"], old["log_std"]
        new_mean, new_log_std = new["mean"], new["log_std"]
        numerator = tf.square(old_mean - new_mean) + tf.exp(2.0 * old_log_std)
        denominator = 2.0 * tf.exp(2.0 * new_log_std)
        return tf.reduce_sum(numerator / denominator + new_log_std - old_log_std - 0.5, axis=-1)

    def kl_np(self, old: InfoNp, new: InfoNp) -> np.ndarray:
        old_mean, old_log_std = np.asarray(old["mean"]), np.asarray(old["log_std"])
        new_mean, new_log_std = np.asarray(new["mean"]), np.asarray(new["log_std"])
        numerator = np.square(old_mean - new_mean) + np.exp(2.0 * old_log_std)
        denominator = 2.0 * np.exp(2.0 * new_log_std)
        return np.sum(numerator / denominator + new_log_std - old_log_std - 0.5, axis=-1)

    def entropy(self, info: Info) -> tf.Tensor:
        return tf.reduce_sum(info["log_std"] + 0.5 * (_LOG_2PI + 1.0), axis=-1)

    def entropy_np(self, info: InfoNp) -> np.ndarray:
        return np.sum(np.asarray(info["log_std"]) + 0.5 * (_LOG_2PI + 1.0), axis=-1)


class Categorical(Distribution):
    """Distribution over ``dim`` discrete actions, parametrised by ``prob``; actions are indices."""

    action_dtype = "int64"

    @property
    def action_shape(self) -> Tuple[int, ...]:
        return ()

    @property
    def info_shapes(self) -> Dict[str, Tuple[int, ...]]:
        return {"prob": (self.dim, )}

    def log_likelihood(self, x: tf.Tensor, info: Info) -> tf.Tensor:
        prob = info["prob"]
        picked = tf.reduce_sum(prob * tf.one_hot(tf.cast(x, tf.int32), self.dim, dtype=prob.dtype),
                               axis=-1)
        return tf.math.log(picked + _TINY)

    def log_likelihood_np(self, x: np.ndarray, info: InfoNp) -> np.ndarray:
        prob = np.asarray(info["prob"])
        picked = np.take_along_axis(prob, np.asarray(x, dtype=np.int64)[..., None], axis=-1)[..., 0]
        return np.log(picked + _TINY)

    def kl(self, old: Info, new: Info) -> tf.Tensor:
        old_prob, new_prob = old["prob"], new["prob"]
        return tf.reduce_sum(old_prob *
                             (tf.math.log(old_prob + _TINY) - tf.math.log(new_prob + _TINY)),
                             axis=-1)

    def kl_np(self, old: InfoNp, new: InfoNp) -> np.ndarray:
        old_prob, new_prob = np.asarray(old["prob"]), np.asarray(new["prob"])
        return np.sum(old_prob * (np.log(old_prob + _TINY) - np.log(new_prob + _TINY)), axis=-1)

    def entropy(self, info: Info) -> tf.Tensor:
        prob = info["prob"]
        return -tf.reduce_sum(prob * tf.math.log(prob + _TINY), axis=-1)

    def entropy_np(self, info: InfoNp) -> np.ndarray:
        prob = np.asarray(info["prob"])
        return -np.sum(prob * np.log(prob + _TINY), axis=-1)
