"""The render process: turns the rollout process's stream into pixels and hands them to the sinks.

It never imports TensorFlow (software GL and TensorFlow crash together in one process), caps its
frame rate, and only renders pixels when some sink wants them.
"""
import logging
import os
import signal
import sys
import tempfile
import time
from multiprocessing.connection import Connection, wait
from typing import Any, List, Optional

from async_plotter.processes import (become_background_child, keep_side_effects_out_of_user_folders)
from async_plotter.worker.config import WorkerConfig
from async_plotter.worker.sinks import SinkContext, WindowSpec, build_sinks
from async_plotter.worker.status import StatusKind, StatusSender
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo, StreamKind, UnknownMessage

logger = logging.getLogger(__name__)


class _Terminated(BaseException):
    """SIGTERM from the supervisor: finish the current video and leave."""


# Set once this process is finishing anyway; a SIGTERM then must not abort the video halfway
# and leave a .partial file (the supervisor's SIGKILL, a second later, still bounds this).
_finishing = False
# Set by SIGTERM. Raised inside a ctypes call (EGL), _Terminated reaches us wrapped in another
# exception (ctypes.ArgumentError); it is still the supervisor stopping us, not an error.
_terminated = False
# The episode whose BEGIN was read and whose END was not (yet): when this process stops with one
# open, it tells apart a rollout that failed (its stream ended) from one stopped by the trainer.
_open_episode: Optional[EpisodeInfo] = None


def main(config: WorkerConfig, frames_in: Connection, lifeline: Connection,
         status_connection: Connection) -> None:
    """Entry point of the render process (started by the supervisor with ``spawn``)."""
    global _finishing
    become_background_child()
    signal.signal(signal.SIGTERM, _raise_terminated)
    status = StatusSender(status_connection, "render")
    sinks: List[Any] = []
    failed = False
    try:
        try:
            _set_up(config)
            _run(config, frames_in, lifeline, status, sinks)
        finally:
            # Inside the outer try: a SIGTERM up to this line still lands in except _Terminated.
            _finishing = True
    except _Terminated:
        pass
    except BaseException:  # noqa: BLE001 - report everything to the trainer
        if not _terminated:
            status.error("render")
            failed = True
    _end_failed_episode(frames_in, sinks)
    _close_all(sinks)
    if failed:
        sys.exit(1)


def _set_up(config: WorkerConfig) -> None:
    # Chosen before mujoco is imported: it reads these once.
    os.environ["MUJOCO_GL"] = config.mujoco_gl
    os.environ["PYOPENGL_PLATFORM"] = config.mujoco_gl
    # llvmpipe starts a thread per core. For recorded videos none: one thread spends the least
    # CPU per frame (measured: 8.0 ms against 8.4 ms with four threads, Swimmer 480x480), and CPU
    # is what the budget pays for. A live view wants the lower latency of a few.
    threads = min(4, os.cpu_count() or 1) if config.live else 0
    os.environ.setdefault("LP_NUM_THREADS", str(threads))
    # Keep Mesa's shader cache out of the user's home directory.
    os.environ.setdefault("MESA_SHADER_CACHE_DIR",
                          os.path.join(tempfile.gettempdir(), "async_plotter_mesa_cache"))
    keep_side_effects_out_of_user_folders()  # after MUJOCO_GL: this imports mujoco
    if any(isinstance(spec, WindowSpec) for spec in config.sinks):
        _die_at_once_when_the_display_goes()


# Kept alive for as long as Xlib may call them.
_x_handlers: List[Any] = []


def _die_at_once_when_the_display_goes() -> None:
    """Make an X error end this process at once (SIGABRT, no exit handlers), before any window
    is opened.

    Xlib's default handlers print the error and call ``exit()`` from whatever thread met it
    (MuJoCo's viewer draws in a thread of its own): the X server went away (killed, a session
    that ended) or took the window with it (``GLXBadDrawable`` in ``X_GLXSwapBuffers``). Library
    destructors run by ``exit()`` in that thread could deadlock with the others, and the render
    process then neither lived nor died while the trainer's exit waited for it. ``abort`` runs
    none of them, and needs neither the GIL nor Python; the supervisor names the cause (the
    display is gone) from the outside. Core dumps are turned off for this process."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import ctypes.util
    import resource

    try:
        xlib = ctypes.CDLL(ctypes.util.find_library("X11") or "libX11.so.6")
        libc = ctypes.CDLL(None)
        abort = ctypes.cast(libc.abort, ctypes.c_void_p)
    except (OSError, AttributeError):
        return
    try:
        _soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    except (OSError, ValueError):
        pass
    xlib.XSetErrorHandler.argtypes = [ctypes.c_void_p]
    xlib.XSetIOErrorHandler.argtypes = [ctypes.c_void_p]
    xlib.XSetErrorHandler.restype = ctypes.c_void_p
    xlib.XSetIOErrorHandler.restype = ctypes.c_void_p
    xlib.XSetErrorHandler(abort)
    xlib.XSetIOErrorHandler(abort)
    _x_handlers.extend((xlib, libc, abort))


def _raise_terminated(signum: int, frame: Any) -> None:
    global _terminated
    _terminated = True
    if not _finishing:
        raise _Terminated()


def _end_failed_episode(frames_in: Connection, sinks: List[Any]) -> None:
    """Stopping (the trainer closed the lifeline, or SIGTERM) with an episode open: if the rollout
    process's stream has ended, that episode's rollout failed (the supervisor stops this process
    after the rollout process died), and nothing of it may be written, however few of its frames
    this process drew before it noticed. A rollout still running (the trainer is closing) keeps
    what was recorded. Reads only what is already in the pipe, for at most 0.1 s."""
    global _open_episode
    episode, _open_episode = _open_episode, None
    if episode is None:
        return
    deadline = time.monotonic() + 0.1
    try:
        while time.monotonic() < deadline and frames_in.poll():
            if frames_in.recv()[0] is StreamKind.END:
                return  # it did end: what was drawn of it is kept
        return
    except (EOFError, OSError):
        pass  # the rollout process is gone, mid-episode
    except Exception:  # noqa: BLE001 - a malformed message: not a failure of the rollout
        return
    for sink in sinks:
        try:
            sink.end_episode(episode, EpisodeEnd(0, 0.0, False, failed=True))
        except Exception:  # noqa: BLE001 - the other sinks still get to drop it
            logger.exception("dropping the failed episode in %s failed", type(sink).__name__)


def _close_all(sinks: List[Any]) -> None:
    for sink in sinks:
        try:
            sink.close()
        except Exception:  # noqa: BLE001 - one broken sink must not keep others from flushing
            logger.exception("closing %s failed", type(sink).__name__)
    sinks.clear()


#: not a message: the rollout process's end of the stream closed
_GONE = object()


def _receive(frames_in: Connection, lifeline: Connection, status: StatusSender) -> Optional[tuple]:
    """The next ``(StreamKind, body)`` message (see ``render/stream.py``); ``(_GONE, None)``
    once the rollout process is gone; None once the trainer closed the lifeline (it is closing
    the plotter, or died). A kind that is not a ``StreamKind`` raises ``UnknownMessage``."""
    while True:
        ready = wait([frames_in, lifeline], timeout=1.0)
        status.beat()
        if lifeline in ready:
            try:
                return _checked(lifeline.recv())
            except (EOFError, OSError):
                return None
        if frames_in in ready:
            try:
                return _checked(frames_in.recv())
            except (EOFError, OSError):
                return (_GONE, None)


def _checked(message: Any) -> tuple:
    if not (isinstance(message, tuple) and len(message) == 2
            and isinstance(message[0], StreamKind)):
        raise UnknownMessage(f"the render process got {message!r:.80}, not a stream message")
    return message


def _run(config: WorkerConfig, frames_in: Connection, lifeline: Connection, status: StatusSender,
         sinks: List[Any]) -> None:
    global _open_episode
    early_metrics = []
    final = False
    while True:
        message = _receive(frames_in, lifeline, status)
        if message is None or message[0] is _GONE:
            return
        if message[0] is StreamKind.FINAL:
            final = True
        elif message[0] is not StreamKind.METRICS:
            break
        else:
            early_metrics.append(message[1])
    kind, scene_info = message
    if kind is not StreamKind.SCENE:
        raise UnknownMessage(f"the rollout process began with {kind}, not the scene")
    scene = None
    if scene_info.kind == "mujoco":
        from async_plotter.render.mujoco_scene import MujocoScene

        scene = MujocoScene(scene_info.model,
                            scene_info.camera,
                            scene_info.camera_id,
                            scene_info.width,
                            scene_info.height,
                            config.quality,
                            size_chosen=config.frame_size is not None)
        status.send(StatusKind.READY, gl_renderer=scene.gl_renderer, preset=scene.preset)
    else:
        status.send(StatusKind.READY,
                    gl_renderer="none (the env draws its own frames)",
                    preset="n/a")
    sinks.extend(
        build_sinks(
            config.sinks,
            SinkContext(scene_kind=scene_info.kind,
                        fps=scene_info.fps or config.fps,
                        title=config.env.label,
                        min_video_seconds=config.min_video_seconds,
                        status=status)))
    for sink in sinks:
        sink.attach(scene)
        for iteration, metrics in early_metrics:
            sink.on_metrics(iteration, metrics)

    # The cap, or the scene's own rate where the rollout process chose one a little above it
    # (Hopper: 31.25 frames/s under a cap of 30): pacing below it would lag the live view.
    interval = 1.0 / max(config.fps, scene_info.fps or 0.0)
    next_due = time.monotonic()
    # Live viewers want the present, not every step: when the renderer falls behind (software
    # GL under a busy trainer), a state with a newer one already waiting is dropped. Videos need
    # every step, so when rollouts are kept nothing is dropped.
    drop_stale = config.live and not config.records
    episode = None
    frames_unreported = 0
    last_report = time.monotonic()
    while True:
        message = _receive(frames_in, lifeline, status)
        if message is None:
            break
        kind, body = message
        if kind is _GONE:
            # The rollout process failed mid-episode (a crash, or an exception it reported):
            # what was recorded of that episode is not a video worth keeping.
            if _open_episode is not None:
                for sink in sinks:
                    sink.end_episode(_open_episode, EpisodeEnd(0, 0.0, False, failed=True))
            _open_episode = None
            break
        if kind is StreamKind.METRICS:
            for sink in sinks:
                sink.on_metrics(*body)
        elif kind is StreamKind.FINAL:
            final = True
        elif kind is StreamKind.BEGIN:
            episode = _open_episode = body
            for sink in sinks:
                sink.begin_episode(episode)
        elif kind is StreamKind.END:
            _open_episode = None
            for sink in sinks:
                sink.end_episode(episode, body)
            if frames_unreported:  # an idle worker would otherwise never report the tail
                status.send(StatusKind.FRAMES, count=frames_unreported)
                frames_unreported, last_report = 0, time.monotonic()
        elif kind in (StreamKind.STATE, StreamKind.FRAME):
            if drop_stale and frames_in.poll():
                continue
            if kind is StreamKind.STATE:
                scene.set_state(body)
                frame = scene.render() if any(s.wants_pixels() for s in sinks) else None
            else:
                frame = body
            for sink in sinks:
                sink.add_frame(frame, episode)
            frames_unreported += 1
            now = time.monotonic()
            if now - last_report >= 0.5:
                status.send(StatusKind.FRAMES, count=frames_unreported)
                frames_unreported, last_report = 0, now
            # The frame-rate cap: the worker's CPU use is bounded by fps x cost of one frame.
            # The final video has no cap: training is over, and close() is waiting for it.
            next_due = max(next_due + interval, now)
            delay = next_due - time.monotonic()
            if delay > 0 and not final:
                time.sleep(delay)
        else:
            raise UnknownMessage(f"{kind} in the middle of the stream")
    if frames_unreported:
        status.send(StatusKind.FRAMES, count=frames_unreported)
