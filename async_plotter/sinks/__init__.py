"""Frame sinks: every output of the render process (videos, state recordings, a window, a callback,
the live page, TensorBoard) behind ``FrameSink`` (``base``), and the picklable specs the trainer
builds (``specs``). What a sink feeds stays in its own room (``web/``, ``view3d/``,
``tensorboard/``, ``render/``).
"""
from async_plotter.sinks.base import FrameSink

__all__ = ["FrameSink"]
