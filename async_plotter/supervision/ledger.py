"""What the worker has delivered: the videos it wrote, whether one shows the final policy, and
the run's history recordings.

Kept by the supervisor's thread (``record``) and read by the trainer's (``wait_for``, from
``Plotter.close()``), hence the condition variable.
"""
import threading
import time
from typing import Any, Callable, Dict, Optional

from async_plotter.supervision.stats import WorkerStats

#: how many videos ``stats["video_log"]`` remembers (the newest)
VIDEO_LOG_LENGTH = 1000
_LOGGED_KEYS = ("path", "update", "iteration", "episodes", "frames", "whole", "clipped", "time")


class VideoLedger:
    """Counts kept rollouts into the stats record (``videos``, ``last_video``, ``video_log``,
    ``final_video``; ``tensorboard_images``; ``state_recordings``, ``final_state_recording``;
    ``history``) and lets the trainer wait for a rollout of an update (an mp4 or a TensorBoard
    image, whichever comes first; and its history recording)."""

    def __init__(self, stats: WorkerStats) -> None:
        self._stats = stats
        self._written = threading.Condition()
        self._newest_update = -1
        #: the newest update a kept rollout shows that is no clip of its episode
        self._newest_whole_update = -1
        #: the newest mp4 and the update it shows
        self._newest_video: Optional[str] = None
        self._newest_video_update = -1
        #: the newest whole state recording beside a video, and the update it shows
        self._newest_states: Optional[str] = None
        self._newest_states_update = -1
        #: the newest update the history has recorded (-1: none yet)
        self.newest_history_update = -1
        #: the update the final video must show (or a newer one); None until training is over
        self.final_update: Optional[int] = None

    @property
    def newest_update(self) -> int:
        """The newest update a kept rollout shows (-1: none yet)."""
        return self._newest_update

    @property
    def newest_whole_update(self) -> int:
        """The newest update a kept rollout shows that is no clip of its episode (-1: none)."""
        return self._newest_whole_update

    def record(self, payload: Dict[str, Any]) -> None:
        """A video report from the render process. A file written again (the final policy's
        whole episode after its clip, ``EpisodeInfo.retake``) replaces its entry."""
        stats = self._stats
        entry = {key: payload.get(key) for key in _LOGGED_KEYS}
        log = [old for old in stats.video_log if old["path"] != entry["path"]]
        new_file = len(log) == len(stats.video_log)
        stats.update(videos=stats.videos + new_file,
                     last_video=payload["path"],
                     video_log=(log + [entry])[-VIDEO_LOG_LENGTH:])
        with self._written:
            update = payload.get("update")
            self._kept(update, payload.get("clipped", False))
            if update is not None and update >= self._newest_video_update:
                self._newest_video, self._newest_video_update = payload["path"], update
            self._mark_final()
            self._written.notify_all()

    def record_states(self, payload: Dict[str, Any]) -> None:
        """A state recording's report from the render process (beside a video, or live)."""
        stats = self._stats
        if payload.get("live"):
            stats.update(live_state_recordings=stats.live_state_recordings + 1)
            return
        # The final policy's retake rewrites its clip's file: still one recording.
        new_file = payload["path"] != stats.last_state_recording
        stats.update(state_recordings=stats.state_recordings + new_file,
                     last_state_recording=payload["path"])
        update = payload.get("update")
        with self._written:
            if payload.get("whole", True) and update is not None \
                    and update >= self._newest_states_update:
                self._newest_states, self._newest_states_update = payload["path"], update
            self._mark_final()

    def record_history(self, payload: Dict[str, Any]) -> Dict[str, Any]:
        """A history recording's report from the rollout process; the entry kept. A policy
        recorded again (by a restarted worker) replaces its entry."""
        stats = self._stats
        entry = {
            "iteration": payload.get("iteration"),
            "update": payload["update"],
            "return": payload.get("episode_return"),
            "length": payload.get("length"),
            "path": payload.get("path"),
            "time": payload.get("time"),
            "cpu_seconds": payload.get("cpu_seconds"),  # simulating and writing it
        }
        log = [old for old in stats.history if old["update"] != entry["update"]]
        stats.update(history=(log + [entry])[-VIDEO_LOG_LENGTH:])
        with self._written:
            self.newest_history_update = max(self.newest_history_update, entry["update"])
            self._written.notify_all()
        return entry

    def record_image(self, payload: Dict[str, Any]) -> None:
        """A TensorBoard image report: a kept rollout too (it may be the final one)."""
        self._stats.tensorboard_images += 1
        with self._written:
            self._kept(payload.get("update"), payload.get("clipped", False))
            self._written.notify_all()

    def _kept(self, update: Optional[int], clipped: bool) -> None:
        if update is None:
            return
        self._newest_update = max(self._newest_update, update)
        if not clipped:
            self._newest_whole_update = max(self._newest_whole_update, update)

    def _newest(self, clips: bool) -> int:
        return self._newest_update if clips else self._newest_whole_update

    def ask_for_final(self, update: int, clips: bool = True) -> bool:
        """Training is over at ``update``; True if a video of it (or newer) already exists
        (with ``clips=False``, one that is no clip of its episode)."""
        with self._written:
            self.final_update = update
            self._mark_final()  # the common case: training ended calmly, its video is there
            return self._newest(clips) >= update

    def _mark_final(self) -> None:
        if self.final_update is None:
            return
        if self._newest_video_update >= self.final_update:
            self._stats.final_video = self._newest_video
        if self._newest_states_update >= self.final_update:
            self._stats.final_state_recording = self._newest_states

    def wait_for(self,
                 update: int,
                 timeout: float,
                 give_up: Callable[[], bool],
                 history: bool = False,
                 video: bool = True,
                 clips: bool = True) -> bool:
        """Wait up to ``timeout`` s for a video of ``update`` or newer (``video=False``: none is
        made here; ``clips=False``: one that is no clip of its episode) and, with ``history``,
        its history recording; stop early once ``give_up()`` (the worker is disabled or gone).
        True once they exist."""
        deadline = time.monotonic() + timeout
        with self._written:
            while ((video and self._newest(clips) < update)
                   or (history and self.newest_history_update < update)):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or give_up():
                    return False
                self._written.wait(min(remaining, 0.5))
        return True
