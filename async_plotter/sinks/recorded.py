"""``RecordedSink``: the base of the sinks that keep one recording per update (an mp4 file, a
TensorBoard image).

Which episodes make a recording is decided here, once for all of them. The first episode of an
update starts a recording; the short episodes of the same update that follow it (``part > 0``)
are chained into it, a still between each; replays of an update already kept are skipped and ask
for no pixels, except the final policy's retake (``EpisodeInfo.retake``), which replaces its clip;
a recording whose rollout failed, or one cut short by newer parameters below ``min_frames``
frames, is discarded. A subclass says only how frames are kept: ``_start``,
``_add``, ``_pause``, ``_save`` and ``_drop``.
"""
from typing import Optional

import numpy as np

from async_plotter.sinks.base import FrameSink
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo

#: the still shown where one chained episode ends and the next begins, in seconds
BOUNDARY_PAUSE_SECONDS = 0.3


class RecordedSink(FrameSink):
    """Records the first episode of each update it sees, with the short episodes chained to it;
    replays of an update already kept are skipped."""

    def __init__(self, fps: float, min_frames: int = 0) -> None:
        self.fps = fps
        # A recording cut short (newer parameters arrived) below this many frames is a fragment,
        # not a recording; one that ended by itself is kept whatever its length.
        self._min_frames = min_frames
        self._recording: Optional[EpisodeInfo] = None
        #: episodes in the recording so far (1 + the ones chained to it)
        self._episodes = 0
        #: frames in the recording so far (the stills between chained episodes not counted)
        self._frames = 0
        self._last_kept_update = -1
        #: an episode of the recording has begun and not ended
        self._episode_open = False
        #: the recording being saved stops before its rollout ended (it was closed mid-episode:
        #: ``close()`` of the plotter, the worker stopping); ``_save`` may read it
        self.cut_short = False
        #: the recording's last episode stopped while the episode went on (the video's length,
        #: newer parameters): a clip of it; ``_save`` may read it
        self.clipped = False
        self._last_clipped = False

    def wants_real_time(self) -> bool:
        return False  # kept, not shown: frames may come ahead of time

    def wants_pixels(self) -> bool:
        # A replay of an update already kept needs no pixels from this sink.
        return self._recording is not None and self._accepting()

    def keeps_every_step(self) -> bool:
        return self._recording is not None  # a replay of an update already kept is not

    def begin_episode(self, episode: EpisodeInfo) -> None:
        if self._recording is not None and episode.part > 0 \
                and episode.update == self._recording.update:
            self._episodes += 1  # chained into the recording
            self._episode_open = True
            return
        self._finish()  # an episode that never got its end message
        replay = episode.update == self._last_kept_update and not episode.retake
        if replay or not self._accepting():
            return
        self._recording = episode
        self._episodes, self._frames, self._last_clipped = 1, 0, False
        self._episode_open = True
        self._start(episode)

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        if self._recording is None or frame is None:
            return
        self._add(frame)
        self._frames += 1

    def end_episode(self, episode: EpisodeInfo, end: EpisodeEnd) -> None:
        if self._recording is None:
            return
        self._episode_open = False
        self._last_clipped = end.clipped or not end.completed
        if end.failed:
            self._discard("its rollout failed")
        elif not end.completed and self._frames < self._min_frames and self._episodes == 1:
            self._discard(f"cut short after {self._frames} frames by newer parameters")
        elif end.continued:
            self._pause(BOUNDARY_PAUSE_SECONDS)
        else:
            self._finish()

    def close(self) -> None:
        self._finish()

    def cut_here(self) -> None:
        """Keep the recording as it is now, cut short (not ``whole``: its rollout went on), and
        nothing more of it: training ended while it was drawn (``worker/render_process.py``)."""
        self._finish()

    def drop_here(self, why: str) -> None:
        """Keep nothing of the recording (``why`` says why): what replaces it comes next (the
        final policy's whole episode, ``EpisodeInfo.retake``, replaces a clip of it)."""
        if self._recording is not None:
            self._discard(why)

    def _finish(self) -> None:
        if self._recording is None:
            return
        recording, self._recording = self._recording, None
        self.cut_short, self._episode_open = self._episode_open, False
        self.clipped = self._last_clipped and not self.cut_short
        if self._save(recording):
            self._last_kept_update = recording.update

    def _discard(self, why: str) -> None:
        self._recording = None
        self._episode_open = False
        self._drop(why)

    # ------------------------------------------------------------------ what a subclass says

    def _accepting(self) -> bool:
        """Whether new recordings may start (False, e.g., once the output is unwritable)."""
        return True

    def _start(self, episode: EpisodeInfo) -> None:
        """A recording of ``episode``'s update begins."""

    def _add(self, frame: np.ndarray) -> None:
        """One frame of the recording (``self._frames`` frames came before it)."""

    def _pause(self, seconds: float) -> None:
        """A still of ``seconds`` where a chained episode begins."""

    def _save(self, recording: EpisodeInfo) -> bool:
        """The recording is over: keep it; whether it was kept (a replay of its update is then
        skipped; one not kept, e.g. without frames, is recorded again)."""
        return False

    def _drop(self, why: str) -> None:
        """The recording is discarded (``why`` says why): keep nothing of it."""
