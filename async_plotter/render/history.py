"""The whole run, kept: one state recording of every policy the worker applied, in
``<video_dir>/history/`` (``iter_0059.npz``, or ``update_0003.npz`` without an iteration; the
names are ``render/videos.py``'s), and the point each one adds to the curve of what was shown.

A history recording is one whole, deterministic episode (up to ``max_path_length`` steps) from
the run's fixed start state, in the state-recording format (``render/recording.py``) with
``history: True`` and the episode's ``return``, ``length`` and ``start_seed`` in its ``meta``.
The rollout process writes it (``worker/history.py``); ``async-plotter render`` and ``replay``
read it as any recording.

The folder is bounded (``thinned``): at most ``kept`` files (``DEFAULT_KEPT``), the newest
quarter always, the older ones thinned to the first of each block of ``k`` iterations with ``k``
a power of two, as small as fits. So the first policy and the newest stay, and the older ones
keep an even spread as the run grows. Runs in the rollout process; never imports GL or
TensorFlow.
"""
import dataclasses
import logging
import os
from typing import Iterable, List, Optional, Set, Tuple

from async_plotter.render.videos import list_named_recordings

logger = logging.getLogger(__name__)

#: the history's folder, inside the video folder
HISTORY_FOLDER = "history"
#: recordings kept at most by default (``Plotter(history=True)``): a 500-iteration run keeps 200
#: (the newest 50 and every 4th older one)
DEFAULT_KEPT = 200
#: the seed of every recording's reset where the Plotter has no ``seed``: one start state for
#: the whole run, so that iterations compare like for like
DEFAULT_START_SEED = 0
#: the iteration the initial policy (update 0, none given) is shown at, before iteration 0
INITIAL_POLICY_ITERATION = -1
#: the TensorBoard scalars of each recording, at its policy's iteration (the TensorBoard step):
#: written by the Plotter's TensorBoard sink, or by ``run_experiment_lite``'s trainer
HISTORY_RETURN_TAG = "history/return"
HISTORY_LENGTH_TAG = "history/length"


@dataclasses.dataclass(frozen=True)
class HistoryPoint:
    """What one recording says of its policy: the return and length of its one deterministic
    episode from the run's start state (not the training average)."""

    update: int
    iteration: Optional[int]
    episode_return: float
    length: int

    @property
    def x(self) -> Optional[int]:
        """Where it goes on a curve by iteration: its iteration; the initial policy's at
        ``INITIAL_POLICY_ITERATION``; None for a later update without one."""
        if self.iteration is not None:
            return self.iteration
        return INITIAL_POLICY_ITERATION if self.update == 0 else None


def history_folder(video_dir: str) -> str:
    """``<video_dir>/history``."""
    return os.path.join(video_dir, HISTORY_FOLDER)


def to_remove(numbered: Iterable[Tuple[str, int]], kept: int) -> Set[Tuple[str, int]]:
    """Of the recordings ``(kind, number)`` (``"iter"`` or ``"update"``), those that go so that at
    most ``kept`` stay: the newest quarter (at least one) stay; of the older, the first of each
    block of ``k`` numbers, ``k`` the smallest power of two that fits. Blocks of ``2k`` are made
    of blocks of ``k``, so a file kept at ``2k`` was kept at ``k``: thinning never brings one
    back, and never removes the first."""
    # Oldest first: the initial policy (``update_0000``, no iteration) comes before iteration 0;
    # a run without iterations has update-numbered files only.
    ordered = sorted(set(numbered), key=lambda item: (item[0] == "iter", item[1]))
    if len(ordered) <= kept:
        return set()
    newest = max(1, kept // 4)
    older, room = ordered[:-newest], kept - newest
    largest = max(number for _, number in older)
    block = 1
    while True:
        firsts = _first_of_blocks(older, block)
        if len(firsts) <= room:
            return set(older) - set(firsts)
        if block > largest:
            # One block per kind is left, more than there is room for (the initial policy's
            # ``update_0000`` and ``iter_0000`` at ``kept=2``): the oldest stay.
            return set(older) - set(firsts[:room])
        block *= 2


def _first_of_blocks(ordered: List[Tuple[str, int]], block: int) -> List[Tuple[str, int]]:
    firsts, seen = [], set()
    for kind, number in ordered:
        key = (kind, number // block)
        if key not in seen:
            seen.add(key)
            firsts.append((kind, number))
    return firsts


def thin(folder: str, kept: int) -> List[str]:
    """Remove the recordings in ``folder`` that ``to_remove`` says go; the names removed."""
    found = {(entry.kind, entry.number): entry.name for entry in list_named_recordings(folder)}
    removed = []
    for key in sorted(to_remove(found, kept)):
        try:
            os.remove(os.path.join(folder, found[key]))
            removed.append(found[key])
        except OSError as error:  # gone meanwhile, or a folder taken away
            logger.debug("cannot remove %s: %s", found[key], error)
    return removed
