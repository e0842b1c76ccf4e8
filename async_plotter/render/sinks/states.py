"""One state recording per recorded video (``render/recording.py``): ``iter_0059.npz`` beside
``iter_0059.mp4``, holding what the rollout process sent rather than what was drawn.

It keeps the same episodes as the video sink (both are ``RecordedSink``s: the first episode of an
update, the short ones chained to it) and asks for no pixels, so it costs a copy of each state.
"""
import errno
import logging
import os
from typing import Any, Callable, Optional

import numpy as np

from async_plotter.render.recording import (SUFFIX, RecordingBuilder, model_to_mjb, write_recording)
from async_plotter.render.sinks.recorded import BOUNDARY_PAUSE_SECONDS, RecordedSink
from async_plotter.render.sinks.video import video_name
from async_plotter.render.stream import EpisodeInfo

logger = logging.getLogger(__name__)

#: ``on_written(path, first_episode, steps, size_in_bytes)``
WrittenCallback = Callable[[str, EpisodeInfo, int, int], None]


def recording_name(episode: EpisodeInfo) -> str:
    """``iter_0059.npz``: the video's name with the recording's suffix."""
    return os.path.splitext(video_name(episode))[0] + SUFFIX


class StateRecordingSink(RecordedSink):
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
        self._playback = dict(playback or {})
        self._on_written = on_written
        self._scene: Any = None
        self._model_mjb = b""
        self._builder: Optional[RecordingBuilder] = None

    def attach(self, scene: Any) -> None:
        self._scene = scene
        if scene is not None:
            self._model_mjb = model_to_mjb(scene.source_model)

    def wants_pixels(self) -> bool:
        return False  # states only

    def _accepting(self) -> bool:
        return self._scene is not None  # envs that draw their own frames have no state

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        if self._recording is None or self._builder is None:
            return
        step = self._scene.step
        if step is None:
            return
        self._builder.add(step.state, step.action, step.reward, self._episodes - 1)
        self._frames += 1

    def _start(self, episode: EpisodeInfo) -> None:
        scene = self._scene
        plan = scene.camera_plan
        self._builder = RecordingBuilder(
            self._model_mjb,
            dict(update=episode.update,
                 iteration=episode.iteration,
                 fps=float(self.fps),
                 stride=int(self._playback.get("stride") or 1),
                 env_rate=self._playback.get("env_rate"),
                 label=self._playback.get("label", ""),
                 camera=plan,
                 camera_id=int(plan["id"]) if plan.get("kind") == "fixed" else -1,
                 width=int(scene.requested_size[0]),
                 height=int(scene.requested_size[1]),
                 size_chosen=bool(scene.size_chosen),
                 quality=scene.quality,
                 preset=scene.preset,
                 pause_seconds=BOUNDARY_PAUSE_SECONDS))

    def _save(self, recording: EpisodeInfo) -> bool:
        builder, self._builder = self._builder, None
        if builder is None or not len(builder):
            return False
        path = os.path.join(self.directory, recording_name(recording))
        try:
            write_recording(path, builder.build())
        except OSError as error:
            # A full device is the video sink's to report, once, for the folder both write to;
            # a warning per recording would repeat it for every video until space comes back.
            log = logger.debug if error.errno == errno.ENOSPC else logger.warning
            log("could not write the state recording %s: %s", path, error)
            return False
        size = os.path.getsize(path)
        logger.info("wrote %s (%d steps, %d bytes)", path, len(builder), size)
        if self._on_written is not None:
            self._on_written(path, recording, len(builder), size)
        return True

    def _drop(self, why: str) -> None:
        self._builder = None
