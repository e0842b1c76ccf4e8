"""Where a started ``Plotter``'s updates go: one small class per route, one interface.

``LocalRoute`` renders here: a shared-memory channel to the worker's two processes, which a
``WorkerSupervisor`` runs; training metrics go straight to the supervisor. ``PublishRoute``
(``Plotter(channel=..., history=False)``) only publishes to Redis, parameters and metrics, for a
viewer elsewhere; ``ShownAndPublishedRoute`` does both, when a channel comes with outputs here
(``video_dir``, a window, a page) or a history to publish. ``open_route`` picks one.
"""
import dataclasses
import logging
import shutil
import tempfile
import time
from typing import Callable, Dict, Optional, Protocol

from async_plotter.channel.base import Update
from async_plotter.channel.shm import SharedMemoryWriter
from async_plotter.console import tell
from async_plotter.trainer.config import PlotterConfig
from async_plotter.supervision.stats import WorkerStats
from async_plotter.supervision.supervisor import WorkerSupervisor

logger = logging.getLogger("async_plotter")

# close() of a publish-only trainer (channel=...): at most this long for the last update to reach
# Redis, whatever the server does (as RedisWriter.close's own default).
_PUBLISH_CLOSE_SECONDS = 2.0


class PlotRoute(Protocol):
    """What a ``Plotter`` does with its updates once started. Nothing here waits for a worker
    but ``close``."""

    #: whether a worker renders in this process's care (the run ends with a summary of videos)
    renders_here: bool

    def publish(self, params: Update, iteration: Optional[int], max_path_length: int) -> None:
        """Make ``params`` the newest update (checked by the caller)."""

    def post_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> bool:
        """Queue training metrics for the live page; False if they break ``metrics_fit``."""

    def close(self, timeout: float, final_video_timeout: float, startup_wait: float = 0.0) -> None:
        """Within ``timeout`` s: a video of the newest parameters where none exists yet (at
        most ``final_video_timeout`` s; 0 skips it), then stop and release everything. A
        worker still starting gets up to ``startup_wait`` s more to finish first."""


class LocalRoute:
    """The worker on this machine: a shared-memory writer and the supervisor of its processes."""

    renders_here = True

    def __init__(self,
                 config: PlotterConfig,
                 stats: WorkerStats,
                 listener: Optional[Callable[[str, dict], None]] = None) -> None:
        self._config = config.worker
        self._verbose = config.verbose
        self._stats = stats
        layout = config.worker.parameters
        self.writer = SharedMemoryWriter(layout.size, layout.dtype)
        # A resumed run's initial policy is its snapshot's: shown as that iteration.
        self.writer.publish(layout.encode(config.initial, config.env_state),
                            config.resume_after,
                            config.worker.max_path_length,
                            number=0)
        try:
            self._supervisor = WorkerSupervisor(config.worker,
                                                self.writer.address,
                                                stats,
                                                max_restarts=config.max_restarts,
                                                hang_timeout=config.hang_timeout,
                                                listener=listener or config.on_event,
                                                verbose=config.verbose)
            self._supervisor.start()
        except BaseException:
            self.writer.close()  # the segment goes now, not at the interpreter's exit
            raise

    def publish(self, params: Update, iteration: Optional[int], max_path_length: int) -> None:
        self.writer.publish(params, iteration, max_path_length)

    def post_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> bool:
        return self._supervisor.post_metrics(iteration, metrics)

    def close(self, timeout: float, final_video_timeout: float, startup_wait: float = 0.0) -> None:
        deadline = time.monotonic() + timeout
        try:
            try:
                if startup_wait > 0 and self._needs_final_video(final_video_timeout):
                    self._wait_for_start_up(startup_wait)
                    deadline = time.monotonic() + timeout  # the limits count from here
                self._record_final_video(min(final_video_timeout, 0.8 * timeout))
            except BaseException:
                self._supervisor.abort()  # Ctrl-C while waiting: wait no longer
                raise
            self._supervisor.stop(max(deadline - time.monotonic(), 0.1))
        finally:
            # Also after a Ctrl-C during the wait above: the segment must not outlive close()
            # (otherwise only the resource tracker, at the interpreter's exit, removes it).
            self.writer.close(max(deadline - time.monotonic(), 0.1))

    def _needs_final_video(self, timeout: float) -> bool:
        """Whether the final policy still needs its video, or its history recording."""
        supervisor, published = self._supervisor, self.writer.published
        records, history = self._config.records, supervisor.keeps_history
        missing = ((records and supervisor.newest_video_update < published)
                   or (history and supervisor.newest_history_update < published))
        return timeout > 0 and not self._stats.disabled and missing

    def _wait_for_start_up(self, timeout: float) -> None:
        """A run shorter than the worker's start-up (TensorFlow's import, the policy's rebuild:
        seconds, more on a busy machine) still gets its final video: the final video's time
        limit counts from when the worker is ready."""
        if self._supervisor.wait_until_ready(0.5):
            return
        tell(
            logger, self._verbose, "close(): the plot worker is still starting; waiting up to "
            "%.0f s for it to record the final policy's video", timeout)
        self._supervisor.wait_until_ready(timeout)

    def _record_final_video(self, timeout: float) -> None:
        """The final policy's video, and its history recording (cheaper: a whole episode
        simulated, not drawn, beside the video), within ``timeout``."""
        writer, supervisor = self.writer, self._supervisor
        video_made = self._config.records and supervisor.final_video_exists(writer.published)
        if video_made and not (supervisor.keeps_history
                               and supervisor.newest_history_update < writer.published):
            return  # a calm end: the newest update's video was made while training
        if not self._needs_final_video(timeout):
            return
        if self._config.records and not video_made:
            writer.request_final()
        started = time.monotonic()
        if supervisor.wait_for_final_video(writer.published, timeout, video=not video_made):
            logger.debug("final video after %.1f s", time.monotonic() - started)
        elif self._stats.video_dir_full:
            logger.info("close(): no video of the final policy: no space left on the device "
                        "for the videos")
        elif not self._stats.disabled:
            video_missing = (not video_made
                             and supervisor.newest_whole_video_update < writer.published)
            what = "video" if self._config.records and video_missing else "history recording"
            logger.warning(
                "close(): the %s of the final policy was not finished within %.3g s; what "
                "was recorded of it is kept. Raise final_video_timeout= (or close(timeout=)) "
                "to wait longer.", what, timeout)


class PublishRoute:
    """A publish-only trainer: parameters and metrics go to Redis; a viewer elsewhere renders."""

    renders_here = False

    def __init__(self,
                 config: PlotterConfig,
                 stats: WorkerStats,
                 live_states: bool = False,
                 history_states: bool = False) -> None:
        from async_plotter.channel.redis.writer import RedisWriter

        target, layout = config.publish, config.worker.parameters
        self.writer = RedisWriter(target.url,
                                  target.experiment,
                                  config.worker,
                                  layout.size,
                                  layout.dtype,
                                  target.secret,
                                  stats,
                                  live_states=live_states,
                                  history_states=history_states,
                                  resumes_after=config.resume_after)
        # A resumed run's initial policy is its snapshot's: shown as that iteration.
        self.writer.publish(layout.encode(config.initial, config.env_state),
                            config.resume_after,
                            config.worker.max_path_length,
                            number=0)

    def publish(self, params: Update, iteration: Optional[int], max_path_length: int) -> None:
        self.writer.publish(params, iteration, max_path_length)

    def post_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> bool:
        return self.writer.post_metrics(iteration, metrics)

    def close(self, timeout: float, final_video_timeout: float, startup_wait: float = 0.0) -> None:
        # No video to wait for: the last update gets what is left, and a Redis server that never
        # answers must not hold the trainer longer than the writer's own bound.
        self.writer.close(min(max(timeout, 0.1), _PUBLISH_CLOSE_SECONDS))


class ShownAndPublishedRoute:
    """``Plotter(channel=..., video_dir=...)`` (or a window, a page): the worker here shows every
    update, and Redis carries it to viewers elsewhere as well, with the run's history recordings
    (``channel/redis/states.py``: a viewer draws them without the policy). A trainer that only
    publishes runs this route too, with no outputs here: its worker only records the history,
    in a private folder removed at close, and runs no episode for nobody."""

    def __init__(self, config: PlotterConfig, stats: WorkerStats) -> None:
        #: the closing summary tells of videos and pages only where some output is here
        self.renders_here = bool(config.worker.sinks)
        self._private_dir: Optional[str] = None
        if config.private_history:
            self._private_dir = tempfile.mkdtemp(prefix="async_plotter_history_")
            config = dataclasses.replace(config,
                                         worker=dataclasses.replace(config.worker,
                                                                    history_dir=self._private_dir))
        # A MuJoCo env's worker plays the live episode for viewers elsewhere (while one
        # watches), and publishes its history (an env that draws itself keeps returns alone),
        # and says so in the structure.
        publishes_history = config.worker.history_dir is not None and config.has_states
        self._published = PublishRoute(config,
                                       stats,
                                       live_states=config.has_states,
                                       history_states=publishes_history)
        target = self._published.writer.run_target()
        if config.has_states:
            config = dataclasses.replace(config,
                                         worker=dataclasses.replace(config.worker,
                                                                    live_target=target))
        self._recordings = None
        if publishes_history:
            from async_plotter.channel.redis.states import RecordingPublisher

            self._recordings = RecordingPublisher(target, config.worker.history_kept)
        user = config.on_event
        recordings = self._recordings

        def listener(kind: str, payload: dict) -> None:
            if recordings is not None and kind == "history":
                recordings.add_report(payload)
            if user is not None:
                user(kind, payload)

        try:
            self._local = LocalRoute(config, stats, listener)
        except BaseException:
            self._close_published(0.1)
            self._remove_private_dir()
            raise

    def publish(self, params: Update, iteration: Optional[int], max_path_length: int) -> None:
        self._local.publish(params, iteration, max_path_length)
        self._published.publish(params, iteration, max_path_length)

    def post_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> bool:
        shown = self._local.post_metrics(iteration, metrics)
        return self._published.post_metrics(iteration, metrics) and shown

    def close(self, timeout: float, final_video_timeout: float, startup_wait: float = 0.0) -> None:
        # The final video (and the final policy's recording) first: the sender thread has had the
        # last update since update_plot.
        deadline = time.monotonic() + timeout + startup_wait
        try:
            self._local.close(timeout, final_video_timeout, startup_wait)
        except BaseException:
            self._close_published(0.1)  # Ctrl-C: wait no longer
            raise
        self._close_published(max(deadline - time.monotonic(), 0.1))

    def _close_published(self, timeout: float) -> None:
        deadline = time.monotonic() + min(timeout, _PUBLISH_CLOSE_SECONDS)
        if self._recordings is not None:
            self._recordings.close(deadline - time.monotonic())
        self._published.close(max(deadline - time.monotonic(), 0.1), 0.0)
        self._remove_private_dir()

    def _remove_private_dir(self) -> None:
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)


def open_route(config: PlotterConfig, stats: WorkerStats) -> PlotRoute:
    """Start the route ``config`` asks for, its initial policy published."""
    if config.publish is None:
        return LocalRoute(config, stats)
    if config.worker.sinks or config.private_history:
        return ShownAndPublishedRoute(config, stats)
    return PublishRoute(config, stats)
