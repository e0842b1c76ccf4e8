"""The interface every frame sink implements: the built-in ones and yours.

A sink of your own is a ``FrameSink`` subclass passed as ``Plotter(..., sinks=[MySink()])``. It
is pickled in the trainer and runs in the render process, which never imports TensorFlow: open
files, sockets or windows in ``attach``, not in ``__init__``. Calls come in this order:
``attach(scene)`` once; per episode ``begin_episode``, ``add_frame`` for each step and
``end_episode``; ``on_metrics`` whenever the trainer sends metrics, ``on_history`` for each
history recording; ``close()`` once at the end.
A sink that raises stops the render process (the supervisor restarts it, as after a crash)::

    class Brightness(FrameSink):
        def attach(self, scene):
            self.log = open("/tmp/brightness.txt", "a")

        def add_frame(self, frame, episode):
            self.log.write(f"{episode.iteration} {frame.mean():.1f}\n")

        def close(self):
            self.log.close()
"""
from typing import Any, Dict, Optional

import numpy as np

from async_plotter.render.stream import EpisodeEnd, EpisodeInfo


class FrameSink:
    """Receives episodes frame by frame in the render process. Override what you need; every
    method's default does nothing."""

    def attach(self, scene: Any) -> None:
        """Called once the scene exists (a ``MujocoScene``, or None for envs that draw frames)."""

    def wants_pixels(self) -> bool:
        """Whether the next frame must be rendered to pixels for this sink. Rendering is skipped
        when no sink wants pixels (a window draws the scene itself; a page nobody watches)."""
        return True

    def wants_real_time(self) -> bool:
        """Whether this sink shows each frame as it comes, so must get it when it is due (a
        window, a page being watched). Sinks that keep frames (videos) say False: they may get
        the next fraction of a second's frames at once, which costs fewer wakeups."""
        return True

    def keeps_every_step(self) -> bool:
        """Whether every step must reach this sink now, however late the renderer is (a
        recording in progress). A live view may skip steps it is too late to show; the render
        process still hands each of them to the sinks that say True here."""
        return False

    def begin_episode(self, episode: EpisodeInfo) -> None:
        """A new episode starts."""

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        """One step: ``frame`` is RGB uint8 pixels, or None when no sink wanted pixels."""

    def end_episode(self, episode: EpisodeInfo, end: EpisodeEnd) -> None:
        """The episode ended (``end.completed`` is False if cut short)."""

    def on_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> None:
        """Training metrics the trainer passed to ``update_plot(..., metrics=...)``."""

    def on_history(self, point: Any) -> None:
        """A policy's history recording is complete (``Plotter(history=...)``): ``point`` has
        its ``update``, ``iteration``, ``episode_return`` and ``length`` (one deterministic
        episode from the run's start state), and ``x``, where it goes on a curve by iteration.
        """

    def close(self) -> None:
        """Flush and release everything; called once."""
