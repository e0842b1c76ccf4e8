"""Hands every frame to a user function, in the render process."""
from typing import Any, Callable, Optional

import numpy as np

from async_plotter.render.sinks.base import FrameSink
from async_plotter.render.stream import EpisodeInfo


class CallbackSink(FrameSink):
    """Calls ``function(frame, info)`` with ``info = {"update", "iteration", "episode"}``."""

    def __init__(self, function: Callable[[np.ndarray, dict], Any]) -> None:
        self._function = function

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        if frame is not None:
            self._function(frame, {
                "update": episode.update,
                "iteration": episode.iteration,
                "episode": episode.episode
            })
