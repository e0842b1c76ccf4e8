"""One video folder, one run: an earlier run's outputs are set aside when a Plotter claims the
folder, so that its videos, its history and the "newest video is the final policy" rule are of
this run alone.

Run a script twice with the same ``video_dir`` and, without this, the second run's files mix with
the first's: a shorter second run leaves the first run's later ``iter_NNNN.mp4`` as the folder's
newest video, and its ``history/`` (which ``async-plotter replay`` scrubs as one run) holds both
runs' policies under one numbering. So a Plotter moves the earlier run's videos, recordings,
``history/`` and ``live/`` into ``<video_dir>/earlier_runs/<when it ended>/``: nothing is lost,
and the user's own files in the folder stay where they are.

A live Plotter holds a shared ``flock`` on the folder until it closes, so another Plotter that
writes into the same folder at the same time leaves its files alone (it is not an earlier run).
The kernel lets go of the lock however the process ends, SIGKILL included.
"""
import errno
import fcntl
import logging
import os
import time
from typing import List, Optional

from async_plotter.console import tell
from async_plotter.render.history import HISTORY_FOLDER
from async_plotter.render.videos import RECORDING_NAME, VIDEO_NAME, list_named_recordings
from async_plotter.sinks.states import LIVE_FOLDER

logger = logging.getLogger("async_plotter")

#: the folder, inside the video folder, that earlier runs' outputs are moved into
EARLIER_RUNS = "earlier_runs"
# Another Plotter may hold the lock exclusively for the few milliseconds it takes to set an
# earlier run aside: the shared lock is tried this often, a little apart, before going without.
_SHARED_LOCK_TRIES = 50
_SHARED_LOCK_PAUSE = 0.02


class RunFolder:
    """A Plotter's claim on its ``video_dir``: taken once every check has passed, released at
    ``close()`` (or when the Plotter is collected). ``set_aside`` is the folder the earlier
    run's files went to, if any."""

    def __init__(self, video_dir: str, verbose: int) -> None:
        self.video_dir = video_dir
        self.set_aside: Optional[str] = None
        self._fd: Optional[int] = _open_folder(video_dir)
        exclusive = self._lock(fcntl.LOCK_EX)
        if exclusive is False:
            logger.info(
                "Plotter: another live Plotter writes into %s too: its files are not an earlier "
                "run's and stay", video_dir)
        else:  # ours alone, or a file system without locks: an earlier run's files go aside
            self.set_aside = set_aside_earlier_run(video_dir, verbose)
        # Shared from now on, so that a Plotter started beside this one sees it (flock turns an
        # exclusive lock into a shared one in place).
        if exclusive is not None and not self._lock_shared():
            logger.debug("Plotter: %s is not locked while this run writes into it", video_dir)

    def release(self) -> None:
        """Let go of the folder (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.release()

    def _lock(self, kind: int) -> Optional[bool]:
        """Whether ``kind`` of lock was taken at once; None where the folder takes no locks."""
        if self._fd is None:
            return None
        try:
            fcntl.flock(self._fd, kind | fcntl.LOCK_NB)
            return True
        except OSError as error:
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            logger.debug("Plotter: %s takes no lock: %s", self.video_dir, error)
            return None

    def _lock_shared(self) -> bool:
        for _ in range(_SHARED_LOCK_TRIES):
            taken = self._lock(fcntl.LOCK_SH)
            if taken is not False:
                return bool(taken)
            time.sleep(_SHARED_LOCK_PAUSE)
        return False


def set_aside_earlier_run(video_dir: str, verbose: int = 1) -> Optional[str]:
    """Move the outputs of an earlier run in ``video_dir`` (videos and recordings named by their
    policy, ``history/``, ``live/``) into ``earlier_runs/<when the newest was written>/``; that
    folder, or None if there were none. A file that cannot be moved stays, with a warning."""
    names = _outputs(video_dir)
    if not names:
        return None
    paths = [os.path.join(video_dir, name) for name in names]
    ended = max(_newest_mtime(path) for path in paths)
    target = _new_folder(os.path.join(video_dir, EARLIER_RUNS), ended)
    if target is None:
        return None
    videos = sum(1 for name in names if VIDEO_NAME.fullmatch(name))
    recordings = sum(1 for name in names if RECORDING_NAME.fullmatch(name))
    history = len(list_named_recordings(os.path.join(video_dir, HISTORY_FOLDER)))
    stayed = []
    for name, path in zip(names, paths):
        try:
            os.rename(path, os.path.join(target, name))
        except OSError as error:
            stayed.append(f"{name} ({error.strerror or error})")
    if stayed:
        logger.warning(
            "Plotter: could not move %s out of %s with the rest of the earlier run's files; "
            "they stay and mix with this run's", ", ".join(stayed), video_dir)
    tell(
        logger, verbose,
        "plotter: %s held an earlier run's outputs (%d videos, %d state recordings, a history of "
        "%d policies): moved to %s, so that the folder shows this run alone", video_dir, videos,
        recordings, history, target)
    return target


def _open_folder(video_dir: str) -> Optional[int]:
    try:
        return os.open(video_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:  # made moments ago by create_output_dirs: only a race removes it
        logger.debug("Plotter: cannot open %s to lock it: %s", video_dir, error)
        return None


def _outputs(video_dir: str) -> List[str]:
    """The names in ``video_dir`` that a run writes: finished videos and recordings, and the
    history and live folders (partial files are the partial-file cleanup's)."""
    try:
        names = sorted(os.listdir(video_dir))
    except OSError:
        return []
    return [
        name for name in names if VIDEO_NAME.fullmatch(name) or RECORDING_NAME.fullmatch(name) or (
            name in (HISTORY_FOLDER, LIVE_FOLDER) and _has_entries(os.path.join(video_dir, name)))
    ]


def _has_entries(folder: str) -> bool:
    """Whether ``folder`` is a folder with something in it (an unreadable one counts: moved, it
    stays with the run that wrote it)."""
    try:
        return os.path.isdir(folder) and bool(os.listdir(folder))
    except OSError:
        return True


def _newest_mtime(path: str) -> float:
    """When ``path`` (a file, or a folder's newest entry) was last written."""
    try:
        newest = os.stat(path).st_mtime
        if os.path.isdir(path):
            for entry in os.scandir(path):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
        return newest
    except OSError:
        return time.time()


def _new_folder(parent: str, ended: float) -> Optional[str]:
    """A new folder in ``parent`` named by the local time ``ended`` (``_2``, ``_3``... if
    taken); None, with a warning, if it cannot be made."""
    stem = os.path.join(parent, time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(ended)))
    for attempt in range(1, 1000):
        target = stem if attempt == 1 else f"{stem}_{attempt}"
        try:
            os.makedirs(target)
            return target
        except FileExistsError:
            continue
        except OSError as error:
            logger.warning(
                "Plotter: cannot make %s for the earlier run's files (%s); they stay and mix with "
                "this run's", target, error.strerror or error)
            return None
    return None
