"""async_plotter: watch a TensorFlow policy act in MuJoCo while it trains, without slowing training.

    from async_plotter import Plotter
    with Plotter("Swimmer-v5", policy, video_dir="videos") as plotter:
        for itr in range(n_itr):
            train_one_iteration(policy)
            plotter.update_plot(policy, iteration=itr)   # returns at once
"""
import importlib
from typing import TYPE_CHECKING, Any, List

if TYPE_CHECKING:  # the same names, for type checkers and readers
    from async_plotter.trainer.plotter_handle import Plotter, PlotterState
    from async_plotter.supervision.budget import DEFAULT_BUDGET
    from async_plotter.trainer.config import DEFAULT_VIDEO_LENGTH, DEFAULT_VIDEO_SECONDS
    from async_plotter.errors import (CameraError, EnvBuildError, EnvMismatchError, EnvRenderError,
                                      EnvSpecError, EnvStepError, InvalidArgumentError,
                                      NoDisplayError, ParameterMismatchError, PlotterClosedError,
                                      PlotterError, PolicyMismatchError, PolicyNotRebuildableError,
                                      PolicyProtocolError, PolicyShapeError, VideoDirError,
                                      FolderInUseError)
    from async_plotter.sinks.base import FrameSink
    from async_plotter.render.stream import EpisodeEnd, EpisodeInfo
    from async_plotter.policy.serializable import Serializable

__version__ = "0.1.0"

# Each public name by the module that defines it, imported when first asked for (PEP 562). The
# worker processes import this package on their way to their own modules: they then load none
# of the trainer's side (measured: 0.85-0.87x of the CPU a worker process spends importing).
_PUBLIC = {
    "async_plotter.trainer.plotter_handle": ("Plotter", "PlotterState"),
    "async_plotter.supervision.budget": ("DEFAULT_BUDGET", ),
    "async_plotter.trainer.config": ("DEFAULT_VIDEO_LENGTH", "DEFAULT_VIDEO_SECONDS"),
    "async_plotter.errors":
    ("PlotterError", "PlotterClosedError", "PolicyProtocolError", "PolicyNotRebuildableError",
     "PolicyMismatchError", "ParameterMismatchError", "EnvSpecError", "NoDisplayError",
     "VideoDirError", "InvalidArgumentError", "PolicyShapeError", "EnvRenderError", "EnvBuildError",
     "EnvMismatchError", "EnvStepError", "CameraError", "FolderInUseError"),
    "async_plotter.sinks.base": ("FrameSink", ),
    "async_plotter.render.stream": ("EpisodeInfo", "EpisodeEnd"),
    "async_plotter.policy.serializable": ("Serializable", ),
}
_HOMES = {name: module for module, names in _PUBLIC.items() for name in names}

__all__ = [
    "Plotter", "Serializable", "PlotterError", "PlotterClosedError", "PolicyProtocolError",
    "PolicyNotRebuildableError", "PolicyMismatchError", "ParameterMismatchError", "EnvSpecError",
    "NoDisplayError", "VideoDirError", "InvalidArgumentError", "PolicyShapeError", "EnvRenderError",
    "EnvBuildError", "EnvMismatchError", "EnvStepError", "CameraError", "FolderInUseError",
    "DEFAULT_BUDGET", "DEFAULT_VIDEO_LENGTH", "DEFAULT_VIDEO_SECONDS", "FrameSink", "EpisodeInfo",
    "EpisodeEnd", "PlotterState"
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
