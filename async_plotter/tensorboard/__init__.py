"""TensorBoard event files, written without TensorFlow (and without the ``tensorboard`` package).

The render process must never import TensorFlow (TF and Mesa's software GL crash together in one
process), and ``tensorboard``'s own ``EventFileWriter`` imports TensorFlow on its first write when
TF is installed. So the few pieces an event file needs are written here by hand, one per module:

* :mod:`~async_plotter.tensorboard.crc32c`: the checksum TFRecord framing uses.
* :mod:`~async_plotter.tensorboard.proto`: the handful of ``Event`` / ``Summary`` protobuf fields.
* :mod:`~async_plotter.tensorboard.events`: TFRecord framing and the event file's name and header.
* :mod:`~async_plotter.tensorboard.gif`: frames to a small animated GIF (Pillow).
* :mod:`~async_plotter.tensorboard.writer`: :class:`SummaryWriter`, scalars and animated images.
* :mod:`~async_plotter.tensorboard.sink`: ``TensorBoardSink``, a frame sink of the render process.

Reading and serving the files needs ``tensorboard`` (``pip install async_plotter[tensorboard]``);
writing them needs only Pillow, which the library depends on anyway.
"""
from async_plotter.tensorboard.writer import SummaryWriter

__all__ = ["SummaryWriter"]
