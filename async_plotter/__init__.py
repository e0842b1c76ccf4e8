"""async_plotter: watch a TensorFlow policy act in MuJoCo while it trains, without slowing training.

    from async_plotter import Plotter
    with Plotter("Swimmer-v5", policy, video_dir="videos") as plotter:
        for itr in range(n_itr):
            train_one_iteration(policy)
            plotter.update_plot(policy, iteration=itr)   # returns at once
"""
from async_plotter.trainer.plotter_handle import Plotter, PlotterState
from async_plotter.supervision.budget import DEFAULT_BUDGET
from async_plotter.trainer.config import DEFAULT_VIDEO_LENGTH, DEFAULT_VIDEO_SECONDS
from async_plotter.errors import (CameraError, EnvBuildError, EnvMismatchError, EnvRenderError,
                                  EnvSpecError, EnvStepError, InvalidArgumentError, NoDisplayError,
                                  ParameterMismatchError, PlotterClosedError, PlotterError,
                                  PolicyMismatchError, PolicyNotRebuildableError,
                                  PolicyProtocolError, PolicyShapeError, VideoDirError)
from async_plotter.sinks.base import FrameSink
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo
from async_plotter.policy.serializable import Serializable

__version__ = "0.1.0"

__all__ = [
    "Plotter", "Serializable", "PlotterError", "PlotterClosedError", "PolicyProtocolError",
    "PolicyNotRebuildableError", "PolicyMismatchError", "ParameterMismatchError", "EnvSpecError",
    "NoDisplayError", "VideoDirError", "InvalidArgumentError", "PolicyShapeError", "EnvRenderError",
    "EnvBuildError", "EnvMismatchError", "EnvStepError", "CameraError", "DEFAULT_BUDGET",
    "DEFAULT_VIDEO_LENGTH", "DEFAULT_VIDEO_SECONDS", "FrameSink", "EpisodeInfo", "EpisodeEnd",
    "PlotterState"
]
