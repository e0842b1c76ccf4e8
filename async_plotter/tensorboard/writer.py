"""``SummaryWriter``: scalars and animated images into one event file, TensorFlow-free.

The ``Event`` / ``Summary`` protocol buffers and the records' masked CRC-32C checksum are
tensorboardX's, which imports neither TensorFlow nor ``tensorboard``; the records are framed
here (TFRecord: a length, its checksum, the data, its checksum) so that each is appended whole
or not at all. The first event of a file says ``file_version: "brain.Event:2"``; TensorBoard
then discards earlier steps only on an explicit session restart, which nothing here writes, so
two writers in one folder (the trainer's scalars and the render process's videos) never erase
each other's data. A resumed run cuts its folder's earlier files to the steps it keeps
(``read_events``, ``write_events``): a restart's effect would depend on the order the files'
names sort in.
"""
import contextlib
import itertools
import numbers
import os
import socket
import struct
import threading
import time
from typing import List, Mapping, Optional, Sequence

import numpy as np
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.proto.summary_pb2 import Summary
from tensorboardX.record_writer import masked_crc32c

from async_plotter.appends import AppendFile
from async_plotter.tensorboard.gif import MAX_FRAMES, MAX_SIDE, FrameReel

FILE_VERSION = "brain.Event:2"
#: every event file's name starts with this; TensorBoard finds files by it
FILE_PREFIX = "events.out.tfevents."
_RGB = 3  # Summary.Image.colorspace

_file_numbers = itertools.count()
_file_numbers_lock = threading.Lock()


def event_file_name(wall_time: float, suffix: str = "") -> str:
    """``events.out.tfevents.<secs>.<host>.<pid>.<n><suffix>``, TensorBoard's own convention:
    the pid and ``n`` keep the files of processes and writers sharing a folder apart."""
    with _file_numbers_lock:
        number = next(_file_numbers)
    host = socket.gethostname()
    return f"{FILE_PREFIX}{int(wall_time):010d}.{host}.{os.getpid()}.{number}{suffix}"


class _EventFile(AppendFile):
    """One event file, appended one whole TFRecord at a time: a reader never meets a torn
    record, and after a write a full device refused the next one goes on."""

    def write(self, data: bytes) -> int:
        """Append ``data`` as one record; its size in the file."""
        header = struct.pack("<Q", len(data))
        record = b"".join((header, struct.pack("<I", masked_crc32c(header)), data,
                           struct.pack("<I", masked_crc32c(data))))
        self.append(record)
        return len(record)


class SummaryWriter:
    """Writes TensorBoard summaries into a new event file in ``logdir``.

    The file (``events.out.tfevents.*``) is created at once; every ``add_*`` is handed to the OS
    before it returns (never an ``fsync``), so a TensorBoard watching the folder sees it within
    its reload interval, and a killed process loses nothing already added. Several writers, in
    one or several processes, may share ``logdir``: each has its own file, and TensorBoard shows
    them as one run.

    Faults of a long run, as TensorFlow's own writer meets them: a file removed meanwhile (its
    folder removed with ``rm -rf``) is followed by a new one (``reopened`` counts them; what the
    removed one held is gone), and an ``add_*`` that raises ``OSError`` (a full device) leaves
    the file as it was, so a later one may succeed.

    Not thread-safe; use one writer per thread.
    """

    def __init__(self, logdir: str, filename_suffix: str = "") -> None:
        self.logdir = os.path.abspath(os.fspath(logdir))
        self._suffix = filename_suffix
        #: new files begun because the one written was removed
        self.reopened = 0
        self._file: Optional[_EventFile] = None
        self._path = ""
        self._closed = False
        self._begin()

    @property
    def path(self) -> str:
        """The event file written now (the last one, once closed)."""
        return self._path

    def reopen_if_gone(self) -> bool:
        """Begin a new file if the one written was removed; whether it did. ``add_*`` does this
        itself; a caller that wants to write again what the removed file held asks first."""
        if self._closed:
            raise ValueError(f"this SummaryWriter ({self.logdir}) is closed")
        if self._file is not None and not self._file.gone():
            return False
        self._begin()
        self.reopened += 1
        return True

    def add_scalars(self, step: int, scalars: Mapping[str, float]) -> int:
        """Write ``{tag: value}`` at ``step`` as one event; returns its size in bytes.

        Values that are not real numbers (strings, bools, None) are skipped; NaN and infinities
        are written as they are (TensorBoard shows them as gaps or markers).
        """
        values = [
            Summary.Value(tag=tag, simple_value=float(value)) for tag, value in scalars.items()
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
        width, height = reel.frames[0].size
        image = Summary.Image(height=height,
                              width=width,
                              colorspace=_RGB,
                              encoded_image_string=reel.encode())
        return self._write(step, [Summary.Value(tag=tag, image=image)])

    def flush(self) -> None:
        """Nothing to do: ``add_*`` hands each event to the OS before it returns."""

    def close(self) -> None:
        """Close the file; calling it again does nothing."""
        self._closed = True
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def __enter__(self) -> "SummaryWriter":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _begin(self) -> None:
        """A new file, its first event the file version; none is left behind if that fails."""
        os.makedirs(self.logdir, exist_ok=True)
        wall_time = time.time()
        path = os.path.join(self.logdir, event_file_name(wall_time, self._suffix))
        file = _EventFile(path)
        try:
            file.write(
                Event(wall_time=wall_time, step=0, file_version=FILE_VERSION).SerializeToString())
        except OSError:
            file.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        old, self._file, self._path = self._file, file, path
        if old is not None:
            old.close()

    def _write(self, step: int, values: List[Summary.Value]) -> int:
        if not isinstance(step, numbers.Integral) or isinstance(step, bool):
            raise TypeError(f"step must be an int, got {step!r}")
        return self._write_event(
            Event(wall_time=time.time(), step=int(step), summary=Summary(value=values)))

    def _write_event(self, event: Event) -> int:
        self.reopen_if_gone()
        assert self._file is not None
        return self._file.write(event.SerializeToString())


def read_events(path: str) -> List[Event]:
    """The events of the file at ``path``, in order; a record cut short at its end (a writer
    killed mid-write) ends the list."""
    events = []
    with open(path, "rb") as file:
        data = file.read()
    offset = 0
    while offset + 12 <= len(data):
        (length, ) = struct.unpack_from("<Q", data, offset)
        end = offset + 12 + length + 4
        if end > len(data):
            break
        events.append(Event.FromString(data[offset + 12:offset + 12 + length]))
        offset = end
    return events


def write_events(path: str, events: Sequence[Event]) -> None:
    """Write the event file at ``path`` anew with ``events`` (as ``read_events`` gave them),
    whole or not at all."""
    partial = f"{path}.{os.getpid()}.partial"
    file = _EventFile(partial)
    try:
        for event in events:
            file.write(event.SerializeToString())
    except BaseException:
        file.close()
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    file.close()
    os.replace(partial, path)


def _is_number(value: object) -> bool:
    # numpy's integer and floating scalars register as numbers.Real; bools are not measurements.
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
