"""What an observation is made of: an array, or (a ``Dict`` or ``Tuple`` space's, as
goal-conditioned envs give them) a dict or tuple of arrays. The env checks (``check.py``,
``carried_state.py``) and the trainer's policy check feed, shift, copy and compare them part by
part through these."""
from typing import Any, Callable, List, Tuple

import numpy as np

#: an array, or a dict or tuple of them (a ``Dict`` or ``Tuple`` observation space's)
Observation = Any


def flat_observation(observation: Observation) -> np.ndarray:
    """All of an observation's numbers in one float64 vector (a dict's parts by sorted key)."""
    numbers = [np.ravel(np.asarray(part, np.float64)) for _, part in parts(observation)]
    return np.concatenate(numbers) if numbers else np.zeros(0)


def parts(observation: Observation, path: str = "") -> List[Tuple[str, Any]]:
    """The arrays an observation is made of, each with where it is (``["goal"]``, ``[1]``)."""
    if isinstance(observation, dict):
        return [
            part for key in sorted(observation)
            for part in parts(observation[key], f"{path}[{key!r}]")
        ]
    if isinstance(observation, tuple):
        return [
            part for index, item in enumerate(observation)
            for part in parts(item, f"{path}[{index}]")
        ]
    return [(path, observation)]


def each_part(function: Callable[[Any], Any], observation: Observation) -> Observation:
    """``observation`` with ``function`` applied to each of its arrays, its structure kept."""
    if isinstance(observation, dict):
        return type(observation)(
            (key, each_part(function, item)) for key, item in observation.items())
    if isinstance(observation, tuple):
        return tuple(each_part(function, item) for item in observation)
    return function(observation)


def batch_of_one(observation: Observation) -> Observation:
    """A batch of one, for a vector env's wrappers."""
    return each_part(lambda part: np.asarray(part)[None], observation)


def first_of_batch(batch: Observation) -> Observation:
    """The one observation of a batch of one."""
    return each_part(lambda part: np.asarray(part)[0], batch)
