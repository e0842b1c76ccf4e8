"""Which episodes make an update's video, and how a live view waits for a short one (docs/design.md,
"A video lasts min_video_seconds whatever else is open"). An episode that ends before
``min_video_seconds`` is followed by more of the same parameters in the same file
(``EpisodeEnd.continued``). When a newer policy arrives while the current video is still short,
the steps it needs are *caught up*: simulated at once and sent for the sinks that keep rollouts
only (``StreamKind.CATCH_UP``); the live sinks see the newer policy next.
"""
import array
import fcntl
import math
import select
import termios
import time
from multiprocessing.connection import Connection
from typing import Any, Callable, Optional

from async_plotter.render.stream import EpisodeEnd, StreamKind

#: at most this long, after a catch-up, the rollout process waits for the render process to
#: have read it before it paces the live view again
DRAIN_WAIT_SECONDS = 5.0


class VideoChain:
    """The rollout process's side of chaining: how many steps an update's video still wants, and
    the catch-up of a short one in a live view.

    Args:
        live: the worker replays the newest policy continuously (``WorkerConfig.live``).
        keeps_rollouts: a sink keeps rollouts (``WorkerConfig.keeps_rollouts``).
        min_steps: env steps in ``min_video_seconds``.
        shown_steps: the ``ShownSteps`` that sends the steps (unpaced while catching up).
        frames_out: the stream to the render process.
    """

    def __init__(self, live: bool, keeps_rollouts: bool, min_steps: int, shown_steps: Any,
                 frames_out: Connection) -> None:
        self._keeps_rollouts = keeps_rollouts
        self.set_live(live)
        self.min_steps = min_steps
        self._shown_steps = shown_steps
        self._out = frames_out
        #: the steps being sent finish a short video, for the recordings only
        self.catching_up = False

    def set_live(self, live: bool) -> None:
        """Live from the next episode on, or not (between episodes, no catch-up running)."""
        self._live = live
        # Recording one rollout per update, every episode may make a video (as before sinks
        # said whether they keep any); live, only when a sink keeps rollouts.
        self._chains = self._keeps_rollouts or not live

    def steps_wanted(self, in_video: bool, shown: int) -> int:
        """Steps the current update's video still wants after the ``shown`` it has (0 for an
        episode that is no part of a video: a live view's replay of an update already kept)."""
        return max(self.min_steps - shown, 0) if self._chains and in_video else 0

    def before_episode(self, chained: bool, reader: Any) -> None:
        """A chained episode is about to begin while newer parameters wait: it is caught up
        from its first step (the live sinks never see it begin)."""
        if (chained and self._live and not self.catching_up and reader.newer_available()
                and not reader.final_requested()):
            self._start(None)

    def keeps_going(self, done: int, wanted: int, reward: float, reader: Any) -> bool:
        """Newer parameters arrived after ``done`` steps of an episode the video wants
        ``wanted`` of: whether the episode goes on rather than being cut for the newer policy.
        Live, it is caught up from here, for the recordings, but never once the final video is
        asked for, which shows the newest parameters without delay. Recorded only (the final
        video asked for), it goes on to ``min_video_seconds`` uncut: the render process cuts it
        there; cut sooner, it was too short to keep and the run lost a video."""
        if done >= wanted:
            return False
        if not self._live:
            return True
        if reader.final_requested():
            return False
        if not self.catching_up:
            self._start(EpisodeEnd(done, reward, completed=False))
        return True

    def enough(self, steps: int, wanted: int) -> bool:
        """While catching up, the video has what it wants after ``steps`` of this episode."""
        return self.catching_up and steps >= wanted

    def continues(self, end_early: bool, steps: int, wanted: int, reader: Any) -> bool:
        """Whether another episode of these parameters joins the video: this one ended early
        (by itself, not cut) and the video is still short, unless the final video is asked for
        while newer parameters wait."""
        return (self._chains and end_early and steps < wanted
                and not (reader.final_requested() and reader.newer_available()))

    def episode_ended(self, continued: bool) -> None:
        """The episode's end was sent: a chain that does not go on ends the catch-up (the
        render process ends it at the same ``END``), once the render process has read it."""
        if self.catching_up and not continued:
            self.catching_up = False
            # The live view's steps are paced from now. Sent while the render process still
            # draws the catch-up, they would queue behind it, and since no step of a recorded
            # rollout is dropped, the live view would lag by every catch-up for good.
            wait_until_read(self._out, DRAIN_WAIT_SECONDS)
            self._shown_steps.catch_up(False)

    def _start(self, live_end: Optional[EpisodeEnd]) -> None:
        # The message first: the steps collected and not yet sent belong to the recordings.
        self._out.send((StreamKind.CATCH_UP, live_end))
        self._shown_steps.catch_up(True)
        self.catching_up = True


def wait_until_read(connection: Any,
                    limit: float = math.inf,
                    stop: Callable[[], bool] = lambda: False,
                    beat: Callable[[], None] = lambda: None,
                    interval: float = 0.005) -> None:
    """Until the other end has read everything sent on ``connection`` (a pipe), ``stop()`` is
    true or ``limit`` seconds have passed, calling ``beat()`` at every look; at once where the
    pipe's fill cannot be read (FIONREAD: Linux; not a pipe) or its reader is gone."""
    deadline = time.monotonic() + limit
    unread = array.array("i", [0])
    try:
        descriptor = connection.fileno()
    except (AttributeError, OSError):
        return
    gone = select.poll()
    gone.register(descriptor, select.POLLOUT)  # POLLERR comes with it once the reader is gone
    while True:
        try:
            fcntl.ioctl(descriptor, termios.FIONREAD, unread, True)
        except OSError:
            return
        if unread[0] == 0 or stop() or time.monotonic() > deadline:
            return
        if any(events & (select.POLLERR | select.POLLHUP) for _, events in gone.poll(0)):
            return
        beat()
        time.sleep(interval)
