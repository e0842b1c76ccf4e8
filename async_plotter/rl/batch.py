"""A batch of sampled paths stored flat: one array per field, path boundaries by length.

Storing the batch flat (rather than as a list of per-path dicts, as rllab did) lets every later step
run as a handful of numpy operations over all transitions at once.
"""
import dataclasses
from typing import Any, Dict, List, Optional, Sequence

import numpy as np


@dataclasses.dataclass
class SampleBatch:
    """Transitions of several whole paths, concatenated in path order.

    Attributes:
        observations: ``(N, obs_dim)`` float32, what the policy saw.
        actions: ``(N, action_dim)`` float32 (Box) or ``(N,)`` int64 (Discrete), as sampled
            (before clipping to the action bounds).
        rewards: ``(N,)`` float64.
        agent_infos: per-step distribution parameters, e.g. ``{"mean": (N, d), "log_std": (N, d)}``.
        path_lengths: ``(P,)`` int64, each at least 1; they sum to N.
        terminated: ``(P,)`` bool, whether a path ended in a terminal state rather than being cut
            by a time limit.
        last_observations: ``(P, obs_dim)`` float32, the observation after each path's last step
            (the state a cut path stopped in), or None when unknown.
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    agent_infos: Dict[str, np.ndarray]
    path_lengths: np.ndarray
    terminated: np.ndarray
    last_observations: Optional[np.ndarray] = None

    @property
    def num_steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def num_paths(self) -> int:
        return int(self.path_lengths.shape[0])

    @property
    def path_starts(self) -> np.ndarray:
        """Index of the first step of each path."""
        return np.cumsum(self.path_lengths) - self.path_lengths

    @property
    def path_ends(self) -> np.ndarray:
        """Index of the last step of each path."""
        return np.cumsum(self.path_lengths) - 1

    @property
    def timesteps(self) -> np.ndarray:
        """Step index within its path, for every transition."""
        return np.arange(self.num_steps) - np.repeat(self.path_starts, self.path_lengths)

    def path_sums(self, values: np.ndarray) -> np.ndarray:
        """Sum of ``values`` (one per step) over each path."""
        if self.num_paths == 0:
            return np.zeros(0)
        return np.add.reduceat(np.asarray(values), self.path_starts)

    def paths(self) -> List[Dict[str, Any]]:
        """rllab-style list of per-path dicts (views into the flat arrays)."""
        result = []
        for i, (start, length) in enumerate(zip(self.path_starts, self.path_lengths)):
            window = slice(int(start), int(start + length))
            path = {
                "observations": self.observations[window],
                "actions": self.actions[window],
                "rewards": self.rewards[window],
                "agent_infos": {
                    key: value[window]
                    for key, value in self.agent_infos.items()
                },
                "terminated": bool(self.terminated[i]),
            }
            if self.last_observations is not None:
                path["last_observation"] = self.last_observations[i]
            result.append(path)
        return result

    @classmethod
    def from_paths(cls, paths: Sequence[Dict[str, Any]]) -> "SampleBatch":
        """Concatenate per-path dicts (keys as in :meth:`paths`)."""
        if not paths:
            raise ValueError("cannot build a SampleBatch from zero paths")
        infos = {
            key: np.concatenate([p["agent_infos"][key] for p in paths])
            for key in paths[0]["agent_infos"]
        }
        last = None
        if all("last_observation" in p for p in paths):
            last = np.stack([p["last_observation"] for p in paths])
        return cls(
            observations=np.concatenate([p["observations"] for p in paths]),
            actions=np.concatenate([p["actions"] for p in paths]),
            rewards=np.concatenate([p["rewards"] for p in paths]).astype(np.float64, copy=False),
            agent_infos=infos,
            path_lengths=np.array([len(p["rewards"]) for p in paths], dtype=np.int64),
            terminated=np.array([bool(p["terminated"]) for p in paths], dtype=bool),
            last_observations=last,
        )
