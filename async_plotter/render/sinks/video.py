"""One mp4 per rendered update, named after the iteration (``iter_0007.mp4``) or the update number
(``update_0003.mp4``). A file is written under a hidden temporary name and renamed when complete,
so a reader never sees half a video."""
import logging
import os
from typing import Callable, Optional

import numpy as np

from async_plotter.render.sinks.base import FrameSink
from async_plotter.worker.stream import EpisodeEnd, EpisodeInfo

logger = logging.getLogger(__name__)


def video_name(episode: EpisodeInfo) -> str:
    """The file name for the video of an episode's policy."""
    if episode.iteration is not None:
        return f"iter_{episode.iteration:04d}.mp4"
    return f"update_{episode.update:04d}.mp4"


class VideoSink(FrameSink):
    """Records the first episode of each update it sees; replays of the same update are skipped."""

    def __init__(self,
                 directory: str,
                 fps: float,
                 on_written: Optional[Callable[[str], None]] = None) -> None:
        self.directory = directory
        self.fps = fps
        self._on_written = on_written
        self._writer = None
        self._partial_path = ""
        self._final_path = ""
        self._recording: Optional[EpisodeInfo] = None
        self._last_recorded_update = -1

    def begin_episode(self, episode: EpisodeInfo) -> None:
        self._finish()  # an episode that never got its end message
        if episode.update == self._last_recorded_update:
            return
        self._recording = episode
        self._final_path = os.path.join(self.directory, video_name(episode))
        # ffmpeg picks the container from the extension, so the temporary name keeps ".mp4".
        self._partial_path = os.path.join(self.directory, ".partial_" + video_name(episode))

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        if self._recording is None or frame is None:
            return
        if self._writer is None:
            import imageio

            # macro_block_size=2: keep the env's frame size (libx264 only needs even sizes).
            self._writer = imageio.get_writer(self._partial_path,
                                              format="FFMPEG",
                                              fps=self.fps,
                                              codec="libx264",
                                              macro_block_size=2,
                                              ffmpeg_log_level="error")
        self._writer.append_data(_even_size(frame))

    def end_episode(self, episode: EpisodeInfo, end: EpisodeEnd) -> None:
        self._finish()

    def _finish(self) -> None:
        if self._recording is None:
            return
        recording, self._recording = self._recording, None
        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        os.replace(self._partial_path, self._final_path)
        self._last_recorded_update = recording.update
        logger.info("wrote %s", self._final_path)
        if self._on_written is not None:
            self._on_written(self._final_path)

    def close(self) -> None:
        self._finish()


def _even_size(frame: np.ndarray) -> np.ndarray:
    height, width = frame.shape[:2]
    return frame[:height - height % 2, :width - width % 2]
