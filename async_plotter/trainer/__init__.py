"""What only the training process runs: the ``Plotter``, its checked configuration, the checks
before anything starts, the route that owns the channel and the worker, and the closing summary.
Supervising the worker's processes is ``async_plotter.supervision``'s; their code
``async_plotter.worker``'s.
"""
