"""The render process's sinks, built from the specs the trainer sent (``sinks/specs.py``), through
one registry keyed by the spec's type: ``build_sinks(specs, context)``. A builder connects its
sink to the render process's reports (``StatusKind``) and the scene's playback.

Adding a kind of output is one spec class (``sinks/specs.py``), one sink (``sinks/``), one
builder here and one ``register_sink`` call.
"""
import dataclasses
import pickle
from typing import Any, Callable, Dict, Iterable, List, Optional, Type

from async_plotter.sinks.base import FrameSink
from async_plotter.sinks.specs import (CallbackSpec, HttpSpec, LiveStatesSpec, SinkSpec, StatesSpec,
                                       TensorBoardSpec, UserSinkSpec, VideoSpec, WindowSpec)
from async_plotter.worker.status import StatusKind

__all__ = ["SinkContext", "register_sink", "build_sinks", "EARLY", "fit_to_scene"]


@dataclasses.dataclass(frozen=True)
class SinkContext:
    """What a builder may use: the scene's kind, the frame rate, the run's title and the render
    process's status sender (``send(StatusKind, **payload)``)."""

    scene_kind: str  # "mujoco" | "frames"
    #: frames per second of the scene's videos: the env's rate over the frame stride (real time)
    fps: float
    title: str
    min_video_seconds: float
    status: Any
    #: every ``stride``-th env step is shown; ``env_rate``: env steps per simulated second
    stride: int = 1
    env_rate: Optional[float] = None
    #: the live page's socket, bound once by the supervisor (``web/listener.py``); None: the
    #: page binds its own
    http_listener: Any = None


Builder = Callable[[Any, SinkContext], FrameSink]
_BUILDERS: Dict[Type[SinkSpec], Builder] = {}


def register_sink(spec_type: Type[SinkSpec], builder: Builder) -> None:
    """Make ``build_sinks`` build ``builder(spec, context)`` for specs of ``spec_type``."""
    _BUILDERS[spec_type] = builder


#: the outputs that start before the scene: the trainer's curves, which the live page and
#: TensorBoard carry, come before any episode (a viewer of a trainer that plays none: it ended,
#: or nobody watched yet). Each is fitted to the scene once it comes (``fit_to_scene``).
EARLY = (HttpSpec, TensorBoardSpec)


def fit_to_scene(sink: FrameSink, spec: SinkSpec, context: SinkContext) -> None:
    """Give ``sink``, built before the scene from ``EARLY``'s ``spec``, the scene's title and
    frame rate (``context``)."""
    _FITTERS[type(spec)](sink, spec, context)


def build_sinks(specs: Iterable[SinkSpec], context: SinkContext) -> List[FrameSink]:
    """The sinks for ``specs``, in order; an unregistered spec type is a ``TypeError``."""
    sinks = []
    for spec in specs:
        builder = _BUILDERS.get(type(spec))
        if builder is None:
            raise TypeError(f"no sink is registered for {type(spec).__name__}")
        sinks.append(builder(spec, context))
    return sinks


# ----------------------------------------------------------------------------- the builders


def _video(spec: VideoSpec, context: SinkContext) -> FrameSink:
    from async_plotter.sinks.video import VideoSink

    def on_written(path: str, recording: Any, episodes: int, frames: int, whole: bool,
                   clipped: bool) -> None:
        context.status.send(StatusKind.VIDEO,
                            path=path,
                            update=recording.update,
                            iteration=recording.iteration,
                            episodes=episodes,
                            frames=frames,
                            whole=whole,
                            clipped=clipped)

    return VideoSink(spec.directory,
                     context.fps,
                     on_written,
                     on_encoder=lambda pid: context.status.send(StatusKind.ENCODER, pid=pid),
                     min_frames=int(context.min_video_seconds * context.fps),
                     on_storage=lambda state, directory, free: context.status.send(
                         StatusKind.STORAGE, state=state, directory=directory, free=free))


def _states(spec: Any, context: SinkContext) -> FrameSink:
    from async_plotter.sinks.states import LiveStateRecordingSink, StateRecordingSink
    live = isinstance(spec, LiveStatesSpec)

    def on_written(path: str, recording: Any, steps: int, size: int, whole: bool) -> None:
        context.status.send(StatusKind.STATES,
                            path=path,
                            update=recording.update,
                            iteration=recording.iteration,
                            steps=steps,
                            bytes=size,
                            live=live,
                            whole=whole)

    playback = dict(stride=context.stride, env_rate=context.env_rate, label=context.title)
    if live:
        return LiveStateRecordingSink(spec.directory, context.fps, playback, on_written)
    return StateRecordingSink(spec.directory,
                              context.fps,
                              playback,
                              on_written,
                              min_frames=int(context.min_video_seconds * context.fps))


def _window(spec: WindowSpec, context: SinkContext) -> FrameSink:
    from async_plotter.sinks.window import MujocoViewerSink, PixelWindowSink

    title = f"async_plotter: {context.title}"
    return MujocoViewerSink(title) if context.scene_kind == "mujoco" else PixelWindowSink(title)


def _http(spec: HttpSpec, context: SinkContext) -> FrameSink:
    from async_plotter.sinks.http import HttpSink

    return HttpSink(spec.address,
                    lambda url: context.status.send(StatusKind.HTTP, url=url),
                    title=context.title,
                    video_dir=spec.video_dir,
                    view=spec.view,
                    listener=context.http_listener)


def _callback(spec: CallbackSpec, context: SinkContext) -> FrameSink:
    from async_plotter.sinks.callback import CallbackSink

    return CallbackSink(pickle.loads(spec.function), fps=context.fps)


def _tensorboard(spec: TensorBoardSpec, context: SinkContext) -> FrameSink:
    from async_plotter.sinks.tensorboard import TensorBoardSink

    def on_written(tag: str, step: int, recording: Any, size: int, frames: int,
                   clipped: bool) -> None:
        context.status.send(StatusKind.TENSORBOARD,
                            path=spec.logdir,
                            tag=tag,
                            step=step,
                            update=recording.update,
                            iteration=recording.iteration,
                            bytes=size,
                            frames=frames,
                            clipped=clipped)

    sink = TensorBoardSink(spec.logdir,
                           "",
                           context.fps,
                           scalars=spec.scalars,
                           on_written=on_written)
    _fit_tensorboard(sink, spec, context)
    return sink


def _fit_tensorboard(sink: Any, spec: TensorBoardSpec, context: SinkContext) -> None:
    sink.fit(spec.tag or f"rollout/{context.title}", context.fps,
             int(context.min_video_seconds * context.fps))


def _fit_http(sink: Any, spec: HttpSpec, context: SinkContext) -> None:
    sink.retitle(context.title)


def _user(spec: UserSinkSpec, context: SinkContext) -> FrameSink:
    sink = pickle.loads(spec.sink)
    if not isinstance(sink, FrameSink):
        raise TypeError(f"sink {spec.name} unpickled as {type(sink).__name__}, not a FrameSink")
    return sink


register_sink(VideoSpec, _video)
register_sink(StatesSpec, _states)
register_sink(LiveStatesSpec, _states)
register_sink(WindowSpec, _window)
register_sink(HttpSpec, _http)
register_sink(CallbackSpec, _callback)
register_sink(TensorBoardSpec, _tensorboard)
register_sink(UserSinkSpec, _user)
_FITTERS: Dict[Type[SinkSpec], Callable[[Any, Any, SinkContext], None]] = {
    HttpSpec: _fit_http,
    TensorBoardSpec: _fit_tensorboard,
}
