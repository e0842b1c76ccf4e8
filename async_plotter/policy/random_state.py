"""Random generators put back as they were: the trainer-side checks act with, and rebuild a copy
of, the user's policy, and neither may shift the numbers training draws afterwards (training must
draw the same numbers with plotting on or off)."""
import inspect
import random
import sys
import types
from typing import Any, Callable, List, Optional, Tuple

import numpy as np


class random_state_kept:  # noqa: N801 - used as a context manager, named like one
    """Puts back, on exit, numpy's and Python's global generators, the numpy generators the
    ``owners`` hold (the policy's own; an env's layers', their functions' too), TensorFlow's
    op-seed generator (after ``tf.random.set_seed``) and Keras's global seed generator."""

    def __init__(self, *owners: Any) -> None:
        self._saved: List[Tuple[Callable[[Any], None], Any]] = []
        self._owners = owners

    def __enter__(self) -> None:
        self._saved.append((np.random.set_state, np.random.get_state()))
        self._saved.append((random.setstate, random.getstate()))
        seen: set = set()
        generators = [found for owner in self._owners for found in _generators_of(owner, 0, seen)]
        for generator in generators:
            if isinstance(generator, np.random.Generator):
                state = generator.bit_generator.state
                self._saved.append(
                    (lambda s, g=generator: setattr(g.bit_generator, "state", s), state))
            else:
                self._saved.append((generator.set_state, generator.get_state()))
        self._saved.extend(_tensorflow_generators())

    def __exit__(self, *exc_info: Any) -> None:
        for restore, state in reversed(self._saved):
            restore(state)


def _tensorflow_generators() -> List[Tuple[Callable[[Any], None], Any]]:
    saved: List[Tuple[Callable[[Any], None], Any]] = []
    if "tensorflow" in sys.modules:
        from tensorflow.python.eager import context

        # Ops without a seed of their own draw one from here once a global seed is set.
        op_seeds = getattr(context.context(), "_rng", None)
        if isinstance(op_seeds, random.Random):
            saved.append((op_seeds.setstate, op_seeds.getstate()))
    if "keras" in sys.modules:
        try:
            from keras.src.backend.common import global_state

            # Only one that exists: making it here would draw its seed earlier than training.
            generator = global_state.get_global_attribute("global_seed_generator")
        except ImportError:
            generator = None
        state = getattr(generator, "state", None)
        if state is not None:
            saved.append((state.assign, np.array(state)))
    return saved


def _generators_of(obj: Any, depth: int = 0, seen: Optional[set] = None) -> List[Any]:
    """numpy generators held by ``obj`` (a policy, an env's layers), up to two steps deep: its
    attributes, the items of a list or tuple, and what a function reads (its closure, the
    globals it names: a ``TransformObservation``'s noise)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 2:
        return []
    seen.add(id(obj))
    if isinstance(obj, (list, tuple)):
        values = list(obj)
    elif inspect.isfunction(obj):
        names = set(obj.__code__.co_names)
        values = [cell.cell_contents for cell in obj.__closure__ or () if _filled(cell)]
        values += [value for name, value in obj.__globals__.items() if name in names]
    else:
        attributes = getattr(obj, "__dict__", None)
        values = list(attributes.values()) if isinstance(attributes, dict) else []
    found: List[Any] = []
    for value in values:
        if isinstance(value, (np.random.Generator, np.random.RandomState)):
            found.append(value)
        elif not isinstance(value, (np.ndarray, str, bytes, int, float, types.ModuleType)):
            found.extend(_generators_of(value, depth + 1, seen))
    return found


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # a cell not yet given its value
        return False
    return True
