"""``async-plotter serve``: one page for every experiment on a Redis server.

The page lists the experiments (``catalog``), shows the newest policy of those somebody watches
(``live``: a render worker per watched experiment, started on demand and stopped after a grace
time; ``relay``: its frames to every browser, newest wins), and, with a record folder, a history
of videos (``recorder``, within a CPU budget; ``history``). ``server`` is the live page's HTTP
server with these routes; ``app`` puts the pieces together.
"""
from async_plotter.serve.options import ServeOptions

__all__ = ["ServeOptions"]  # the server itself: ``async_plotter.serve.app.ServeApp``
