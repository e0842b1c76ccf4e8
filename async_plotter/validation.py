"""Argument checks shared by the Plotter and the RL host: each returns the checked value or raises
``InvalidArgumentError`` (a ``ValueError``) whose message names the argument and what it got."""
import math
import numbers
import os
import tempfile
from typing import Any, Dict, Optional, Tuple

import numpy as np

from async_plotter.errors import InvalidArgumentError


def is_int(value: Any) -> bool:
    """An integer (numpy's too), but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_whole(value: Any) -> bool:
    """An integer, or a float that is one (``1e3`` from a config file, ``500.0``)."""
    return is_int(value) or (_is_real(value) and float(value).is_integer())


def folder_problem(path: str) -> Optional[str]:
    """Why no file can be written into the folder ``path`` (made where it is missing), in
    words; None where one can."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        # The OS says "File exists" or "Not a directory": name the file in the way instead.
        blocking = next((part for part in _path_and_parents(path)
                         if os.path.exists(part) and not os.path.isdir(part)), None)
        if blocking is not None:
            return f"{blocking!r} is a file, not a folder"
        return error.strerror or str(error)
    return None


def _path_and_parents(path: str) -> Tuple[str, ...]:
    parts = [os.path.abspath(path)]
    while os.path.dirname(parts[-1]) != parts[-1]:
        parts.append(os.path.dirname(parts[-1]))
    return tuple(parts)


def user_path(path: Any) -> str:
    """``path`` (a str or ``os.PathLike``) as an absolute path, ``~`` expanded: Python does
    not, and ``video_dir="~/videos"`` made a folder named ``~`` in the working directory."""
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def positive_int(name: str, value: Any) -> int:
    if not _is_whole(value) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def non_negative_int(name: str, value: Any) -> int:
    if not _is_whole(value) or value < 0:
        raise InvalidArgumentError(f"{name} must be a non-negative int, got {value!r}")
    return int(value)


def optional_non_negative_int(name: str, value: Any) -> Optional[int]:
    if value is not None and (not _is_whole(value) or value < 0):
        raise InvalidArgumentError(f"{name} must be a non-negative int or None, got {value!r}")
    return None if value is None else int(value)


def positive_number(name: str, value: Any) -> float:
    if not _is_real(value) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def non_negative_number(name: str, value: Any) -> float:
    if not _is_real(value) or value < 0:
        raise InvalidArgumentError(f"{name} must be a non-negative number, got {value!r}")
    return float(value)


def unit_interval(name: str, value: Any) -> float:
    """A number in [0, 1]: discounts, GAE's lambda."""
    if not _is_real(value) or not 0 <= value <= 1:
        raise InvalidArgumentError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def cpu_fraction(name: str, value: Any) -> float:
    """A share of the machine's CPU, in (0, 1]."""
    if not _is_real(value) or not 0 < value <= 1:
        raise InvalidArgumentError(
            f"{name} must be a fraction of the machine's CPU in (0, 1], e.g. 0.05 for 5%; "
            f"got {value!r}")
    return float(value)


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")
    return value


def one_of(name: str, value: Any, choices: Tuple[str, ...]) -> str:
    if value not in choices:
        raise InvalidArgumentError(f"{name} must be one of {', '.join(map(repr, choices))}; "
                                   f"got {value!r}")
    return value


def frame_size(value: Any) -> Optional[Tuple[int, int]]:
    """``(width, height)`` of positive ints, or None."""
    if value is None:
        return None
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(is_int(v) and v > 0 for v in value)):
        raise InvalidArgumentError(
            f"frame_size must be (width, height) with positive ints, got {value!r}")
    return int(value[0]), int(value[1])


def metrics(value: Any) -> Dict[str, float]:
    """A dict of name -> number, as floats (their size is the channel's rule: ``metrics_fit``).
    A number is also a one-element array or tensor (a TensorFlow loss, ``tf.Variable``)."""
    if not isinstance(value, dict):
        raise InvalidArgumentError(
            f"metrics must be a dict of name -> number, got {type(value).__name__}")
    checked = {}
    for name, number in value.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(f"metrics keys must be strings, got {name!r}")
        scalar = _one_number(number)
        if scalar is None:
            raise InvalidArgumentError(
                f"metrics[{name!r}] must be a number (or an array or tensor of one), got "
                f"{type(number).__name__}{_shape_of(number)}")
        checked[name] = scalar
    return checked


def _one_number(value: Any) -> Optional[float]:
    """``value`` as a float: a number, or an array or tensor of one number (read through its
    ``numpy()``, so TensorFlow is never imported here); None otherwise."""
    if isinstance(value, numbers.Real):
        return None if isinstance(value, bool) else float(value)
    read = getattr(value, "numpy", None)
    try:
        array = np.asarray(read() if callable(read) else value)
    except Exception:  # noqa: BLE001 - a value that is no array at all
        return None
    if array.size != 1 or array.dtype.kind not in "iuf":
        return None
    return float(array.reshape(()))


def _shape_of(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f" of shape {tuple(shape)}" if shape is not None else ""


def callable_or_none(name: str, value: Any) -> None:
    if value is not None and not callable(value):
        raise InvalidArgumentError(f"{name} must be a callable or None, got {type(value).__name__}")
