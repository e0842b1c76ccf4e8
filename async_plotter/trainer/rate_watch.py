"""The videos' rate is planned once, as the worker starts, from the env's rate then
(``worker/playback.py``: steps per second of simulated time, and which steps are drawn). A
``frame_skip`` or time step the trainer sets during the run travels to the worker's env with its
other settings, and the videos would go on at the planned rate, faster or slower than real time,
with no word: ``RateWatch`` names it once, at the ``update_plot`` that carries it there.
"""
import logging
import math
import time
from typing import Any, Optional

from async_plotter.worker.playback import env_rate

logger = logging.getLogger("async_plotter")

#: a check at ``update_plot`` waits this many times its own length after the one before (the
#: env's ``dt``: ~1 us): at most 1% of the trainer's time
_SPACING = 100.0


class RateWatch:
    """The trainer's env's rate at each ``update_plot``, against the one the videos were planned
    at (the same settings, read at ``Plotter()``)."""

    def __init__(self, env: Any, label: str, planned: float) -> None:
        self._env, self._label, self._planned = env, label, planned
        self._said = False
        self._next_check = 0.0

    @classmethod
    def of(cls, trainer_env: Any, label: str) -> Optional["RateWatch"]:
        """A watch of ``trainer_env`` (the env object whose settings travel), or None where it
        says no rate (the videos play at the Plotter's ``fps`` then)."""
        found = env_rate(trainer_env) if trainer_env is not None else None
        return cls(trainer_env, label, found[0]) if found is not None else None

    def check(self) -> None:
        """Warn, once, if the env's rate is no longer the planned one."""
        started = time.perf_counter()
        if self._said or started < self._next_check:
            return
        found = env_rate(self._env)
        if found is not None and not math.isclose(found[0], self._planned, rel_tol=1e-6):
            self._said = True
            speed = self._planned / found[0]
            logger.warning(
                "%s now runs at %.4g steps per simulated second, not %.4g as when its videos' rate "
                "was planned (a frame_skip or time step set during the run, which travels to the "
                "plot worker): its videos keep the planned rate, so from this update on they "
                "play %.3gx %s than real time. Close this Plotter and start another to plan "
                "them again.", self._label, found[0], self._planned,
                speed if speed > 1 else 1 / speed, "faster" if speed > 1 else "slower")
        self._next_check = started + _SPACING * (time.perf_counter() - started)
