"""TensorBoard event files, written without TensorFlow.

The render process must never import TensorFlow (TF and Mesa's software GL crash together in one
process), and ``tensorboard``'s own ``EventFileWriter`` imports TensorFlow on its first write when
TF is installed. So the files are written with tensorboardX's record writer and protocol-buffer
classes, which need neither:

* :mod:`~async_plotter.tensorboard.gif`: frames to a small animated GIF (Pillow).
* :mod:`~async_plotter.tensorboard.writer`: :class:`SummaryWriter`, scalars and animated images.
* :mod:`~async_plotter.sinks.tensorboard`: ``TensorBoardSink``, a frame sink of the render process.

Reading and serving the files needs ``tensorboard`` (``pip install async_plotter[tensorboard]``).
"""
from async_plotter.tensorboard.writer import SummaryWriter

__all__ = ["SummaryWriter"]
