"""Vanilla policy gradient (REINFORCE with a baseline), one Adam step per batch by default."""
from typing import Any, Dict, Optional

import numpy as np
import tensorflow as tf

from async_plotter.rl import interrupts
from async_plotter.rl.baselines import Baseline
from async_plotter.rl.batch_polopt import BatchPolopt
from async_plotter.validation import positive_int
from async_plotter.rl.optim import Adam
from async_plotter.rl.sample_processing import ProcessedSamples


class VPG(BatchPolopt):
    """Minimises ``-mean(log pi(a|s) * advantage)`` with Adam.

    Args:
        learning_rate: Adam's step size.
        optimizer_steps: full-batch gradient steps per iteration.
        **kwargs: see :class:`~async_plotter.rl.batch_polopt.BatchPolopt`.
    """

    def __init__(self,
                 env: Any,
                 policy: Any,
                 baseline: Optional[Baseline] = None,
                 learning_rate: float = 0.01,
                 optimizer_steps: int = 1,
                 **kwargs: Any) -> None:
        super().__init__(env, policy, baseline, **kwargs)
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {learning_rate!r}")
        self.learning_rate = float(learning_rate)
        self.optimizer_steps = positive_int("optimizer_steps", optimizer_steps)
        self._functions = None
        self._optimizer: Optional[Adam] = None

    def optimizer_state(self) -> Optional[Dict[str, Any]]:
        """Adam's moments and step count (None before the first iteration)."""
        return None if self._optimizer is None else self._optimizer.state()

    def restore_optimizer_state(self, state: Dict[str, Any]) -> None:
        """Go on with the moments of the run resumed."""
        if self._functions is None:
            self._build()
        self._optimizer.restore(state)

    def _build(self) -> None:
        policy, dist = self.policy, self.policy.distribution
        variables = policy.trainable_variables
        optimizer = self._optimizer = Adam(variables, self.learning_rate)
        signature = self._input_signature()

        def surrogate(obs, actions, advantages):
            log_likelihood = dist.log_likelihood(actions, policy.dist_info(obs))
            return -tf.reduce_mean(log_likelihood * advantages)

        @tf.function(input_signature=signature)
        def train_step(obs, actions, advantages, old_info):
            with tf.GradientTape() as tape:
                loss = surrogate(obs, actions, advantages)
            optimizer.apply(tape.gradient(loss, variables))
            return loss

        @tf.function(input_signature=signature)
        def loss_and_kl(obs, actions, advantages, old_info):
            kl = tf.reduce_mean(dist.kl(old_info, policy.dist_info(obs)))
            return surrogate(obs, actions, advantages), kl

        self._functions = (train_step, loss_and_kl)

    def optimize_policy(self, itr: int, samples: ProcessedSamples) -> Dict[str, float]:
        interrupts.raise_if_lost()
        if self._functions is None:
            self._build()
        train_step, loss_and_kl = self._functions
        inputs = self._tensors(samples)
        loss_before = None
        for _ in range(self.optimizer_steps):
            loss = float(train_step(*inputs))
            loss_before = loss if loss_before is None else loss_before
        loss_after, mean_kl = (float(x) for x in loss_and_kl(*inputs))
        if not np.isfinite(loss_after):
            raise FloatingPointError(f"VPG loss became {loss_after} at iteration {itr}; lower "
                                     "learning_rate")
        return {
            "LossBefore": loss_before,
            "LossAfter": loss_after,
            "dLoss": loss_before - loss_after,
            "MeanKL": mean_kl,
        }
