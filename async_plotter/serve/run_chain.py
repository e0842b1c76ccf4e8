"""One experiment's curve across the runs that resume one another, as ``serve``'s page shows it.

A run resumed from its snapshot of iteration K (``run_experiment_lite(..., resume_from=...)``, a
preempted job started again) is a new trainer run over Redis; its structure says so
(``resumes_after``: K). Its curve goes on from the run it resumed: the points of the runs before
it up to iteration K, then its own. Where a run started again from iteration i, what the runs
before it did from i on is superseded (it does those iterations again), so a chain of resumes
shows each iteration once. A run that resumes nothing starts the curve afresh.

Each stream (the trainer's metrics, the history's returns) is read in order, oldest first. A
point of an earlier run read once the current run is known (a page opened after the resume) is
held until the current run's first point in that stream, because a run between them may still
supersede it; the chain is computed then, and again only when a run starts.
"""
import collections
from typing import Any, Deque, Dict, List, Optional, Sequence, Set, Tuple

from async_plotter.learning_curve import MAX_POINTS, LearningCurve

#: the streams a curve is made of
METRICS, RETURNS = "metrics", "returns"


def on_chain(points: Sequence[Tuple[Any, Optional[float]]], current: Any,
             after: Optional[int]) -> List[bool]:
    """For each point ``(run, iteration)`` of one stream, oldest first, whether it is on the
    curve of ``current``, which resumes after iteration ``after`` (None: resumes nothing).

    A point is superseded where a later run starts (its first point after another run's) at its
    iteration or before. One pass from the newest back, holding the two earliest later starts of
    different runs (a run's own later start does not supersede it): linear, also on a stream
    that hostile data makes switch run at every point."""
    starts = {
        index
        for index, (run, iteration) in enumerate(points)
        if iteration is not None and (index == 0 or points[index - 1][0] != run)
    }
    keep = [False] * len(points)
    first: Optional[Tuple[float, Any]] = None  # the earliest later start: (iteration, run)
    second: Optional[Tuple[float, Any]] = None  # the earliest of another run than first's
    for index in range(len(points) - 1, -1, -1):
        run, iteration = points[index]
        if run == current:
            keep[index] = True
        elif after is not None and iteration is not None and iteration <= after:
            against = second if first is not None and first[1] == run else first
            keep[index] = against is None or iteration < against[0]
        if index in starts:
            start = (iteration, run)
            if first is None or iteration < first[0]:
                if first is not None and first[1] != run:
                    second = first
                first = start
            elif run != first[1] and (second is None or iteration < second[0]):
                second = start
    return keep


class ChainedCurve:
    """The curve of the current run and the runs it resumes (``curve``), fed each stream's
    points in order and told each new run."""

    def __init__(self) -> None:
        #: what the page draws
        self.curve = LearningCurve()
        self._points: Dict[str, Deque[Tuple[Any, Optional[float], Dict[str, float]]]] = {
            stream: collections.deque(maxlen=MAX_POINTS)
            for stream in (METRICS, RETURNS)
        }
        self._current: Any = None
        self._after: Optional[int] = None
        self._started: Set[str] = set()  # the streams the current run has a point in

    def follow(self, run: Any, after: Optional[int]) -> None:
        """A new run (its structure verified) resuming after iteration ``after`` (or None)."""
        if run == self._current:
            return
        self._current, self._after = run, after
        self._started = {
            stream
            for stream, points in self._points.items() if any(point[0] == run for point in points)
        }
        self._rebuild()

    def add(self, stream: str, run: Any, iteration: Optional[float], metrics: Dict[str,
                                                                                   float]) -> None:
        """A verified point of ``stream`` (``METRICS`` or ``RETURNS``), the stream's next."""
        self._points[stream].append((run, iteration, metrics))
        if self._current is None or (run == self._current and stream in self._started):
            self.curve.add(iteration, metrics, run)  # the common case: the run goes on
        elif run == self._current:
            self._started.add(stream)  # the current run starts in this stream: the chain
            self._rebuild()
        # else a point of an earlier run, held until the current run's first one here

    def _rebuild(self) -> None:
        curve = LearningCurve()
        for points in self._points.values():
            keep = on_chain([(run, iteration) for run, iteration, _ in points], self._current,
                            self._after)
            for (run, iteration, metrics), kept in zip(points, keep):
                if kept:
                    curve.add(iteration, metrics, run)
        self.curve = curve
