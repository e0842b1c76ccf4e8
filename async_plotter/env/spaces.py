"""What kind of action space an env has, told by its structure rather than by its package.

Gymnasium's ``spaces.Discrete`` and the real ``gym`` package's (0.26) are different classes with the
same shape: testing ``isinstance(space, gymnasium.spaces.Discrete)`` refused gym's CartPole. So a
space is *discrete* when it has an ``n`` and a scalar shape, a *box* when it has ``low``, ``high``
and a shape, and *other* (Dict, Tuple, MultiBinary...) otherwise; the worker passes actions for
other spaces through unchanged.
"""
from typing import Any

import numpy as np

DISCRETE = "discrete"
BOX = "box"
OTHER = "other"


def space_kind(space: Any) -> str:
    """``"discrete"``, ``"box"`` or ``"other"`` for a gym or Gymnasium space (or None)."""
    if space is None or isinstance(getattr(space, "spaces", None), (dict, tuple, list)):
        return OTHER  # Dict and Tuple spaces hold sub-spaces
    shape = getattr(space, "shape", None)
    if hasattr(space, "n") and not hasattr(space, "nvec") and shape in ((), None):
        return DISCRETE
    if hasattr(space, "low") and hasattr(space, "high") and isinstance(shape, tuple):
        return BOX
    return OTHER


def to_env_action(action: Any, space: Any) -> Any:
    """A policy's output adapted to the action space: ``n`` logits to an index (offset by the
    space's ``start``), one value to that index, a box's values clipped to its bounds (in the
    policy's float dtype)."""
    kind = space_kind(space)
    if kind == DISCRETE:
        action = np.asarray(action)
        if action.size > 1:
            return int(np.argmax(action)) + int(getattr(space, "start", 0))
        return int(np.rint(action.reshape(-1)[0]))
    if kind == BOX:
        # In the policy's own dtype, as the trainer's env gets it: gym's Pendulum renders from
        # the action it was given, and drawing a float32 one fails there (float64 works).
        action = np.asarray(action)
        if action.dtype.kind != "f":
            action = action.astype(space.dtype)
        action = action.reshape(space.shape)
        return np.clip(action, space.low.astype(action.dtype), space.high.astype(action.dtype))
    return action
