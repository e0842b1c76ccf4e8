"""Training metrics (and the history's points) on their way to the render process, and the
curve a restarted one needs."""
import collections
from typing import Any, Deque, Dict, Optional

from async_plotter.channel.base import metrics_fit
from async_plotter.learning_curve import MAX_POINTS
from async_plotter.render.stream import StreamKind


class MetricsRelay:
    """Queues metrics from any thread; the supervisor's thread forwards them without blocking.

    The newest ``MAX_POINTS`` sent are kept: a restarted render process gets the curve again."""

    def __init__(self) -> None:
        self._history: Deque[tuple] = collections.deque(maxlen=MAX_POINTS)
        # Appending to a deque is safe across threads.
        self._pending: "collections.deque[tuple]" = collections.deque()

    def post(self, iteration: Optional[int], metrics: Dict[str, float]) -> bool:
        """Queue metrics; never blocks. False if they break ``metrics_fit``."""
        if not metrics_fit(iteration, metrics):
            return False
        self._pending.append((StreamKind.METRICS, (iteration, dict(metrics))))
        return True

    def post_history(self, point: Any) -> None:
        """Queue a history recording's ``HistoryPoint`` (``render/history.py``); never blocks."""
        self._pending.append((StreamKind.HISTORY, point))

    def restart_curve(self) -> None:
        """The curve starts again (a viewer following another trainer run): the render process
        is told to drop what it has, and a restarted one is sent nothing from before; never
        blocks. Only queued: ``forward``'s thread alone takes from the queue and the history
        (clearing them here raced it, and lost the restart)."""
        self._pending.append((StreamKind.CURVE_RESTART, None))

    def forward(self, lifeline: Any) -> None:
        """Send what is pending on the non-blocking ``lifeline``; a full pipe waits for the next
        turn, a dead process for the restart."""
        while self._pending:
            message = self._pending[0]
            try:
                lifeline.send(message)
            except (OSError, ValueError):
                return  # full: next turn; the render process gone: all is resent to the next
            self._pending.popleft()
            if message[0] is StreamKind.CURVE_RESTART:
                self._history.clear()  # a new render process starts from here
            else:
                self._history.append(message)

    def resend_all(self) -> None:
        """A new render process: everything sent so far goes again, before what is pending."""
        self._pending.extendleft(reversed(self._history))
        self._history.clear()
