"""``async-plotter render``: state recordings to mp4, later, at any quality and size.

A recording is drawn through the same scene and video sink the render process uses
(``MujocoScene``, ``VideoSink``): the same camera plan, frame rate, chained episodes and the
still between them, so that at the recording's own preset the frames match the original video.
Never imports TensorFlow; call :func:`prepare_gl` before anything imports ``mujoco``.
"""
import functools
import logging
import multiprocessing
import os
import pickle
import sys
import threading
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Callable, Generator, Optional, Sequence, TextIO, Tuple

from async_plotter.newest import Newest
from async_plotter.render.recording import StateRecording, read_recording
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo, SceneInfo

logger = logging.getLogger("async_plotter")

#: ``progress(done, total)`` after each frame
Progress = Callable[[int, int], None]
#: one recording drawn: calling it gives the video's path, or raises what drawing it raised
Outcome = Callable[[], str]


def prepare_gl() -> None:
    """Choose the offscreen GL backend and the drawing's threads as the render process does
    (MuJoCo and numpy read them once, when first imported; the processes of ``jobs`` inherit
    them)."""
    from async_plotter.display import offscreen_gl_backend

    backend = offscreen_gl_backend()
    os.environ["MUJOCO_GL"] = backend
    os.environ["PYOPENGL_PLATFORM"] = backend
    # As for the render process's videos: llvmpipe draws in the calling thread. Its own threads
    # cost more than they save beside ffmpeg (2 cores: 1.10-1.15x the wall time of a folder
    # drawn in one process, benchmarks/render_jobs.py), and with ``jobs`` each has a core.
    os.environ.setdefault("LP_NUM_THREADS", "0")
    # And numpy's BLAS on one thread, as in the worker: each of the ``jobs`` processes would
    # otherwise start a thread per core at numpy's import, for arrays too small to split.
    from async_plotter.processes import one_blas_thread

    os.environ.update(one_blas_thread())


def rerender(path: str,
             out_dir: str,
             quality: str = "same",
             size: Optional[int] = None,
             progress: Optional[Progress] = None) -> str:
    """Draw the recording at ``path`` into ``out_dir`` (same file name, ``.mp4``); returns the
    video's path.

    Args:
        quality: ``"same"`` (the preset the recording was drawn with), ``"cheap"``, ``"full"``
            or ``"auto"``.
        size: the frame's longer side in pixels (the recording's aspect kept); None: the size
            the recording's video had.
    """
    from async_plotter.render.mujoco_scene import MujocoScene
    from async_plotter.sinks.video import VideoSink

    recording = read_recording(path)
    meta = recording.meta
    # A recording written elsewhere may leave out how its video was drawn: the worker's
    # defaults then (480x480 before the preset's scale; ``frame_rate``: real time).
    width = int(meta.get("width") or SceneInfo.width)
    height = int(meta.get("height") or SceneInfo.height)
    chosen = bool(meta.get("size_chosen", False))
    if size is not None:
        scale = size / max(width, height)
        width, height = _even(width * scale), _even(height * scale)
        chosen = True
    if quality == "same":
        quality = meta.get("preset") if meta.get("preset") in ("cheap", "full") else "auto"
    scene = MujocoScene(pickle.dumps(recording.load_model()), meta.get("camera"),
                        int(meta.get("camera_id", -1)), width, height, quality, chosen)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    sink = VideoSink(out_dir,
                     recording.frame_rate,
                     on_written=lambda video, *_: written.append(video))
    try:
        _play(recording, scene, sink, progress)
    finally:
        sink.close()
        scene.close()
    if not written:
        raise RuntimeError(f"no video was written for {path}")
    return written[0]


def rerender_each(
    paths: Sequence[str],
    out_dir: str,
    quality: str = "same",
    size: Optional[int] = None,
    jobs: int = 1,
    progress_for: Optional[Callable[[str], Progress]] = None
) -> Generator[Tuple[str, Outcome], None, None]:
    """Draw every recording in ``paths`` as :func:`rerender` does; yields ``(path, outcome)``
    as each is done (calling ``outcome`` raises what drawing that one raised, a
    ``RecordingError`` or ``OffscreenGLError`` say; the others go on).

    With ``jobs`` > 1, that many spawned processes draw at once, each with a GL context of its
    own: llvmpipe draws a frame on one core, and threads would share one interpreter lock (two
    GL contexts in two threads were 1.12x slower than one, measured). They log their own
    ``wrote ...`` lines, at this process's level; ``progress_for(name)`` (a per-frame bar) is
    used with one job only. Closing the iterator early cancels what has not started.
    """
    if jobs <= 1:
        for path in paths:
            progress = progress_for(os.path.basename(path)) if progress_for else None
            yield path, functools.partial(rerender, path, out_dir, quality, size, progress)
        return
    from async_plotter.console import configure_command_logging

    pool = ProcessPoolExecutor(max_workers=jobs,
                               mp_context=multiprocessing.get_context("spawn"),
                               initializer=configure_command_logging,
                               initargs=(logger.getEffectiveLevel(), ))
    logger.info("drawing %d recordings in %d processes", len(paths), jobs)
    try:
        futures = {
            pool.submit(_rerender_here, path, out_dir, quality, size): path
            for path in paths
        }
        for future in as_completed(futures):
            yield futures[future], functools.partial(_drawn_by, future)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _rerender_here(path: str, out_dir: str, quality: str, size: Optional[int]) -> Tuple[str, int]:
    return rerender(path, out_dir, quality, size), os.getpid()


def _drawn_by(future: Future) -> str:
    video, pid = future.result()
    logger.debug("process %d drew %s", pid, video)
    return video


def _play(recording: StateRecording, scene, sink, progress: Optional[Progress]) -> None:
    meta = recording.meta
    episodes = recording.episodes
    total = len(recording.states)
    last_part = int(episodes.max()) if total else 0
    done = 0
    for part in range(last_part + 1):
        rows = [row for row in range(total) if episodes[row] == part]
        info = EpisodeInfo(int(meta.get("update") or 0), meta.get("iteration"), 0, part)
        sink.begin_episode(info)
        for row in rows:
            scene.set_state(recording.states[row])
            sink.add_frame(scene.render(), info)
            done += 1
            if progress is not None:
                progress(done, total)
        reward = float(recording.rewards[rows].sum()) if rows else 0.0
        sink.end_episode(info, EpisodeEnd(len(rows), reward, True, continued=part < last_part))


def text_progress(name: str, stream: TextIO = sys.stderr) -> Progress:
    """A one-line progress bar on ``stream`` (redrawn in place on a terminal)."""
    width = 30

    def show(done: int, total: int) -> None:
        filled = width * done // max(total, 1)
        end = "\n" if done >= total else ""
        if stream.isatty() or done >= total:
            stream.write(f"\r{name} [{'#' * filled}{'.' * (width - filled)}] "
                         f"{done}/{total} frames{end}")
            stream.flush()

    return show


def _even(value: float) -> int:
    return max(2, int(round(value / 2)) * 2)


class NewestRenderer:
    """Draws recordings to mp4 in ``out_dir`` as they are offered, in a thread of its own: the
    newest offered while one is drawn waits, older ones are skipped (``replay redis://...
    --video-dir``: a viewer that keeps up with the run rather than with every iteration)."""

    def __init__(self, out_dir: str) -> None:
        self._out_dir = out_dir
        self._waiting: Newest[str] = Newest()
        self._thread = threading.Thread(target=self._run,
                                        name="async_plotter-rerender",
                                        daemon=True)
        self._thread.start()

    def offer(self, path: str) -> None:
        self._waiting.put(path)

    def close(self, timeout: float) -> None:
        """Finish the video being drawn (within ``timeout`` s); the waiting one is dropped."""
        self._waiting.close()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            path = self._waiting.take()
            if path is None:
                return
            try:
                rerender(path, self._out_dir)
            except Exception as error:  # noqa: BLE001 - one bad recording stops no other
                logger.warning("could not draw %s: %s", os.path.basename(path), error)
