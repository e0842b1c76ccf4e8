"""The hidden names a video or a state recording is written under until it is whole
(``.partial_iter_0008.mp4``), and the ones a writer that died left behind.

A writer creates its partial file locked (``flock``) and holds the lock until the file is renamed
or removed. The kernel lets go of the lock however the writer ends, SIGKILL included. So a
render process that starts writing into a folder removes the partial files nobody holds a lock
on: those of a writer that died (a worker killed from outside, a machine that lost power).
Another live Plotter's partial files in the same folder are locked, and left alone; over NFS
too, where Linux turns ``flock`` into a lock the server keeps for every client. (A writer of an
older version of this package, which locked nothing, would not be told apart.)
"""
import fcntl
import logging
import os
import stat
from typing import List, Optional

logger = logging.getLogger(__name__)

PREFIX = ".partial_"


def partial_path(path: str) -> str:
    """The hidden name ``path`` is written under until it is whole."""
    directory, name = os.path.split(path)
    return os.path.join(directory, PREFIX + name)


class PartialFile:
    """``path``'s partial file, created empty and locked by this process until ``release``.

    The writer (this process, or the encoder it starts) then writes the file at ``self.path``
    as it would any file: the lock is on the file, not on a descriptor the writer uses. Where
    no lock can be had (the file system takes none, or another live writer holds this very
    name), the file is written unlocked, as before locks existed."""

    def __init__(self, path: str) -> None:
        self.path = partial_path(path)
        self._fd: Optional[int] = _create_locked(self.path)

    def release(self) -> None:
        """Let go of the lock (once the file is renamed or removed). Idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _create_locked(path: str) -> Optional[int]:
    for _ in range(3):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as error:  # a full device, a folder gone: the writer's own error says so
            logger.debug("cannot create %s locked: %s", path, error)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            logger.debug("writing %s unlocked: %s", path, error)
            return None
        try:
            # Removed between our open and our lock (as a dead writer's, by a process
            # starting meanwhile): the lock is on a file nobody will see; make it again.
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                os.ftruncate(fd, 0)
                return fd
        except OSError:
            pass
        os.close(fd)
    return None


def remove_abandoned(directory: str) -> List[str]:
    """Remove the partial files in ``directory`` whose writer is gone (nobody holds their
    lock); the names removed."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []  # not made yet, or unreadable: nothing of ours is there
    removed = []
    for name in names:
        if name.startswith(PREFIX) and _remove_if_abandoned(os.path.join(directory, name)):
            removed.append(name)
    if removed:
        logger.info("removed %d unfinished file(s) a stopped writer left in %s: %s", len(removed),
                    directory, ", ".join(sorted(removed)))
    return removed


def _remove_if_abandoned(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False  # gone meanwhile, a link, or not ours to open
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a live writer holds it (or no locks here: then leave it)
        # Still the file we locked (not renamed into place and replaced meanwhile).
        if not os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False)):
            return False
        os.remove(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
