"""One mp4 per rendered update, named after the iteration (``iter_0007.mp4``) or the update number
(``update_0003.mp4``). A file is written under a hidden temporary name and renamed when complete,
so a reader never sees half a video."""
import logging
import os
from typing import Callable, Optional

import numpy as np
import psutil

from async_plotter.render.sinks.recorded import RecordedSink
from async_plotter.render.stream import EpisodeInfo

logger = logging.getLogger(__name__)

# x264's "superfast" preset on one thread: measured per 320x320 MuJoCo frame 1.3 ms of CPU
# (Swimmer) and 1.4 ms (HalfCheetah) against 1.9 and 2.6 ms with "veryfast", for files about
# twice as large (~1.1 KB and ~2.6 KB a frame); "ultrafast" saves little more and makes them
# 3-5 times larger. Its threads add CPU, not speed, at this size. The encoder's CPU counts
# against the budget like the rendering's.
_ENCODER_PARAMS = ["-preset", "superfast", "-threads", "1"]

#: ``on_written(path, first_episode, episodes, frames)``
WrittenCallback = Callable[[str, EpisodeInfo, int, int], None]


def video_name(episode: EpisodeInfo) -> str:
    """The file name for the video of an episode's policy."""
    if episode.iteration is not None:
        return f"iter_{episode.iteration:04d}.mp4"
    return f"update_{episode.update:04d}.mp4"


class VideoSink(RecordedSink):
    """Records the first episode of each update it sees, with the short episodes chained to it;
    replays of the same update are skipped (see ``RecordedSink``)."""

    def __init__(self,
                 directory: str,
                 fps: float,
                 on_written: Optional[WrittenCallback] = None,
                 on_encoder: Optional[Callable[[int], None]] = None,
                 min_frames: int = 0) -> None:
        super().__init__(fps, min_frames)
        self.directory = directory
        self._on_written = on_written
        self._on_encoder = on_encoder
        self._writer = None
        self._partial_path = ""
        self._final_path = ""
        self._last_frame: Optional[np.ndarray] = None

    def _start(self, episode: EpisodeInfo) -> None:
        self._final_path = os.path.join(self.directory, video_name(episode))
        # ffmpeg picks the container from the extension, so the temporary name keeps ".mp4".
        self._partial_path = os.path.join(self.directory, ".partial_" + video_name(episode))

    def _add(self, frame: np.ndarray) -> None:
        frame = _even_size(frame)
        if self._writer is None:
            self._open_writer()
        self._writer.append_data(frame)
        if self._frames == 0 and self._on_encoder is not None:
            # The encoder is a process of its own, started with the writer's first frame; the
            # CPU budget must count it too.
            for pid in child_pids(os.getpid()):
                self._on_encoder(pid)
        self._last_frame = frame

    def _pause(self, seconds: float) -> None:
        # A short still marks where one episode ends and the next one begins.
        if self._writer is not None and self._last_frame is not None:
            for _ in range(max(int(seconds * self.fps), 1)):
                self._writer.append_data(self._last_frame)

    def _open_writer(self) -> None:
        import imageio

        # macro_block_size=2: keep the env's frame size (libx264 only needs even sizes).
        self._writer = imageio.get_writer(self._partial_path,
                                          format="FFMPEG",
                                          fps=self.fps,
                                          codec="libx264",
                                          macro_block_size=2,
                                          ffmpeg_log_level="error",
                                          output_params=list(_ENCODER_PARAMS))

    def _save(self, recording: EpisodeInfo) -> bool:
        self._last_frame = None
        if self._writer is None:
            return False
        writer, self._writer = self._writer, None
        try:
            writer.close()
            whole = _whole_mp4(self._partial_path)
        except Exception:  # noqa: BLE001 - a dead encoder raises all sorts (broken pipe, ...)
            whole = False
        if not whole:
            # Its encoder was stopped before it finished (killed, or this process interrupted in
            # the middle of a frame, e.g. SIGTERM while stopping): there is no video to keep.
            _remove_quietly(self._partial_path)
            logger.info("dropped %s: its encoder stopped before the video was finished",
                        os.path.basename(self._final_path))
            return False
        os.replace(self._partial_path, self._final_path)
        logger.info("wrote %s (%d frames, %d episode%s)", self._final_path, self._frames,
                    self._episodes, "" if self._episodes == 1 else "s")
        if self._on_written is not None:
            self._on_written(self._final_path, recording, self._episodes, self._frames)
        return True

    def _drop(self, why: str) -> None:
        self._last_frame = None
        if self._writer is not None:
            try:
                self._writer.close()
            finally:
                self._writer = None
                _remove_quietly(self._partial_path)
            logger.info("dropped the video being recorded: %s", why)


def _whole_mp4(path: str) -> bool:
    """Whether ``path`` is a finished mp4: its top-level boxes chain to the end of the file and
    include the index (``moov``) that ffmpeg writes last. Reads a few headers, not the file."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            offset, kinds = 0, set()
            while offset + 8 <= size:
                handle.seek(offset)
                header = handle.read(16)
                length, kind = int.from_bytes(header[:4], "big"), header[4:8]
                if length == 1 and len(header) == 16:
                    length = int.from_bytes(header[8:16], "big")  # a 64-bit box size
                elif length == 0:
                    length = size - offset  # the last box runs to the end of the file
                if length < 8:
                    return False
                kinds.add(kind)
                offset += length
            return offset == size and b"moov" in kinds
    except OSError:
        return False


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def child_pids(parent: int) -> list:
    """Processes whose parent is ``parent`` (empty once it is gone)."""
    try:
        return [child.pid for child in psutil.Process(parent).children()]
    except psutil.Error:
        return []


def _even_size(frame: np.ndarray) -> np.ndarray:
    height, width = frame.shape[:2]
    return frame[:height - height % 2, :width - width % 2]
