"""The render process: turns the rollout process's stream into pixels and hands them to the sinks.

It never imports TensorFlow (software GL and TensorFlow crash together in one process), caps its
frame rate, and only renders pixels when some sink wants them.
"""
import logging
import os
import pickle
import signal
import sys
import tempfile
import time
from multiprocessing.connection import Connection, wait
from typing import Any, List, Optional

from async_plotter.processes import (become_background_child, keep_side_effects_out_of_user_folders)
from async_plotter.worker.config import WorkerConfig
from async_plotter.worker.status import StatusSender

logger = logging.getLogger(__name__)


class _Terminated(BaseException):
    """SIGTERM from the supervisor: finish the current video and leave."""


# Set once this process is finishing anyway; a SIGTERM then must not abort the video halfway
# and leave a .partial file (the supervisor's SIGKILL, a second later, still bounds this).
_finishing = False


def main(config: WorkerConfig, frames_in: Connection, lifeline: Connection,
         status_connection: Connection) -> None:
    """Entry point of the render process (started by the supervisor with ``spawn``)."""
    global _finishing
    become_background_child(config.priority)
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
        status.error("render")
        failed = True
    _close_all(sinks)
    if failed:
        sys.exit(1)


def _set_up(config: WorkerConfig) -> None:
    # Chosen before mujoco is imported: it reads these once.
    os.environ["MUJOCO_GL"] = config.mujoco_gl
    os.environ["PYOPENGL_PLATFORM"] = config.mujoco_gl
    # llvmpipe starts a thread per core; a few are enough for one small scene at a capped rate.
    os.environ.setdefault("LP_NUM_THREADS", str(min(4, os.cpu_count() or 1)))
    # Keep Mesa's shader cache out of the user's home directory.
    os.environ.setdefault("MESA_SHADER_CACHE_DIR",
                          os.path.join(tempfile.gettempdir(), "async_plotter_mesa_cache"))
    keep_side_effects_out_of_user_folders()  # after MUJOCO_GL: this imports mujoco


def _raise_terminated(signum: int, frame: Any) -> None:
    if not _finishing:
        raise _Terminated()


def _close_all(sinks: List[Any]) -> None:
    for sink in sinks:
        try:
            sink.close()
        except Exception:  # noqa: BLE001 - one broken sink must not keep others from flushing
            logger.exception("closing %s failed", type(sink).__name__)
    sinks.clear()


def make_sinks(config: WorkerConfig, scene_kind: str, status: StatusSender) -> List[Any]:
    """The sinks this configuration asks for."""
    sinks: List[Any] = []
    if config.video_dir:
        from async_plotter.render.sinks.video import VideoSink

        sinks.append(
            VideoSink(config.video_dir, config.fps, lambda path: status.send("video", path=path)))
    if config.window:
        from async_plotter.render.sinks.window import MujocoViewerSink, PixelWindowSink

        title = f"async_plotter: {config.env.label}"
        sinks.append(MujocoViewerSink(title) if scene_kind == "mujoco" else PixelWindowSink(title))
    if config.http is not None:
        from async_plotter.web.sink import HttpSink

        sinks.append(HttpSink(config.http, status, title=config.env.label))
    if config.on_frame is not None:
        from async_plotter.render.sinks.callback import CallbackSink

        sinks.append(CallbackSink(pickle.loads(config.on_frame)))
    return sinks


def _receive(frames_in: Connection, lifeline: Connection, status: StatusSender) -> Optional[tuple]:
    """The next message, or None once the trainer or the rollout process is gone.

    The lifeline from the trainer carries training metrics; its end-of-file means the trainer
    is closing the plotter or died.
    """
    while True:
        ready = wait([frames_in, lifeline], timeout=1.0)
        status.beat()
        if lifeline in ready:
            try:
                return ("metrics", lifeline.recv())
            except (EOFError, OSError):
                return None
        if frames_in in ready:
            try:
                return frames_in.recv()
            except (EOFError, OSError):
                return None


def _run(config: WorkerConfig, frames_in: Connection, lifeline: Connection, status: StatusSender,
         sinks: List[Any]) -> None:
    early_metrics = []
    while True:
        message = _receive(frames_in, lifeline, status)
        if message is None:
            return
        if message[0] != "metrics":
            break
        early_metrics.append(message[1])
    kind, scene_info = message
    scene = None
    if scene_info.kind == "mujoco":
        from async_plotter.render.mujoco_scene import MujocoScene

        scene = MujocoScene(scene_info.model, scene_info.camera, scene_info.camera_id,
                            scene_info.width, scene_info.height, config.quality)
        status.send("ready", gl_renderer=scene.gl_renderer, preset=scene.preset)
    else:
        status.send("ready", gl_renderer="none (the env draws its own frames)", preset="n/a")
    sinks.extend(make_sinks(config, scene_info.kind, status))
    for sink in sinks:
        sink.attach(scene)
        for iteration, metrics in early_metrics:
            sink.on_metrics(iteration, metrics)

    interval = 1.0 / config.fps
    next_due = time.monotonic()
    # Live viewers want the present, not every step: when the renderer falls behind (software
    # GL under a busy trainer), a state with a newer one already waiting is dropped. Videos need
    # every step, so with a video_dir nothing is dropped.
    drop_stale = config.live and not config.video_dir
    episode = None
    frames_unreported = 0
    last_report = time.monotonic()
    while True:
        message = _receive(frames_in, lifeline, status)
        if message is None:
            break
        kind, body = message
        if kind == "metrics":
            for sink in sinks:
                sink.on_metrics(*body)
        elif kind == "begin":
            episode = body
            for sink in sinks:
                sink.begin_episode(episode)
        elif kind == "end":
            for sink in sinks:
                sink.end_episode(episode, body)
            if frames_unreported:  # an idle worker would otherwise never report the tail
                status.send("frames", count=frames_unreported)
                frames_unreported, last_report = 0, time.monotonic()
        else:
            if drop_stale and frames_in.poll():
                continue
            if kind == "state":
                scene.set_state(body)
                frame = scene.render() if any(s.wants_pixels() for s in sinks) else None
            else:
                frame = body
            for sink in sinks:
                sink.add_frame(frame, episode)
            frames_unreported += 1
            now = time.monotonic()
            if now - last_report >= 0.5:
                status.send("frames", count=frames_unreported)
                frames_unreported, last_report = 0, now
            # The frame-rate cap: the worker's CPU use is bounded by fps x cost of one frame.
            next_due = max(next_due + interval, now)
            delay = next_due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    if frames_unreported:
        status.send("frames", count=frames_unreported)
