"""TensorBoard event files without TensorFlow: ``tensorboard``'s own writer imports it on its first
write, and the render process must never. tensorboardX's records and protocol buffers, Pillow's
GIFs; reading the files needs ``tensorboard`` (``pip install async_plotter[tensorboard]``).
"""
from async_plotter.tensorboard.writer import SummaryWriter

__all__ = ["SummaryWriter"]
