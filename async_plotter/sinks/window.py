"""A live window. MuJoCo scenes get MuJoCo's own viewer (mouse camera control); envs that draw
their own frames get a plain pygame window showing them. Only ever created in the render process,
after the trainer checked that a display exists: a window without one aborts the process."""
import logging
from typing import Any, Optional

import numpy as np

from async_plotter.sinks.base import FrameSink
from async_plotter.render.stream import EpisodeInfo

logger = logging.getLogger(__name__)


class MujocoViewerSink(FrameSink):
    """MuJoCo's passive viewer, posed from the scene's ``MjData`` after every step."""

    def __init__(self, title: str = "async_plotter") -> None:
        self._title = title
        self._viewer = None

    def attach(self, scene: Any) -> None:
        import mujoco.viewer

        self._viewer = mujoco.viewer.launch_passive(scene.model,
                                                    scene.data,
                                                    show_left_ui=False,
                                                    show_right_ui=False)
        with self._viewer.lock():
            for attribute in ("type", "fixedcamid", "trackbodyid", "distance", "azimuth",
                              "elevation"):
                setattr(self._viewer.cam, attribute, getattr(scene.camera, attribute))
            self._viewer.cam.lookat[:] = scene.camera.lookat

    def wants_pixels(self) -> bool:
        return False  # the viewer draws the scene itself

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        if self._viewer is not None and self._viewer.is_running():
            self._viewer.sync()

    def close(self) -> None:
        if self._viewer is not None:
            self._viewer.close()
            self._viewer = None


class PixelWindowSink(FrameSink):
    """A pygame window that shows ready-made frames (CartPole and other self-drawing envs)."""

    def __init__(self, title: str = "async_plotter") -> None:
        self._title = title
        self._screen = None
        self._closed = False

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        if frame is None or self._closed:
            return
        import pygame

        if self._screen is None:
            pygame.display.init()
            self._screen = pygame.display.set_mode((frame.shape[1], frame.shape[0]))
        pygame.display.set_caption(f"{self._title} - update {episode.update}")
        for event in pygame.event.get():
            if event.type == pygame.QUIT:
                self.close()
                return
        self._screen.blit(pygame.surfarray.make_surface(frame.swapaxes(0, 1)), (0, 0))
        pygame.display.flip()

    def close(self) -> None:
        if self._screen is not None:
            import pygame

            pygame.display.quit()
            self._screen = None
        self._closed = True
