"""State-value baselines that reduce the variance of policy-gradient estimates.

A baseline maps (observation, step index within the path) to a value, for a whole batch at once:
``predict(observations, timesteps)`` and ``fit(observations, timesteps, returns)``. Working on
arrays rather than on paths lets sample processing also ask for the value of the state a path was
cut in (for bootstrapping at time limits).
"""
import logging

import numpy as np

logger = logging.getLogger(__name__)


class Baseline:
    """Interface: one value per (observation, timestep) row; fit by regression on returns."""

    def predict(self, observations: np.ndarray, timesteps: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def fit(self, observations: np.ndarray, timesteps: np.ndarray, returns: np.ndarray) -> None:
        raise NotImplementedError


class ZeroBaseline(Baseline):
    """Predicts zero everywhere (advantages are then the returns)."""

    def predict(self, observations: np.ndarray, timesteps: np.ndarray) -> np.ndarray:
        return np.zeros(len(timesteps))

    def fit(self, observations: np.ndarray, timesteps: np.ndarray, returns: np.ndarray) -> None:
        pass


class LinearFeatureBaseline(Baseline):
    """Ridge regression on rllab's hand-made features of observation and time.

    Features per step: the observation clipped to [-10, 10], its square, ``t/100``, its square and
    cube (``t`` = step index within the path, which lets the value fall towards the time limit), and
    a constant. The ridge term grows tenfold (up to 5 times) until the solution is finite.
    """

    def __init__(self, reg_coeff: float = 1e-5) -> None:
        self.reg_coeff = float(reg_coeff)
        self.coeffs = None

    @staticmethod
    def features(observations: np.ndarray, timesteps: np.ndarray) -> np.ndarray:
        """The ``(N, 2 * obs_dim + 4)`` feature matrix."""
        n = len(timesteps)
        obs = np.clip(np.asarray(observations).reshape(n, -1), -10.0, 10.0)
        d = obs.shape[1]
        t = np.asarray(timesteps, dtype=np.float64) / 100.0
        feats = np.empty((n, 2 * d + 4))
        feats[:, :d] = obs
        np.square(obs, out=feats[:, d:2 * d])
        feats[:, 2 * d] = t
        feats[:, 2 * d + 1] = t * t
        feats[:, 2 * d + 2] = t * t * t
        feats[:, 2 * d + 3] = 1.0
        return feats

    def predict(self, observations: np.ndarray, timesteps: np.ndarray) -> np.ndarray:
        if self.coeffs is None:
            return np.zeros(len(timesteps))
        return self.features(observations, timesteps) @ self.coeffs

    def fit(self, observations: np.ndarray, timesteps: np.ndarray, returns: np.ndarray) -> None:
        feats = self.features(observations, timesteps)
        gram = feats.T @ feats
        target = feats.T @ np.asarray(returns, dtype=np.float64)
        reg = self.reg_coeff
        for _ in range(5):
            try:
                coeffs = np.linalg.solve(gram + reg * np.eye(gram.shape[0]), target)
            except np.linalg.LinAlgError:
                coeffs = None
            if coeffs is not None and np.all(np.isfinite(coeffs)):
                self.coeffs = coeffs
                return
            reg *= 10.0
        logger.warning(
            "LinearFeatureBaseline: no finite fit even with ridge %.1e; keeping the "
            "previous coefficients", reg)
