"""The two halves every parameter channel implements, and what travels on one.

A channel carries the newest flat parameter vector from the trainer to a worker: ``ParamWriter``
in the trainer, ``ParamReader`` in the worker (the training metrics beside it take the Redis
channel too, ``RedisWriter.post_metrics``; a local worker gets them from its supervisor). The
trainer hands the worker a ``ChannelAddress`` (plain, picklable data) from which the worker opens
its reader. Shared memory (``shm``) and Redis (``redis/``) implement all three.
"""
import dataclasses
import pickle
from typing import Dict, Optional, Protocol, Tuple, Union

import numpy as np

# The worker's lifeline to its render process takes one metrics message per write of at most
# PIPE_BUF (4096) bytes, which Linux makes atomic: whole or, when the pipe is full, not at all.
# The message wrapper takes ~100 bytes of it.
MAX_METRICS_BYTES = 3900


class ParentGone(Exception):
    """The trainer on the other end of the channel went away; the worker should exit."""


@dataclasses.dataclass(frozen=True)
class ParamUpdate:
    """One published parameter vector and what the trainer said about it."""

    #: 0 is the initial policy given at start; then 1, 2, 3, ... in publishing order.
    number: int
    params: np.ndarray
    #: the training iteration the trainer passed to ``update_plot`` (None if it passed none)
    iteration: Optional[int]
    #: rollout length limit for this update
    max_path_length: int


#: an update as the trainer hands it to a writer: one vector, or its parts in order (the policy's
#: parameters, then its env's state), which the writer copies one after the other into its own
#: buffer: putting them together first cost a second copy (of a million parameters: ~2x one)
Update = Union[np.ndarray, Tuple[np.ndarray, ...]]


def copy_update(target: np.ndarray, update: Update) -> None:
    """Copy ``update`` (of ``target``'s size) into ``target``."""
    if isinstance(update, np.ndarray):
        np.copyto(target, update, casting="same_kind")
        return
    offset = 0
    for part in update:
        np.copyto(target[offset:offset + part.size], part, casting="same_kind")
        offset += part.size


def metrics_fit(iteration: Optional[int], metrics: Dict[str, float]) -> bool:
    """The one size rule for metrics, on every channel: whether they reach a worker whole."""
    return len(pickle.dumps((iteration, dict(metrics)))) <= MAX_METRICS_BYTES


class ParamReader(Protocol):
    """Worker side: sleeps until something newer than what it has arrives."""

    def newer_available(self) -> bool:
        """Whether an update newer than the last one returned is waiting."""

    def final_requested(self) -> bool:
        """Whether the trainer finished and wants a video of its newest parameters."""

    def wait(self, timeout: Optional[float]) -> Optional[ParamUpdate]:
        """The newest update once one newer than the last is there, or None after ``timeout``.
        Raises ``ParentGone`` when the trainer is gone."""

    def close(self) -> None:
        """Release the channel's resources."""


class ParamWriter(Protocol):
    """Trainer side. Nothing here may wait for a reader."""

    @property
    def published(self) -> int:
        """The number of the newest update published (0: the initial policy)."""

    def publish(self,
                params: Update,
                iteration: Optional[int],
                max_path_length: int,
                number: Optional[int] = None) -> int:
        """Make ``params`` the newest update; returns its number. Older unread ones are dropped."""

    def request_final(self) -> None:
        """Training is over: ask the worker for a video of the newest parameters."""

    def address(self) -> "ChannelAddress":
        """What a worker opens its reader from (a fresh one for each launch of the worker)."""

    def close(self, timeout: float) -> None:
        """Deliver what is pending within ``timeout`` seconds, then release everything."""


class ChannelAddress(Protocol):
    """Picklable data a worker process opens its ``ParamReader`` from."""

    def open_reader(self) -> ParamReader:
        """Open the worker's end of the channel."""
