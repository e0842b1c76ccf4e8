"""State recordings (``render/recording.py``) of what the render process was sent, not of what was
drawn: they ask for no pixels and cost a copy of each state.

* ``StateRecordingSink``: one per recorded video, ``iter_0059.npz`` beside ``iter_0059.mp4``. It
  keeps the same episodes as the video sink (both are ``RecordedSink``s: the first episode of an
  update, the short ones chained to it).
* ``LiveStateRecordingSink`` (``Plotter(record_states=True)``): every episode a live view shows,
  one file each in ``<video_dir>/live/``, ``ep_000123_iter_0059.npz`` (a number that goes on
  across worker restarts, then the policy's; a new run sets the folder aside:
  ``trainer/run_folder.py``), the newest
  ``LIVE_RECORDINGS_KEPT`` kept.
"""
import collections
import errno
import logging
import os
from typing import Any, Callable, Deque, Dict, Optional, Tuple

import numpy as np

from async_plotter.render.partial_files import remove_abandoned
from async_plotter.render.recording import RecordingBuilder, model_to_mjb, write_recording
from async_plotter.sinks.base import FrameSink, ShownStep
from async_plotter.sinks.recorded import BOUNDARY_PAUSE_SECONDS, RecordedSink
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo
from async_plotter.render.videos import (LIVE_RECORDING_NAME, live_recording_name, recording_name)

logger = logging.getLogger(__name__)

#: ``on_written(path, first_episode, steps, size_in_bytes, whole)``: ``whole`` is False for a
#: recording that stops before its rollout ended (the worker stopped mid-episode)
WrittenCallback = Callable[[str, EpisodeInfo, int, int, bool], None]
#: the live episodes' recordings kept (the newest): a live view replays episodes for as long as
#: training runs; 100 HalfCheetah episodes of 1000 steps take ~17 MB (~3 KB a second of motion
#: and ~18 KB of model each)
LIVE_RECORDINGS_KEPT = 100
#: the folder of the live episodes' recordings, inside the video folder
LIVE_FOLDER = "live"


class _StepCopies:
    """What both sinks here share: the scene whose steps they copy, its model as MJB (kept in
    every recording), how the scene plays, and whom to tell of each file written."""

    fps: float

    def _copy_steps(self, playback: Optional[dict], on_written: Optional[WrittenCallback]) -> None:
        self._playback = dict(playback or {})
        self._on_written = on_written
        self._scene: Any = None
        self._model_mjb = b""
        self._builder: Optional[RecordingBuilder] = None

    def attach(self, scene: Any) -> None:
        self._scene = scene
        if scene is not None:  # envs that draw their own frames have no state to record
            self._model_mjb = model_to_mjb(scene.source_model)

    def wants_pixels(self) -> bool:
        return False  # states only

    def _begin(self, episode: EpisodeInfo, **meta: Any) -> None:
        """A recording of ``episode`` begins."""
        self._builder = RecordingBuilder(
            self._model_mjb,
            dict(recording_meta(self._scene, episode, self.fps, self._playback), **meta))

    def _keep(self, step: ShownStep, part: int) -> bool:
        """Copy ``step`` into the recording being made, as of episode ``part`` of it; whether
        there was one to copy it into (and a state to copy)."""
        if self._builder is None or step.state is None:
            return False
        self._builder.add(step.state.state, step.state.action, step.state.reward, part)
        return True


class StateRecordingSink(_StepCopies, RecordedSink):
    """Writes a state recording of each rollout a video is made of (MuJoCo scenes only).

    Args:
        directory: where the videos go.
        fps: the videos' frame rate.
        playback: ``stride`` and ``env_rate`` of the scene (kept in the recording).
        on_written: told about each complete file.
        min_frames: as the video sink's (a fragment is not kept).
    """

    def __init__(self,
                 directory: str,
                 fps: float,
                 playback: Optional[dict] = None,
                 on_written: Optional[WrittenCallback] = None,
                 min_frames: int = 0) -> None:
        super().__init__(fps, min_frames)
        self.directory = directory
        self._copy_steps(playback, on_written)

    def _accepting(self) -> bool:
        return self._scene is not None  # envs that draw their own frames have no state

    def add_step(self, frame: Optional[np.ndarray], step: ShownStep) -> None:
        if self._keep(step, self._episodes - 1):  # a recording is being made
            self._frames += 1

    def _start(self, episode: EpisodeInfo) -> None:
        self._begin(episode)

    def _save(self, recording: EpisodeInfo) -> bool:
        builder, self._builder = self._builder, None
        if builder is None or not len(builder):
            return False
        path = os.path.join(self.directory, recording_name(recording))
        size = write_logged(path, builder)
        if size is None:
            return False
        if self._on_written is not None:
            self._on_written(path, recording, len(builder), size, not self.cut_short)
        return True

    def _drop(self, why: str) -> None:
        self._builder = None


def recording_meta(scene: Any, episode: EpisodeInfo, fps: float,
                   playback: Dict[str, Any]) -> Dict[str, Any]:
    """What a recording of ``episode`` says besides its steps: the policy, and how the video
    was framed and played."""
    plan = scene.camera_plan
    return dict(update=episode.update,
                iteration=episode.iteration,
                fps=float(fps),
                stride=int(playback.get("stride") or 1),
                env_rate=playback.get("env_rate"),
                label=playback.get("label", ""),
                camera=plan,
                camera_id=int(plan["id"]) if plan.get("kind") == "fixed" else -1,
                width=int(scene.requested_size[0]),
                height=int(scene.requested_size[1]),
                size_chosen=bool(scene.size_chosen),
                quality=scene.quality,
                preset=scene.preset,
                pause_seconds=BOUNDARY_PAUSE_SECONDS)


def write_logged(path: str, builder: RecordingBuilder) -> Optional[int]:
    """Write ``builder``'s recording to ``path`` (whole, then renamed); its size, or None if it
    could not be written (logged)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_recording(path, builder.build())
    except OSError as error:
        # A full device is the video sink's to report, once, for the folder both write to;
        # a warning per recording would repeat it for every video until space comes back.
        log = logger.debug if error.errno == errno.ENOSPC else logger.warning
        log("could not write the state recording %s: %s", path, error)
        return None
    size = os.path.getsize(path)
    logger.info("wrote %s (%d steps, %d bytes)", path, len(builder), size)
    return size


class LiveStateRecordingSink(_StepCopies, FrameSink):
    """Writes a state recording of every episode shown live (MuJoCo scenes only): one file per
    episode in ``<directory>/live/``, numbered on from the newest already there; beyond
    ``keep`` files the oldest are deleted. An episode whose rollout failed is not kept; one cut
    short (newer parameters, or the worker stopping) is, as far as it was shown.

    Args:
        directory: where the videos go (the recordings go to its ``live`` folder).
        fps: the videos' frame rate.
        playback: ``stride``, ``env_rate`` and ``label`` of the scene (kept in each recording).
        on_written: told about each complete file.
        keep: how many recordings are kept, the newest.
    """

    def __init__(self,
                 directory: str,
                 fps: float,
                 playback: Optional[dict] = None,
                 on_written: Optional[WrittenCallback] = None,
                 keep: int = LIVE_RECORDINGS_KEPT) -> None:
        self.directory = os.path.join(directory, LIVE_FOLDER)
        self.fps = fps
        self.keep = keep
        self._copy_steps(playback, on_written)
        self._episode: Optional[EpisodeInfo] = None
        #: ``(number, name)`` of the recordings kept, oldest first
        self._kept: Deque[Tuple[int, str]] = collections.deque()
        self._next = 0

    def attach(self, scene: Any) -> None:
        super().attach(scene)
        remove_abandoned(self.directory)  # a killed writer's (the video sink sees to its folder)
        try:
            names = os.listdir(self.directory)
        except OSError:
            names = []
        found = sorted((int(match[1]), name) for name in names
                       for match in [LIVE_RECORDING_NAME.fullmatch(name)] if match)
        self._kept.extend(found)
        self._next = found[-1][0] + 1 if found else 0

    def begin_episode(self, episode: EpisodeInfo) -> None:
        self._finish(None)  # an episode that never got its end message
        if self._scene is not None:
            self._episode = episode
            self._begin(episode, live=True)

    def keeps_every_step(self) -> bool:
        return self._builder is not None  # the episode as sent, also what a live view skipped

    def add_step(self, frame: Optional[np.ndarray], step: ShownStep) -> None:
        self._keep(step, 0)

    def end_episode(self, episode: EpisodeInfo, end: EpisodeEnd) -> None:
        if end.failed:
            self._builder = self._episode = None
        else:
            self._finish(end)

    def close(self) -> None:
        self._finish(None)

    def _finish(self, end: Optional[EpisodeEnd]) -> None:
        builder, episode = self._builder, self._episode
        self._builder = self._episode = None
        if builder is None or episode is None or len(builder) < 2:
            return  # nothing moved
        builder.meta.update(completed=bool(end and end.completed),
                            total_reward=None if end is None else float(end.total_reward))
        number, self._next = self._next, self._next + 1
        name = live_recording_name(number, episode)
        path = os.path.join(self.directory, name)
        size = write_logged(path, builder)
        if size is None:
            return
        self._kept.append((number, name))
        while len(self._kept) > self.keep:
            _, old = self._kept.popleft()
            try:
                os.remove(os.path.join(self.directory, old))
            except OSError as error:
                logger.debug("cannot remove %s: %s", old, error)
        if self._on_written is not None:
            self._on_written(path, episode, len(builder), size, end is not None)
