"""``async-plotter serve``: one page for every experiment on a Redis server, a live view of those
somebody watches, and a budgeted history of videos (``app`` puts the pieces together).
"""
from async_plotter.serve.options import ServeOptions

__all__ = ["ServeOptions"]  # the server itself: ``async_plotter.serve.app.ServeApp``
