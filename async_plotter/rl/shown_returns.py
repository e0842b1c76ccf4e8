"""The curve of what was shown, in ``progress.csv``: each row's ``ShownReturn`` and
``ShownIteration``.

The plotter's history (``Plotter(history=...)``) rolls out every policy it takes once more: one
whole, deterministic episode from the run's one start state, whose return ``stats["history"]``
reports as it is recorded, a little after the policy's own row. A row's ``ShownReturn`` is the
return of the newest recording finished while that iteration ran, and ``ShownIteration`` the
iteration of the policy it shows (``-1``: the initial policy); both are blank in a row where none
finished. The last row also gets the final policy's, recorded at ``close()``. It is not the
training average (``AverageReturn``, over the sampled, stochastic paths of the batch).

A row holds one recording, so where two finish within one iteration the older is not in
``progress.csv``; ``ShownReturns.points`` keeps every one seen, for the learning curve.
"""
from typing import Any, Dict, Optional

from async_plotter.learning_curve import SHOWN_RETURN
from async_plotter.render.history import INITIAL_POLICY_ITERATION

#: the column naming the policy whose return a row's ``ShownReturn`` is
SHOWN_ITERATION = "ShownIteration"
#: the columns, blank (None) in a row where no recording finished
BLANK: Dict[str, Optional[float]] = {SHOWN_RETURN: None, SHOWN_ITERATION: None}


class ShownReturns:
    """Hands each history recording to one row: the newest not handed yet."""

    def __init__(self) -> None:
        self._handed = -1  # the newest update already in a row
        #: ``{iteration: return}`` of every recording seen so far (``-1``: the initial policy)
        self.points: Dict[float, float] = {}

    def columns(self, stats: Dict[str, Any]) -> Dict[str, Optional[float]]:
        """``ShownReturn`` and ``ShownIteration`` of the newest recording in ``stats``
        (``Plotter.stats``) not handed to a row yet; ``BLANK`` if there is none. Every
        recording in ``stats`` goes to ``points``."""
        newest = None
        for entry in stats.get("history") or ():
            if entry.get("return") is None:
                continue
            iteration = _iteration_of(entry)
            if iteration is not None:
                self.points[float(iteration)] = float(entry["return"])
            if entry["update"] <= self._handed:
                continue
            if newest is None or entry["update"] > newest["update"]:
                newest = entry
        if newest is None:
            return dict(BLANK)
        self._handed = newest["update"]
        return {SHOWN_RETURN: float(newest["return"]), SHOWN_ITERATION: _iteration_of(newest)}


def _iteration_of(entry: Dict[str, Any]) -> Optional[int]:
    """The iteration of the policy a history entry recorded (``-1``: the initial policy)."""
    iteration = entry.get("iteration")
    if iteration is None and entry["update"] == 0:
        return INITIAL_POLICY_ITERATION
    return iteration
