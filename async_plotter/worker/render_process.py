"""The render process: turns the rollout process's stream into pixels and hands them to the sinks.

It never imports TensorFlow (software GL and TensorFlow crash together in one process), caps its
frame rate, and only renders pixels when some sink wants them.
"""
import collections
import logging
import os
import signal
import sys
import tempfile
import time
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from async_plotter.cpu import usable_cores
from async_plotter.processes import (become_background_child, exit_now, resend_lost_stops,
                                     keep_side_effects_out_of_user_folders)
from async_plotter.worker.config import WorkerConfig
from async_plotter.sinks.specs import WindowSpec
from async_plotter.worker.sink_builders import EARLY, SinkContext, build_sinks, fit_to_scene
from async_plotter.worker.status import StatusKind, StatusSender
from async_plotter.sinks.base import ShownStep
from async_plotter.sinks.recorded import RecordedSink
from async_plotter.render.mujoco_scene import OffscreenGLError
from async_plotter.render.stream import (EpisodeEnd, EpisodeInfo, SceneInfo, StateChunk, StepState,
                                         StreamKind, UnknownMessage)
from async_plotter.render.timeline import Timeline, now, wait_until

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


def main(config: WorkerConfig,
         frames_in: Connection,
         lifeline: Connection,
         status_connection: Connection,
         http_listener: Any = None) -> None:
    """Entry point of the render process (started by the supervisor with ``spawn``);
    ``http_listener`` is the live page's socket, bound once by the supervisor."""
    global _finishing
    become_background_child()
    signal.signal(signal.SIGTERM, _raise_terminated)
    resend_lost_stops(_Terminated)
    status = StatusSender(status_connection, "render")
    status.offer_stacks()
    sinks: List[Any] = []
    failed = False
    try:
        try:
            _set_up(config)
            _run(config, frames_in, lifeline, status, sinks, http_listener)
        finally:
            # Inside the outer try: a SIGTERM up to this line still lands in except _Terminated.
            _finishing = True
    except _Terminated:
        pass
    except BaseException as error:  # noqa: BLE001 - report everything to the trainer
        if not _terminated:
            # The supervisor may start the next one with another GL backend.
            gl = error.reason if isinstance(error, OffscreenGLError) else None
            status.error("render", offscreen_gl=gl)
            failed = True
    _end_failed_episode(lifeline, sinks)
    _close_all(sinks)
    # Every file is written and closed: the interpreter's teardown (~0.1 s: the GL context,
    # Mesa, the modules) would only add to what close() waits for.
    exit_now(1 if failed else 0)


def _set_up(config: WorkerConfig) -> None:
    # Chosen before mujoco is imported: it reads these once.
    os.environ["MUJOCO_GL"] = config.mujoco_gl
    os.environ["PYOPENGL_PLATFORM"] = config.mujoco_gl
    # llvmpipe starts a thread per core. For recorded videos none: one thread spends the least
    # CPU per frame (measured: 8.0 ms against 8.4 ms with four threads, Swimmer 480x480), and CPU
    # is what the budget pays for. A live view wants the lower latency of a few.
    threads = min(4, usable_cores()) if config.live else 0
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
    """Make an X error end this process at once (SIGABRT, no core dump), before any window
    is opened: Xlib's default handlers call ``exit()`` from the viewer's thread, whose library
    destructors could deadlock with the other threads, and the process then neither lived nor
    died. The supervisor names the cause (the display is gone) from the outside."""
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


def _end_failed_episode(lifeline: Connection, sinks: List[Any]) -> None:
    """Stopping (the trainer closed the lifeline, or SIGTERM) with an episode open: if the trainer
    said the worker failed (``FAILED``, sent before it stops a worker whose rollout process died
    or hung), nothing of that episode may be written, however few of its frames this process drew
    before it noticed. A stop (``close()``, Ctrl-C) keeps what was recorded. Reads only what is
    already in the lifeline, for at most 0.1 s."""
    global _open_episode
    episode, _open_episode = _open_episode, None
    if episode is None or not _told_failed(lifeline):
        return
    for sink in sinks:
        try:
            sink.end_episode(episode, EpisodeEnd(0, 0.0, False, failed=True))
        except Exception:  # noqa: BLE001 - the other sinks still get to drop it
            logger.exception("dropping the failed episode in %s failed", type(sink).__name__)


def _told_failed(lifeline: Connection) -> bool:
    deadline = time.monotonic() + 0.1
    try:
        while time.monotonic() < deadline and lifeline.poll():
            message = lifeline.recv()
            if isinstance(message, tuple) and message[:1] == (StreamKind.FAILED, ):
                return True
    except (EOFError, OSError):
        pass
    except Exception:  # noqa: BLE001 - a malformed message says nothing of a failure
        pass
    return False


def _close_all(sinks: List[Any]) -> None:
    for sink in sinks:
        try:
            sink.close()
        except Exception:  # noqa: BLE001 - one broken sink must not keep others from flushing
            logger.exception("closing %s failed", type(sink).__name__)
    sinks.clear()


#: at most this long is spent finishing the final rollout's state recording once the trainer
#: stopped waiting for its video (a 500-step HalfCheetah rollout takes well under a second)
_FINISH_ROLLOUT_SECONDS = 5.0

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


def _run(config: WorkerConfig,
         frames_in: Connection,
         lifeline: Connection,
         status: StatusSender,
         sinks: List[Any],
         http_listener: Any = None) -> None:
    # The live page and TensorBoard start before the scene: a viewer of a trainer that plays no
    # live episode (it ended, or nobody watched yet) gets the page's address and the run's
    # curves at once, the picture once an episode comes.
    early_specs = [spec for spec in config.sinks if isinstance(spec, EARLY)]
    early_sinks = build_sinks(
        early_specs,
        SinkContext(scene_kind="unknown",
                    fps=config.fps,
                    title=config.env.label,
                    min_video_seconds=config.min_video_seconds,
                    status=status,
                    http_listener=http_listener))
    sinks.extend(early_sinks)
    opening = _await_scene(frames_in, lifeline, status, early_sinks)
    if opening is None:
        return
    scene_info, early = opening
    scene = _open_scene(scene_info, config, status)
    # The env's name as the trainer's scene gives it (a viewer of states knows only the
    # experiment's): the tag of TensorBoard's rollouts, the window's title, the page's.
    context = SinkContext(scene_kind=scene_info.kind,
                          fps=scene_info.fps or config.fps,
                          title=scene_info.label or config.env.label,
                          min_video_seconds=config.min_video_seconds,
                          status=status,
                          stride=scene_info.stride,
                          env_rate=scene_info.env_rate)
    others = build_sinks([spec for spec in config.sinks if not isinstance(spec, EARLY)], context)
    sinks.extend(others)
    for spec, sink in zip(early_specs, early_sinks):
        fit_to_scene(sink, spec, context)
    for sink in sinks:
        sink.attach(scene)
    stream = _Stream(config, scene_info, scene, sinks, status, frames_in, lifeline)
    for kind, body in early:
        if kind in _CURVE:
            _hand_curve(others, kind, body)  # the early sinks have had it
        else:
            stream.handle(kind, body)
    stream.run()


def _hand_curve(sinks: List[Any], kind: StreamKind, body: Any) -> None:
    """The trainer's ``METRICS`` (iteration, metrics), ``HISTORY`` (a history point) or
    ``CURVE_RESTART`` message to each of ``sinks``: before the scene, after it, and to the sinks
    built in between."""
    for sink in sinks:
        if kind is StreamKind.METRICS:
            sink.on_metrics(*body)
        elif kind is StreamKind.HISTORY:
            sink.on_history(body)
        else:
            sink.on_curve_restart()


def _await_scene(frames_in: Connection, lifeline: Connection, status: StatusSender,
                 early_sinks: List[Any]) -> Optional[Tuple[SceneInfo, List[tuple]]]:
    """The handshake: the rollout process's ``(SCENE, SceneInfo)``, and the trainer's messages
    that came before it (``METRICS``, ``HISTORY``, ``FINAL``), to be handled once the sinks exist
    (the curves' go to ``early_sinks`` at once). None if either end went away first."""
    early = []
    while True:
        message = _receive(frames_in, lifeline, status)
        if message is None or message[0] is _GONE:
            return None
        kind, body = message
        if kind is StreamKind.SCENE:
            return body, early
        if kind is StreamKind.FAILED:
            continue  # no episode is open before the scene
        if kind not in (*_CURVE, StreamKind.FINAL):
            raise UnknownMessage(f"the rollout process began with {kind}, not the scene")
        if kind in _CURVE:
            _hand_curve(early_sinks, kind, body)
        early.append(message)


def _open_scene(scene_info: SceneInfo, config: WorkerConfig, status: StatusSender) -> Any:
    """The ``MujocoScene`` that turns states into pixels (None for envs that draw their own
    frames); reports the render process ready."""
    if scene_info.kind != "mujoco":
        status.send(StatusKind.READY,
                    gl_renderer="none (the env draws its own frames)",
                    preset="n/a")
        return None
    from async_plotter.render.mujoco_scene import MujocoScene

    scene = MujocoScene(scene_info.model,
                        scene_info.camera,
                        scene_info.camera_id,
                        scene_info.width,
                        scene_info.height,
                        config.quality,
                        size_chosen=config.frame_size is not None,
                        gl=any(spec.draws for spec in config.sinks))
    status.send(StatusKind.READY, gl_renderer=scene.gl_renderer, preset=scene.preset)
    return scene


class _Stream:
    """The loop after the handshake: each message goes to its handler in ``_HANDLERS``."""

    def __init__(self, config: WorkerConfig, scene_info: SceneInfo, scene: Any, sinks: List[Any],
                 status: StatusSender, frames_in: Connection, lifeline: Connection) -> None:
        self._scene = scene
        self._sinks = sinks
        self._status = status
        self._frames_in = frames_in
        # The scene's rate, which the rollout process chose under the cap (or a little above
        # it: Hopper's 31.25 frames/s under a cap of 30): a live view's frames come a chunk at
        # a time, and are shown at the rate they were simulated at.
        self._timeline = Timeline(1.0 / (scene_info.fps or config.fps))
        # Live viewers want the present, not every step: a renderer that falls behind (software
        # GL on a starved core) skips what is already stale for them (``_on_states``). Sinks
        # that keep what they get (videos, state recordings) still get every step.
        self._live = config.live
        #: messages read from the rollout process ahead of their turn (at most up to the next
        #: shown steps): whether newer steps wait decides whether the ones in hand are stale
        self._ahead: Deque[tuple] = collections.deque()
        #: the update whose steps were shown last: a new policy's first message is never
        #: skipped whole, so that its episode is seen from its start
        self._shown_update: Optional[int] = None
        #: training is over: the final video is drawn without the frame-rate cap
        self._final = False
        #: the final policy's update, once training is over (``_superseded``)
        self._final_update: Optional[int] = None
        #: the episode now streamed is an older policy's, begun once training was over: its
        #: steps are read and dropped, nothing drawn
        self._passing = False
        #: the update of the last episode dropped so, or of the final policy's clip dropped for
        #: its whole episode (``_drop_the_clip_retaken``): episodes chained to it are dropped too
        self._passed_update: Optional[int] = None
        #: whether the final policy's episode now drawn ends as a clip (read ahead to its end;
        #: None until that end has come)
        self._ends_clipped: Optional[bool] = None
        #: steps handed to the sinks of the video now drawn (its chained episodes included), and
        #: what a video cut once training is over keeps at least (``_cut_once_training_is_over``)
        self._video_steps = 0
        self._min_video_steps = int(config.min_video_seconds * (scene_info.fps or config.fps))
        #: the shown steps and reward of the episode now drawn
        self._episode_steps, self._episode_reward = 0, 0.0
        #: the trainer's end of the lifeline: a wait for the frame cap ends when it speaks
        self._lifeline = lifeline
        #: what comes finishes a short video (``worker/video_chain.py``): only the sinks that
        #: keep rollouts get it, drawn without the cap, until an episode's end not continued
        self._catching_up = False
        self._recorders = [sink for sink in sinks if isinstance(sink, RecordedSink)]
        self._viewers = [sink for sink in sinks if not isinstance(sink, RecordedSink)]
        #: the first video, where every sink keeps files (nothing live, no user sink, which is
        #: promised frames at the cap's times), is drawn without the cap too: until it exists
        #: the worker runs at the trainer's priority, uncharged (``supervision/budget.py``), and
        #: the cap would spread the same CPU over seconds of start-up instead of showing it soon
        self._first_video = not config.live and not self._viewers
        self._episode: Optional[EpisodeInfo] = None
        self._frames_unreported = 0
        #: of those, the frames with pixels (a live view that nobody watches draws none)
        self._drawn_unreported = 0
        self._last_report = time.monotonic()
        #: the sinks that copy states and draw nothing (state recordings), by their specs
        self._state_copies = [
            sink for spec, sink in zip(config.sinks, sinks) if not getattr(spec, "draws", True)
        ]

    def run(self) -> None:
        """Handle messages until the trainer closes the lifeline or the rollout process goes."""
        lifeline = self._lifeline
        while True:
            # What was read ahead comes first, unless the trainer has something to say (it may
            # be closing: a render process that keeps reading ahead must still hear it).
            if self._ahead and not lifeline.poll():
                self._status.beat()
                message = self._ahead.popleft()
            else:
                message = _receive(self._frames_in, lifeline, self._status)
            if message is None:
                self._finish_final_rollout()
                break
            kind, body = message
            if kind is _GONE:
                self._rollout_gone()
                break
            self.handle(kind, body)
        self._report_frames()

    def _finish_final_rollout(self) -> None:
        """The trainer stopped waiting for the final video (``final_video_timeout``) while it
        was drawn: the sinks that draw are closed with what they have, and those that only copy
        states get the rest of the rollout undrawn, until the supervisor's SIGTERM or
        ``_FINISH_ROLLOUT_SECONDS`` (docs/design.md, "The final policy is always shown")."""
        global _finishing
        if not self._final or _open_episode is None or self._scene is None \
                or not self._state_copies:
            return
        # From here a SIGTERM only ends the copying: the files are finished, not abandoned.
        _finishing = True
        drawing = [sink for sink in self._sinks if sink not in self._state_copies]
        self._sinks[:] = self._state_copies
        _close_all(drawing)
        started = time.monotonic()
        copied = self._copy_final_states(_open_episode.update, started + _FINISH_ROLLOUT_SECONDS)
        logger.debug("the final rollout's last %d shown steps copied in %.2f s, undrawn", copied,
                     time.monotonic() - started)

    def _copy_final_states(self, update: int, deadline: float) -> int:
        """Hand the sinks left the stream's states until the final rollout's last episode of
        ``update`` ends; how many states were copied."""
        copied = 0
        while not _terminated and time.monotonic() < deadline:
            if self._ahead:
                kind, body = self._ahead.popleft()  # read ahead of the drawing (``_retaken``)
            else:
                try:
                    if not self._frames_in.poll(0.1):
                        continue
                    kind, body = _checked(self._frames_in.recv())
                except (EOFError, OSError):
                    break  # the rollout process is gone: what was copied is kept, cut short
            if kind is _GONE:
                break
            if kind is StreamKind.STATES:
                for step in body.steps():
                    self._scene.set_state(step.state)
                    self._hand(self._sinks, None, step, now())
                    copied += 1
            elif kind is StreamKind.BEGIN:
                if body.update != update:
                    break
                self._on_begin(body)  # a chained episode of the final policy
            elif kind is StreamKind.END:
                self._on_end(body)
                if not body.continued:
                    break
        return copied

    def handle(self, kind: StreamKind, body: Any) -> None:
        handler = _HANDLERS.get(kind)
        if handler is None:
            raise UnknownMessage(f"{kind} in the middle of the stream")
        if self._passing and kind in _PASSED_OVER:
            return  # an older policy's episode begun once training was over (``_superseded``)
        handler(self, body)

    def _rollout_gone(self) -> None:
        # The rollout process failed mid-episode (a crash, or an exception it reported; its
        # stream ended while the trainer was not stopping us, or the trainer said so): what
        # was recorded of that episode is not a video worth keeping.
        global _open_episode
        if _open_episode is not None:
            for sink in self._targets():
                sink.end_episode(_open_episode, EpisodeEnd(0, 0.0, False, failed=True))
        _open_episode = None

    def _on_metrics(self, body: Tuple[Optional[int], Dict[str, float]]) -> None:
        _hand_curve(self._sinks, StreamKind.METRICS, body)

    def _on_history(self, point: Any) -> None:
        _hand_curve(self._sinks, StreamKind.HISTORY, point)

    def _on_curve_restart(self, _: None) -> None:
        _hand_curve(self._sinks, StreamKind.CURVE_RESTART, None)

    def _on_final(self, update: Optional[int]) -> None:
        self._final = True
        self._final_update = update
        self._cut_once_training_is_over()

    def _cut_once_training_is_over(self) -> None:
        """Training is over and the video being drawn is an older policy's: end it here once it
        holds ``min_video_seconds`` (it is kept, shorter), and drop the rest of its steps. The
        rollout process ran ahead of the drawing (a budgeted video's steps wait in the pipe
        whole), and ``close()`` waits for this and the final video after it: drawing the rest
        took 0.1-0.7 s of it. The history keeps that policy's whole episode. The final
        policy's own clip is dropped instead (``_drop_the_clip_retaken``)."""
        episode, final = _open_episode, self._final_update
        if not self._final or episode is None or final is None or self._passing:
            return
        if episode.update >= final:
            if self._retaken(episode):
                self._drop_the_clip_retaken(episode)
            return
        if self._video_steps < self._min_video_steps:
            return
        logger.debug("update %d's video cut at close after %d steps", episode.update,
                     self._video_steps)
        self._leave_the_video(episode, keep=True)

    def _leave_the_video(self, episode: EpisodeInfo, keep: bool) -> None:
        """End the video being drawn here, and drop the rest of its steps: the recordings keep
        it cut short (``keep``, as ``close()`` would) or nothing of it; the other sinks see its
        episode end."""
        global _open_episode
        _open_episode = None
        self._report_frames()
        end = EpisodeEnd(self._episode_steps, self._episode_reward, completed=False)
        for sink in self._targets():
            if not isinstance(sink, RecordedSink):
                sink.end_episode(episode, end)
            elif keep:
                sink.cut_here()
            else:
                sink.drop_here("the final policy's whole episode replaces this clip of it")
        self._passing, self._passed_update = True, episode.update
        self._catching_up = self._first_video = False

    def _retaken(self, episode: EpisodeInfo) -> bool:
        """Whether ``episode`` (the final policy's, training over) is a clip that the rollout
        process makes again whole next: it stopped at the video's length before ``close()``
        asked for the final video, and the rollout process retakes every such clip
        (``EpisodeInfo.retake``). Its end is read ahead: the rollout process ran ahead of the
        drawing. Never in a live view, whose episodes are whole."""
        if self._live or episode.retake:
            return False
        if self._ends_clipped is None:
            self._ends_clipped = self._read_to_the_videos_end()
        return bool(self._ends_clipped)

    def _read_to_the_videos_end(self) -> Optional[bool]:
        """Whether the video now drawn ends as a clip: its last ``END`` (one not continued by a
        chained episode), read ahead of the drawing; None while it has not come yet."""
        end = self._read_ahead_to(lambda kind, body: kind is StreamKind.END and not body.continued)
        return None if end is None else end[1].clipped

    def _read_ahead_to(self, wanted: Callable[[StreamKind, Any], bool]) -> Optional[tuple]:
        """The first message read ahead (before, or now from the pipe, as far as it holds)
        that is ``wanted``; None if none is there (yet)."""
        for message in self._ahead:
            if wanted(*message):
                return message
        while self._frames_in.poll() and not (self._ahead and self._ahead[-1][0] is _GONE):
            try:
                message = _checked(self._frames_in.recv())
            except (EOFError, OSError):
                message = (_GONE, None)
            self._ahead.append(message)
            if wanted(*message):
                return message
        return None

    def _drop_the_clip_retaken(self, episode: EpisodeInfo) -> None:
        """The final policy's clip being drawn (``_retaken``) is dropped, nothing of it kept:
        its whole episode comes next and replaces it. Drawing the rest of the clip took up to
        a clip's drawing of ``close()``, and TensorBoard shows the first image written at a
        step, so the clip's would have hidden the whole episode's."""
        logger.debug("update %d's clip dropped after %d steps: its whole episode comes next",
                     episode.update, self._video_steps)
        self._leave_the_video(episode, keep=False)

    def _superseded(self, episode: EpisodeInfo) -> bool:
        """Whether ``episode`` is an older policy's that begins after training ended (the
        rollout process was ahead of the drawing, and cut it for the final policy): not drawn,
        since the final video comes next and ``close()`` waits for it; the history keeps that
        policy whole. The video being drawn is cut too (``_cut_once_training_is_over``), unless
        it is short of ``min_video_seconds`` (a chained episode of it is then drawn)."""
        if episode.part > 0 and episode.update == self._passed_update:
            return True  # chained to one dropped: an older policy's, or the final policy's clip
        final = self._final_update
        if final is None or episode.update >= final:
            return False
        return episode.part == 0

    @property
    def _uncapped(self) -> bool:
        return self._final or self._catching_up or self._first_video

    def _on_failed(self, body: None) -> None:
        self._rollout_gone()

    def _on_catch_up(self, live_end: Optional[EpisodeEnd]) -> None:
        # The live sinks leave the open episode here, cut short as by a newer policy (which
        # is what they see next); the recordings go on with it.
        if live_end is not None and self._episode is not None:
            for sink in self._viewers:
                sink.end_episode(self._episode, live_end)
        self._catching_up = True

    def _targets(self) -> List[Any]:
        """The sinks that get what comes now: all, or while catching up the recordings."""
        return self._recorders if self._catching_up else self._sinks

    def _on_begin(self, episode: EpisodeInfo) -> None:
        global _open_episode
        self._passing = self._superseded(episode)
        if self._passing:
            self._passed_update = episode.update
            logger.debug(
                "not drawn: update %d's episode, begun after the final video was asked "
                "for", episode.update)
            return
        self._episode = _open_episode = episode
        self._episode_steps, self._episode_reward = 0, 0.0
        if episode.part == 0:
            self._video_steps, self._ends_clipped = 0, None
        if episode.retake:
            self._passed_update = None  # the whole episode's chained ones are drawn
        for sink in self._targets():
            sink.begin_episode(episode)

    def _on_end(self, end: EpisodeEnd) -> None:
        global _open_episode
        if self._passing:
            self._passing = False
            return
        _open_episode = None
        # Before the sinks end it: a video they write is then reported after its frames (a
        # whole first video, drawn without the cap, fits between two reports).
        self._report_frames()
        for sink in self._targets():
            sink.end_episode(self._episode, end)
        if not end.continued:
            self._catching_up = False
            self._first_video = False

    def _on_states(self, chunk: StateChunk) -> None:
        # docs/design.md, "A late renderer skips to the present": a chunk with a newer one
        # behind it is stale for the live outputs; within a chunk a step whose successor is due
        # already is skipped, and the rest once a newer policy's steps have come. A catch-up is
        # for the recordings alone: every step, at once (``_show``).
        if self._catching_up:
            for step in chunk.steps():
                if self._passing:
                    return  # cut once training was over
                self._on_state(step)
            return
        stale = self._anchor()
        steps = chunk.steps()
        last = len(steps) - 1
        for index, step in enumerate(steps):
            if self._passing:
                return  # cut once training was over
            if not stale and self._live and index and self._newer_policy_waiting():
                stale = True
            if stale:
                self._skip(step)
            elif self._live and self._timeline.behind() and (index < last or self._newer_waiting()):
                self._timeline.advance()  # the step after it is shown at its time
                self._skip(step)
            else:
                self._on_state(step)
        if not stale:
            self._keep_cap()

    def _anchor(self) -> bool:
        """Where the schedule of the message in hand starts: when it is due, now if it came
        late, and now for a new policy's first message in a live view; whether the live
        outputs skip it (newer shown steps have come: what comes next starts now)."""
        timeline = self._timeline
        if self._live and self._episode is not None \
                and self._episode.update != self._shown_update:
            timeline.anchor()
            return False
        stale = self._live and self._newer_waiting()
        timeline.anchor(min(timeline.next_due, now()) if stale else timeline.due())
        return stale

    def _newer_policy_waiting(self) -> bool:
        """Whether another policy's episode and its first shown steps have come (read ahead)."""
        return self._newer_waiting() and any(kind is StreamKind.BEGIN and self._episode is not None
                                             and body.update != self._episode.update
                                             for kind, body in self._ahead)

    def _newer_waiting(self) -> bool:
        """Whether the rollout process has sent shown steps beyond those in hand: messages
        waiting in the pipe are read ahead, up to the first ``STATES`` or ``FRAME`` one (an
        episode's last chunk is always followed by its ``END`` at once; that is not newer)."""
        return self._read_ahead_to(lambda kind, body: kind in _SHOWN) is not None

    def _skip(self, step: Optional[StepState], frame: Any = None) -> None:
        """A step the live outputs skip: only sinks that keep every step (a video, a state
        recording, while recording) get it."""
        keepers = [sink for sink in self._sinks if sink.keeps_every_step()]
        if not keepers:
            return
        if step is not None:
            self._scene.set_state(step.state)
            wanted = any(sink.wants_pixels() for sink in keepers)
            frame = self._scene.render() if wanted else None
        self._hand(keepers, frame, step, now())

    def _hand(self, sinks: List[Any], frame: Any, step: Optional[StepState], due: float) -> None:
        """One shown step to ``sinks``: its frame (None where none was drawn) and its record."""
        shown = ShownStep(self._episode, step, None if self._scene is None else self._scene.data,
                          due)
        for sink in sinks:
            sink.add_step(frame, shown)
        self._video_steps += 1
        self._episode_steps += 1
        self._episode_reward += 0.0 if step is None else step.reward
        self._cut_once_training_is_over()

    def _on_state(self, step: StepState) -> None:
        self._scene.set_state(step.state)
        wanted = any(sink.wants_pixels() for sink in self._targets())
        self._show(self._scene.render() if wanted else None, step)

    def _on_frame(self, frame: Any) -> None:
        # Envs that draw their own frames send one per message, each when it is due.
        if self._anchor():
            self._skip(None, frame)
            return
        self._show(frame, None)
        self._keep_cap()

    def _keep_cap(self) -> None:
        # Where nothing was paced frame by frame, the cap is kept once a message: what comes
        # next is not shown before the last frame shown is due. A live view stops waiting
        # when newer steps come (a new policy's start at once; others at their time).
        deadline = self._timeline.next_due - self._timeline.interval
        if self._uncapped:
            return
        if not self._live:
            self._wait_for_cap(deadline)
            return
        while not self._newer_waiting():
            delay = deadline - now()
            if delay <= 0 or (self._ahead and self._ahead[-1][0] is _GONE):
                return
            wait([self._frames_in], delay)

    def _wait_for_cap(self, deadline: float) -> None:
        """Sleep until ``deadline``, handling what the trainer says meanwhile: its ``FINAL``
        ends the wait (``close()`` waits for what comes next); a closed lifeline too (``run``
        then ends)."""
        while not self._final:
            delay = deadline - now()
            if delay <= 0 or not wait([self._lifeline], delay):
                return
            try:
                message = _checked(self._lifeline.recv())
            except (EOFError, OSError):
                return
            self.handle(*message)

    def _show(self, frame: Any, step: Optional[StepState]) -> None:
        # The frame-rate cap bounds the worker's CPU; the final video and a catch-up have none
        # (close() or the live view waits for them). Sinks that show frames as they come get
        # each at its time; the others a chunk's at once, each with its due time.
        due = now() if self._uncapped else self._timeline.due()
        if due > now() and any(sink.wants_real_time() for sink in self._sinks):
            wait_until(due)
        self._hand(self._targets(), frame, step, due)
        if self._episode is not None:
            self._shown_update = self._episode.update
        self._frames_unreported += 1
        self._drawn_unreported += frame is not None
        if time.monotonic() - self._last_report >= 0.5:
            self._report_frames()
        # A live view's steps are each due one interval after the step before, however late
        # that one was drawn (a step whose successor is due already is skipped: _on_states);
        # otherwise the next frame is due one interval after this one (the cap).
        self._timeline.advance(since=None if self._live else due)

    def _report_frames(self) -> None:
        if self._frames_unreported:
            self._status.send(StatusKind.FRAMES,
                              count=self._frames_unreported,
                              drawn=self._drawn_unreported)
            self._frames_unreported, self._drawn_unreported = 0, 0
            self._last_report = time.monotonic()


#: the messages that carry shown steps
_SHOWN = (StreamKind.STATES, StreamKind.FRAME)
#: what an episode that is not drawn is read and dropped of: its steps, and a catch-up sent
#: before the rollout process saw that training was over (nothing to finish); its END still
#: comes to ``_on_end``
_PASSED_OVER = (StreamKind.STATES, StreamKind.FRAME, StreamKind.CATCH_UP)
#: the trainer's messages for the curves (``_hand_curve``)
_CURVE = (StreamKind.METRICS, StreamKind.HISTORY, StreamKind.CURVE_RESTART)

#: what the render process does with each kind of message after the scene (``SCENE`` is not in
#: it: the scene comes once, first)
_HANDLERS: Dict[StreamKind, Callable[[_Stream, Any], None]] = {
    StreamKind.METRICS: _Stream._on_metrics,
    StreamKind.HISTORY: _Stream._on_history,
    StreamKind.CURVE_RESTART: _Stream._on_curve_restart,
    StreamKind.FINAL: _Stream._on_final,
    StreamKind.FAILED: _Stream._on_failed,
    StreamKind.BEGIN: _Stream._on_begin,
    StreamKind.END: _Stream._on_end,
    StreamKind.STATES: _Stream._on_states,
    StreamKind.FRAME: _Stream._on_frame,
    StreamKind.CATCH_UP: _Stream._on_catch_up,
}
