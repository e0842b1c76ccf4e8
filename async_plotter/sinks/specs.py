"""Where rendered frames go: sink *specs*, built in the trainer.

A spec is small, picklable, checked data (a folder, an address, a pickled user object) that
travels inside ``WorkerConfig.sinks`` to the render process only, where
``worker/sink_builders.py`` turns each into its :class:`~async_plotter.sinks.base.FrameSink`
through one registry keyed by the spec's type. Adding a kind of output is one spec class here,
one sink in this room and one builder there; the rollout process never sees any of it.

Whether the worker runs *live* (replays the newest policy continuously, for somebody watching)
or *records* (one rollout per update) follows from the specs alone: :func:`wants_live`.
"""
import dataclasses
from typing import Any, Iterable, Optional

__all__ = [
    "SinkSpec", "VideoSpec", "StatesSpec", "LiveStatesSpec", "WindowSpec", "HttpSpec",
    "CallbackSpec", "UserSinkSpec", "TensorBoardSpec", "wants_live", "records"
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
    """mp4 files in ``directory`` (``sinks/video.py``)."""

    directory: str
    records = True


@dataclasses.dataclass(frozen=True)
class StatesSpec(SinkSpec):
    """A state recording beside each video in ``directory`` (``sinks/states.py``)."""

    directory: str
    records = True
    draws = False


@dataclasses.dataclass(frozen=True)
class LiveStatesSpec(SinkSpec):
    """A state recording of every episode a live view shows, in ``directory``'s ``live``
    folder (``Plotter(record_states=True)``; ``sinks/states.py``)."""

    directory: str
    records = True
    draws = False


@dataclasses.dataclass(frozen=True)
class WindowSpec(SinkSpec):
    """A window on the display (``sinks/window.py``)."""

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
    (``sinks/tensorboard.py``; written without TensorFlow)."""

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


def wants_live(specs: Iterable[SinkSpec]) -> bool:
    """The one rule for live mode: somebody may be watching (a window, a page)."""
    return any(spec.live for spec in specs)


def records(specs: Iterable[SinkSpec]) -> bool:
    """Whether rollouts are kept (mp4 files, TensorBoard images): then no step may be dropped."""
    return any(spec.records for spec in specs)
