"""The names of a run's videos (``iter_NNNN.mp4``, or ``update_NNNN.mp4`` without an iteration),
state recordings (``iter_NNNN.npz`` beside the video, ``history/iter_NNNN.npz``,
``live/ep_000123_iter_0059.npz``) and TensorBoard event files (``...async_plotter``): made here
for the sinks and the rollout process's history, listed here for the live page, ``serve``'s
history, the 3D history, the history's bound, a run's folder and ``run_experiment_lite``.
Only final names directly inside a folder match (not a file still written under its hidden
temporary name), so a request can never name another file (``..``, a slash)."""
import dataclasses
import os
import re
from typing import Any, Dict, List, Optional

from async_plotter.render.recording import SUFFIX
from async_plotter.render.stream import EpisodeInfo

_POLICY = r"(iter|update)_(\d{1,9})"  # the policy a file shows: its iteration, else its update
#: a finished video's name
VIDEO_NAME = re.compile(_POLICY + r"\.mp4")
#: a video's state recording, beside it
RECORDING_NAME = re.compile(_POLICY + re.escape(SUFFIX))
#: a live episode's state recording (its number, then its policy's)
LIVE_RECORDING_NAME = re.compile(r"ep_(\d{6,12})_" + _POLICY + re.escape(SUFFIX))
#: what the names of a Plotter's TensorBoard event files end with, so that a later run in the
#: folder can set them aside (the user's own writers' files there stay)
EVENTS_SUFFIX = ".async_plotter"
#: a Plotter's TensorBoard event file
EVENTS_NAME = re.compile(r"events\.out\.tfevents\..+" + re.escape(EVENTS_SUFFIX))


def video_name(episode: EpisodeInfo) -> str:
    """The file name of the video of an episode's policy."""
    if episode.iteration is not None:
        return f"iter_{episode.iteration:04d}.mp4"
    return f"update_{episode.update:04d}.mp4"


def recording_name(episode: EpisodeInfo) -> str:
    """``iter_0059.npz``: the video's name with the recording's suffix."""
    return os.path.splitext(video_name(episode))[0] + SUFFIX


def history_name(update: int, iteration: Optional[int]) -> str:
    """``iter_0059.npz`` (``update_0003.npz`` without an iteration): a history recording's name
    in ``<video_dir>/history/``, as the policy's video would be named."""
    return recording_name(EpisodeInfo(update, iteration, 0))


def live_recording_name(number: int, episode: EpisodeInfo) -> str:
    """``ep_000123_iter_0059.npz``: the live episode's number, then its policy's."""
    return f"ep_{number:06d}_" + recording_name(episode)


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
        return dict(file=self.name,
                    kind=self.kind,
                    number=self.number,
                    size=self.size,
                    recording=self.recording)


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
        recording = os.path.splitext(name)[0] + SUFFIX
        found.append(
            Video(name, match[1], int(match[2]), stat.st_size, stat.st_mtime,
                  recording if recording in present else None))
    # Iteration-numbered first (they order by training progress), then update-numbered.
    found.sort(key=lambda video: (video.kind != "iter", video.number))
    return found


def video_path(folder: str, name: str, recording: bool = False) -> Optional[str]:
    """The file to serve for a request naming ``name`` in ``folder``, or None if there is no
    such video (``recording``: state recording); a name no sink writes is never looked up."""
    if (RECORDING_NAME if recording else VIDEO_NAME).fullmatch(name) is None:
        return None
    path = os.path.join(folder, name)
    return path if os.path.isfile(path) else None


@dataclasses.dataclass(frozen=True)
class NamedRecording:
    """One finished state recording named by its policy (``iter_0007.npz``), by name."""

    name: str
    kind: str  # "iter" or "update"
    number: int


def list_named_recordings(folder: str) -> List[NamedRecording]:
    """The finished recordings named by their policy directly in ``folder`` (a video folder, or
    its ``history/``), iteration-numbered first, each kind by number; an absent or unreadable
    folder has none."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = [
        NamedRecording(name, match[1], int(match[2])) for name in names
        for match in [RECORDING_NAME.fullmatch(name)] if match
    ]
    found.sort(key=lambda entry: (entry.kind != "iter", entry.number))
    return found


@dataclasses.dataclass(frozen=True)
class RecordingFile:
    """One finished state recording named by its policy (``iter_0007.npz``)."""

    path: str
    kind: str  # "iter" (numbered by iteration) or "update"
    number: int
    mtime: float


def list_recordings(folder: str) -> List[RecordingFile]:
    """The recordings of a run's policies in ``folder`` and in its ``history/`` sub-folder, one
    per policy (``history/``'s where both have one: a whole episode from the run's fixed
    start), iteration-numbered first, each kind by number. ``folder`` may also be a
    ``history/`` folder itself, or one recording (then only it). Absent or unreadable: none."""
    if os.path.isfile(folder):
        match = RECORDING_NAME.fullmatch(os.path.basename(folder))
        if match is None:
            return []
        return [RecordingFile(folder, match[1], int(match[2]), os.stat(folder).st_mtime)]
    found: Dict[tuple, RecordingFile] = {}
    for where in (folder, os.path.join(folder, "history")):  # the history's win
        for entry in list_named_recordings(where):
            path = os.path.join(where, entry.name)
            try:
                mtime = os.stat(path).st_mtime
            except OSError:
                continue  # removed meanwhile (the history is thinned)
            key = (entry.kind != "iter", entry.number)
            found[key] = RecordingFile(path, entry.kind, entry.number, mtime)
    return [found[key] for key in sorted(found)]
