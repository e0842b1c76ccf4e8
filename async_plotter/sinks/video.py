"""One mp4 per rendered update, named after the iteration (``iter_0007.mp4``) or the update number
(``update_0003.mp4``). A file is written under a hidden temporary name and renamed when complete,
so a reader never sees half a video; the temporary names a dead writer left are removed when the
sink starts (``render/partial_files.py``)."""
import errno
import logging
import os
import shutil
import time
from typing import Callable, Optional

import numpy as np

from async_plotter.render.partial_files import PartialFile, partial_path, remove_abandoned
from async_plotter.sinks.encoder import Encoder, EncoderError, says_no_space
from async_plotter.sinks.recorded import RecordedSink
from async_plotter.render.stream import EpisodeInfo
from async_plotter.render.videos import video_name
from async_plotter.words import amount

logger = logging.getLogger(__name__)

#: once the device was full, recording resumes when this much is free (or twice the largest
#: video so far, whichever is more), so that it does not fail again at once
_RESUME_FREE_BYTES = 1 << 20
#: a video that failed with less than this free on its device failed for want of space
_LOW_FREE_BYTES = 64 << 10
#: while the device is full, how often its free space is looked at
_SPACE_CHECK_SECONDS = 1.0

#: ``on_written(path, first_episode, episodes, frames, whole, clipped)``: ``frames`` is what the
#: file holds (the stills between chained episodes included); ``whole`` is False for a video cut
#: short by ``close()`` before its rollout ended; ``clipped`` is True where its last episode
#: stopped at the video's length (or for newer parameters) while the episode went on
WrittenCallback = Callable[[str, EpisodeInfo, int, int, bool, bool], None]
#: ``on_storage(state, directory, free_bytes)``: ``"full"`` (videos stop), ``"writable"``
#: (they resume) or ``"recreated"`` (the folder was removed and is made again)
StorageCallback = Callable[[str, str, Optional[int]], None]


class VideoSink(RecordedSink):
    """Records the first episode of each update it sees, with the short episodes chained to it;
    replays of the same update are skipped (see ``RecordedSink``).

    The folder is the user's, and so are its faults: a folder removed while training is made
    again; a full device stops the videos (``on_storage("full")``, the encoder's messages kept
    off the trainer's terminal) until space is free again. Neither is a worker failure."""

    def __init__(self,
                 directory: str,
                 fps: float,
                 on_written: Optional[WrittenCallback] = None,
                 on_encoder: Optional[Callable[[int], None]] = None,
                 min_frames: int = 0,
                 on_storage: Optional[StorageCallback] = None) -> None:
        super().__init__(fps, min_frames)
        self.directory = directory
        self._on_written = on_written
        self._on_encoder = on_encoder
        self._on_storage = on_storage
        self._encoder: Optional[Encoder] = None
        self._partial_path = ""
        #: the lock on the partial file while this process writes it
        self._partial: Optional[PartialFile] = None
        self._final_path = ""
        self._last_frame: Optional[np.ndarray] = None
        #: frames written into the file being recorded: the episodes' and the stills'
        self._file_frames = 0
        #: the device is full: no recording starts until space is free again
        self.full = False
        self._next_space_check = 0.0
        self._largest_video = 0

    def _accepting(self) -> bool:
        if not self.full:
            return True
        now = time.monotonic()
        if now < self._next_space_check:
            return False
        self._next_space_check = now + _SPACE_CHECK_SECONDS
        free = free_bytes(self.directory)
        if free is None or free < max(_RESUME_FREE_BYTES, 2 * self._largest_video):
            return False
        self.full = False
        logger.info("%s has space again (%d bytes free): videos resume", self.directory, free)
        self._report("writable", free)
        return True

    def attach(self, scene: object) -> None:
        remove_abandoned(self.directory)  # a killed worker's (or run's) half-written videos

    def _start(self, episode: EpisodeInfo) -> None:
        self._final_path = os.path.join(self.directory, video_name(episode))
        # ffmpeg picks the container from the extension, so the temporary name keeps ".mp4".
        self._partial_path = partial_path(self._final_path)
        self._file_frames = 0

    def _add(self, frame: np.ndarray) -> None:
        frame = _even_size(frame)
        if self._encoder is None:
            if not self._open_encoder(frame):
                return
        self._write(frame)
        self._last_frame = frame

    def _pause(self, seconds: float) -> None:
        # A short still marks where one episode ends and the next one begins.
        if self._encoder is not None and self._last_frame is not None:
            for _ in range(max(int(seconds * self.fps), 1)):
                if self._encoder is None:
                    break  # it failed for want of space
                self._write(self._last_frame)

    def _open_encoder(self, frame: np.ndarray) -> bool:
        """Start the encoder for this recording; False if there is no room for it."""
        try:
            self._make_directory()
        except OSError as error:
            if not _no_space(error):
                raise
            self._out_of_space(str(error))
            return False
        height, width = frame.shape[:2]
        self._partial = PartialFile(self._final_path)
        self._encoder = Encoder(self._partial_path, width, height, self.fps)
        if self._on_encoder is not None:
            # The encoder is a process of its own; the CPU budget must count it too.
            self._on_encoder(self._encoder.pid)
        return True

    def _make_directory(self) -> None:
        """Make the folder again if it was removed while training (``rm -rf runs/``)."""
        if os.path.isdir(self.directory):
            return
        os.makedirs(self.directory, exist_ok=True)
        logger.info("%s was removed; made it again", self.directory)
        self._report("recreated", free_bytes(self.directory))

    def _write(self, frame: np.ndarray) -> None:
        try:
            self._encoder.write(frame)
            self._file_frames += 1
        except EncoderError as error:
            # ffmpeg exits on a write error: a full device is the user's to fix, not a failure
            # of the worker; anything else is, and the worker is restarted.
            encoder, self._encoder = self._encoder, None
            messages = encoder.finish()
            if not self._short_of_space(messages):
                raise EncoderError(f"{error} {messages}") from None
            self._out_of_space(messages)

    def _out_of_space(self, messages: str) -> None:
        logger.debug("the video encoder ran out of space: %s", messages)
        self._discard("no space left on the device")
        if not self.full:
            self.full = True
            self._next_space_check = time.monotonic() + _SPACE_CHECK_SECONDS
            self._report("full", free_bytes(self.directory))

    def _short_of_space(self, messages: str) -> bool:
        free = free_bytes(self.directory)
        return says_no_space(messages) or (free is not None and free < _LOW_FREE_BYTES)

    def _report(self, state: str, free: Optional[int]) -> None:
        if self._on_storage is not None:
            self._on_storage(state, self.directory, free)

    def _save(self, recording: EpisodeInfo) -> bool:
        try:
            return self._keep_video(recording)
        finally:
            self._release_partial()

    def _keep_video(self, recording: EpisodeInfo) -> bool:
        self._last_frame = None
        if self._encoder is None:
            return False
        encoder, self._encoder = self._encoder, None
        messages = encoder.finish()
        if not _whole_mp4(self._partial_path):
            # The device is full (ffmpeg could not write the index it writes last), or its
            # encoder was stopped before it finished (killed, or this process interrupted in the
            # middle of a frame, e.g. SIGTERM while stopping): there is no video to keep.
            no_space = self._short_of_space(messages)
            _remove_quietly(self._partial_path)
            if no_space:
                self._out_of_space(messages)
                return False
            logger.info("dropped %s: its encoder stopped before the video was finished (%s)",
                        os.path.basename(self._final_path), messages or "no message")
            return False
        os.replace(self._partial_path, self._final_path)
        self._largest_video = max(self._largest_video, _size(self._final_path))
        logger.info("wrote %s (%d frames, %s%s)", self._final_path, self._file_frames,
                    amount(self._episodes, "episode", "episodes"),
                    ", cut short" if self.cut_short else ", a clip" if self.clipped else "")
        if self._on_written is not None:
            self._on_written(self._final_path, recording, self._episodes, self._file_frames,
                             not self.cut_short, self.clipped)
        return True

    def _drop(self, why: str) -> None:
        self._last_frame = None
        try:
            if self._encoder is not None:
                encoder, self._encoder = self._encoder, None
                encoder.abandon()
                logger.info("dropped the video being recorded: %s", why)
        finally:
            if self._partial is not None:  # also where the encoder failed for want of space
                _remove_quietly(self._partial_path)
            self._release_partial()

    def _release_partial(self) -> None:
        partial, self._partial = self._partial, None
        if partial is not None:
            partial.release()


def free_bytes(directory: str) -> Optional[int]:
    """Bytes free to this user on the device of ``directory`` (of its nearest existing parent
    if it is gone); None if that cannot be told."""
    path = os.path.abspath(directory)
    while True:
        try:
            return shutil.disk_usage(path).free
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent
        except OSError:
            return None


def _no_space(error: OSError) -> bool:
    return error.errno in (errno.ENOSPC, errno.EDQUOT)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


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


def _even_size(frame: np.ndarray) -> np.ndarray:
    height, width = frame.shape[:2]
    return frame[:height - height % 2, :width - width % 2]
