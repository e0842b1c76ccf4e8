"""What only the training process runs: the ``Plotter`` (``plotter_handle``), its checked
configuration (``config``), the checks before anything starts (``preflight``), the route that
owns the channel and the worker (``routes``: shared memory and a local worker, or publish-only
to Redis) and the closing summary (``summary``).

Starting, watching and budgeting the worker's processes is ``async_plotter.supervision``'s, which
``async-plotter view`` and ``serve`` use too; the child processes' own code is
``async_plotter.worker``'s.
"""
