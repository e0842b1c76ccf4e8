"""Resuming a run from one of its snapshots (``run_experiment_lite(..., resume_from=...)``, as
rllab's): the algorithm trains on from the iteration after the snapshot's, with its policy's
parameters and its baseline, in the run's own folder, so that ``progress.csv``, the learning
curve, TensorBoard, the videos and the history go on as one run.

The algorithm itself is the one the user builds again (its hyperparameters may change, e.g. a
larger ``n_itr``); its policy must have the snapshot's structure. The snapshot also holds the
optimizer's state (VPG's Adam moments) and the sampling seed, which the resumed run takes unless
given a seed of its own, and what each sampler's env wrappers had learned (running observation
statistics), which each resumed sampler goes on from: with ``n_parallel=1`` it then samples and
steps exactly as the first run would have gone on (with more, which sampler runs which path
depends on timing, in the first run too).
"""
import dataclasses
import json
import logging
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from async_plotter.env.state import TrainerEnvState
from async_plotter.errors import ResumeError, SnapshotNotFoundError
from async_plotter.validation import user_path
from async_plotter.rl.recorder import EXPERIMENT_FILE
from async_plotter.rl.snapshot import LAST_SNAPSHOT, load_snapshot, snapshot_iteration
from async_plotter.words import amount

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """A snapshot to resume from: its file, its iteration and what it holds."""

    path: str
    itr: int
    snapshot: Dict[str, Any]

    @property
    def folder(self) -> str:
        """The run's folder, where the snapshot was written."""
        return os.path.dirname(self.path)

    @property
    def run_name(self) -> str:
        """The name of the run the snapshot is of: its ``experiment.json``'s ``exp_name``,
        else its folder's name (a resumed run given none goes on under it)."""
        try:
            with open(os.path.join(self.folder, EXPERIMENT_FILE), encoding="utf-8") as file:
                name = json.load(file).get("exp_name")
        except (OSError, ValueError, AttributeError):
            name = None
        return name if isinstance(name, str) and name else os.path.basename(self.folder)


def resume_point(resume_from: Any) -> ResumePoint:
    """``resume_from`` (a snapshot, or a run's folder: its ``params.pkl``, else its newest
    ``itr_<N>.pkl``) checked and loaded; a clear error before anything is built or written."""
    if not isinstance(resume_from, (str, os.PathLike)):
        raise TypeError(f"resume_from must be the path of a snapshot or of a run's folder, got "
                        f"{type(resume_from).__name__}")
    path = user_path(resume_from)
    if os.path.isdir(path):
        path = _newest_snapshot(path)
    elif not os.path.isfile(path):
        raise SnapshotNotFoundError(f"resume_from {path!r} does not exist: give a snapshot "
                                    "(params.pkl, itr_<N>.pkl) or the run's folder")
    try:
        snapshot = load_snapshot(path)
    except Exception as error:  # noqa: BLE001 - whatever unpickling raises, say which file
        raise ResumeError(f"resume_from {path!r} could not be read as a snapshot: "
                          f"{type(error).__name__}: {error}") from error
    if not isinstance(snapshot, dict) or not {"itr", "policy_params"} <= set(snapshot):
        raise ResumeError(f"resume_from {path!r} is not a snapshot of run_experiment_lite's (it "
                          "has no 'itr' and 'policy_params')")
    return ResumePoint(path, int(snapshot["itr"]), snapshot)


def apply_to(algo: Any, point: ResumePoint) -> None:
    """Give ``algo`` the snapshot's policy parameters and baseline, and start it at the next
    iteration; raises ``ResumeError`` where the policy differs or nothing is left to train."""
    check_fits(algo, point)
    ours = algo.policy.get_param_values()
    algo.policy.set_param_values(
        np.asarray(point.snapshot["policy_params"]).astype(ours.dtype, copy=False))
    baseline = point.snapshot.get("baseline")
    if baseline is not None and type(baseline) is type(algo.baseline):
        algo.baseline = baseline
    optimizer_state = point.snapshot.get("optimizer_state")
    if optimizer_state is not None:
        try:
            algo.restore_optimizer_state(optimizer_state)
        except ValueError as error:
            raise ResumeError(f"resume_from {point.path!r}: {error}; resume with the algorithm "
                              "and policy the run trained") from error
    algo.start_itr = point.itr + 1


def restore_env_states(sampler: Any, point: ResumePoint) -> None:
    """Give the started ``sampler``'s envs what the run's wrappers had learned (running
    observation statistics), each sampler its own, where they are the run's wrappers; a warning
    where they differ."""
    learned = _learned(point)
    if learned is None:
        return
    states, layout = learned
    ours = sampler.env_state_layout()
    if ours != layout:
        logger.warning(
            "resume_from %s: the run's env wrappers had learned %s, and this env's hold %s: what "
            "they learn starts afresh", point.path, layout.describe(),
            ours.describe() if ours is not None else "nothing")
        return
    sampler.restore_env_states(states)
    samplers = getattr(sampler, "n_parallel", 1)
    if samplers != len(states):
        logger.info(
            "the env's wrappers go on from what they had learned (%s); the run had %s and this "
            "one %d: sampler i goes on from the run's sampler i %% %d", layout.describe(),
            amount(len(states), "sampler", "samplers"), samplers, len(states))
    else:
        logger.info("the env's wrappers go on from what they had learned (%s)", layout.describe())


def give_env_state(env: Any, point: ResumePoint) -> None:
    """Write into the wrappers of ``env`` (the plotter's copy of the env) what the run's first
    sampler had learned, where they are the run's wrappers: the snapshot's policy, which the
    resumed plotter shows first (as its iteration), is then shown on the observations it trained
    on, not on statistics started afresh."""
    learned = _learned(point)
    if learned is None:
        return
    states, layout = learned
    try:
        reader = TrainerEnvState(env, type(env).__name__)
        if reader.layout == layout:
            reader.write(states[0])
    except Exception as error:  # noqa: BLE001 - the user's hook: the samplers' restore says it
        logger.debug("the plotter's env does not take the run's learned state: %s", error)


def _learned(point: ResumePoint) -> Optional[Tuple[List[np.ndarray], Any]]:
    """Each sampler's learned state in the snapshot, with the layout it was read by; None where
    it holds none (a snapshot of an earlier version holds the first sampler's alone, as
    ``env_state``)."""
    snapshot, layout = point.snapshot, point.snapshot.get("env_state_layout")
    if snapshot.get("env_states"):
        states = [np.asarray(state) for state in snapshot["env_states"]]
    elif snapshot.get("env_state") is not None:
        states = [np.asarray(snapshot["env_state"])]
    else:
        return None
    return None if layout is None else (states, layout)


def sampling_seed(point: ResumePoint, seed: Optional[int]) -> Optional[int]:
    """The seed a resumed run samples with: the one given, else the run's own (a snapshot of an
    earlier version holds none: then a fresh one)."""
    if seed is not None or point.snapshot.get("seed") is None:
        return seed
    logger.info("sampling with the run's seed, %d, as it would have gone on (seed= to change it)",
                point.snapshot["seed"])
    return int(point.snapshot["seed"])


def check_fits(algo: Any, point: ResumePoint) -> None:
    """Raise ``ResumeError`` where ``algo`` cannot resume from ``point``: another policy, or no
    iteration left to train (run before anything is written, where the algorithm is given)."""
    params = np.asarray(point.snapshot["policy_params"])
    ours = algo.policy.get_param_values()
    if params.shape != ours.shape:
        raise ResumeError(
            f"resume_from {point.path!r} holds a policy of {params.size} parameters, and the "
            f"algorithm's has {ours.size}: resume with the policy the run trained (the same "
            "class, sizes and env)")
    start = point.itr + 1
    if start >= algo.n_itr:
        raise ResumeError(f"resume_from {point.path!r} is of iteration {point.itr}, and n_itr is "
                          f"{algo.n_itr} (iterations 0-{algo.n_itr - 1}): nothing is left to "
                          "train; give the algorithm a larger n_itr")


def _newest_snapshot(folder: str) -> str:
    last = os.path.join(folder, LAST_SNAPSHOT)
    if os.path.isfile(last):
        return last
    numbered = [(snapshot_iteration(name), name) for name in os.listdir(folder)]
    numbered = [(itr, name) for itr, name in numbered if itr is not None]
    if not numbered:
        raise SnapshotNotFoundError(f"resume_from {folder!r} holds no snapshot (params.pkl or "
                                    "itr_<N>.pkl): was the run made with snapshot_mode='none'?")
    return os.path.join(folder, max(numbered)[1])
