"""The plotter's view of an env the trainer does not step: where the samplers build and step envs of
their own (from an id or a factory; in worker processes for a ``ParallelSampler``), the trainer
holds a copy that is never stepped, and after each batch writes into its wrappers what the
sampler's env learned (``Sampler.env_state``: running observation statistics). That copy is the
env object handed to the ``Plotter``, so what its wrappers learned travels with every
``update_plot``, as for an env object the trainer steps itself; before, the plot worker's
``NormalizeObservation`` started fresh and the videos showed the policy acting on observations
it never trained on.

With several samplers each env learns from its own paths; the mirror follows worker 0's.
"""
import logging
from typing import Any, Callable, Optional

import numpy as np

from async_plotter.env.recipe import describe_env
from async_plotter.env.state import TrainerEnvState, WorkerEnvState
from async_plotter.errors import EnvSpecError

logger = logging.getLogger(__name__)


class EnvMirror:
    """A copy of the samplers' env for the plotter, following what their wrappers learn."""

    def __init__(self, env: Any, label: str) -> None:
        self.env = env
        layout = TrainerEnvState(env, label).layout
        self._writer = WorkerEnvState(env, layout, label) if layout.layers else None

    @classmethod
    def of(cls, make: Callable[[], Any], label: str) -> Optional["EnvMirror"]:
        """A mirror of the env ``make`` builds, or None where its wrappers learn nothing (the
        plotter can then build its own from the id or the factory) or the copy cannot travel to
        the plot worker (an env without a registration that cloudpickle cannot copy, where the
        factory can: the plotter then gets the factory, and says its statistics start fresh)."""
        mirror = cls(make(), label)
        if mirror._writer is None:
            mirror.close()
            return None
        try:
            describe_env(mirror.env)  # what Plotter() does with it: it must travel
        except EnvSpecError as error:
            logger.info(
                "the plotter gets the env's factory, not a copy that follows the samplers' "
                "statistics: %s", error)
            mirror.close()
            return None
        return mirror

    def follow(self, state: Optional[np.ndarray]) -> None:
        """Write ``state`` (a sampler's ``env_state()``; None: nothing new) into the wrappers."""
        if state is not None and self._writer is not None:
            self._writer.apply(state)

    def close(self) -> None:
        try:
            self.env.close()
        except Exception as error:  # noqa: BLE001 - closing a copy must not fail training
            logger.debug("closing the plotter's copy of the env: %s", error)
