"""Trust Region Policy Optimization (Schulman et al. 2015): a natural-gradient step with a line
search.

One update, top to bottom:

1. ``g``: gradient of the surrogate loss ``L = -mean(pi(a|s) / pi_old(a|s) * A)`` at the old
   parameters.
2. ``x ~ -H^-1 g`` by conjugate gradient, where ``H`` is the Hessian of the mean
   ``KL(pi_old || pi)`` (the Fisher matrix), applied to vectors by double backpropagation plus a
   small damping ``reg_coeff * v``. ``H`` is never formed.
3. Scale ``x`` so the quadratic model of the KL equals ``step_size``.
4. Backtrack along that step until the real KL is within ``step_size`` *and* the surrogate loss
   improved; if no step qualifies, keep the old parameters.
"""
import logging
from typing import Any, Dict, Optional

import numpy as np
import tensorflow as tf

from async_plotter.rl import interrupts
from async_plotter.rl.baselines import Baseline
from async_plotter.rl.batch_polopt import BatchPolopt
from async_plotter.validation import positive_int
from async_plotter.rl.optim import conjugate_gradient, flatten_tensors, unflatten_tensor
from async_plotter.rl.sample_processing import ProcessedSamples

logger = logging.getLogger(__name__)


class TRPO(BatchPolopt):
    """TRPO with a KL trust region.

    Args:
        step_size: maximum mean KL divergence between consecutive policies.
        cg_iters: conjugate-gradient iterations.
        reg_coeff: damping added to the Fisher-vector product (``(H + reg_coeff I) v``).
        backtrack_ratio: step shrink factor of the line search.
        max_backtracks: line-search attempts.
        subsample_factor: fraction of the batch used for Fisher-vector products (1.0 = all).
        **kwargs: see :class:`~async_plotter.rl.batch_polopt.BatchPolopt`.
    """

    def __init__(self,
                 env: Any,
                 policy: Any,
                 baseline: Optional[Baseline] = None,
                 step_size: float = 0.01,
                 cg_iters: int = 10,
                 reg_coeff: float = 1e-5,
                 backtrack_ratio: float = 0.8,
                 max_backtracks: int = 15,
                 subsample_factor: float = 1.0,
                 **kwargs: Any) -> None:
        super().__init__(env, policy, baseline, **kwargs)
        if not step_size > 0:
            raise ValueError(f"step_size must be positive, got {step_size!r}")
        if not 0 < backtrack_ratio < 1:
            raise ValueError(f"backtrack_ratio must be in (0, 1), got {backtrack_ratio!r}")
        if not 0 < subsample_factor <= 1:
            raise ValueError(f"subsample_factor must be in (0, 1], got {subsample_factor!r}")
        if reg_coeff < 0:
            raise ValueError(f"reg_coeff must be non-negative, got {reg_coeff!r}")
        self.step_size = float(step_size)
        self.cg_iters = positive_int("cg_iters", cg_iters)
        self.reg_coeff = float(reg_coeff)
        self.backtrack_ratio = float(backtrack_ratio)
        self.max_backtracks = positive_int("max_backtracks", max_backtracks)
        self.subsample_factor = float(subsample_factor)
        # Unseeded, subsampling draws from numpy's global generator (run_experiment_lite seeds
        # it).
        rng_seed = self.seed if self.seed is not None else np.random.randint(2**31 - 1)
        self._rng = np.random.default_rng(rng_seed)
        self._functions = None

    def _build(self) -> None:
        policy, dist = self.policy, self.policy.distribution
        variables = policy.trainable_variables
        obs_spec, action_spec, adv_spec, info_spec = self._input_signature()
        vector_spec = tf.TensorSpec([policy.num_params], tf.float32)

        def surrogate(obs, actions, advantages, old_info, new_info):
            ratio = dist.likelihood_ratio(actions, old_info, new_info)
            return -tf.reduce_mean(ratio * advantages)

        @tf.function(input_signature=(obs_spec, action_spec, adv_spec, info_spec))
        def loss_and_grad(obs, actions, advantages, old_info):
            with tf.GradientTape() as tape:
                loss = surrogate(obs, actions, advantages, old_info, policy.dist_info(obs))
            return loss, flatten_tensors(tape.gradient(loss, variables), variables)

        @tf.function(input_signature=(obs_spec, action_spec, adv_spec, info_spec))
        def loss_and_kl(obs, actions, advantages, old_info):
            new_info = policy.dist_info(obs)
            kl = tf.reduce_mean(dist.kl(old_info, new_info))
            return surrogate(obs, actions, advantages, old_info, new_info), kl

        @tf.function(input_signature=(obs_spec, info_spec, vector_spec))
        def fisher_vector_product(obs, old_info, vector):
            # d/dθ (∇θ KL · v) = H v, with v held constant: two tapes, no matrix.
            with tf.GradientTape() as outer:
                with tf.GradientTape() as inner:
                    kl = tf.reduce_mean(dist.kl(old_info, policy.dist_info(obs)))
                kl_grads = inner.gradient(kl, variables)
                pieces = unflatten_tensor(vector, variables)
                products = [tf.reduce_sum(g * v) for g, v in zip(kl_grads, pieces) if g is not None]
                grad_dot_vector = tf.add_n(products)
            return flatten_tensors(outer.gradient(grad_dot_vector, variables), variables)

        self._functions = (loss_and_grad, loss_and_kl, fisher_vector_product)

    def optimize_policy(self, itr: int, samples: ProcessedSamples) -> Dict[str, float]:
        interrupts.raise_if_lost()
        if self._functions is None:
            self._build()
        loss_and_grad, loss_and_kl, fisher_vector_product = self._functions
        obs, actions, advantages, old_info = self._tensors(samples)

        loss_tensor, grad_tensor = loss_and_grad(obs, actions, advantages, old_info)
        loss_before = float(loss_tensor)
        gradient = grad_tensor.numpy().astype(np.float64)

        fvp_obs, fvp_info = obs, old_info
        if self.subsample_factor < 1.0:
            n = samples.batch.num_steps
            size = max(1, int(n * self.subsample_factor))
            keep = np.sort(self._rng.choice(n, size, replace=False))
            fvp_obs = tf.gather(obs, keep)
            fvp_info = {k: tf.gather(v, keep) for k, v in old_info.items()}

        def hessian_vector(vector: np.ndarray) -> np.ndarray:
            product = fisher_vector_product(fvp_obs, fvp_info, tf.constant(vector, tf.float32))
            return product.numpy().astype(np.float64) + self.reg_coeff * vector

        direction = conjugate_gradient(hessian_vector, -gradient, self.cg_iters)
        quadratic = 0.5 * direction @ hessian_vector(direction)  # ½ xᵀHx
        stats = {"LossBefore": loss_before, "GradNorm": float(np.linalg.norm(gradient))}
        if not np.isfinite(quadratic) or quadratic <= 0:
            logger.warning("itr %d: degenerate natural-gradient step (xᵀHx = %g); no update", itr,
                           2 * quadratic)
            stats.update(LossAfter=loss_before, dLoss=0.0, MeanKL=0.0, LineSearchBacktracks=-1)
            return stats
        full_step = direction * np.sqrt(self.step_size / quadratic)

        old_params = self.policy.get_param_values().astype(np.float64)
        accepted = False
        for backtracks in range(self.max_backtracks):
            fraction = self.backtrack_ratio**backtracks
            self.policy.set_param_values(old_params + fraction * full_step)
            loss, kl = (float(x) for x in loss_and_kl(obs, actions, advantages, old_info))
            finite = np.isfinite(loss) and np.isfinite(kl)
            if finite and loss < loss_before and kl <= self.step_size:
                accepted = True
                break
        if not accepted:
            logger.warning(
                "itr %d: line search found no step that improves the loss within the "
                "KL limit; keeping the old policy", itr)
            self.policy.set_param_values(old_params)
            loss, kl, backtracks = loss_before, 0.0, self.max_backtracks
        stats.update(LossAfter=loss,
                     dLoss=loss_before - loss,
                     MeanKL=kl,
                     LineSearchBacktracks=backtracks)
        return stats
