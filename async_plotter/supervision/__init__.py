"""Supervising a worker's two processes, for any parent that starts one (the trainer,
``async-plotter view`` and ``serve``): start, watch, restart and stop them, hold them to a CPU
budget, and count what they delivered.
"""
