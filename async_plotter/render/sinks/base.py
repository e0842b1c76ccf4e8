"""The interface every frame sink implements."""
from typing import Any, Dict, Optional

import numpy as np

from async_plotter.worker.stream import EpisodeEnd, EpisodeInfo


class FrameSink:
    """Receives episodes frame by frame in the render process. Override what you need."""

    #: replay the newest policy continuously while this sink is attached (windows, web pages)
    live = False

    def attach(self, scene: Any) -> None:
        """Called once the scene exists (a ``MujocoScene``, or None for envs that draw frames)."""

    def wants_pixels(self) -> bool:
        """Whether the next frame must be rendered to pixels for this sink. Rendering is skipped
        when no sink wants pixels (a window draws the scene itself; a page nobody watches)."""
        return True

    def begin_episode(self, episode: EpisodeInfo) -> None:
        """A new episode starts."""

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        """One step: ``frame`` is RGB uint8 pixels, or None when no sink wanted pixels."""

    def end_episode(self, episode: EpisodeInfo, end: EpisodeEnd) -> None:
        """The episode ended (``end.completed`` is False if cut short)."""

    def on_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> None:
        """Training metrics the trainer passed to ``update_plot(..., metrics=...)``."""

    def is_open(self) -> bool:
        """False once the sink can take no more frames (a user closed the window)."""
        return True

    def close(self) -> None:
        """Flush and release everything; called once."""
