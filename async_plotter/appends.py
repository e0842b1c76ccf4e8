"""Appending to a file whole or not at all.

A write that a full device cuts short is cut off again (``ftruncate`` to the size before it), so
a reader never meets half a row or half a record, and the next append simply goes on after the
last whole one. Each append is handed to the OS at once, without ``fsync``: a reader sees it,
and neither the trainer nor a budgeted worker waits for the disk.
"""
import contextlib
import os
from typing import Optional, Tuple

#: a file as the OS knows it: its device and inode (and its size, for a file appended to)
Identity = Tuple[int, ...]

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)


class AppendFile:
    """A file opened for appending (made if missing), kept open between appends."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: Optional[int] = os.open(path, _FLAGS, 0o666)
        status = os.fstat(self._fd)
        self._identity = (status.st_dev, status.st_ino)
        #: the file's size after the last whole append (its size when opened, before any)
        self.size = status.st_size

    def append(self, data: bytes) -> None:
        """Append ``data`` whole, or raise ``OSError`` with the file as it was."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size)
            raise
        self.size += len(data)

    def gone(self) -> bool:
        """Whether the file was removed (or replaced) since it was opened: its folder removed
        with ``rm -rf`` while the run goes on."""
        return identity(self.path) != self._identity

    def close(self) -> None:
        """Close the file; calling it again does nothing."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> "AppendFile":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def identity(path: str, with_size: bool = False) -> Optional[Identity]:
    """``path``'s device and inode (and size), or None where there is nothing: a file another
    one replaced, or one removed with its folder, has another identity."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    if with_size:
        return status.st_dev, status.st_ino, status.st_size
    return status.st_dev, status.st_ino


def append_whole(path: str, data: bytes) -> None:
    """Append ``data`` to ``path`` (made if missing) whole, or raise ``OSError`` leaving the file
    as it was."""
    with AppendFile(path) as file:
        file.append(data)
