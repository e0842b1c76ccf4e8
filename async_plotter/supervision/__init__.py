"""Supervising a worker's two processes, for any parent that starts one: the trainer, and
``async-plotter view`` and ``serve`` on a viewer's machine.

``supervisor`` starts, watches, restarts and stops the processes (with ``metrics_relay``, which
hands the trainer's metrics to the render process); ``budget`` (with ``token_bucket``) and
``priorities`` hold them to a CPU budget; ``stats`` and ``ledger`` count what they delivered.
"""
