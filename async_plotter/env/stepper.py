"""The one way the plotter steps an env: a policy's output converted to the action space, the
state that travelled kept in the env's wrappers, the step, and the step limit kept.

The rollout process steps its env with it at every step, and the trainer-side check
(``trainer/preflight.py``) steps its own copy once with it at ``Plotter()``: an env that
fails on the worker's path (a duck-typed ``Box`` whose bounds are scalars, a ``step`` that rejects
the action) fails there first, as a named error, instead of failing the worker over and over.

Runs in the trainer (once) and in the rollout process (every step); needs no TensorFlow.
"""
from typing import Any, NamedTuple, Optional

import numpy as np

from async_plotter.env.gym_compat import direct_step
from async_plotter.env.spaces import ActionConverter
from async_plotter.env.state import WorkerEnvState


class Step(NamedTuple):
    """What one step gave."""

    #: the action the env was given (converted, clipped; a non-finite value replaced)
    action: Any
    observation: Any
    reward: float
    terminated: bool
    #: the env's own truncation, or the step limit of a ``TimeLimit`` stepped past
    truncated: bool

    @property
    def ended(self) -> bool:
        return self.terminated or self.truncated


class EnvStepper:
    """Steps ``env`` (built from its recipe, Gymnasium API) whose stateful wrappers are ``state``.

    Where every wrapper of the env only keeps books (``gymnasium.make``'s ``TimeLimit``,
    ``OrderEnforcing``, ``PassiveEnvChecker``), steps go to the bare env, a quarter of a Hopper
    step's CPU less, and the ``TimeLimit`` is kept here (``env/gym_compat.direct_step``).
    """

    def __init__(self, env: Any, state: WorkerEnvState) -> None:
        self.env = env
        self._state = state
        self._convert = ActionConverter(getattr(env, "action_space", None))
        self._step, self._time_limit = direct_step(env)
        self._steps = 0
        self._nonfinite = 0

    def reset(self, seed: Optional[int] = None) -> Any:
        """A new episode; its first observation."""
        self._state.hold()  # the trainer's wrapper state, never the worker's own updates of it
        # TimeLimit's limit is a setting that travels: read anew where it is kept here.
        self._step, self._time_limit = direct_step(self.env)
        observation, _ = self.env.reset(seed=seed)
        self._steps = 0
        return observation

    def action_for(self, policy_output: Any) -> Any:
        """The action the env is given for ``policy_output``."""
        return self._convert(policy_output)[0]

    def step(self, policy_output: Any) -> Step:
        """One step with the policy's output (as ``get_action`` or the model gave it)."""
        action, finite = self._convert(policy_output)
        if not finite:
            self._nonfinite += 1
        self._state.hold()
        observation, reward, terminated, truncated, _ = self._step(action)
        self._steps += 1
        limit = self._time_limit
        truncated = bool(truncated) or (limit is not None and self._steps >= limit)
        return Step(action, observation, as_reward(reward), bool(terminated), truncated)

    def take_nonfinite(self) -> int:
        """Steps whose policy output was not finite (NaN, inf) since the last call; each was
        stepped with 0 in place of those values (``spaces.ActionConverter``)."""
        count, self._nonfinite = self._nonfinite, 0
        return count


def as_reward(reward: Any) -> float:
    """A step's reward as one number: an array of one (``np.array([r])``, which custom envs and
    their training loops take alike) is its value, a vector of several (a multi-objective env's)
    their sum."""
    try:
        return float(reward)
    except TypeError:
        return float(np.sum(np.asarray(reward, np.float64)))
