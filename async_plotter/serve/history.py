"""The recorded videos of each experiment: ``<record_dir>/<experiment>/iter_NNNN.mp4``, each with
its state recording beside it where the env is MuJoCo's (``iter_NNNN.npz``, replayed in 3D).

Only names the video sink writes are listed and served (``render/videos.py``; its hidden
temporary files never), from a folder named by a valid experiment name, so a request can never
reach another file. ``MAX_VIDEOS`` per experiment are kept: beyond that the oldest
(but the first, which shows where training started) are deleted.
"""
import logging
import os
from typing import List, Optional

from async_plotter.channel.redis.wire import valid_experiment
from async_plotter.render.videos import Video, list_videos, video_path

logger = logging.getLogger("async_plotter")

#: videos kept per experiment
MAX_VIDEOS = 200


class History:
    """Lists, serves and prunes the videos under ``root``."""

    def __init__(self, root: str, max_videos: int = MAX_VIDEOS) -> None:
        self.root = os.path.abspath(root)
        self.max_videos = max_videos

    def folder(self, experiment: str) -> str:
        """Where the experiment's videos go (``ValueError`` for an invalid name)."""
        if not valid_experiment(experiment):
            raise ValueError(f"not an experiment name: {experiment!r}")
        return os.path.join(self.root, experiment)

    def videos(self, experiment: str) -> List[Video]:
        """The experiment's finished videos, by kind then number."""
        try:
            folder = self.folder(experiment)
        except ValueError:
            return []
        return list_videos(folder)

    def path(self, experiment: str, name: str, recording: bool = False) -> Optional[str]:
        """The file to serve for a request, or None if there is no such video (``recording``:
        no such state recording)."""
        try:
            folder = self.folder(experiment)
        except ValueError:
            return None
        return video_path(folder, name, recording)

    def prune(self, experiment: str) -> int:
        """Delete the oldest videos beyond ``max_videos`` (the first one stays); how many."""
        videos = self.videos(experiment)
        if len(videos) <= self.max_videos:
            return 0
        by_age = sorted(videos[1:], key=lambda video: video.mtime)
        removed = 0
        for video in by_age[:len(videos) - self.max_videos]:
            for name in filter(None, (video.name, video.recording)):  # its state recording too
                try:
                    os.remove(os.path.join(self.folder(experiment), name))
                    removed += name == video.name
                except OSError as error:
                    logger.debug("cannot remove %s: %s", name, error)
        return removed
