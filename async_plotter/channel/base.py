"""What travels on a parameter channel."""
import dataclasses
from typing import Optional

import numpy as np


class ParentGone(Exception):
    """The trainer on the other end of the channel went away; the worker should exit."""


@dataclasses.dataclass(frozen=True)
class ParamUpdate:
    """One published parameter vector and what the trainer said about it."""

    #: 0 is the initial policy given at start; then 1, 2, 3, ... in publishing order.
    number: int
    params: np.ndarray
    #: the training iteration the trainer passed to ``update_plot`` (None if it passed none)
    iteration: Optional[int]
    #: rollout length limit for this update
    max_path_length: int
