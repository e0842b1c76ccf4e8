"""Frame sinks: where rendered episodes go. Each sink is one output (a video file per update, a
window, a user callback, a web page) behind the same small interface, ``FrameSink``."""
from async_plotter.render.sinks.base import FrameSink

__all__ = ["FrameSink"]
