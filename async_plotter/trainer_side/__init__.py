"""The trainer's side of the plotter, run in the training process (or in ``async-plotter view``,
which stands in for a trainer on another machine): the ``Plotter`` (``plotter``), its checked
configuration (``config``) and the checks before anything starts (``preflight``), the route
that owns the channel and the worker (``routes``), the supervisor thread that starts, watches,
restarts and stops the worker's processes (``supervisor``, with ``metrics_relay``), the CPU
budget's governor (``budget``, ``priorities``), the counters (``stats``, ``ledger``) and the
closing summary (``summary``), and the Redis viewer's assembly (``viewer``).

The child processes' own code lives in ``async_plotter.worker``.
"""
