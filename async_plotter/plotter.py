"""rllab's plotting functions, with rllab's semantics, on top of ``Plotter``.

rllab's training loop calls::

    plotter.init_worker()                      # once, when plotting is on
    plotter.init_plot(env, policy)             # once, with the env and the initial policy
    plotter.update_plot(policy, max_length)    # after each iteration
    plotter.shutdown_worker()                  # at the end

Here ``init_worker`` only records the options (where videos go, window or not); the worker starts in
``init_plot``, in the background, and ``update_plot`` never waits for it.
"""
import logging
import math
import os
from typing import Any, Dict, Optional

from async_plotter.trainer.plotter_handle import Plotter
from async_plotter.errors import PlotterError

logger = logging.getLogger("async_plotter")

_options: Dict[str, Any] = {}
_plotter: Optional[Plotter] = None


def init_worker(**plotter_options: Any) -> None:
    """Prepare plotting. Keyword arguments are passed to ``Plotter`` (``video_dir``, ``window``,
    ``fps``, ``budget``, ...). Without ``video_dir``, ``$ASYNC_PLOTTER_VIDEO_DIR`` is used if
    set."""
    _options.clear()
    _options.update(plotter_options)
    if "video_dir" not in _options and os.environ.get("ASYNC_PLOTTER_VIDEO_DIR"):
        _options["video_dir"] = os.environ["ASYNC_PLOTTER_VIDEO_DIR"]


def init_plot(env: Any, policy: Any, **plotter_options: Any) -> Plotter:
    """Start showing ``policy`` acting in ``env`` (a new worker; an earlier one is shut down)."""
    global _plotter
    if _plotter is not None:
        shutdown_worker()
    if not _options and "video_dir" not in plotter_options:
        init_worker()
    options = dict(_options, **plotter_options)
    _plotter = Plotter(env, policy, **options).start()
    return _plotter


def update_plot(policy: Any, max_length: float = math.inf, iteration: Optional[int] = None) -> None:
    """Show the policy's newest parameters; ``max_length`` caps the rollout (rllab's default:
    no cap beyond the plotter's ``max_path_length``). Returns at once."""
    if _plotter is None:
        raise PlotterError("plotter.update_plot() called before plotter.init_plot(env, policy)")
    max_path_length = None if max_length is None or math.isinf(max_length) else int(max_length)
    _plotter.update_plot(policy, max_path_length=max_path_length, iteration=iteration)


def shutdown_worker(timeout: Optional[float] = None) -> None:
    """Stop the worker, after a video of the newest policy when it has none yet (bounded by
    ``timeout``; default: the plotter's ``final_video_timeout`` plus a few seconds). Safe to
    call when nothing is running."""
    global _plotter
    plotter, _plotter = _plotter, None
    if plotter is not None:
        plotter.close(timeout)


def get_plotter() -> Optional[Plotter]:
    """The plotter started by ``init_plot``, if any (for its ``stats``)."""
    return _plotter
