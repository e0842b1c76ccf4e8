"""What kind of action space an env has, told by its structure rather than by its package, and how
a policy's output becomes that space's action.

Gymnasium's ``spaces.Discrete`` and the real ``gym`` package's (0.26) are different classes with the
same shape: testing ``isinstance(space, gymnasium.spaces.Discrete)`` refused gym's CartPole. So a
space is *discrete* when it has an ``n`` and a scalar shape, a *box* when it has ``low``, ``high``
and a shape, and *other* (Dict, Tuple, MultiBinary...) otherwise; the worker passes actions for
other spaces through unchanged. A box's bounds may be arrays, lists or scalars (rllab-era and
hand-written spaces hold ``low = -0.1`` with ``shape = (2,)``): they are read once, as arrays of
the box's shape.
"""
import math
from typing import Any, Dict, Tuple

import numpy as np

DISCRETE = "discrete"
BOX = "box"
OTHER = "other"

_sum = np.add.reduce


def space_kind(space: Any) -> str:
    """``"discrete"``, ``"box"`` or ``"other"`` for a gym or Gymnasium space (or None)."""
    if space is None or isinstance(getattr(space, "spaces", None), (dict, tuple, list)):
        return OTHER  # Dict and Tuple spaces hold sub-spaces
    shape = getattr(space, "shape", None)
    if hasattr(space, "n") and not hasattr(space, "nvec") and shape in ((), None):
        return DISCRETE
    if hasattr(space, "low") and hasattr(space, "high") and isinstance(shape, (tuple, list)):
        return BOX
    return OTHER


class ActionConverter:
    """Turns a policy's output into the action an env with ``space`` is given, as the RL host's
    samplers do: ``n`` logits to an index (offset by the space's ``start``), one value to that
    index, a box's values reshaped to its shape and clipped to its bounds in the policy's own
    float dtype (gym's Pendulum renders from the action it was given, and drawing a float32 one
    fails there; float64 works).

    A value that is not finite (NaN parameters, an overflow) is replaced: a box's by 0 (then
    clipped into the bounds), a discrete action by the space's first. Such an action is the
    policy's fault, not the env's: stepped as it is, MuJoCo zeroes every control anyway (with a
    warning on the terminal, and a NaN control in the state the render process poses again),
    and other envs may raise, which would fail the worker over and over. The caller is told
    (``__call__``'s second value) and says so once.
    """

    def __init__(self, space: Any) -> None:
        self.kind = space_kind(space)
        self._start = int(getattr(space, "start", 0) or 0) if self.kind == DISCRETE else 0
        if self.kind == BOX:
            self._shape = tuple(int(size) for size in space.shape)
            # For outputs that are not floats (an int policy): the space's own dtype.
            self._dtype = np.dtype(getattr(space, "dtype", None) or np.float64)
            self._low, self._high = space.low, space.high
            self._bounds: Dict[np.dtype, Tuple[np.ndarray, np.ndarray]] = {}
            self._bounds_in(np.dtype(np.float64))  # a bound that does not fit the shape: now

    def __call__(self, output: Any) -> Tuple[Any, bool]:
        """``(action, finite)``: the env's action, and whether ``output`` was finite."""
        if self.kind == BOX:
            return self._box(output)
        if self.kind == DISCRETE:
            return self._discrete(output)
        return output, True

    def _box(self, output: Any) -> Tuple[np.ndarray, bool]:
        action = np.asarray(output)
        if action.dtype.kind != "f":
            action = action.astype(self._dtype)
        action = action.reshape(self._shape)
        low, high = self._bounds.get(action.dtype) or self._bounds_in(action.dtype)
        # The sum (in float64: float32 values cannot overflow it) is finite unless a value is
        # not: one reduction where np.isfinite(...).all() costs two, at every worker step.
        finite = math.isfinite(_sum(action, None, np.float64)) or bool(np.isfinite(action).all())
        if not finite:
            action = np.where(np.isfinite(action), action, 0).astype(action.dtype)
        # np.clip's own dispatch costs 4x the two ufuncs on a few values.
        return np.minimum(np.maximum(action, low), high), finite

    def _discrete(self, output: Any) -> Tuple[int, bool]:
        action = np.asarray(output)
        if not np.isfinite(action).all():
            return self._start, False
        if action.size > 1:
            return int(np.argmax(action)) + self._start, True
        return int(np.rint(action.reshape(-1)[0])), True

    def _bounds_in(self, dtype: np.dtype) -> Tuple[np.ndarray, np.ndarray]:
        """The box's bounds as arrays of its shape in ``dtype``, made once per dtype."""
        bounds = self._bounds.get(dtype)
        if bounds is None:
            bounds = self._bounds[dtype] = (self._bound("low", self._low, dtype),
                                            self._bound("high", self._high, dtype))
        return bounds

    def _bound(self, name: str, value: Any, dtype: np.dtype) -> np.ndarray:
        try:
            with np.errstate(over="ignore"):  # a float64 bound beyond float32 is +-inf there
                array = np.asarray(value, dtype=dtype)
            return np.broadcast_to(array, self._shape)
        except (TypeError, ValueError) as error:
            raise ValueError(f"the action space's {name} ({value!r}) is not a number or an array "
                             f"of its shape {self._shape}: {error}") from error
