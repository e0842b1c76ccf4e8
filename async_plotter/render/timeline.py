"""One clock for a live view: ``now()``, and ``Timeline``, steps due one interval apart.

The rollout process sends a chunk of steps when its first is due (``worker/shown_steps.py``), the
render process shows each step at its time (``worker/render_process.py``) and the 3D front sends
each pose at the time it came with (``view3d/front.py``): all on ``now()``, which asyncio's
default loop reads too. What each does when late (skip a step, a chunk; start again from now) is
its own rule, not the timeline's.
"""
import time
from typing import Optional

#: the clock every due time is read on
now = time.monotonic


class Timeline:
    """Steps due one ``interval`` apart, the next one at ``next_due``."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.next_due = now()

    def anchor(self, at: Optional[float] = None) -> None:
        """The next step is due at ``at`` (None: now)."""
        self.next_due = now() if at is None else at

    def due(self) -> float:
        """When the next step is shown: when it is due, or now if that has passed."""
        return max(self.next_due, now())

    def advance(self, steps: int = 1, since: Optional[float] = None) -> None:
        """The next step is due ``steps`` intervals after ``since`` (None: ``next_due``)."""
        self.next_due = (self.next_due if since is None else since) + steps * self.interval

    def behind(self) -> bool:
        """Whether the step after the next one is due already."""
        return now() > self.next_due + self.interval

    def pace(self, steps: int = 1) -> None:
        """Wait until the next step is due (a late one is not: missed time is not made up);
        the step after these ``steps`` is due ``steps`` intervals after it."""
        due = self.due()
        wait_until(due)
        self.advance(steps, since=due)


def wait_until(when: float) -> None:
    """Sleep until ``when`` (not at all if it has passed)."""
    delay = when - now()
    if delay > 0:
        time.sleep(delay)
