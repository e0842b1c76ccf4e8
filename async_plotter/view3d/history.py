"""``RunHistory``: a run's state recordings, one per policy, as the 3D history shows them: listed
again whenever asked (the folder grows while the run trains), each summed up once (its
policy, its return) and loaded whole only when shown, a few kept in memory.

A recording of the run's history (``<video_dir>/history/iter_NNNN.npz``: one whole episode from
the run's fixed start) says its return and length in its ``meta``; for any other (beside a
video: chained episodes from seeded starts) they are the first episode's rewards summed and its
steps counted. Needs numpy and the recordings alone (no viser, no MuJoCo until one is loaded).
"""
import collections
import dataclasses
import json
import logging
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from async_plotter.render.history import HISTORY_FOLDER
from async_plotter.render.history_returns import RETURNS_FILE, read_returns
from async_plotter.render.recording import FORMAT, RecordingError, StateRecording, read_recording
from async_plotter.render.videos import RecordingFile, list_recordings

logger = logging.getLogger(__name__)

#: recordings kept loaded (the one shown, the ghosts, the last few scrubbed past)
LOADED = 8


@dataclasses.dataclass(frozen=True)
class Entry:
    """One recording of the run, summed up."""

    file: RecordingFile
    update: int
    iteration: Optional[int]
    #: the episode's return (None: not known), and its steps
    episode_return: Optional[float]
    length: int
    #: where the scrubber and the curve put it: the iteration (the initial policy, which has
    #: none, just before the first), or the update in a run without iterations
    x: int = 0

    @property
    def label(self) -> str:
        """``iteration 7``, ``initial policy`` or ``update 3``."""
        if self.iteration is not None:
            return f"iteration {self.iteration}"
        return "initial policy" if self.update == 0 else f"update {self.update}"

    def describe(self) -> str:
        """``iteration 7: return 12.3``."""
        if self.episode_return is None:
            return self.label
        return f"{self.label}: return {self.episode_return:.1f}"


class RunHistory:
    """The recordings of the run at ``source`` (a folder: its own and its ``history/``'s; or one
    recording), by policy (``render/videos.py``'s ``list_recordings``). Not thread-safe: one
    owner calls it."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.entries: List[Entry] = []
        self._summaries: Dict[Tuple[str, float], Optional[Entry]] = {}
        self._loaded: "collections.OrderedDict[Tuple[str, float], StateRecording]" = (
            collections.OrderedDict())
        self._returns_read: Optional[Tuple[str, int]] = None
        self._returns: List[Tuple[int, float]] = []

    def refresh(self) -> bool:
        """List the recordings again; whether the list changed. A file that cannot be read is
        left out (it is logged once)."""
        entries = []
        for file in list_recordings(self.source):
            key = (file.path, file.mtime)
            if key not in self._summaries:
                self._summaries[key] = _summary(file)
            entry = self._summaries[key]
            if entry is not None:
                entries.append(entry)
        entries = _placed(entries)
        changed = entries != self.entries
        self.entries = entries
        return changed

    def returns_line(self) -> List[Tuple[int, float]]:
        """``(x, return)`` of every recording the run's ``returns.csv`` lists
        (``render/history_returns.py``: those thinned away too), placed as the entries are; []
        where the source has none (a folder of recordings alone, one recording)."""
        for folder in (os.path.join(self.source, HISTORY_FOLDER), self.source):
            path = os.path.join(folder, RETURNS_FILE)
            try:
                stamp = (path, os.stat(path).st_mtime_ns)
            except OSError:
                continue
            if stamp != self._returns_read:
                self._returns_read, self._returns = stamp, _line(read_returns(folder))
            return self._returns
        return []

    def find(self, x: int) -> Optional[Entry]:
        """The entry at ``x`` (see ``Entry.x``), if there is one."""
        return next((entry for entry in self.entries if entry.x == x), None)

    def nearest(self, x: float, toward: int = 0) -> Optional[Entry]:
        """The entry nearest ``x``; with ``toward`` (+1 or -1), the nearest at or beyond ``x``
        that way, if there is one."""
        if not self.entries:
            return None
        if toward:
            beyond = [entry for entry in self.entries if (entry.x - x) * toward >= 0]
            if beyond:
                return min(beyond, key=lambda entry: abs(entry.x - x))
        return min(self.entries, key=lambda entry: abs(entry.x - x))

    def load(self, entry: Entry) -> StateRecording:
        """The whole recording (``RecordingError`` if it cannot be read)."""
        key = (entry.file.path, entry.file.mtime)
        recording = self._loaded.get(key)
        if recording is None:
            recording = self._loaded[key] = read_recording(entry.file.path)
            while len(self._loaded) > LOADED:
                self._loaded.popitem(last=False)
        self._loaded.move_to_end(key)
        return recording


def _summary(file: RecordingFile) -> Optional[Entry]:
    """A recording's entry, read from its meta and rewards alone (None: unreadable)."""
    try:
        with np.load(file.path, allow_pickle=False) as archive:
            if "format" not in archive.files or str(archive["format"]) != FORMAT:
                raise RecordingError("not a state recording of this version")
            meta = json.loads(str(archive["meta"]))
            episode_return, length = meta.get("return"), meta.get("length")
            if episode_return is None or length is None:
                rewards, episodes = archive["reward"], archive["episode"]
                first = episodes == episodes[0] if len(episodes) else np.zeros(0, bool)
                if episode_return is None and len(rewards):
                    episode_return = float(np.sum(rewards[first], dtype=np.float64))
                if length is None:
                    length = int(np.count_nonzero(first))
    except (OSError, KeyError, ValueError) as error:
        logger.info("3D history: leaving out %s (%s)", file.path, error)
        return None
    iteration = meta.get("iteration")
    if iteration is None and file.kind == "iter":
        iteration = file.number
    update = meta.get("update")
    if update is None:
        update = file.number if file.kind == "update" else -1
    finite = episode_return is not None and np.isfinite(float(episode_return))
    return Entry(file, int(update), None if iteration is None else int(iteration),
                 float(episode_return) if finite else None, int(length or 0))


def _line(rows: List[Dict[str, Any]]) -> List[Tuple[int, float]]:
    """``returns.csv``'s rows as ``(x, return)``, x as ``_placed`` gives it: the iteration (the
    initial policy's -1), or in a run without iterations the update."""
    numbered = any(row["iteration"] is not None and row["update"] != 0 for row in rows)
    line = []
    for row in rows:
        x = row["iteration"] if numbered else row["update"]
        if x is not None and row["return"] is not None:
            line.append((int(x), float(row["return"])))
    return sorted(line)


def _placed(entries: List[Entry]) -> List[Entry]:
    """The entries by update, each given its ``x``: its iteration; in a run with iterations an
    entry without one (the initial policy) just before the first; else its update."""
    entries = sorted(entries,
                     key=lambda entry: (entry.update, entry.file.kind != "iter", entry.file.number))
    numbered = [entry.iteration for entry in entries if entry.iteration is not None]
    placed, seen = [], set()
    for position, entry in enumerate(entries):
        if not numbered:
            x = entry.update
        elif entry.iteration is not None:
            x = entry.iteration
        else:
            later = [other.iteration for other in entries[position:] if other.iteration is not None]
            x = (later[0] if later else numbered[-1] + 1) - 1
        if x in seen:  # two recordings of one iteration: the later update's
            placed = [other for other in placed if other.x != x]
        seen.add(x)
        placed.append(dataclasses.replace(entry, x=int(x)))
    return sorted(placed, key=lambda entry: entry.x)
