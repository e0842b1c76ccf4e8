"""``SummaryWriter``: scalars and animated images into one event file, TensorFlow-free."""
import numbers
import os
import time
from typing import Mapping, Optional, Sequence

import numpy as np

from async_plotter.tensorboard import proto
from async_plotter.tensorboard.events import EventFile
from async_plotter.tensorboard.gif import MAX_FRAMES, MAX_SIDE, FrameReel

_RGB = 3  # Image.colorspace


class SummaryWriter:
    """Writes TensorBoard summaries into a new event file in ``logdir``.

    The file (``events.out.tfevents.*``) is created at once; every ``add_*`` is handed to the OS
    before it returns (a ``flush``, never an ``fsync``), so a TensorBoard watching the folder sees
    it within its reload interval, and a killed process loses nothing already added. Several
    writers, in one or several processes, may share ``logdir``: each has its own file, and
    TensorBoard shows them as one run.

    Not thread-safe; use one writer per thread.
    """

    def __init__(self, logdir: str, filename_suffix: str = "") -> None:
        self.logdir = os.path.abspath(os.fspath(logdir))
        self._file: Optional[EventFile] = EventFile(self.logdir, filename_suffix)
        #: the event file's path
        self.path = self._file.path

    def add_scalars(self, step: int, scalars: Mapping[str, float]) -> int:
        """Write ``{tag: value}`` at ``step`` as one event; returns its size in bytes.

        Values that are not real numbers (strings, bools, None) are skipped; NaN and infinities
        are written as they are (TensorBoard shows them as gaps or markers).
        """
        values = [
            proto.scalar_value(tag, float(value)) for tag, value in scalars.items()
            if _is_number(value)
        ]
        if not values:
            return 0
        return self._write(step, values)

    def add_animated_image(self,
                           tag: str,
                           step: int,
                           frames: Sequence[np.ndarray],
                           fps: float,
                           *,
                           max_frames: int = MAX_FRAMES,
                           max_side: int = MAX_SIDE) -> int:
        """Write ``frames`` (HxWx3 uint8 each, at ``fps``) as one animated GIF image summary,
        downscaled to ``max_side`` pixels and thinned to ``max_frames`` frames; returns the
        event's size in bytes."""
        reel = FrameReel(fps, max_frames=max_frames, max_side=max_side)
        for frame in frames:
            reel.add(frame)
        return self.add_reel(tag, step, reel)

    def add_reel(self, tag: str, step: int, reel: FrameReel) -> int:
        """Write a :class:`~async_plotter.tensorboard.gif.FrameReel` as an animated image."""
        if not len(reel):
            raise ValueError(f"add_reel({tag!r}): the reel has no frames")
        encoded = reel.encode()
        width, height = reel.frames[0].size
        return self._write(step, [proto.image_value(tag, height, width, _RGB, encoded)])

    def flush(self) -> None:
        """Hand everything written to the OS (``add_*`` already does)."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Flush and close the file; calling it again does nothing."""
        if self._file is not None:
            file, self._file = self._file, None
            file.close()

    def __enter__(self) -> "SummaryWriter":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _event_file(self) -> EventFile:
        if self._file is None:
            raise ValueError(f"this SummaryWriter ({self.logdir}) is closed")
        return self._file

    def _write(self, step: int, values: list) -> int:
        if not isinstance(step, numbers.Integral) or isinstance(step, bool):
            raise TypeError(f"step must be an int, got {step!r}")
        file = self._event_file()
        event = proto.event(time.time(), int(step), summary_bytes=proto.summary(values))
        file.write_event(event)
        file.flush()
        return len(event) + 16  # the TFRecord framing: length, two checksums


def _is_number(value: object) -> bool:
    # numpy's integer and floating scalars register as numbers.Real; bools are not measurements.
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
