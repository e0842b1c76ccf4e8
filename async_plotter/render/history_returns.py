"""``<video_dir>/history/returns.csv``: the return of every history recording, a row each.

The folder keeps at most ``history_kept`` recordings (``render/history.py`` thins the older ones)
and ``stats["history"]`` the newest 1000, in memory; this file keeps a row for every recording
the run made, also those whose file was thinned away, and those of envs that draw themselves
(which have no file). The supervisor appends a row as each recording's report comes, so one
file spans the worker's restarts; a ``Plotter``'s claim on its folder has set an earlier run's
aside, and a resumed run's rows up to its iteration stay.

Columns (``COLUMNS``): ``iteration`` (-1: the initial policy; blank: an update sent without
one), ``update``, ``return`` (blank if not finite), ``length`` (steps), ``recording`` (the
file's name in the folder, blank if none was written or the env draws itself; it may have been
thinned since), ``time`` (when it was recorded, seconds since the epoch) and ``cpu_seconds``
(what simulating and writing it took). A policy recorded again by a restarted worker has a
second row; the later one is its.
"""
import csv
import errno
import io
import logging
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

from async_plotter.appends import AppendFile
from async_plotter.render.history import INITIAL_POLICY_ITERATION

logger = logging.getLogger(__name__)

#: the file's name in the history folder
RETURNS_FILE = "returns.csv"
COLUMNS = ("iteration", "update", "return", "length", "recording", "time", "cpu_seconds")
_WHOLE_NUMBERS = ("iteration", "update", "length")


class ReturnsFile:
    """Appends history reports (``VideoLedger.record_history``'s entries) to ``returns.csv`` in
    ``folder``; the first one of this object starts the file anew, unless ``keep_rows`` (the
    rows there are the run's own: it was resumed). Never raises: a folder that
    cannot be written loses those rows and is tried again at the next report; it warns once,
    unless the folder was taken away or the device is full (the video sink says so)."""

    def __init__(self, folder: str, keep_rows: bool = False) -> None:
        self.path = os.path.join(folder, RETURNS_FILE)
        self._started = keep_rows
        self._warned = False

    def append(self, entry: Mapping[str, Any]) -> None:
        """One recording's row: ``entry`` has ``update``, ``iteration``, ``return``, ``length``,
        ``path``, ``time`` and ``cpu_seconds``."""
        try:
            self._write(_row(entry))
        except OSError as error:
            # A video folder taken away or a full device is the video sink's to report.
            quiet = self._warned or error.errno in (errno.ENOENT, errno.ENOSPC)
            self._warned = self._warned or not quiet
            log = logger.debug if quiet else logger.warning
            log("could not add update %s's return to %s: %s", entry.get("update"), self.path, error)

    def _write(self, row: Dict[str, Any]) -> None:
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            # Only the history folder: a video folder taken away is the video sink's to make
            # again (and to say so).
            os.mkdir(folder)
        if not self._started:  # the run's first row: the file anew
            with open(self.path, "wb"):
                pass
        text = io.StringIO()
        writer = csv.DictWriter(text, COLUMNS, lineterminator="\n")
        # Whole or not at all: a row a full device cut short would break the table.
        with AppendFile(self.path) as file:
            if file.size == 0:  # new, or made again after the folder was taken away
                writer.writeheader()
            writer.writerow(row)
            file.append(text.getvalue().encode("utf-8"))
        self._started = True


def _row(entry: Mapping[str, Any]) -> Dict[str, Any]:
    iteration = entry.get("iteration")
    if iteration is None and entry["update"] == 0:
        iteration = INITIAL_POLICY_ITERATION
    value = entry.get("return")
    path = entry.get("path")
    moment = entry.get("time")
    return {
        "iteration": iteration,
        "update": entry["update"],
        "return": value if value is not None and math.isfinite(value) else None,
        "length": entry.get("length"),
        "recording": os.path.basename(path) if path else None,
        "time": None if moment is None else round(float(moment), 3),
        "cpu_seconds": entry.get("cpu_seconds"),
    }


def read_returns(folder: str) -> List[Dict[str, Any]]:
    """The rows of ``folder``'s ``returns.csv`` (``COLUMNS``; numbers as numbers, blanks as None,
    ``recording`` a name), the later row of a policy recorded twice only (by its iteration, else
    its update: a resumed run numbers its updates afresh); [] without one."""
    try:
        with open(os.path.join(folder, RETURNS_FILE), encoding="utf-8", newline="") as file:
            rows = list(csv.DictReader(file))
    except (OSError, csv.Error, UnicodeDecodeError):
        return []
    by_policy: Dict[Tuple[str, int], Dict[str, Any]] = {}
    for row in rows:
        try:
            parsed = {key: _number(key, row.get(key)) for key in COLUMNS if key != "recording"}
        except ValueError:
            continue  # a line cut short by a crash
        if parsed["update"] is None:
            continue
        parsed["recording"] = row.get("recording") or None
        iteration = parsed["iteration"]
        by_policy[("update", int(parsed["update"])) if iteration is None else
                  ("iteration", int(iteration))] = parsed
    return sorted(by_policy.values(), key=_in_run_order)


def _in_run_order(row: Dict[str, Any]) -> Tuple[float, float]:
    """Rows by iteration (those without one, sent without, by update after them)."""
    iteration = row["iteration"]
    return (math.inf, row["update"]) if iteration is None else (iteration, row["update"])


def _number(column: str, text: Optional[str]) -> Optional[float]:
    if text is None or text == "":
        return None
    return int(text) if column in _WHOLE_NUMBERS else float(text)
