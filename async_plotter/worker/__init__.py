"""What runs in the plot worker's two child processes: the rollout process (policy + physics, its
own TensorFlow runtime; ``rollout_process``, ``playback``) feeding the render process (GL and the
frame sinks, never TensorFlow; ``render_process``), and what both sides of the pipes share: the
worker's configuration (``config``) and the typed reports it sends back (``status``).

Nothing here runs in the trainer except the plain data types; the side that starts, watches and
budgets these processes is ``async_plotter.supervision``; the sinks are ``async_plotter.sinks``.
"""
