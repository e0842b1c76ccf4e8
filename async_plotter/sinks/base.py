"""The interface every frame sink implements: the built-in ones and yours.

A sink of your own is a ``FrameSink`` subclass passed as ``Plotter(..., sinks=[MySink()])``. It
is pickled in the trainer and runs in the render process, which never imports TensorFlow: open
files, sockets or windows in ``attach``, not in ``__init__``. Calls come in this order:
``attach(scene)`` once; per episode ``begin_episode``, ``add_step`` for each shown step (by
default ``add_frame`` with the step's episode) and ``end_episode``; ``on_metrics`` whenever the
trainer sends metrics, ``on_history`` for each history recording; ``close()`` once at the end.
A sink that raises stops the render process (the supervisor restarts it, as after a crash)::

    class Brightness(FrameSink):
        def attach(self, scene):
            self.log = open("/tmp/brightness.txt", "a")

        def add_frame(self, frame, episode):
            self.log.write(f"{episode.iteration} {frame.mean():.1f}\n")

        def close(self):
            self.log.close()
"""
import dataclasses
from typing import Any, Dict, Optional

import numpy as np

from async_plotter.render.stream import EpisodeEnd, EpisodeInfo, StepState


@dataclasses.dataclass(frozen=True)
class ShownStep:
    """One shown step, as the render process hands it to every sink (``FrameSink.add_step``)."""

    episode: EpisodeInfo
    #: as the rollout process sent it: MuJoCo's physics state, the action that led there, the
    #: reward since the step shown before (None for envs that draw their own frames)
    state: Optional[StepState]
    #: the scene's ``MjData``, posed at ``state`` (None without a MuJoCo scene)
    data: Any
    #: when it is to be on screen (``render/timeline.now()``); unless a sink
    #: ``wants_real_time``, a chunk's steps come at once, ahead of their time
    due: float


class FrameSink:
    """Receives episodes frame by frame in the render process. Override what you need; every
    method's default does nothing (``add_step``'s calls ``add_frame``)."""

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

    def add_step(self, frame: Optional[np.ndarray], step: ShownStep) -> None:
        """One shown step: ``frame`` (as in ``add_frame``) and what the step is. Override it
        where the physics state, the posed ``MjData`` or the due time matter; by default it
        calls ``add_frame(frame, step.episode)``."""
        self.add_frame(frame, step.episode)

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        """One step: ``frame`` is RGB uint8 pixels, or None when no sink wanted pixels."""

    def end_episode(self, episode: EpisodeInfo, end: EpisodeEnd) -> None:
        """The episode ended (``end.completed`` is False if cut short)."""

    def on_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> None:
        """Training metrics the trainer passed to ``update_plot(..., metrics=...)``."""

    def on_curve_restart(self) -> None:
        """The curve starts again: the points that follow are another trainer run's (a viewer
        that follows a restarted trainer)."""

    def on_history(self, point: Any) -> None:
        """A policy's history recording is complete (``Plotter(history=...)``): ``point`` has
        its ``update``, ``iteration``, ``episode_return`` and ``length`` (one deterministic
        episode from the run's start state), and ``x``, where it goes on a curve by iteration.
        """

    def close(self) -> None:
        """Flush and release everything; called once."""
