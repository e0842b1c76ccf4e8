"""Where a run's outputs go: ``progress.csv``, TensorBoard scalars, the learning curve, snapshots,
videos."""
import contextlib
import csv
import dataclasses
import io
import logging
import os
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from async_plotter.appends import append_whole, identity
from async_plotter.errors import RunFilesNotWrittenError
from async_plotter.learning_curve import PREFERRED_METRIC, SHOWN_RETURN
from async_plotter.rl.kept_writes import FolderWatch, KeptWrite
from async_plotter.rl.run_scalars import RunScalars
from async_plotter.rl.shown_returns import SHOWN_ITERATION
from async_plotter.rl.snapshot import (LAST_SNAPSHOT, PathLike, atomic_write_bytes, save_snapshot,
                                       snapshot_iteration, snapshot_name)
from async_plotter.trainer.run_folder import (VIDEO_OUTPUTS, RunFolder, RunOutputs, has_entries,
                                              read_table)
from async_plotter.validation import user_path
from async_plotter.words import counted

logger = logging.getLogger(__name__)

SNAPSHOT_MODES = ("last", "all", "none")
#: the files a run writes into its folder, besides snapshots, event files and ``videos/``
#: the run's settings, as ``run_experiment_lite`` was given them (a resumed run reads its name)
EXPERIMENT_FILE = "experiment.json"
_RUN_FILES = ("progress.csv", "learning_curve.png", "debug.log", EXPERIMENT_FILE, LAST_SNAPSHOT)
_EVENTS_PREFIX = "events.out.tfevents."
_VIDEOS = "videos"


class RunRecorder:
    """Writes one run's files into ``log_dir``; with ``log_dir=None`` it keeps rows in memory only.

    Files:
        ``progress.csv``: one row per iteration, appended as it finishes.
        ``events.out.tfevents.*`` (``tensorboard=True``): every numeric column of each row as a
        TensorBoard scalar ``progress/<column>`` at step ``Iteration``, written as the row is
        (not ``ShownReturn``, ``ShownIteration``: ``run_scalars.NOT_SCALARS``); and each history
        recording's return as ``history/return`` at its policy's iteration.
        ``learning_curve.png``: AverageReturn against Iteration, and beside it each row's
        ``ShownReturn`` at its ``ShownIteration`` (the history's deterministic episode of that
        iteration's policy, where the plotter keeps one) and every other recording's return
        given to :meth:`note_shown`, redrawn after every iteration
        unless iterations are so short that drawing (~50 ms) would cost more than ~5% of the run;
        then as often as that budget allows, and always by :meth:`close`.
        ``params.pkl`` (snapshot_mode ``"last"``) or ``itr_<N>.pkl`` (``"all"``).
        ``videos/``: where the plotter is told to put its videos.

    A long run's faults never stop training (``rl/kept_writes.py``): a file that cannot be
    written (a full device) is said once and written at the next chance, the rows and the
    newest snapshot kept in memory meanwhile; a folder removed while the run goes on is made
    again, ``progress.csv`` and the TensorBoard scalars written again whole from memory.
    :meth:`raise_if_unwritten` names what is still unwritten when the run ends.
    """

    def __init__(self,
                 log_dir: Optional[str] = None,
                 snapshot_mode: str = "last",
                 tensorboard: bool = False) -> None:
        if snapshot_mode not in SNAPSHOT_MODES:
            raise ValueError(
                f"snapshot_mode must be one of {', '.join(map(repr, SNAPSHOT_MODES))}; "
                f"got {snapshot_mode!r}")
        self.log_dir = None if log_dir is None else user_path(log_dir)
        self.snapshot_mode = snapshot_mode
        self.rows: List[Dict[str, Any]] = []
        self._columns: Optional[List[str]] = None
        self._curve_failed = False
        self._curve_stale = False
        self._next_curve_time = 0.0
        #: ``{iteration: return}`` of every history recording given to ``note_shown``
        self._shown: Dict[float, float] = {}
        self.tensorboard = bool(tensorboard) and self.log_dir is not None
        #: progress.csv as last written here (device, inode, size): anything else, and the
        #: file is written again whole
        self._csv_written: Optional[Tuple[int, ...]] = None
        #: ``(iteration, path, snapshot)`` of the newest snapshot, while it is not on disk
        self._snapshot_pending: Optional[Tuple[int, str, Dict[str, Any]]] = None
        self._snapshot_saved: Optional[int] = None  # the newest iteration saved
        self._csv = KeptWrite("progress.csv",
                              "training goes on, and the whole file is written at the next row")
        self._curve_file = KeptWrite("the learning curve",
                                     "training goes on, and it is drawn again with the next row")
        self._snapshots = KeptWrite(
            "the snapshot", "training goes on, and each iteration tries again with its own")
        self._folder: Optional[FolderWatch] = None
        self._claim: Optional[RunFolder] = None  # the claim on log_dir while the run holds it
        self._scalars: Optional[RunScalars] = None
        if self.log_dir is not None:
            os.makedirs(self.log_dir, exist_ok=True)
            self._folder = FolderWatch(self.log_dir)
            if self.tensorboard:
                self._scalars = RunScalars(self.log_dir, self.rows, self._shown)

    def _path(self, name: str) -> Optional[str]:
        return None if self.log_dir is None else os.path.join(self.log_dir, name)

    @property
    def progress_csv(self) -> Optional[str]:
        return self._path("progress.csv")

    @property
    def learning_curve_png(self) -> Optional[str]:
        return self._path("learning_curve.png")

    @property
    def video_dir(self) -> Optional[str]:
        return self._path("videos")

    @property
    def debug_log(self) -> Optional[str]:
        return self._path("debug.log")

    @contextlib.contextmanager
    def claimed(self,
                holder: str,
                resume_after: Optional[int] = None,
                speaker: str = "run_experiment_lite") -> Iterator[None]:
        """Hold ``log_dir`` for the run (``trainer/run_folder.py``: an earlier run's files set
        aside first, a live run's folder refused), and with ``resume_after`` go on with the
        run in it from that iteration (``resume_after``); nothing without a ``log_dir``.
        ``speaker`` (``TRPO.train()``) begins the line that says what was set aside."""
        if self.log_dir is None:
            yield
            return
        outputs = dataclasses.replace(_LOG_OUTPUTS, speaker=speaker)
        with RunFolder(self.log_dir, 1, holder, outputs, resume_after) as claim:
            self._claim = claim
            try:
                if resume_after is not None:
                    self.resume_after(resume_after)
                yield
            finally:
                self._claim = None

    def resume_after(self, itr: int) -> None:
        """Continue the run whose rows up to iteration ``itr`` are in ``progress.csv`` (the
        later ones, and the later steps of the folder's TensorBoard files, were set aside):
        keep them, so that the file, the curve and TensorBoard go on from there."""
        if self.log_dir is None:
            return
        for row in _read_rows(self.progress_csv):
            self.rows.append(row)
            if SHOWN_RETURN in row:
                self._shown[row.get(SHOWN_ITERATION, row.get("Iteration"))] = row[SHOWN_RETURN]

    def note_shown(self, points: Dict[float, float]) -> None:
        """The return of every history recording so far, by its policy's iteration: a row has
        room for one (``ShownReturn``); the curve draws them all, and TensorBoard gets each new
        one as ``history/return`` at its policy's iteration."""
        new = {
            iteration: value
            for iteration, value in points.items() if self._shown.get(iteration) != value
        }
        if not new:
            return
        self._shown.update(new)
        self._curve_stale = True
        if self._scalars is not None:
            self._scalars.add_returns(new)

    def record(self, row: Dict[str, Any]) -> None:
        """Keep ``row``, append it to ``progress.csv`` and redraw the learning curve."""
        self.rows.append(dict(row))
        if self.log_dir is None:
            return
        self._notice_removal()
        self._csv.attempt(lambda: self._write_csv(row))
        if self._scalars is not None:
            self._scalars.add_row(row, len(self.rows) - 1)
        self._curve_stale = True
        if time.monotonic() >= self._next_curve_time:
            self._draw_curve()

    def amend_last(self, values: Dict[str, Any]) -> None:
        """Set ``values`` in the last row (the final policy's ``ShownReturn``, known only once
        the plotter has closed): ``progress.csv`` written again, the numeric ones that are
        scalars written to TensorBoard at that row's step (the final policy's return reaches
        TensorBoard through :meth:`note_shown`)."""
        if not self.rows:
            return
        self.rows[-1].update(values)
        if self.log_dir is None:
            return
        self._columns = None  # the whole file again, with any new column
        self._csv.attempt(lambda: self._write_csv(self.rows[-1]))
        self._curve_stale = True  # close() draws the final policy's point
        if self._scalars is not None:
            last = dict(values, Iteration=self.rows[-1].get("Iteration"))
            self._scalars.add_row(last, len(self.rows) - 1)

    def close(self) -> None:
        """Write what a fault left unwritten, once more; bring the learning curve up to date
        (the last iterations may have been throttled) and close the TensorBoard event file."""
        if self.log_dir is not None:
            self._notice_removal()
            if self._csv.error is not None and self.rows:
                self._csv.attempt(lambda: self._write_csv(self.rows[-1]), last=True)
            if self._snapshot_pending is not None:
                self._save(*self._snapshot_pending, last=True)
            if self._curve_stale:
                self._draw_curve(last=True)
        if self._scalars is not None:
            self._scalars.close()

    def raise_if_unwritten(self) -> None:
        """After :meth:`close`: raise ``RunFilesNotWrittenError`` naming what a fault of the
        folder left unwritten (``progress.csv``'s rows, the newest snapshot)."""
        lost: Dict[str, Optional[OSError]] = {}
        if self._csv.error is not None:
            lost[f"progress.csv (its {len(self.rows)} rows)"] = self._csv.error
        if self._snapshot_pending is not None:
            itr, path, _ = self._snapshot_pending
            lost[f"the snapshot of iteration {itr} ({path})"] = self._snapshots.error
        if not lost:
            return
        causes = {str(error) for error in lost.values()}
        why = (causes.pop() if len(causes) == 1 else "; ".join(f"{what}: {error}"
                                                               for what, error in lost.items()))
        saved = (f"the newest snapshot on disk is iteration {self._snapshot_saved}'s, which "
                 "resume_from goes on from"
                 if self._snapshot_saved is not None else "no snapshot is on disk")
        raise RunFilesNotWrittenError(
            f"the run finished, but could not write {' nor '.join(lost)} ({why}); {saved}. Make "
            f"room in {self.log_dir}")

    def _notice_removal(self) -> None:
        """Make the run folder again if it was removed while the run went on (``rm -rf``):
        progress.csv and the TensorBoard scalars notice their files are gone and are written
        again whole, and the curve is drawn again now."""
        if self._folder is None or not self._folder.made_again():
            return
        logger.warning(
            "the run folder %s was removed while the run went on; made it again: progress.csv "
            "and the TensorBoard scalars written again from the %d rows kept, snapshots and "
            "videos from now on (the earlier ones are gone)", self.log_dir, len(self.rows))
        if self._claim is not None and not self._claim.hold_again():
            logger.warning("another run claimed %s meanwhile: the two write into one folder",
                           self.log_dir)
        self._curve_stale = True
        self._next_curve_time = 0.0

    def _write_csv(self, row: Dict[str, Any]) -> None:
        """Append ``row``; the whole file (atomically) where that is needed: the first row, a
        new column, a file not as this run last left it (removed, or cut by a full device)."""
        written, self._csv_written = self._csv_written, None  # until this write is whole
        intact = written is not None and identity(self.progress_csv, with_size=True) == written
        if not intact or self._columns is None or any(key not in self._columns for key in row):
            # The union of the rows' columns, so that the file always parses as one table.
            columns = list(self._columns or [])
            for r in self.rows:
                columns.extend(key for key in r if key not in columns)
            self._columns = columns
            buffer = io.StringIO()
            writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
            writer.writeheader()
            writer.writerows(self.rows)
            atomic_write_bytes(self.progress_csv, buffer.getvalue().encode("utf-8"))
        else:
            line = io.StringIO()
            csv.DictWriter(line, fieldnames=self._columns, lineterminator="\n").writerow(row)
            append_whole(self.progress_csv, line.getvalue().encode("utf-8"))
        self._csv_written = identity(self.progress_csv, with_size=True)

    def _draw_curve(self, last: bool = False) -> None:
        if self._curve_failed:
            return
        rows = [r for r in self.rows if PREFERRED_METRIC in r]
        started = time.monotonic()
        try:
            iterations = [r.get("Iteration", i) for i, r in enumerate(rows)]
            returns = [r[PREFERRED_METRIC] for r in rows]
            stds = [r.get("StdReturn", 0.0) for r in rows]
            drawn = self._curve_file.attempt(
                lambda: save_learning_curve(self.learning_curve_png,
                                            iterations,
                                            returns,
                                            stds,
                                            title=os.path.basename(self.log_dir),
                                            shown=shown_points(self.rows, self._shown)),
                last=last)
        except Exception:  # a plotting problem must not stop training
            self._curve_failed = True
            logger.exception("could not draw the learning curve; not trying again")
            drawn = True
        finished = time.monotonic()
        self._curve_stale = not drawn
        self._next_curve_time = finished + 19.0 * (finished - started)  # draw <= 5% of the time

    def save_snapshot(self, itr: int, snapshot: Dict[str, Any]) -> Optional[str]:
        """Write the snapshot of iteration ``itr`` as the mode says; returns its path, or None
        where there is none or it could not be written (it is kept until the next one is)."""
        if self.log_dir is None or self.snapshot_mode == "none":
            return None
        self._notice_removal()
        name = snapshot_name(None if self.snapshot_mode == "last" else itr)
        return self._save(itr, self._path(name), snapshot)

    def _save(self,
              itr: int,
              path: str,
              snapshot: Dict[str, Any],
              last: bool = False) -> Optional[str]:
        # Kept for the next try only after a fault of the folder: a Ctrl-C during the write
        # ends the run (close() must not write it again), a newer snapshot replaces it.
        if not self._snapshots.attempt(lambda: save_snapshot(path, snapshot), last=last):
            self._snapshot_pending = (itr, path, snapshot)
            return None
        self._snapshot_pending, self._snapshot_saved = None, itr
        return path

    def write_text(self, name: str, text: str) -> None:
        """Write a small text file (e.g. the experiment's settings) into the run folder."""
        if self.log_dir is not None:
            atomic_write_bytes(self._path(name), text.encode("utf-8"))


def shown_points(rows: Sequence[Dict[str, Any]],
                 more: Optional[Dict[float, float]] = None) -> List[Tuple[float, float]]:
    """``(ShownIteration, ShownReturn)`` of the rows that have one, and ``more`` (iteration:
    return), by iteration: the return of one deterministic episode of that iteration's policy
    (``rl/shown_returns.py``)."""
    points = dict(more or {})
    points.update({
        float(row[SHOWN_ITERATION]): float(row[SHOWN_RETURN])
        for row in rows
        if row.get(SHOWN_RETURN) is not None and row.get(SHOWN_ITERATION) is not None
    })
    return sorted(points.items())


def save_learning_curve(path: PathLike,
                        iterations: Sequence[float],
                        average_returns: Sequence[float],
                        std_returns: Optional[Sequence[float]] = None,
                        title: str = "",
                        shown: Sequence[Tuple[float, float]] = ()) -> None:
    """Write a PNG of the curve (a band of one standard deviation when given), atomically;
    ``shown``: ``(iteration, return)`` points of the history's deterministic episodes, drawn as
    a second, dashed line.

    Uses matplotlib's object API with the Agg canvas, which draws off-screen and, unlike
    ``matplotlib.use("Agg")``, leaves the backend of the user's own plots alone.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    x = np.asarray(iterations, dtype=float)
    y = np.asarray(average_returns, dtype=float)
    figure = Figure(figsize=(6.4, 4.0), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    if std_returns is not None:
        std = np.asarray(std_returns, dtype=float)
        axes.fill_between(x, y - std, y + std, alpha=0.2, linewidth=0, label="± std over paths")
    axes.plot(x, y, marker="o" if len(x) < 30 else None, markersize=3, label=PREFERRED_METRIC)
    if len(shown):
        shown_x, shown_y = np.asarray(shown, dtype=float).T
        axes.plot(shown_x,
                  shown_y,
                  linestyle="--",
                  marker=".",
                  markersize=4,
                  label=f"{SHOWN_RETURN} (one deterministic episode)")
    axes.set_xlabel("Iteration")
    axes.set_ylabel("Return" if len(shown) else PREFERRED_METRIC)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="best")
    # Fixed margins: tight_layout would cost an extra draw pass (~20 ms of ~70 ms).
    figure.subplots_adjust(left=0.13, right=0.97, top=0.92, bottom=0.12)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    atomic_write_bytes(path, buffer.getvalue())


def _read_rows(path: Optional[str]) -> List[Dict[str, Any]]:
    """``progress.csv``'s rows, numbers as numbers and blanks left out; [] without one."""
    _, rows = read_table(path or "")
    return [{key: _parsed(text) for key, text in row.items() if key and text} for row in rows]


def _parsed(text: str) -> Any:
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() and "." not in text and "e" not in text else number


def _run_outputs(log_dir: str) -> List[str]:
    """The names in ``log_dir`` that a run of ``run_experiment_lite`` wrote (the user's own
    files there are not)."""
    try:
        names = sorted(os.listdir(log_dir))
    except OSError:
        return []
    return [
        name for name in names
        if name in _RUN_FILES or snapshot_iteration(name) is not None or name.startswith(
            _EVENTS_PREFIX) or (name == _VIDEOS and has_entries(os.path.join(log_dir, name)))
    ]


def _event_files(log_dir: str) -> List[str]:
    """Every TensorBoard event file in ``log_dir``: the trainer's scalars and its Plotter's
    images, and any other writer's of the run (a resumed run keeps their steps up to its
    snapshot, whatever order their names sort in)."""
    try:
        return sorted(name for name in os.listdir(log_dir) if name.startswith(_EVENTS_PREFIX))
    except OSError:
        return []


def _describe_run_outputs(log_dir: str, names: List[str]) -> str:
    """``progress.csv, 2 TensorBoard event files, 1 snapshot, videos/, 3 more files``."""
    snapshots = sum(1 for name in names
                    if name == LAST_SNAPSHOT or snapshot_iteration(name) is not None)
    events = sum(1 for name in names if name.startswith(_EVENTS_PREFIX))
    rest = len(names) - snapshots - events - ("progress.csv" in names) - (_VIDEOS in names)
    parts = [
        "progress.csv" if "progress.csv" in names else "",
        counted(events, "TensorBoard event file", "TensorBoard event files"),
        counted(snapshots, "snapshot", "snapshots"), "videos/" if _VIDEOS in names else "",
        counted(rest, "more file", "more files")
    ]
    return ", ".join(part for part in parts if part)


def _later_outputs(log_dir: str, after: int) -> List[str]:
    """The snapshots (``itr_<N>.pkl``) of iterations after ``after``, and the videos and
    recordings of those iterations in ``videos/`` (set aside here, with the rest of them)."""
    try:
        names = sorted(os.listdir(log_dir))
    except OSError:
        return []
    numbered = ((name, snapshot_iteration(name)) for name in names)
    snapshots = [name for name, itr in numbered if itr is not None and itr > after]
    videos = VIDEO_OUTPUTS.later(os.path.join(log_dir, _VIDEOS), after)
    return snapshots + [os.path.join(_VIDEOS, path) for path in videos]


#: ``run_experiment_lite``'s ``log_dir``: two runs there would write one progress.csv (the first
#: run's lost), tangle their curves in TensorBoard (two event files, the same steps) and
#: overwrite each other's snapshots
_LOG_OUTPUTS = RunOutputs("log_dir",
                          "run_experiment_lite",
                          _run_outputs,
                          _describe_run_outputs,
                          _later_outputs,
                          tables=(("progress.csv", "Iteration"), ) + tuple(
                              (os.path.join(_VIDEOS, path), column)
                              for path, column in VIDEO_OUTPUTS.tables),
                          events=_event_files,
                          hosts_its_plotters_events=True)
