"""Observation wrappers that change during the run outside the state that travels: a
``TransformObservation`` whose function reads statistics the training loop updates, a wrapper of
the user's that reads a global. ``Plotter()``'s checks see the env as it is then; the worker's copy
is built once, from what the env was then, so such a change never reaches it, and its videos
would show the policy on observations it no longer trains on.

Checked in the trainer at ``update_plot``: a copy of the env built as the worker builds it,
kept for the run and given the state that travels with that update, must transform a few
observations as the trainer's env does now (``env/check.py``'s comparison, on detached copies of
the wrappers: neither env changes). Only where an observation wrapper holds no state that
travels (a wrapper of a known kind, or with its own hook, is given the trainer's state with every
update) and is the user's, or holds a function of the user's; nothing otherwise (Gymnasium's
``FlattenObservation`` and the like cannot change). A check costs ~0.7-0.8 ms (Swimmer under
two wrappers, the random generators they could draw from kept as they were; ~0.015 ms for the rest
of ``update_plot``), so after one the next waits 100 times as long: every update of a training
loop, at most 1% of a loop that calls it far more often. A refused update is not sent.
"""
import logging
import time
from typing import Any, Callable, Optional

import gymnasium
import numpy as np

from async_plotter.env.check import compare_observation_wrappers, raw_observation
from async_plotter.env.layers import LIBRARY_PACKAGES, LINKS, env_layers, from_a_library
from async_plotter.env.state import WorkerEnvState, layer_kind
from async_plotter.errors import EnvMismatchError

logger = logging.getLogger("async_plotter")

#: a check waits this many times its own length after the one before: at most 1% of the trainer's
#: time, and every update where updates come more than ~80 ms apart (a check: ~0.8 ms)
_SPACING = 100.0
_ADVICE = ("The worker's copy was built when Plotter() was, so whatever the wrapper reads that "
           "changed since (statistics you update, a global) reached it as it was then: keep such "
           "state in a wrapper with get_wrapper_state() and set_wrapper_state(state), which "
           "travel with every update_plot, or in the policy.")


class ObservationDrift:
    """The trainer's observation wrappers against the worker's copy, at each update."""

    def __init__(self, copy: Any, copy_state: WorkerEnvState, trainer_env: Any, label: str,
                 raw: np.ndarray) -> None:
        self._copy, self._copy_state = copy, copy_state
        self._trainer_env, self._label, self._raw = trainer_env, label, raw
        self._next_check = 0.0

    @classmethod
    def of(cls, build: Callable[[], Any], state_of: Callable[[Any], WorkerEnvState],
           trainer_env: Any, label: str) -> Optional["ObservationDrift"]:
        """A check of ``trainer_env`` against a copy ``build`` makes (``state_of(copy)``: its
        end of the state that travels, given the trainer's now), or None where nothing can
        drift this way: no env object, no observation wrapper without travelling state, or
        wrappers that cannot be compared (``Plotter()``'s checks said so)."""
        if trainer_env is None or not any(_may_drift(layer) for layer in env_layers(trainer_env)):
            return None
        copy = None
        try:
            copy = build()
            copy_state = state_of(copy)
            raw = raw_observation(copy)
            if raw is not None and compare_observation_wrappers(copy, trainer_env, label, raw):
                return cls(copy, copy_state, trainer_env, label, raw)
        except Exception:  # noqa: BLE001 - Plotter()'s checks named what they could
            logger.debug("not following %s's observation wrappers", label, exc_info=True)
        if copy is not None:
            _close_quietly(copy)
        return None

    def check(self, travelled: np.ndarray) -> None:
        """Raise ``EnvMismatchError`` if the worker's copy, given ``travelled`` (the update's
        env state, as the worker gets it), transforms observations otherwise than the trainer's
        env now."""
        started = time.perf_counter()
        if started < self._next_check:
            return
        try:
            self._copy_state.apply(travelled)
            compared = compare_observation_wrappers(self._copy, self._trainer_env, self._label,
                                                    self._raw, _ADVICE)
        except EnvMismatchError as error:
            raise EnvMismatchError(
                "since Plotter() was built, your env's observation wrappers changed in a way "
                f"that does not travel to the plot worker: {error}") from None
        except Exception:  # noqa: BLE001 - the check's own trouble must not fail an update
            logger.debug("no longer following %s's observation wrappers",
                         self._label,
                         exc_info=True)
            compared = False
        # Wrappers that can no longer be compared (a shape that changed) are not tried again.
        self._next_check = (started + _SPACING *
                            (time.perf_counter() - started) if compared else float("inf"))

    def close(self) -> None:
        _close_quietly(self._copy)


def _may_drift(layer: Any) -> bool:
    """An observation wrapper whose behaviour no travelling state carries: the user's own, or a
    library's that holds a function of the user's (``TransformObservation``); Gymnasium's others
    (``FlattenObservation``, ``RescaleObservation``...) hold only their own."""
    if layer_kind(layer) is not None or not isinstance(
            layer, (gymnasium.ObservationWrapper, gymnasium.vector.VectorObservationWrapper)):
        return False
    return not from_a_library(layer) or any(
        _users_function(value) for key, value in vars(layer).items() if key not in LINKS)


def _users_function(value: Any) -> bool:
    """A callable not defined by Gymnasium, gym, numpy or this library (one without a module,
    such as a ``functools.partial``, counts as the user's)."""
    module = getattr(value, "__module__", None) or ""
    return callable(value) and module.split(".")[0] not in LIBRARY_PACKAGES + ("numpy", )


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing a copy must not fail the trainer
        pass
