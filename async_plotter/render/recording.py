"""State recordings: a shown rollout as the simulator states it went through, not as pixels.

One ``.npz`` file (numpy's zip of arrays, read with ``allow_pickle=False``: opening a recording
runs no code) per recorded video, next to it and named like it (``iter_0059.npz`` beside
``iter_0059.mp4``). It holds, per shown step, the MuJoCo state (``mjSTATE_FULLPHYSICS``), the
simulated time, the action that led to it and the reward since the previous shown step; which
chained episode each step belongs to; the update and iteration; how the video was framed and
played (camera plan, size, frame rate, stride); and the model itself as MuJoCo's binary model
(MJB), so that replaying or re-rendering needs neither the env's code nor its assets. A
HalfCheetah second of motion (20 shown steps) takes ~2.5 KB compressed, plus the model once.

Files are written whole under a hidden temporary name and renamed, as the videos are (locked
meanwhile: ``render/partial_files.py``).
"""
import dataclasses
import functools
import io
import json
import os
import tempfile
import zipfile
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from async_plotter.render.partial_files import PartialFile

#: what the ``format`` entry of a recording says; a reader refuses any other
FORMAT = "async_plotter.state_recording/1"
#: the same of the compact form a recording travels in
COMPACT_FORMAT = "async_plotter.state_recording_compact/1"
SUFFIX = ".npz"
# What numpy raises for bytes that are not a recording it can read (a zip cut short included).
_UNREADABLE = (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile)


@dataclasses.dataclass
class StateRecording:
    """A recording in memory. ``states`` has one row per shown step; ``actions`` a row of NaN
    where an episode begins (no action led there)."""

    model_mjb: bytes
    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    episodes: np.ndarray
    #: update, iteration, fps, stride, env_rate, label, camera (the plan), camera_id, width,
    #: height, size_chosen, preset, pause_seconds (the still between chained episodes)
    meta: Dict[str, Any]

    @property
    def times(self) -> np.ndarray:
        """Simulated time of each shown step (the state's first entry)."""
        return self.states[:, 0].copy()

    @property
    def frame_rate(self) -> float:
        """Frames per second of its video: as written, else real time from the simulated times
        of its steps (a recording written elsewhere), else 30."""
        if self.meta.get("fps"):
            return float(self.meta["fps"])
        steps = np.diff(self.times) if len(self.states) > 1 else np.zeros(0)
        steps = steps[steps > 0]
        return 1.0 / float(np.median(steps)) if steps.size else 30.0

    @property
    def seconds(self) -> float:
        """Seconds of motion, as the video plays them (frames over the frame rate)."""
        return len(self.states) / self.frame_rate

    def load_model(self) -> Any:
        """The ``mujoco.MjModel`` (from the MJB bytes; MuJoCo reads them from a file)."""
        return model_from_mjb(self.model_mjb)


def model_to_mjb(model: Any) -> bytes:
    """MuJoCo's binary form of ``model``."""
    import mujoco

    buffer = np.empty(mujoco.mj_sizeModel(model), dtype=np.uint8)
    mujoco.mj_saveModel(model, None, buffer)
    return buffer.tobytes()


def model_from_mjb(mjb: bytes) -> Any:
    """An ``MjModel`` from MJB bytes."""
    import mujoco

    handle, path = tempfile.mkstemp(suffix=".mjb", prefix="async_plotter_")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(mjb)
        return mujoco.MjModel.from_binary_path(path)
    finally:
        os.remove(path)


def recording_bytes(recording: StateRecording) -> bytes:
    """``recording`` as the bytes of its file: the archive of its model (compressed once per
    model, ``_model_archive``) with its steps and ``meta`` added."""
    meta = json.dumps(recording.meta, separators=(",", ":"), allow_nan=False)
    arrays = {
        "meta": np.array(meta),
        "state": np.asarray(recording.states, dtype=np.float64),
        "time": recording.times,
        "action": np.asarray(recording.actions, dtype=np.float32),
        "reward": np.asarray(recording.rewards, dtype=np.float32),
        "episode": np.asarray(recording.episodes, dtype=np.int32),
    }
    buffer = io.BytesIO(_model_archive(recording.model_mjb))
    with zipfile.ZipFile(buffer, "a", zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            _add_array(archive, name, array)
    return buffer.getvalue()


@functools.lru_cache(maxsize=2)
def _model_archive(model_mjb: bytes) -> bytes:
    """A numpy zip of the format and the model alone. Deflating the MJB (~0.5 MB, to ~15 KB)
    took half of each recording's write, 4-6 ms, for the same bytes every time: each
    recording of a run now copies this archive and adds its own arrays."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        _add_array(archive, "format", np.array(FORMAT))
        _add_array(archive, "model_mjb", np.frombuffer(model_mjb, dtype=np.uint8))
    return buffer.getvalue()


def _add_array(archive: zipfile.ZipFile, name: str, array: np.ndarray) -> None:
    """``array`` as ``name.npy`` in ``archive``, as ``np.savez_compressed`` writes it."""
    with archive.open(name + ".npy", "w", force_zip64=True) as member:  # as numpy does
        np.lib.format.write_array(member, array, allow_pickle=False)


def compact_bytes(recording: StateRecording) -> bytes:
    """``recording`` in the compact form it travels in (``channel/redis/states.py``): without its
    model and without the ``time`` column (the state's first entry), its states, actions and
    rewards as float32, each column's bytes grouped by significance (``_byte_planes``) so that
    deflate finds what repeats. float32 is the precision MuJoCo draws in (its scene's geoms are
    float32); the files on the trainer's disk keep float64. A 500-step HalfCheetah recording is
    34 KB so against 86 KB as a file's bytes, and encodes in a fifth of the time.
    """
    meta = json.dumps(recording.meta, separators=(",", ":"), allow_nan=False)
    buffer = io.BytesIO()
    np.savez_compressed(buffer,
                        format=np.array(COMPACT_FORMAT),
                        meta=np.array(meta),
                        state=_byte_planes(recording.states),
                        action=_byte_planes(recording.actions),
                        reward=_byte_planes(np.reshape(recording.rewards, (-1, 1))),
                        episode=np.asarray(recording.episodes, dtype=np.int32))
    return buffer.getvalue()


def recording_from_compact(data: bytes, what: str, model_mjb: bytes) -> StateRecording:
    """The recording ``compact_bytes`` made, with ``model_mjb`` put back (``what`` names it in a
    ``RecordingError``). Reading runs no code (``allow_pickle=False``) and checks every shape."""

    def from_planes(archive: Any) -> StateRecording:
        episodes = np.asarray(archive["episode"], dtype=np.int32)
        rows = len(episodes)
        states = _from_byte_planes(archive["state"], rows, "state")
        actions = _from_byte_planes(archive["action"], rows, "action")
        rewards = _from_byte_planes(archive["reward"], rows, "reward")
        if rewards.shape[1] != 1:
            raise ValueError("the rewards are not one column")
        return StateRecording(model_mjb=model_mjb,
                              states=states.astype(np.float64),
                              actions=actions,
                              rewards=rewards[:, 0].copy(),
                              episodes=episodes,
                              meta=json.loads(str(archive["meta"])))

    return _read_archive(io.BytesIO(data), what, COMPACT_FORMAT, from_planes)


def _byte_planes(array: np.ndarray) -> np.ndarray:
    """A (rows, columns) array as float32 bytes in planes of shape (4, columns, rows): the
    first byte of every value of a column, then the next... Neighbouring states share their
    high bytes, so deflate shrinks the planes by 2x where it shrinks the plain floats by 1.1x."""
    values = np.ascontiguousarray(np.asarray(array, dtype="<f4").T)
    return np.ascontiguousarray(
        values.view(np.uint8).reshape(values.shape[0], values.shape[1], 4).transpose(2, 0, 1))


def _from_byte_planes(planes: np.ndarray, rows: int, name: str) -> np.ndarray:
    if planes.dtype != np.uint8 or planes.ndim != 3 or planes.shape[0] != 4 \
            or planes.shape[2] != rows:
        raise ValueError(f"the {name} array has shape {planes.shape} ({planes.dtype}), not "
                         f"(4, columns, {rows}) bytes")
    columns = np.ascontiguousarray(planes.transpose(1, 2, 0)).view("<f4")
    return np.ascontiguousarray(columns.reshape(planes.shape[1], rows).T)


def write_recording(path: str, recording: StateRecording) -> None:
    """Write ``recording`` to ``path`` whole: under ``.partial_<name>`` first, then renamed."""
    data = recording_bytes(recording)
    claim = PartialFile(path)
    partial = claim.path
    try:
        with open(partial, "wb") as file:
            file.write(data)
        os.replace(partial, path)
    except BaseException:
        try:
            os.remove(partial)
        except OSError:
            pass
        raise
    finally:
        claim.release()


class RecordingError(ValueError):
    """A file that is not a state recording this version reads."""


def read_recording(path: str) -> StateRecording:
    """The recording at ``path``; a ``RecordingError`` naming the file if it is not one."""
    return _parse(path, path)


def _parse(source: Any, what: str) -> StateRecording:
    return _read_archive(
        source, what, FORMAT,
        lambda archive: StateRecording(model_mjb=archive["model_mjb"].tobytes(),
                                       states=archive["state"],
                                       actions=archive["action"],
                                       rewards=archive["reward"],
                                       episodes=archive["episode"],
                                       meta=json.loads(str(archive["meta"]))))


def _read_archive(source: Any, what: str, expected_format: str,
                  build: Callable[[Any], StateRecording]) -> StateRecording:
    """``build(archive)`` of the numpy zip at ``source`` if it says ``expected_format``; any
    failure to read it, a ``RecordingError`` naming ``what``. Runs no code
    (``allow_pickle=False``)."""
    try:
        # np.load reads what is no zip as a .npy or a pickle, and says so ("contains pickled
        # data"): about a CSV or an mp4 given by mistake, the wrong thing.
        if not _is_zip(source):
            raise RecordingError(
                f"{what} is not a state recording: recordings are numpy zips (.npz), such as "
                "the iter_NNNN.npz files beside the videos and in their history/ folder")
        with np.load(source, allow_pickle=False) as archive:
            if "format" not in archive.files or str(archive["format"]) != expected_format:
                raise RecordingError(f"{what} is not an async_plotter state recording "
                                     f"(expected format {expected_format})")
            return build(archive)
    except _UNREADABLE as error:
        if isinstance(error, RecordingError):
            raise
        raise RecordingError(f"cannot read the state recording {what}: {error}") from error


def _is_zip(source: Any) -> bool:
    """Whether ``source`` (a path or a seekable file) starts as a zip does; read from where it
    is, and put back there."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as file:
            return file.read(4) == _ZIP_MAGIC
    where = source.tell()
    try:
        return source.read(4) == _ZIP_MAGIC
    finally:
        source.seek(where)


_ZIP_MAGIC = b"PK\x03\x04"


def recordings_in(path: str) -> List[str]:
    """``path`` itself if it is a file, else the recordings in the folder, by name."""
    if os.path.isfile(path):
        return [path]
    names = sorted(name for name in os.listdir(path)
                   if name.endswith(SUFFIX) and not name.startswith("."))
    return [os.path.join(path, name) for name in names]


class RecordingBuilder:
    """Collects one recording step by step (the sink in the render process fills it)."""

    def __init__(self, model_mjb: bytes, meta: Dict[str, Any]) -> None:
        self._model_mjb = model_mjb
        self.meta = dict(meta)
        self._states: List[np.ndarray] = []
        self._actions: List[Optional[np.ndarray]] = []
        self._rewards: List[float] = []
        self._episodes: List[int] = []

    def __len__(self) -> int:
        return len(self._states)

    def add(self, state: np.ndarray, action: Optional[np.ndarray], reward: float,
            episode: int) -> None:
        """One shown step of chained episode ``episode`` (0 for the first)."""
        self._states.append(np.array(state, dtype=np.float64))
        self._actions.append(None if action is None else np.asarray(action, dtype=np.float32))
        self._rewards.append(float(reward))
        self._episodes.append(int(episode))

    def build(self) -> StateRecording:
        """The recording so far."""
        width = max((action.size for action in self._actions if action is not None), default=0)
        actions = np.full((len(self._actions), width), np.nan, dtype=np.float32)
        for row, action in enumerate(self._actions):
            if action is not None and action.size == width:
                actions[row] = action.reshape(-1)
        return StateRecording(model_mjb=self._model_mjb,
                              states=np.stack(self._states) if self._states else np.zeros((0, 1)),
                              actions=actions,
                              rewards=np.asarray(self._rewards, dtype=np.float32),
                              episodes=np.asarray(self._episodes, dtype=np.int32),
                              meta=self.meta)
