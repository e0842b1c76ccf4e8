"""Parameter channels: the newest flat parameter vector from the trainer to a worker. A writer in
the trainer never waits; a reader in the worker sleeps until something newer arrives and returns
only the newest (``base``). ``shm`` is the local channel; ``redis/`` reaches other machines.
"""
from async_plotter.channel.base import (ChannelAddress, ParamReader, ParamUpdate, ParamWriter,
                                        ParentGone, metrics_fit)

__all__ = [
    "ChannelAddress", "ParamReader", "ParamUpdate", "ParamWriter", "ParentGone", "metrics_fit"
]
