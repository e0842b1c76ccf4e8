"""Hands every frame to a user function, in the render process."""
from typing import Any, Callable, Optional

import numpy as np

from async_plotter.sinks.base import FrameSink
from async_plotter.render.stream import EpisodeInfo


class CallbackSink(FrameSink):
    """Calls ``function(frame, info)`` with ``info = {"update", "iteration", "episode", "fps"}``
    (``fps``: the frames' rate in simulated time, as the videos play)."""

    def __init__(self,
                 function: Callable[[np.ndarray, dict], Any],
                 fps: Optional[float] = None) -> None:
        self._function = function
        self._fps = fps

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        if frame is not None:
            self._function(
                frame, {
                    "update": episode.update,
                    "iteration": episode.iteration,
                    "episode": episode.episode,
                    "fps": self._fps
                })
