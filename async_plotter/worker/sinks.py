"""Where rendered frames go: sink *specs* built in the trainer, sinks built in the render process.

A spec is small, picklable, checked data (a folder, an address, a pickled user object) that
travels inside ``WorkerConfig.sinks`` to the render process only; ``build_sinks`` turns each spec
into its :class:`~async_plotter.render.sinks.base.FrameSink` there, through one registry keyed by
the spec's type. Adding a kind of output is one spec class, one builder and one
``register_sink`` call; the rollout process never sees any of it.

Whether the worker runs *live* (replays the newest policy continuously, for somebody watching)
or *records* (one rollout per update) follows from the specs alone: :func:`wants_live`.
"""
import dataclasses
import pickle
from typing import Any, Callable, Dict, Iterable, List, Optional, Type

from async_plotter.render.sinks.base import FrameSink

__all__ = [
    "SinkSpec", "VideoSpec", "StatesSpec", "LiveStatesSpec", "WindowSpec", "HttpSpec",
    "CallbackSpec", "UserSinkSpec", "TensorBoardSpec", "SinkContext", "register_sink",
    "build_sinks", "wants_live", "records"
]


class SinkSpec:
    """Base of every sink spec: plain, frozen, picklable data."""

    #: the worker replays the newest policy continuously while a sink of this kind is attached
    live = False
    #: it keeps every step of a rollout (a file to watch later): none may be dropped, and the
    #: final policy's rollout is waited for at close()
    records = False
    #: it needs pixels drawn in the render process (GL); a scene whose sinks all say no opens
    #: no GL context
    draws = True


@dataclasses.dataclass(frozen=True)
class VideoSpec(SinkSpec):
    """mp4 files in ``directory`` (``render/sinks/video.py``)."""

    directory: str
    records = True


@dataclasses.dataclass(frozen=True)
class StatesSpec(SinkSpec):
    """A state recording beside each video in ``directory`` (``render/sinks/states.py``)."""

    directory: str
    records = True
    draws = False


@dataclasses.dataclass(frozen=True)
class LiveStatesSpec(SinkSpec):
    """A state recording of every episode a live view shows, in ``directory``'s ``live``
    folder (``Plotter(record_states=True)``; ``render/sinks/states.py``)."""

    directory: str
    records = True
    draws = False


@dataclasses.dataclass(frozen=True)
class WindowSpec(SinkSpec):
    """A window on the display (``render/sinks/window.py``)."""

    live = True


@dataclasses.dataclass(frozen=True)
class HttpSpec(SinkSpec):
    """The live page (``web/``), at the checked address ``web.address.HttpConfig``; with
    ``video_dir`` (where the ``VideoSpec`` writes) it also lists and plays the recorded videos."""

    address: Any
    video_dir: Optional[str] = None
    #: ``"3d"``: the browser draws the scene (``async_plotter.view3d``); ``"2d"``: MJPEG only
    view: str = "2d"
    live = True


@dataclasses.dataclass(frozen=True)
class CallbackSpec(SinkSpec):
    """``on_frame(frame, info)``, cloudpickled in the trainer."""

    function: bytes


@dataclasses.dataclass(frozen=True)
class TensorBoardSpec(SinkSpec):
    """Animated images (and optionally scalars) in a TensorBoard event file in ``logdir``
    (``tensorboard/sink.py``; written without TensorFlow)."""

    logdir: str
    #: the images' tag; None: ``rollout/<env label>``
    tag: Optional[str] = None
    #: also write ``update_plot(..., metrics=...)`` as scalars
    scalars: bool = True
    records = True


@dataclasses.dataclass(frozen=True)
class UserSinkSpec(SinkSpec):
    """A user's ``FrameSink`` instance, cloudpickled in the trainer and unpickled where it runs."""

    sink: bytes
    name: str


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


def build_sinks(specs: Iterable[SinkSpec], context: SinkContext) -> List[FrameSink]:
    """The sinks for ``specs``, in order; an unregistered spec type is a ``TypeError``."""
    sinks = []
    for spec in specs:
        builder = _BUILDERS.get(type(spec))
        if builder is None:
            raise TypeError(f"no sink is registered for {type(spec).__name__}")
        sinks.append(builder(spec, context))
    return sinks


def wants_live(specs: Iterable[SinkSpec]) -> bool:
    """The one rule for live mode: somebody may be watching (a window, a page)."""
    return any(spec.live for spec in specs)


def records(specs: Iterable[SinkSpec]) -> bool:
    """Whether rollouts are kept (mp4 files, TensorBoard images): then no step may be dropped."""
    return any(spec.records for spec in specs)


# ----------------------------------------------------------------------------- the builders


def _video(spec: VideoSpec, context: SinkContext) -> FrameSink:
    from async_plotter.render.sinks.video import VideoSink
    from async_plotter.worker.status import StatusKind

    def on_written(path: str, recording: Any, episodes: int, frames: int, whole: bool) -> None:
        context.status.send(StatusKind.VIDEO,
                            path=path,
                            update=recording.update,
                            iteration=recording.iteration,
                            episodes=episodes,
                            frames=frames,
                            whole=whole)

    return VideoSink(spec.directory,
                     context.fps,
                     on_written,
                     on_encoder=lambda pid: context.status.send(StatusKind.ENCODER, pid=pid),
                     min_frames=int(context.min_video_seconds * context.fps),
                     on_storage=lambda state, directory, free: context.status.send(
                         StatusKind.STORAGE, state=state, directory=directory, free=free))


def _states(spec: Any, context: SinkContext) -> FrameSink:
    from async_plotter.render.sinks.states import LiveStateRecordingSink, StateRecordingSink
    from async_plotter.worker.status import StatusKind

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
    from async_plotter.render.sinks.window import MujocoViewerSink, PixelWindowSink

    title = f"async_plotter: {context.title}"
    return MujocoViewerSink(title) if context.scene_kind == "mujoco" else PixelWindowSink(title)


def _http(spec: HttpSpec, context: SinkContext) -> FrameSink:
    from async_plotter.web.sink import HttpSink

    from async_plotter.worker.status import StatusKind

    return HttpSink(spec.address,
                    lambda url: context.status.send(StatusKind.HTTP, url=url),
                    title=context.title,
                    video_dir=spec.video_dir,
                    view=spec.view,
                    listener=context.http_listener)


def _callback(spec: CallbackSpec, context: SinkContext) -> FrameSink:
    from async_plotter.render.sinks.callback import CallbackSink

    return CallbackSink(pickle.loads(spec.function), fps=context.fps)


def _tensorboard(spec: TensorBoardSpec, context: SinkContext) -> FrameSink:
    from async_plotter.tensorboard.sink import TensorBoardSink

    from async_plotter.worker.status import StatusKind

    def on_written(tag: str, step: int, recording: Any, size: int, frames: int) -> None:
        context.status.send(StatusKind.TENSORBOARD,
                            path=spec.logdir,
                            tag=tag,
                            step=step,
                            update=recording.update,
                            iteration=recording.iteration,
                            bytes=size,
                            frames=frames)

    return TensorBoardSink(spec.logdir,
                           spec.tag or f"rollout/{context.title}",
                           context.fps,
                           scalars=spec.scalars,
                           min_frames=int(context.min_video_seconds * context.fps),
                           on_written=on_written)


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
