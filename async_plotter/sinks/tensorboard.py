"""``TensorBoardSink``: each recorded rollout as an animated image in TensorBoard's Images tab.

It runs in the render process, which never imports TensorFlow: the event file is written by
:class:`~async_plotter.tensorboard.writer.SummaryWriter` (tensorboardX's framing, Pillow's GIF).
"""
import logging
import time
from typing import Callable, Dict, Optional

import numpy as np

from async_plotter.render.history import HISTORY_LENGTH_TAG, HISTORY_RETURN_TAG, HistoryPoint
from async_plotter.sinks.recorded import RecordedSink
from async_plotter.render.stream import EpisodeInfo
from async_plotter.render.videos import EVENTS_SUFFIX
from async_plotter.tensorboard.gif import FrameReel
from async_plotter.tensorboard.writer import SummaryWriter

logger = logging.getLogger(__name__)

#: ``on_written(tag, step, recording, size_bytes, frames, clipped)``: ``clipped`` as for videos
WrittenCallback = Callable[[str, int, EpisodeInfo, int, int, bool], None]

#: seconds a sink that failed to write collects no rollout before it tries again
RETRY_SECONDS = 30.0

#: the TensorBoard step of the initial policy's rollout (``Plotter()``'s policy, update 0)
INITIAL_POLICY_STEP = -1


def rollout_step(episode: EpisodeInfo) -> int:
    """The TensorBoard step of a rollout: its iteration, else its update number; the initial
    policy's (update 0, no iteration) is at ``INITIAL_POLICY_STEP``, before iteration 0's (at
    step 0 both, one hid the other)."""
    if episode.iteration is not None:
        return episode.iteration
    return INITIAL_POLICY_STEP if episode.update == 0 else episode.update


class TensorBoardSink(RecordedSink):
    """Writes the first rollout of each update (with the short episodes chained to it) as one
    animated GIF image summary at step :func:`rollout_step`, tag ``tag``; it keeps and drops what
    the video sink does (both are ``RecordedSink``s).

    Args:
        logdir: the folder of the event file (created when the first summary is written).
        tag: the images' tag, e.g. ``"rollout/Swimmer-v5"``.
        fps: the rate of the rollout's frames, for playback speed.
        scalars: also write the metrics of ``update_plot(..., metrics=...)`` as scalars (off
            where the trainer writes its own, as ``run_experiment_lite`` does).
        min_frames: shorter recordings cut short by newer parameters are dropped.
        on_written: called after each image is written.

    A failure to write (a full device) is logged once; the sink then collects no rollout for
    ``RETRY_SECONDS`` and tries again, so the summaries resume by themselves; the other sinks
    carry on meanwhile. An event file removed meanwhile is followed by a new one.
    """

    def __init__(self,
                 logdir: str,
                 tag: str,
                 fps: float,
                 *,
                 scalars: bool = False,
                 min_frames: int = 0,
                 on_written: Optional[WrittenCallback] = None) -> None:
        super().__init__(fps, min_frames)
        self.logdir = logdir
        self.tag = tag
        self.scalars = scalars
        self._on_written = on_written
        self._writer: Optional[SummaryWriter] = None
        #: when a sink that failed to write tries again (time.monotonic()); None: it did not fail
        self._retry_at: Optional[float] = None
        self._reel: Optional[FrameReel] = None
        self._metrics_seen = 0
        #: images written so far
        self.written = 0

    def fit(self, tag: str, fps: float, min_frames: int) -> None:
        """The rollouts' tag, frame rate and shortest length, once the scene is known (the
        sink starts before it, for the trainer's curves: ``worker/sink_builders.EARLY``)."""
        self.tag, self.fps, self._min_frames = tag, fps, min_frames

    def _accepting(self) -> bool:
        return self._retry_at is None or time.monotonic() >= self._retry_at

    def _start(self, episode: EpisodeInfo) -> None:
        self._reel = FrameReel(self.fps)

    def _add(self, frame: np.ndarray) -> None:
        self._reel.add(frame)

    def _pause(self, seconds: float) -> None:
        self._reel.hold(seconds)  # the still between chained episodes

    def on_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> None:
        if not self.scalars:
            return
        # Metrics sent without an iteration are numbered in the order they arrive.
        step = iteration if iteration is not None else self._metrics_seen
        self._metrics_seen += 1
        self._write(lambda writer: writer.add_scalars(step, metrics))

    def on_history(self, point: HistoryPoint) -> None:
        """The return and length of a history recording, as scalars ``history/return`` and
        ``history/length`` at the policy's step (``rollout_step``: its iteration), beside the
        training curve; with ``scalars`` only: ``run_experiment_lite``'s trainer writes
        ``history/return`` itself."""
        if not self.scalars:
            return
        step = rollout_step(EpisodeInfo(point.update, point.iteration, 0))
        values = {HISTORY_RETURN_TAG: point.episode_return, HISTORY_LENGTH_TAG: point.length}
        self._write(lambda writer: writer.add_scalars(step, values))

    def close(self) -> None:
        super().close()
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except OSError as error:
                logger.warning("closing the TensorBoard event file %s failed: %s", writer.path,
                               error)

    def _save(self, recording: EpisodeInfo) -> bool:
        reel, self._reel = self._reel, None
        if reel is None or not len(reel):
            return False
        step = rollout_step(recording)
        started = time.process_time()
        size = self._write(lambda writer: writer.add_reel(self.tag, step, reel))
        if size is None:
            return False
        self.written += 1
        logger.info("TensorBoard: %s at step %d, %d frames of %dx%d, %.0f KB (%.0f ms of CPU)",
                    self.tag, step, len(reel), *reel.frames[0].size, size / 1024,
                    1000 * (time.process_time() - started))
        if self._on_written is not None:
            self._on_written(self.tag, step, recording, size, len(reel), self.clipped)
        return True

    def _drop(self, why: str) -> None:
        self._reel = None
        logger.info("TensorBoard: dropped the rollout being collected: %s", why)

    def _write(self, write: Callable[[SummaryWriter], int]) -> Optional[int]:
        try:
            if self._writer is None:
                self._writer = SummaryWriter(self.logdir, filename_suffix=EVENTS_SUFFIX)
            reopened = self._writer.reopened
            size = write(self._writer)
        except OSError as error:
            if self._retry_at is None:
                logger.warning(
                    "TensorBoard: cannot write into %s (%s); its summaries resume by themselves "
                    "once it can", self.logdir, error)
            self._retry_at = time.monotonic() + RETRY_SECONDS
            return None
        if self._writer.reopened > reopened:
            logger.warning("TensorBoard: the event file in %s was removed; writing a new one",
                           self.logdir)
        if self._retry_at is not None:
            self._retry_at = None
            logger.info("TensorBoard: writing into %s again", self.logdir)
        return size
