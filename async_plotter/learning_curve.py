"""The learning curve (``update_plot(metrics=...)``) as every keeper holds it: the newest
``MAX_POINTS`` points, and the one rule for the column shown. Kept by the live page's feed (which
tells the page that column), serve's catalog, the Redis channel (as many entries) and the 3D
view's panel (``view3d/scene.py``, which draws at most its own number of points)."""
import collections
import itertools
import math
from typing import Any, Deque, Dict, Iterable, List, Optional, Tuple

#: points kept (the newest), wherever the curve is kept
MAX_POINTS = 10000
#: the column shown where the trainer passes it (``run_experiment_lite`` does); else the first
PREFERRED_METRIC = "AverageReturn"
#: the history's points (``render/history.py``): the return of one deterministic episode of each
#: policy shown; drawn beside the column shown, and shown itself only where nothing else is
SHOWN_RETURN = "ShownReturn"
# The newest points whose columns the choice looks at.
_RECENT = 50


def shown_metric(names: Iterable[str]) -> Optional[str]:
    """``PREFERRED_METRIC`` among ``names``, else the first of them but ``SHOWN_RETURN`` (the
    second line), else that; None for none."""
    names = list(names)
    if PREFERRED_METRIC in names:
        return PREFERRED_METRIC
    return next((name for name in names if name != SHOWN_RETURN), next(iter(names), None))


class LearningCurve:
    """Points ``(iteration or None, metrics, tag)``, oldest first; ``tag`` is the keeper's own.
    Not thread-safe: its keeper holds a lock."""

    def __init__(self) -> None:
        self._points: Deque[Tuple[Optional[int], Dict[str, float],
                                  Any]] = collections.deque(maxlen=MAX_POINTS)
        #: points added since the curve was made
        self.total = 0

    def add(self, iteration: Optional[int], metrics: Dict[str, float], tag: Any = None) -> None:
        """One point (``metrics`` is kept, not copied)."""
        self._points.append((iteration, metrics, tag))
        self.total += 1

    def clear(self) -> None:
        """Start again (another run's curve): every page that has points is told to reset."""
        self._points.clear()
        # One past what any page has seen: ``since`` then says reset to each of them.
        self.total += 1

    @property
    def shown(self) -> Optional[str]:
        """The column to show (``shown_metric`` of the newest points' columns)."""
        recent = list(itertools.islice(reversed(self._points), _RECENT))[::-1]
        return shown_metric(dict.fromkeys(name for _, metrics, _ in recent for name in metrics))

    def since(self, count: int) -> Tuple[List[Dict[str, Any]], bool]:
        """The points after the first ``count`` added as JSON (``{"iteration", "values"}``),
        and whether some the caller has not seen were dropped (then it gets all kept ones)."""
        first_kept = self.total - len(self._points)
        reset = count < first_kept
        new = itertools.islice(self._points, max(count - first_kept, 0), None)
        return [{
            "iteration": iteration,
            "values": dict(zip(metrics, map(_json, metrics.values())))
        } for iteration, metrics, _ in new], reset

    def series(self, metric: str, most: int) -> List[List[Any]]:
        """``[x, value]`` of the points that have ``metric`` (x: the iteration, else the
        point's place), evenly thinned to ``most``."""
        series = [[place if iteration is None else iteration,
                   _json(metrics[metric])]
                  for place, (iteration, metrics, _) in enumerate(self._points)
                  if metric in metrics]
        step = (len(series) - 1) / (most - 1)
        return series if len(series) <= most else [series[round(i * step)] for i in range(most)]


def _json(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None  # JSON has no NaN (JSON.parse refuses it)
