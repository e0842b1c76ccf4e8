"""Parameter channels: how the newest flat parameter vector gets from the trainer to a worker.

Every channel has the same two halves (``base.ParamWriter`` and ``base.ParamReader``): a writer in
the trainer whose ``publish`` never waits for the reader, and a reader in the worker that sleeps
until something newer than what it has arrives, then returns only the newest update (older ones
are skipped, never queued). ``shm`` is the local channel; ``redis/`` reaches other machines.
"""
from async_plotter.channel.base import (ChannelAddress, ParamReader, ParamUpdate, ParamWriter,
                                        ParentGone, metrics_fit)

__all__ = [
    "ChannelAddress", "ParamReader", "ParamUpdate", "ParamWriter", "ParentGone", "metrics_fit"
]
