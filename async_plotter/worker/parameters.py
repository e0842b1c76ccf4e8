"""The vector an update carries from the trainer to the rollout process, both ends of it.

It is the policy's flat parameters, then the state of the trainer's env's wrappers (running
statistics, ``env/state.py``) and its settings (``env/settings_travel.py``), in the policy's
dtype. The trainer builds it with
``ParameterLayout.encode`` and publishes it (shared memory or Redis); the rollout process's
``ParameterClient`` takes the newest, cuts it with ``split`` and applies both parts, as acme's
``VariableClient`` fetches an actor's newest variables. The trainer-side check gives its copy of
the env the state through the same two calls. Where the rollout process also keeps the run's
history (``worker/history.py``), one ``UpdateFanOut`` reads the channel and hands each update to
both, newest wins for each.
"""
import dataclasses
import threading
from typing import Any, Optional, Tuple

import numpy as np

from async_plotter.channel.base import ParamReader, ParamUpdate, ParentGone, Update
from async_plotter.env.state import EnvStateLayout, TrainerEnvState, WorkerEnvState
from async_plotter.newest import Newest
from async_plotter.worker.status import StatusKind, StatusSender


@dataclasses.dataclass(frozen=True)
class ParameterLayout:
    """``policy_size`` parameters, then ``env_state``'s values, all of ``dtype``."""

    policy_size: int
    dtype: np.dtype
    env_state: EnvStateLayout = EnvStateLayout()

    @property
    def size(self) -> int:
        """Values in one update (what a channel is built for)."""
        return self.policy_size + self.env_state.size

    def encode(self,
               policy_flat: np.ndarray,
               env_state: Optional[TrainerEnvState] = None) -> np.ndarray:
        """Trainer side: the policy's parameters, then its env's wrapper state read now, as one
        vector (``parts`` joined)."""
        update = self.parts(policy_flat, env_state)
        return update if isinstance(update, np.ndarray) else np.concatenate(update)

    def parts(self, policy_flat: np.ndarray, env_state: Optional[TrainerEnvState]) -> Update:
        """``encode``'s update as its parts, for a writer to copy (``channel/base.Update``)."""
        if env_state is None:
            return policy_flat
        return policy_flat, env_state.read(self.dtype)

    def split(self, flat: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Worker side: ``encode``'s vector as (policy's parameters, env's wrapper state)."""
        return flat[:self.policy_size], flat[self.policy_size:]


class ParameterClient:
    """The rollout process's end: the newest update from ``reader``, its policy's part given to
    ``runtime``, its env's part to the worker's env (``env_state``), ``APPLIED`` reported."""

    def __init__(self, reader: ParamReader, layout: ParameterLayout, runtime: Any,
                 env_state: WorkerEnvState, status: StatusSender) -> None:
        self._reader = reader
        self._layout = layout
        self._runtime = runtime
        self._env_state = env_state
        self._status = status
        #: the update applied last; None before the first
        self.current: Optional[ParamUpdate] = None

    def update(self, timeout: Optional[float] = 1.0) -> bool:
        """Apply the newest update once one newer than ``current`` is there, within ``timeout``
        seconds; False if none came (``ParentGone`` once the trainer is gone)."""
        update = self._reader.wait(timeout=timeout)
        self._status.beat()
        if update is None:
            return False
        policy, env_state = self._layout.split(update.params)
        self._runtime.set_params(policy)
        self._env_state.apply(env_state)
        self.current = update
        self._status.send(StatusKind.APPLIED, update=update.number, iteration=update.iteration)
        return True

    def newer_available(self) -> bool:
        """Whether an update newer than ``current`` waits."""
        return self._reader.newer_available()

    def final_requested(self) -> bool:
        """Whether the trainer finished and wants a video of its newest parameters."""
        return self._reader.final_requested()


class UpdateFanOut:
    """One channel reader, two takers: the rollout process's episodes (``main``, a
    ``ParamReader`` for its ``ParameterClient``) and its history thread (``history``). A thread
    waits on the channel and puts each update into both slots; what a taker has not taken yet is
    replaced by the newer one. The history thread records cheap whole episodes while the
    episodes of a video wait on the render process, so it keeps up with updates that the video
    never shows; it must not wait for them to be applied there."""

    def __init__(self, reader: ParamReader) -> None:
        self._reader = reader
        self._main: Newest[ParamUpdate] = Newest()
        #: the newest update not yet taken by the history thread
        self.history: Newest[ParamUpdate] = Newest()
        #: why the channel thread stopped (``ParentGone``, or a reader's error), re-raised by
        #: the main taker
        self.ended: Optional[BaseException] = None
        self.main = _MainTaker(self)
        self._thread = threading.Thread(target=self._pump, name="async_plotter-params", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            while True:
                update = self._reader.wait(timeout=1.0)
                if update is not None:
                    self._main.put(update)
                    self.history.put(update)
        except BaseException as error:  # noqa: BLE001 - handed to the main thread
            self.ended = error
        finally:
            self._main.close()
            self.history.close()


class _MainTaker:
    """The episodes' end of an ``UpdateFanOut``: a ``ParamReader``."""

    def __init__(self, fan_out: UpdateFanOut) -> None:
        self._fan_out = fan_out

    def newer_available(self) -> bool:
        # The channel too: the thread may not have moved its newest update here yet, and a
        # final video asked for must not be taken for one of the update applied before it.
        fan_out = self._fan_out
        return fan_out._main.fresh or fan_out._reader.newer_available()

    def final_requested(self) -> bool:
        return self._fan_out._reader.final_requested()

    def wait(self, timeout: Optional[float]) -> Optional[ParamUpdate]:
        update = self._fan_out._main.take(timeout)
        ended = self._fan_out.ended
        if update is None and ended is not None:
            if isinstance(ended, ParentGone):
                raise ParentGone(str(ended))
            raise ended
        return update

    def close(self) -> None:
        self._fan_out._reader.close()
