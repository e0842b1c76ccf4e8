"""The finished videos of one folder, as the video sink names them (the server sends them).

The video sink (``sinks/video.py``) writes ``iter_NNNN.mp4`` (numbered by iteration) or
``update_NNNN.mp4`` (by update), each under a hidden temporary name until it is complete. Only
those final names are listed and served, and only as plain files directly inside the folder, so
that a request can never name another file (``..``, a slash, a hidden file do not match).

Used by the live page (``server``, with ``Plotter(video_dir=...)``) and by ``async-plotter serve``,
whose ``serve.history`` keeps one such folder per experiment. A video's state recording, where
the states sink wrote one beside it (``iter_NNNN.npz``), is named with it (``recording``).
"""
import dataclasses
import os
import re
from typing import Any, Dict, List, Optional

__all__ = ["VIDEO_NAME", "RECORDING_NAME", "Video", "list_videos", "video_path", "recording_path"]

VIDEO_NAME = re.compile(r"(iter|update)_(\d{1,9})\.mp4")
#: a video's state recording, beside it
RECORDING_NAME = re.compile(r"(iter|update)_(\d{1,9})\.npz")


@dataclasses.dataclass(frozen=True)
class Video:
    """One finished video."""

    name: str  # the file's name
    kind: str  # "iter" (numbered by iteration) or "update"
    number: int
    size: int
    mtime: float
    #: the name of its state recording, where there is one beside it
    recording: Optional[str] = None

    def as_json(self) -> Dict[str, Any]:
        """For the page."""
        return {
            "file": self.name,
            "kind": self.kind,
            "number": self.number,
            "size": self.size,
            "recording": self.recording
        }


def list_videos(folder: str) -> List[Video]:
    """The finished videos in ``folder``, iteration-numbered first, each kind by number; an
    absent or unreadable folder has none."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = []
    present = set(names)
    for name in names:
        match = VIDEO_NAME.fullmatch(name)
        if match is None:
            continue
        try:
            stat = os.stat(os.path.join(folder, name))
        except OSError:
            continue  # removed meanwhile (pruned)
        recording = name[:-len(".mp4")] + ".npz"
        found.append(
            Video(name, match[1], int(match[2]), stat.st_size, stat.st_mtime,
                  recording if recording in present else None))
    # Iteration-numbered first (they order by training progress), then update-numbered.
    found.sort(key=lambda video: (video.kind != "iter", video.number))
    return found


def video_path(folder: str, name: str, pattern: "re.Pattern[str]" = VIDEO_NAME) -> Optional[str]:
    """The file to serve for a request naming ``name`` in ``folder``, or None if there is no
    such video (a name the sink does not write is never looked up); ``pattern``: the names
    looked up."""
    if pattern.fullmatch(name) is None:
        return None
    path = os.path.join(folder, name)
    return path if os.path.isfile(path) else None


def recording_path(folder: str, name: str) -> Optional[str]:
    """The state recording a request names in ``folder``, as ``video_path`` finds a video."""
    return video_path(folder, name, RECORDING_NAME)
