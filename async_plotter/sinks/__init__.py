"""Frame sinks: where rendered episodes go, all in this room. Each sink is one output (an mp4 per
update, a state recording, a window, a user callback, the live page, TensorBoard images) behind
the same small interface, ``FrameSink`` (``base``); ``specs`` holds the small picklable specs the
trainer builds and the registry that turns them into sinks in the render process.

The rule for what lives here: every sink class does. What a sink feeds stays in its own room
(the web server in ``web/``, the 3D front in ``view3d/``, the event-file writer in
``tensorboard/``, the MuJoCo scene in ``render/``).
"""
from async_plotter.sinks.base import FrameSink

__all__ = ["FrameSink"]
