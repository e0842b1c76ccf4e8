"""Parameter channels: how the newest flat parameter vector gets from the trainer to a worker.

Every channel has the same two halves: a writer in the trainer whose ``publish`` never waits for the
reader, and a reader in the worker that sleeps until something newer than what it has arrives, then
returns only the newest update (older ones are skipped, never queued).
"""
from async_plotter.channel.base import ParamUpdate, ParentGone

__all__ = ["ParamUpdate", "ParentGone"]


def open_reader(kind: str, *args):
    """Open the worker side of a channel from the tuple its writer advertised."""
    if kind == "shm":
        from async_plotter.channel.shm import SharedMemoryReader

        return SharedMemoryReader(*args)
    if kind == "redis":
        from async_plotter.channel.redis_reader import RedisReader

        return RedisReader(*args)
    raise ValueError(f"unknown parameter channel kind {kind!r}")
