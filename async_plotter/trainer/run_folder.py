"""One folder, one run: an earlier run's outputs are set aside when a run claims the folder, so
that its videos, its history and the "newest video is the final policy" rule are of this run
alone. A ``Plotter`` claims its ``video_dir``; ``run_experiment_lite`` claims its ``log_dir``
(``rl/recorder.py`` says which of its files are a run's).

Run a script twice with the same ``video_dir`` and, without this, the second run's files mix with
the first's: a shorter second run leaves the first run's later ``iter_NNNN.mp4`` as the folder's
newest video, and its ``history/`` (which ``async-plotter replay`` scrubs as one run) holds both
runs' policies under one numbering. So the earlier run's videos, recordings, ``history/`` and
``live/`` move into ``<video_dir>/earlier_runs/<when it ended>/``: nothing is lost, and the
user's own files in the folder stay where they are.

A live run holds an exclusive ``flock`` on its folder until it closes. Another run (a Plotter,
``async-plotter view --video-dir``, ``run_experiment_lite``) asked to write there meanwhile would
overwrite its files under the same names, so it is refused with ``FolderInUseError`` naming the
holder (a claim of this process, or the other process's pid and command line): in a notebook,
the Plotter from a cell's earlier run. The kernel lets go of the lock however the process ends,
SIGKILL included, so a killed run leaves no claim. ``earlier_runs/`` keeps the newest
``EARLIER_RUNS_KEPT`` runs.

A run resumed from its snapshot of iteration K is the same run (``resume_after``): what the
folder holds of iterations up to K stays, and only the outputs of later ones, which it does
again, go aside, with the later rows of its tables (``progress.csv``, ``returns.csv``).
"""
import csv
import dataclasses
import errno
import fcntl
import io
import logging
import os
import re
import shutil
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from async_plotter.console import tell
from async_plotter.errors import FolderInUseError
from async_plotter.render.history import HISTORY_FOLDER
from async_plotter.render.history_returns import RETURNS_FILE
from async_plotter.render.videos import (EVENTS_NAME, RECORDING_NAME, VIDEO_NAME,
                                         list_named_recordings)
from async_plotter.sinks.states import LIVE_FOLDER
from async_plotter.words import counted

logger = logging.getLogger("async_plotter")

#: the folder, inside the run's folder, that earlier runs' outputs are moved into
EARLIER_RUNS = "earlier_runs"
#: earlier runs kept in it: setting one more aside removes the oldest (a run of the demo's
#: size is 2-3 MB; a folder reused every day would otherwise grow without end)
EARLIER_RUNS_KEPT = 5
_EARLIER_RUN_NAME = re.compile(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d(_\d+)?")
# The folders this process holds, by (device, inode), with who holds them (named in the error
# when a second claim in this process is refused: the kernel says which process, not which
# object) and what for.
_held_here: Dict[Tuple[int, int], Tuple[str, "RunOutputs"]] = {}


@dataclasses.dataclass(frozen=True)
class RunOutputs:
    """Which of a folder's entries a run writes, and the words for them."""

    #: the argument that named the folder (``video_dir``, ``log_dir``), for the refusal
    argument: str
    #: who speaks in the line that says a run was set aside (``plotter``)
    speaker: str
    #: the names in a folder that are a run's outputs (the user's own files are not)
    names: Callable[[str], List[str]]
    #: what those were, for that line: ``3 videos, 3 state recordings, a history of 8 policies``
    describe: Callable[[str, List[str]], str]
    #: the outputs (paths relative to the folder) of the iterations after the given one: a run
    #: resumed after it does them again
    later: Callable[[str, int], List[str]]
    #: tables (a path relative to the folder, its iteration column) whose rows of the later
    #: iterations go aside with those outputs
    tables: Tuple[Tuple[str, str], ...] = ()
    #: the folder's TensorBoard event files that a run resumed after an iteration cuts to
    #: their steps up to it, the whole files going aside (as the tables' rows do); none if None
    events: Optional[Callable[[str], List[str]]] = None
    #: whether the run's own Plotter writes its TensorBoard files into the folder, as part of
    #: the run (``run_experiment_lite``'s log_dir): that Plotter does not claim it again
    hosts_its_plotters_events: bool = False


class RunFolder:
    """A run's claim on its folder (by default a Plotter's ``video_dir``): taken once every
    check has passed, released at ``close()`` (or when the Plotter is collected).
    ``set_aside`` is the folder the earlier run's files went to, if any. ``holder`` says who
    claims it ("a Plotter for Swimmer-v5"), for the error another claimant gets. A run resumed
    after iteration ``resume_after`` continues the one in the folder: only the outputs of later
    iterations, which it does again, are set aside."""

    def __init__(self,
                 folder: str,
                 verbose: int,
                 holder: str = "a Plotter",
                 outputs: Optional[RunOutputs] = None,
                 resume_after: Optional[int] = None) -> None:
        self.folder = folder
        self.outputs = outputs or VIDEO_OUTPUTS
        self.set_aside: Optional[str] = None
        self._holder = holder
        self._fd: Optional[int] = None
        self._key: Optional[Tuple[int, int]] = None
        taken = self._claim()
        if taken is False:
            who, here = self._holder_now()
            self.release()
            first = ("close() that one first (in a notebook, the Plotter of a cell's earlier run "
                     "is still open: Plotter.close_all() closes it)"
                     if here else "let that run end first")
            argument = self.outputs.argument
            raise FolderInUseError(
                f"{argument} {folder!r} is in use: {who} writes a run there, and two runs in one "
                f"folder overwrite each other's files. Either {first}, or give this run a folder "
                f"of its own (e.g. {argument}={_sibling(folder)!r}).")
        # Ours alone, or a file system without locks: an earlier run's files go aside.
        if resume_after is None:
            self.set_aside = set_aside_earlier_run(folder, verbose, self.outputs)
        else:
            self.set_aside = set_aside_later_iterations(folder, resume_after, verbose, self.outputs)

    def hold_again(self) -> bool:
        """Claim the folder again once it was removed and made again while the run went on
        (``rm -rf runs/``): the claim went with the folder it was on. False where another run
        claimed the new one first."""
        self.release()
        if self._claim() is False:
            self.release()
            return False
        return True

    def _claim(self) -> Optional[bool]:
        """Open the folder and lock it (``_lock``'s answer); taken, the claim is noted for
        another claimant of this process, who is told it is its own."""
        self._fd = _open_folder(self.folder)
        taken = self._lock()
        if taken and self._fd is not None:
            status = os.fstat(self._fd)
            self._key = (status.st_dev, status.st_ino)
            _held_here[self._key] = (f"{self._holder} of this process (claimed at "
                                     f"{time.strftime('%H:%M:%S')})", self.outputs)
        return taken

    def release(self) -> None:
        """Let go of the folder (idempotent)."""
        fd, self._fd = self._fd, None
        key, self._key = self._key, None
        if key is not None:
            _held_here.pop(key, None)
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.release()

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def _lock(self) -> Optional[bool]:
        """Whether the folder is ours now; None where it takes no locks."""
        if self._fd is None:
            return None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as error:
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            logger.debug("%s takes no lock: %s", self.folder, error)
            return None

    def _holder_now(self) -> Tuple[str, bool]:
        """Who holds the folder, and whether it is this process: a claim of this process by
        its holder, another by its pid and command line (from ``/proc/locks``)."""
        assert self._fd is not None
        status = os.fstat(self._fd)
        here = _held_here.get((status.st_dev, status.st_ino))
        if here is not None:
            return here[0], True
        pid = _flock_holder(status)
        if pid is None:
            return "another live Plotter", False
        if pid == os.getpid():
            return "another live Plotter of this process", True
        return f"process {pid}{_command_line(pid)}", False


def set_aside_earlier_run(folder: str,
                          verbose: int = 1,
                          outputs: Optional[RunOutputs] = None) -> Optional[str]:
    """Move the outputs of an earlier run in ``folder`` (by default a video folder's: videos and
    recordings named by their policy, ``history/``, ``live/``) into ``earlier_runs/<when the
    newest was written>/``; that folder, or None if there were none. A file that cannot be moved
    stays, with a warning."""
    outputs = outputs or VIDEO_OUTPUTS
    names = outputs.names(folder)
    if not names:
        return None
    ended = max(_newest_mtime(os.path.join(folder, name)) for name in names)
    what = outputs.describe(folder, names)
    target = _move_aside(folder, names, (), None, ended, verbose, outputs.speaker)
    if target is not None:
        tell(
            logger, verbose,
            "%s: %s held an earlier run's outputs (%s): moved to %s, so that the folder shows "
            "this run alone", outputs.speaker, folder, what, target)
    return target


def set_aside_later_iterations(folder: str,
                               after: int,
                               verbose: int = 1,
                               outputs: Optional[RunOutputs] = None) -> Optional[str]:
    """For a run resumed after iteration ``after`` in ``folder``: move the outputs of later
    iterations (an earlier run went further than the snapshot resumed from) into
    ``earlier_runs/<now>/``, with the tables' rows of those iterations (the whole table is
    copied there, and keeps only the earlier rows here); that folder, or None if there were
    none. Everything of iterations up to ``after`` stays: it is this run's."""
    outputs = outputs or VIDEO_OUTPUTS
    paths = outputs.later(folder, after)
    tables = [(path, column) for path, column in outputs.tables
              if _rows_after(os.path.join(folder, path), column, after)]
    events = _events_through(folder, outputs.events(folder), after) if outputs.events else {}
    if not paths and not tables and not events:
        return None
    target = _move_aside(folder, paths, tables, after, time.time(), verbose, outputs.speaker,
                         events)
    if target is not None:
        moved = [f"{len(paths)} files"] if paths else []
        moved += [f"the later rows of {path}" for path, _ in tables]
        moved += [f"the later steps of {len(events)} TensorBoard event file(s)"] if events else []
        tell(
            logger, verbose,
            "%s: %s held iterations after %d, which this resumed run does again (%s): moved "
            "to %s", outputs.speaker, folder, after, " and ".join(moved), target)
    return target


def _move_aside(folder: str,
                paths: List[str],
                tables: Sequence[Tuple[str, str]],
                after: Optional[int],
                ended: float,
                verbose: int,
                speaker: str,
                events: Optional[Dict[str, List[Any]]] = None) -> Optional[str]:
    """Move ``paths`` (relative to ``folder``) into a new ``earlier_runs/<ended>/``, and copy
    the ``tables`` and the event files ``events`` there, keeping here only their rows and steps
    of iterations up to ``after`` (``events``: each file's kept events); that folder, or None if
    it cannot be made. What cannot be moved stays, with a warning."""
    target = _new_folder(os.path.join(folder, EARLIER_RUNS), ended)
    if target is None:
        return None
    _keep_newest_runs(os.path.join(folder, EARLIER_RUNS), target, verbose)
    stayed = []
    for path in paths:
        try:
            os.makedirs(os.path.dirname(os.path.join(target, path)), exist_ok=True)
            os.rename(os.path.join(folder, path), os.path.join(target, path))
        except OSError as error:
            stayed.append(f"{path} ({error.strerror or error})")
    for path, column in tables:
        try:
            os.makedirs(os.path.dirname(os.path.join(target, path)), exist_ok=True)
            shutil.copy2(os.path.join(folder, path), os.path.join(target, path))
            _keep_rows_through(os.path.join(folder, path), column, after)
        except (OSError, csv.Error) as error:
            stayed.append(f"the later rows of {path} ({getattr(error, 'strerror', None) or error})")
    if events:
        from async_plotter.tensorboard.writer import write_events
    for name, kept in (events or {}).items():
        try:
            shutil.copy2(os.path.join(folder, name), os.path.join(target, name))
            write_events(os.path.join(folder, name), kept)
        except OSError as error:
            stayed.append(f"the later steps of {name} ({error.strerror or error})")
    if stayed:
        logger.warning(
            "%s: could not move %s out of %s with the rest of the earlier run's files; they stay "
            "and mix with this run's", speaker, ", ".join(stayed), folder)
    return target


def _iteration_of(name: str) -> Optional[int]:
    """The iteration a video or state recording named by its policy shows (``iter_0007.mp4``:
    7); None for one named by its update."""
    match = VIDEO_NAME.fullmatch(name) or RECORDING_NAME.fullmatch(name)
    return int(match[2]) if match and match[1] == "iter" else None


def _events_through(folder: str, names: List[str], after: int) -> Dict[str, List[Any]]:
    """The event files ``names`` in ``folder`` that hold a step after ``after``, each with its
    events up to it (read once: a file of rollout images is megabytes)."""
    # Here, not at the top: only a resumed run with event files needs protocol buffers.
    from async_plotter.tensorboard.writer import read_events

    through = {}
    for name in names:
        try:
            events = read_events(os.path.join(folder, name))
        except Exception:  # noqa: BLE001 - unreadable (protobuf's DecodeError, OSError): stays
            continue
        kept = [event for event in events if event.step <= after]
        if len(kept) < len(events):
            through[name] = kept
    return through


def _rows_after(path: str, column: str, after: int) -> bool:
    return any(_iteration(row, column) > after for row in read_table(path)[1])


def _keep_rows_through(path: str, column: str, after: int) -> None:
    """Rewrite the table at ``path`` with its rows of iterations up to ``after`` (and those
    without one), whole or not at all."""
    header, rows = read_table(path)
    kept = io.StringIO()
    writer = csv.DictWriter(kept, header, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(row for row in rows if _iteration(row, column) <= after)
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "w", encoding="utf-8", newline="") as file:
        file.write(kept.getvalue())
    os.replace(partial, path)


def read_table(path: str) -> Tuple[List[str], List[Dict[str, str]]]:
    """A CSV table's header and rows, as text; empty where it cannot be read."""
    try:
        with open(path, encoding="utf-8", newline="") as file:
            reader = csv.DictReader(file)
            rows = list(reader)
            return list(reader.fieldnames or []), rows
    except (OSError, csv.Error, UnicodeDecodeError):
        return [], []


def _iteration(row: Dict[str, str], column: str) -> float:
    """A row's iteration; -inf where it has none (an update sent without one): kept."""
    try:
        return float(row.get(column) or "-inf")
    except ValueError:
        return float("-inf")


def has_entries(folder: str) -> bool:
    """Whether ``folder`` is a folder with something in it (an unreadable one counts: moved, it
    stays with the run that wrote it)."""
    try:
        return os.path.isdir(folder) and bool(os.listdir(folder))
    except OSError:
        return True


def _video_outputs(video_dir: str) -> List[str]:
    """The names in ``video_dir`` that a run writes: finished videos and recordings, and the
    history and live folders (partial files are the partial-file cleanup's)."""
    try:
        names = sorted(os.listdir(video_dir))
    except OSError:
        return []
    # A Plotter's own TensorBoard event files too, where tensorboard_dir is the video folder.
    return [
        name for name in names if VIDEO_NAME.fullmatch(name) or RECORDING_NAME.fullmatch(name)
        or EVENTS_NAME.fullmatch(name) or (
            name in (HISTORY_FOLDER, LIVE_FOLDER) and has_entries(os.path.join(video_dir, name)))
    ]


def _describe_videos(video_dir: str, names: List[str]) -> str:
    """``3 videos, 3 state recordings, a history of 8 policies``: what there is of each."""
    videos = sum(1 for name in names if VIDEO_NAME.fullmatch(name))
    recordings = sum(1 for name in names if RECORDING_NAME.fullmatch(name))
    history = len(list_named_recordings(os.path.join(video_dir, HISTORY_FOLDER)))
    parts = [
        counted(videos, "video", "videos"),
        counted(recordings, "state recording", "state recordings"),
        f"a history of {counted(history, 'policy', 'policies')}" if history else "",
        _describe_events(video_dir, names), "live/" if LIVE_FOLDER in names else ""
    ]
    return ", ".join(part for part in parts if part)


def _event_files(folder: str) -> List[str]:
    """A Plotter's TensorBoard event files in ``folder`` (the user's own writers' are not)."""
    try:
        return sorted(name for name in os.listdir(folder) if EVENTS_NAME.fullmatch(name))
    except OSError:
        return []


def _describe_events(folder: str, names: List[str]) -> str:
    count = sum(1 for name in names if EVENTS_NAME.fullmatch(name))
    return counted(count, "TensorBoard event file", "TensorBoard event files")


def _later_videos(video_dir: str, after: int) -> List[str]:
    """Videos and recordings, beside them and in the history, of iterations after ``after``."""
    found = []
    for folder in ("", HISTORY_FOLDER):
        try:
            names = sorted(os.listdir(os.path.join(video_dir, folder)))
        except OSError:
            continue
        for name in names:
            iteration = _iteration_of(name)
            if iteration is not None and iteration > after:
                found.append(os.path.join(folder, name))
    return found


#: a Plotter's ``video_dir``
VIDEO_OUTPUTS = RunOutputs("video_dir",
                           "plotter",
                           _video_outputs,
                           _describe_videos,
                           _later_videos,
                           ((os.path.join(HISTORY_FOLDER, RETURNS_FILE), "iteration"), ),
                           events=_event_files)
#: a Plotter's ``tensorboard_dir`` (a resumed run keeps the steps up to its snapshot: TensorBoard
#: draws each step once, whatever order the files' names sort in)
TENSORBOARD_OUTPUTS = RunOutputs("tensorboard_dir",
                                 "plotter",
                                 _event_files,
                                 _describe_events,
                                 lambda folder, after: [],
                                 events=_event_files)


def hosts_a_plotters_events(folder: str) -> bool:
    """Whether a run of this process holds ``folder`` as one its Plotter writes TensorBoard files
    into, as part of that run (``run_experiment_lite``'s log_dir). Held otherwise (another live
    Plotter's ``video_dir`` or ``tensorboard_dir``), a Plotter's claim on it is refused: two runs'
    event files there would be drawn as one run."""
    try:
        status = os.stat(folder)
    except OSError:
        return False
    held = _held_here.get((status.st_dev, status.st_ino))
    return held is not None and held[1].hosts_its_plotters_events


def _sibling(folder: str) -> str:
    """``folder`` with ``_2`` added, relative to the working directory where it is below it."""
    other = folder.rstrip(os.sep) + "_2"
    relative = os.path.relpath(other)
    return other if relative.startswith("..") else relative


def _flock_holder(status: os.stat_result) -> Optional[int]:
    """The pid holding a ``flock`` on the file ``status`` is of, as ``/proc/locks`` lists it
    (``1: FLOCK  ADVISORY  WRITE 4242 00:2f:1839 0 EOF``); None where it does not say."""
    inode = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            for line in locks:
                fields = line.split()
                # Lines of processes waiting for a lock start "1: ->": not a holder.
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode:
                    return int(fields[4]) or None
    except (OSError, ValueError):
        pass
    return None


def _command_line(pid: int) -> str:
    """`` (python train.py --seed 3)``, at most 160 characters, or "" where it cannot be
    read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            words = file.read().split(b"\0")
    except OSError:
        return ""
    words = [" ".join(word.decode(errors="replace").split()) for word in words if word]
    if not words:
        return ""
    line = " ".join([os.path.basename(words[0])] + words[1:])  # python, not its whole path
    return f" ({line if len(line) <= 160 else line[:157] + '...'})"


def _keep_newest_runs(parent: str, target: str, verbose: int) -> None:
    """Remove the oldest runs in ``parent`` beyond ``EARLIER_RUNS_KEPT`` (``target``, the one
    being set aside, counted), with one line naming them; only folders named as this module
    names them (``2026-12-07_05-37-59``, ``..._2``) count, anything else there stays."""
    try:
        runs = sorted(name for name in os.listdir(parent) if _EARLIER_RUN_NAME.fullmatch(name))
    except OSError:
        return
    # Names sort by when the run ended; ``_2`` after the plain name of the same second.
    runs.sort(key=lambda name: (name[:19], int(name[20:] or 1)))
    oldest = [name for name in runs[:-EARLIER_RUNS_KEPT] if name != os.path.basename(target)]
    removed = []
    for name in oldest:
        try:
            shutil.rmtree(os.path.join(parent, name))
            removed.append(name)
        except OSError as error:
            logger.warning("could not remove the old run %s from %s: %s", name, parent,
                           error.strerror or error)
    if removed:  # the user's files go: said where they see it, as the move is
        tell(logger, verbose, "%s keeps the newest %d earlier runs: removed the oldest, %s", parent,
             EARLIER_RUNS_KEPT, ", ".join(removed))


def _open_folder(folder: str) -> Optional[int]:
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:  # made moments ago by create_output_dirs: only a race removes it
        logger.debug("cannot open %s to lock it: %s", folder, error)
        return None


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


def new_folder(stem: str) -> str:
    """Make and return a folder that did not exist: ``stem``, else ``stem_2``, ``stem_3``...
    (made, not looked for, so two runs starting together never get the same one). Raises the
    ``OSError`` where none can be made."""
    for attempt in range(1, 10_000):
        target = stem if attempt == 1 else f"{stem}_{attempt}"
        try:
            os.makedirs(target)
            return target
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"{stem} and 9,998 numbered ones after it exist", stem)


def _new_folder(parent: str, ended: float) -> Optional[str]:
    """A new folder in ``parent`` named by the local time ``ended``; None, with a warning, if it
    cannot be made."""
    try:
        return new_folder(
            os.path.join(parent, time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(ended))))
    except OSError as error:
        logger.warning(
            "cannot make a folder in %s for the earlier run's files (%s); they stay and mix with "
            "this run's", parent, error.strerror or error)
        return None
