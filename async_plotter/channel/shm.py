"""The local channel: a shared-memory segment with two slots and a one-byte wake-up pipe.

Why this shape (docs/design.md, "Shared memory, newest wins"): publishing is one ``memcpy`` and
never blocks the trainer; no lock is shared, so a killed worker cannot freeze it. Each slot
carries a sequence counter (a *seqlock*: odd while written), so a reader never applies a torn
vector, and two slots written alternately let it through a trainer publishing flat-out. The
worker sleeps in ``select`` on the pipe, whose end-of-file tells it the trainer died. Segments are
named after their creator (``async_plotter_<pid>_<start time>_<random>``) so that the next writer
removes those a killed process group left in ``/dev/shm`` (``remove_orphaned_segments``).
"""
import errno
import logging
import multiprocessing.connection
import os
import secrets
import select
import shutil
import sys
import time
from multiprocessing import resource_tracker, shared_memory
import dataclasses
from typing import List, Optional

import numpy as np
import psutil

from async_plotter.channel.base import ParamUpdate, ParentGone, Update, copy_update
from async_plotter.words import amount

_MAGIC = 0x41504c54  # "APLT"
_DTYPES = {0: np.dtype(np.float32), 1: np.dtype(np.float64)}
_DTYPE_CODES = {dtype: code for code, dtype in _DTYPES.items()}

# Header: int64 words. _H_WAKE_PENDING is 1 while a wake-up byte sits unread in the pipe: the
# writer then skips the system call, so a trainer publishing faster than the worker reads pays
# for one copy and a few memory writes only.
# _H_FINAL is 1 once training is over: the reader then cuts an older episode short to show the
# newest parameters in the final video.
_H_MAGIC, _H_SIZE, _H_DTYPE, _H_LATEST, _H_WAKE_PENDING, _H_FINAL = 0, 1, 2, 3, 4, 5
_SLOT_BASE, _SLOT_WORDS = 8, 4  # per slot: sequence, update number, iteration, max_path_length
_S_SEQ, _S_NUMBER, _S_ITERATION, _S_MAX_PATH = 0, 1, 2, 3
_HEADER_BYTES = 128  # keeps both data slots 64-byte aligned
_NO_ITERATION = -1

#: the start of this library's segment names (followed by the creator's pid and start time)
SEGMENT_PREFIX = "async_plotter_"
_SHM_DIR = "/dev/shm"

logger = logging.getLogger("async_plotter")


def supported_dtype(dtype: np.dtype) -> bool:
    """Whether parameters of this dtype can travel on the local channel."""
    return np.dtype(dtype) in _DTYPE_CODES


@dataclasses.dataclass(frozen=True)
class ShmAddress:
    """Where a worker finds the segment: its name and the read end of a fresh wake-up pipe."""

    name: str
    wake_reader: multiprocessing.connection.Connection

    def open_reader(self) -> "SharedMemoryReader":
        return SharedMemoryReader(self.name, self.wake_reader)


class SharedMemoryWriter:
    """Trainer side. Owns the segment and the write end of the wake-up pipe.

    Only parameters go through the segment; the trainer hands metrics to the worker's supervisor
    itself (``WorkerSupervisor.post_metrics``)."""

    def __init__(self, size: int, dtype: np.dtype) -> None:
        dtype = np.dtype(dtype)
        if dtype not in _DTYPE_CODES:
            raise ValueError(
                f"parameters of dtype {dtype} are not supported; use float32 or float64")
        self.size = int(size)
        self.dtype = dtype
        remove_orphaned_segments()
        # The pipe first: if the segment cannot be had, nothing is left that outlives us.
        self._wake_reader, self._wake_writer = _wake_pipe()
        self._shm = _create_segment(_HEADER_BYTES + 2 * _slot_bytes(self.size, dtype))
        self._header = np.ndarray((_HEADER_BYTES // 8, ), np.int64, self._shm.buf, 0)
        self._header[:] = 0
        self._slots = _slots(self._shm, self.size, dtype)
        self._header[_H_SIZE] = self.size
        self._header[_H_DTYPE] = _DTYPE_CODES[dtype]
        self._header[_H_LATEST] = -1  # nothing published yet
        self._header[_H_MAGIC] = _MAGIC
        self._published = -1
        self._wake_fd = self._wake_writer.fileno()
        self._closed = False

    @property
    def name(self) -> str:
        """The segment's name, for the reader to attach to."""
        return self._shm.name

    @property
    def wake_reader(self) -> multiprocessing.connection.Connection:
        """The read end of the wake-up pipe, to hand to exactly one reader process."""
        return self._wake_reader

    @property
    def published(self) -> int:
        """Number of the last update published (-1 before the first)."""
        return self._published

    def publish(self,
                params: Update,
                iteration: Optional[int],
                max_path_length: int,
                number: Optional[int] = None) -> int:
        """Copy ``params`` into the next slot and wake the reader. Never waits for the reader.

        ``params`` must already have this channel's size and dtype (the caller checks, so that the
        error names the user's call). Returns the update's number.
        """
        number = self._published + 1 if number is None else number
        base = _SLOT_BASE + (number % 2) * _SLOT_WORDS
        header = self._header
        header[base + _S_SEQ] += 1  # odd: slot being written
        copy_update(self._slots[number % 2], params)
        header[base + _S_NUMBER] = number
        header[base + _S_ITERATION] = _NO_ITERATION if iteration is None else iteration
        header[base + _S_MAX_PATH] = max_path_length
        header[base + _S_SEQ] += 1  # even: slot whole again
        header[_H_LATEST] = number
        self._published = number
        if not header[_H_WAKE_PENDING]:
            header[_H_WAKE_PENDING] = 1
            try:
                os.write(self._wake_fd, b"\1")
            except OSError:
                pass  # full, or no reader right now: it reads the latest slot when it looks
        return number

    def address(self) -> ShmAddress:
        """The address for a (re)started worker: a fresh wake-up pipe each time."""
        return ShmAddress(self.name, self.renew_wake_pipe())

    def request_final(self) -> None:
        """Training is over: the reader should show the newest update without delay."""
        if not self._closed:
            self._header[_H_FINAL] = 1

    def renew_wake_pipe(self) -> multiprocessing.connection.Connection:
        """A fresh wake-up pipe for a restarted reader; returns its read end.

        Closing the old write end is what tells an old reader, if one is still alive, to exit.
        """
        self._wake_reader.close()
        self._wake_writer.close()
        self._wake_reader, self._wake_writer = _wake_pipe()
        self._wake_fd = self._wake_writer.fileno()
        self._header[_H_WAKE_PENDING] = 0  # the old pipe's unread byte went with it
        return self._wake_reader

    def close(self, timeout: float = 0.0) -> None:
        """Release the segment and the pipe (nothing is pending: ``timeout`` is not needed).
        The reader sees end-of-file and exits."""
        if self._closed:
            return
        self._closed = True
        self._wake_reader.close()
        self._wake_writer.close()
        # numpy views pin the buffer; drop them before closing the mapping.
        self._header = None
        self._slots = []
        self._shm.close()
        try:
            self._shm.unlink()
        except FileNotFoundError:
            pass


class SharedMemoryReader:
    """Worker side: attaches to the segment, sleeps until woken, reads only whole, newest
    updates."""

    def __init__(self, name: str, wake_reader: multiprocessing.connection.Connection) -> None:
        self._shm = _attach_untracked(name)
        header = np.ndarray((_HEADER_BYTES // 8, ), np.int64, self._shm.buf, 0)
        if header[_H_MAGIC] != _MAGIC:
            raise RuntimeError(f"shared memory segment {name} is not a parameter channel")
        self._header = header
        self._slots = _slots(self._shm, int(header[_H_SIZE]), _DTYPES[int(header[_H_DTYPE])])
        self._wake_conn = wake_reader  # keeps the descriptor open
        self._wake_fd = wake_reader.fileno()
        self.last_number = -1

    def newer_available(self) -> bool:
        """Cheap check (one memory read, no system call) for an update newer than the last read."""
        return int(self._header[_H_LATEST]) > self.last_number

    def final_requested(self) -> bool:
        """Whether the trainer finished training and waits for a video of its newest update."""
        return bool(self._header[_H_FINAL])

    def wait(self, timeout: Optional[float]) -> Optional[ParamUpdate]:
        """Sleep until an update newer than the last one read arrives; return the newest.

        Returns None on timeout. Raises ``ParentGone`` once the trainer has closed the channel or
        died.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.newer_available():
                self._drain_wakeups()
                return self.read_newest()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            try:
                ready, _, _ = select.select([self._wake_fd], [], [], remaining)
            except InterruptedError:
                continue
            except (OSError, ValueError) as error:
                raise ParentGone(f"the wake-up pipe is gone: {error}") from error
            if ready:
                self._drain_wakeups()

    def read_newest(self) -> Optional[ParamUpdate]:
        """Copy the newest update if it is newer than the last one read, else return None."""
        attempt = 0
        while True:
            number = int(self._header[_H_LATEST])
            if number <= self.last_number:
                return None
            base = _SLOT_BASE + (number % 2) * _SLOT_WORDS
            header = self._header
            seq_before = int(header[base + _S_SEQ])
            if seq_before % 2 == 0 and int(header[base + _S_NUMBER]) == number:
                params = self._slots[number % 2].copy()
                iteration = int(header[base + _S_ITERATION])
                max_path_length = int(header[base + _S_MAX_PATH])
                if int(header[base + _S_SEQ]) == seq_before and int(
                        header[base + _S_NUMBER]) == number:
                    self.last_number = number
                    return ParamUpdate(number, params,
                                       None if iteration == _NO_ITERATION else iteration,
                                       max_path_length)
            # The trainer overwrote the slot during the copy: it published twice meanwhile.
            attempt += 1
            time.sleep(min(0.0005 * attempt, 0.02))

    def _drain_wakeups(self) -> None:
        # Cleared before draining: a byte written after this point stays for the next select.
        self._header[_H_WAKE_PENDING] = 0
        while True:
            try:
                ready, _, _ = select.select([self._wake_fd], [], [], 0)
                if not ready:
                    return
                if not os.read(self._wake_fd, 4096):
                    raise ParentGone("the trainer closed the parameter channel")
            except InterruptedError:
                continue
            except OSError as error:
                if error.errno in (errno.EBADF, errno.EPIPE):
                    raise ParentGone(str(error)) from error
                raise

    def close(self) -> None:
        """Detach from the segment (the trainer owns and unlinks it)."""
        self._header = None
        self._slots = []
        self._shm.close()


def _start_time(pid: int) -> Optional[int]:
    """When process ``pid`` started (clock ticks since boot), or None if it does not exist or this
    is not known here. With the pid it names a process uniquely: pids are reused, start times
    are not. Counted from boot, not from the epoch, so that a change of the system clock does not
    make a live creator look like another process."""
    try:
        since_boot = psutil.Process(pid).create_time() - psutil.boot_time()
        ticks_per_second = os.sysconf("SC_CLK_TCK")
    except (psutil.Error, OSError, ValueError, AttributeError):
        return None
    return round(since_boot * ticks_per_second)


def _create_segment(size: int) -> shared_memory.SharedMemory:
    pid = os.getpid()
    started = _start_time(pid)
    creator = f"{pid}_{started}" if started is not None else f"{pid}"
    while True:
        name = f"{SEGMENT_PREFIX}{creator}_{secrets.token_hex(4)}"
        try:
            segment = shared_memory.SharedMemory(name=name, create=True, size=size)
        except FileExistsError:
            continue
        try:
            _reserve(segment.name, size)
        except OSError:
            segment.close()
            segment.unlink()
            raise
        return segment


def _reserve(name: str, size: int) -> None:
    """Give segment ``name`` its memory now. A segment is a sparse file in ``/dev/shm``: where
    that tmpfs has no room (Docker gives containers 64 MB), the first write into a page it
    cannot back is a SIGBUS that kills the trainer; reserved, the shortage is an ``OSError``
    here instead, naming the fix."""
    path = os.path.join(_SHM_DIR, name.lstrip("/"))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # shared memory is not a /dev/shm file here: nothing to reserve this way
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.ENOMEM):
            return  # a file system that reserves nothing (EOPNOTSUPP): as before
        free = shutil.disk_usage(_SHM_DIR).free
        raise OSError(
            error.errno,
            f"{_SHM_DIR} has no room for the plotter's shared memory ({size / 1e6:.1f} MB: two "
            f"copies of the parameter vector; {free / 1e6:.1f} MB free). Free space there, or "
            "give the container more (docker run --shm-size=1g)") from error
    finally:
        os.close(fd)


def _creator_alive(name: str) -> bool:
    """Whether the process that created segment ``name`` (ours: ``SEGMENT_PREFIX``) still runs.
    Anything that does not parse counts as alive: it is never removed."""
    parts = name[len(SEGMENT_PREFIX):].split("_")
    if len(parts) != 3 or not (parts[0].isdigit() and parts[1].isdigit()):
        return True
    started = _start_time(int(parts[0]))
    return started is not None and started == int(parts[1])


def remove_orphaned_segments() -> int:
    """Remove this library's segments in ``/dev/shm`` whose creator is dead (a run killed with its
    resource tracker, e.g. ``kill -9`` of its process group); returns how many. Linux only (where
    creators' start times can be read); other segments, and those of live processes, are left
    alone. Costs one directory listing and a look at one process per segment of ours."""
    if _start_time(os.getpid()) is None:
        return 0
    try:
        names = [n for n in os.listdir(_SHM_DIR) if n.startswith(SEGMENT_PREFIX)]
    except OSError:
        return 0
    removed, freed = 0, 0
    for name in names:
        if _creator_alive(name):
            continue
        path = os.path.join(_SHM_DIR, name)
        try:
            size = os.stat(path).st_size
            os.unlink(path)
        except OSError:
            continue  # removed meanwhile, or not ours to remove
        removed, freed = removed + 1, freed + size
    if removed:
        logger.info("removed %s (%.1f MB) left in %s by killed runs",
                    amount(removed, "shared-memory segment", "shared-memory segments"), freed / 1e6,
                    _SHM_DIR)
    return removed


def _wake_pipe():
    reader, writer = multiprocessing.Pipe(duplex=False)
    os.set_blocking(writer.fileno(), False)
    return reader, writer


def _attach_untracked(name: str) -> shared_memory.SharedMemory:
    """Attach to the trainer's segment without registering it with the resource tracker.

    The trainer created and registered it; if a reader registered it too, the tracker would unlink
    it (or warn of a leak) when the *reader* exits. Python 3.13 says this with ``track=False``.
    """
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    original = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = original


def _slot_bytes(size: int, dtype: np.dtype) -> int:
    return (max(size, 1) * dtype.itemsize + 63) // 64 * 64  # 64-byte aligned


def _slots(shm: shared_memory.SharedMemory, size: int, dtype: np.dtype) -> List[np.ndarray]:
    """The two data slots' views (after the header, each 64-byte aligned)."""
    step = _slot_bytes(size, dtype)
    return [np.ndarray((size, ), dtype, shm.buf, _HEADER_BYTES + i * step) for i in range(2)]
