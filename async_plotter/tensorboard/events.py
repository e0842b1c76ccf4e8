"""Event files: TFRecord framing, the file name TensorBoard looks for, and the file's header.

Each record is ``uint64 length``, ``uint32 masked_crc32c(length)``, ``data``,
``uint32 masked_crc32c(data)``, little-endian. The first event of a file says
``file_version: "brain.Event:2"``; TensorBoard then discards earlier steps only on an explicit
session restart, which these files never contain, so two writers in one folder (the trainer's
scalars and the render process's videos) never erase each other's data.
"""
import itertools
import os
import socket
import struct
import threading
import time
from typing import BinaryIO, Optional

from async_plotter.tensorboard import proto
from async_plotter.tensorboard.crc32c import masked_crc32c

FILE_VERSION = "brain.Event:2"
#: every event file's name starts with this; TensorBoard finds files by it
FILE_PREFIX = "events.out.tfevents."

_file_numbers = itertools.count()
_file_numbers_lock = threading.Lock()


def frame_record(data: bytes) -> bytes:
    """``data`` framed as one TFRecord."""
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc32c(length)) + data +
            struct.pack("<I", masked_crc32c(data)))


def event_file_name(wall_time: float, number: int, suffix: str = "") -> str:
    """``events.out.tfevents.<secs>.<host>.<pid>.<n><suffix>``, TensorBoard's own convention:
    the pid and ``n`` keep the files of processes and writers sharing a folder apart."""
    host, pid = socket.gethostname(), os.getpid()
    return f"{FILE_PREFIX}{int(wall_time):010d}.{host}.{pid}.{number}{suffix}"


class EventFile:
    """One open event file in ``directory`` (created if needed), header already written.

    Not thread-safe: one writer per thread, or a lock around it.
    """

    def __init__(self, directory: str, suffix: str = "") -> None:
        os.makedirs(directory, exist_ok=True)
        wall_time = time.time()
        self._file: Optional[BinaryIO] = None
        while self._file is None:
            with _file_numbers_lock:
                number = next(_file_numbers)
            path = os.path.join(directory, event_file_name(wall_time, number, suffix))
            try:
                # "x": never append to another writer's file (a pid reused within a second).
                self._file = open(path, "xb")
            except FileExistsError:
                continue
        self.path = path
        self.write_event(proto.event(wall_time, 0, file_version=FILE_VERSION))
        self.flush()

    def write_event(self, event: bytes) -> None:
        """Append one encoded ``Event`` (buffered until :meth:`flush`)."""
        if self._file is None:
            raise ValueError(f"event file {self.path} is closed")
        self._file.write(frame_record(event))

    def flush(self) -> None:
        """Hand what was written to the OS: a reader sees it at once; no ``fsync``, so this
        costs a system call, never a wait for the disk."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Flush and close; calling it again does nothing."""
        if self._file is not None:
            try:
                self._file.flush()
            finally:
                self._file.close()
                self._file = None
