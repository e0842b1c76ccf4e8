"""A state recording in the 3D viewer, with play/pause, a time slider and a speed: what
``async-plotter replay`` serves, and what ``async-plotter serve``'s history strip opens.

Needs no env code, no TensorFlow and no GL: the recording holds the model; the browser draws.
A ``Replay`` is the model in a viser scene (``view3d``) behind a ``View3DFront``, and a thread
that poses it at the recording's frame rate times the speed, only while a viewer is connected;
the slider (dragged in the browser) seeks. It serves nothing itself: ``ReplayServer`` (the
command) or serve's server answers for its front, behind their token, Host and Origin checks,
through the one ``View3DFront.answer``. ``ReplayPool`` keeps a bounded number of them open for
serve.
"""
import logging
import os
import threading
import time
from typing import Any, Dict, Optional, Tuple

from aiohttp import web

from async_plotter.render.recording import StateRecording, read_recording
from async_plotter.web.address import HttpConfig
from async_plotter.web.server import HttpServer, plain
from async_plotter.view3d.front import View3DFront

logger = logging.getLogger(__name__)

SPEEDS = ("0.25", "0.5", "1", "2", "4")
#: replays one ``ReplayPool`` holds open at once (each a viser server and a playback thread)
MAX_REPLAYS = 4
#: seconds a replay nobody watches stays open (a reload finds it ready), then it is closed
REPLAY_LINGER = 60.0
# Seconds between two looks of a replay nobody watches at whether somebody does now.
_IDLE_POLL = 0.25


class ReplayServer(HttpServer):
    """``async-plotter replay``'s server: only the replay's page and its socket, at ``/``."""

    def __init__(self, config: HttpConfig, front: View3DFront) -> None:
        super().__init__(config, what="the replay")
        self.front = front

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/{path:.*}", self._route, allow_head=False)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        if request.rel_url.raw_path not in ("/", "/index.html"):
            return plain(404, "not found; open / for the replay")
        return await self.front.answer(request, self)


class Replay:
    """Plays ``recording`` to every browser connected to ``front`` (``start`` the playback;
    ``serve`` to answer for it on an address of its own)."""

    def __init__(self, recording: StateRecording, title: str) -> None:
        import mujoco

        from async_plotter.render.camera import make_camera
        from async_plotter.view3d.scene import Scene3D

        self.recording = recording
        self._mujoco = mujoco
        self.model = recording.load_model()
        self.data = mujoco.MjData(self.model)
        meta = recording.meta
        camera = make_camera(self.model, self.data, meta.get("camera"),
                             int(meta.get("camera_id", -1)))
        self._set(0)
        self.scene = Scene3D(self.model, self.data, camera, title)
        self.front = View3DFront()
        self.front.connect(self.scene.port, self.scene.secret)
        self.server: Optional[ReplayServer] = None
        self.url: Optional[str] = None
        self.fps = float(meta.get("fps") or 30.0)
        self.index = 0
        self.playing = True
        self.speed = 1.0
        #: when a viewer was last connected (or the replay opened)
        self.watched_at = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._add_controls()
        self._player = threading.Thread(target=self._play, name="replay-play", daemon=True)

    @property
    def steps(self) -> int:
        """Shown steps in the recording."""
        return len(self.recording.states)

    def start(self) -> "Replay":
        """Play (in a thread)."""
        self._player.start()
        return self

    def serve(self, config: HttpConfig) -> "Replay":
        """Also answer at ``config``'s address (``ReplayServer``, in a thread)."""
        self.server = ReplayServer(config, self.front)
        self.url = self.server.url
        threading.Thread(target=self.server.serve_forever, name="replay-http", daemon=True).start()
        return self

    def seek(self, index: int) -> None:
        """Show step ``index`` (clamped), as the slider does."""
        with self._lock:
            self.index = max(0, min(int(index), self.steps - 1))
            self._show()

    def idle_seconds(self) -> float:
        """Seconds since a viewer was last connected (0 while one is)."""
        return 0.0 if self.front.viewers else time.monotonic() - self.watched_at

    def close(self) -> None:
        """Stop playing and serving."""
        self._stop.set()
        if self.server is not None:
            self.server.close()
        self.scene.close()

    def _add_controls(self) -> None:
        gui = self.scene.server.gui
        meta = self.recording.meta
        policy = (f"iteration {meta['iteration']}"
                  if meta.get("iteration") is not None else f"update {meta.get('update')}")
        gui.add_markdown(f"replay of {policy}: {self.steps} steps, "
                         f"{self.recording.seconds:.1f} s")
        self._play_button = gui.add_button("Pause")
        self._slider = gui.add_slider("step", 0, max(self.steps - 1, 1), 1, 0)
        self._time = gui.add_markdown("t = 0.00 s")
        self._speed = gui.add_dropdown("speed", SPEEDS, initial_value="1")

        @self._play_button.on_click
        def _(_event: Any) -> None:
            self.playing = not self.playing
            self._play_button.label = "Pause" if self.playing else "Play"

        @self._slider.on_update
        def _(event: Any) -> None:
            if event.client is not None:  # dragged in a browser, not set by the playback
                self.seek(self._slider.value)

        @self._speed.on_update
        def _(_event: Any) -> None:
            self.speed = float(self._speed.value)

    def _play(self) -> None:
        next_due = time.monotonic()
        while not self._stop.is_set():
            if not self.front.viewers:  # nothing is posed while nobody watches
                self._stop.wait(_IDLE_POLL)
                next_due = time.monotonic()
                continue
            self.watched_at = time.monotonic()
            next_due += 1.0 / (self.fps * self.speed)
            delay = next_due - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_due = time.monotonic()
            with self._lock:
                # Checked under the lock: paused and then moved by the slider while this thread
                # was waiting for the lock, it must not step past where the slider put it.
                if not self.playing or not self.front.viewers:
                    continue
                self.index = (self.index + 1) % self.steps
                self._show()
                self._slider.value = self.index

    def _show(self) -> None:
        self._set(self.index)
        self._time.content = f"t = {self.recording.times[self.index]:.2f} s"
        if self.front.viewers:
            message = self.scene.pose(self.data)
            if message is not None:
                self.front.broadcast(message)

    def _set(self, index: int) -> None:
        mujoco = self._mujoco
        mujoco.mj_setState(self.model, self.data, self.recording.states[index],
                           mujoco.mjtState.mjSTATE_FULLPHYSICS)
        mujoco.mj_forward(self.model, self.data)


def load_replay(path: str) -> Replay:
    """A playing ``Replay`` of the recording at ``path`` (``RecordingError`` if it is not one),
    titled by the run's label and the file's name."""
    recording = read_recording(path)
    title = recording.meta.get("label") or os.path.basename(path)
    return Replay(recording, f"{title}: {os.path.basename(path)}").start()


def open_replay(path: str, config: HttpConfig) -> Replay:
    """A playing ``Replay`` of the recording at ``path``, served at ``config``'s address."""
    return load_replay(path).serve(config)


def serve_replay(path: str, config: HttpConfig, stop: Optional[threading.Event] = None) -> None:
    """Serve ``path``'s replay until ``stop`` is set (or Ctrl-C)."""
    replay = open_replay(path, config)
    logger.info("replay of %s at %s%s", path, replay.url,
                " (token required: ?token=...)" if config.token else "")
    try:
        (stop or threading.Event()).wait()
    except KeyboardInterrupt:
        pass
    finally:
        replay.close()


class ReplayBusy(Exception):
    """Every replay a pool may hold is being watched."""


class ReplayPool:
    """The replays one server holds open (``async-plotter serve``), by file: opened by the first
    request for one, at most ``limit`` at once. Opening another closes the one watched least
    recently among those nobody watches (none: ``ReplayBusy``); one nobody has watched for
    ``linger`` seconds is closed by the pool's sweeper. Thread-safe; ``open`` blocks (it reads
    the file and builds the scene: call it off the event loop)."""

    def __init__(self, limit: int = MAX_REPLAYS, linger: float = REPLAY_LINGER) -> None:
        self.limit = limit
        self.linger = linger
        self._replays: Dict[Tuple[str, int], Replay] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._sweeper: Optional[threading.Thread] = None

    def __len__(self) -> int:
        return len(self._replays)

    def open(self, path: str) -> Replay:
        """The replay of the recording at ``path`` (a file changed since is opened anew)."""
        key = (os.path.abspath(path), os.stat(path).st_mtime_ns)
        with self._lock:
            if self._closed.is_set():
                raise ReplayBusy("the server is stopping")
            replay = self._replays.get(key)
            if replay is not None:
                replay.watched_at = max(replay.watched_at, time.monotonic())
                return replay
            if len(self._replays) >= self.limit:
                idle = [item for item in self._replays.items() if not item[1].front.viewers]
                if not idle:
                    raise ReplayBusy(f"{self.limit} replays are being watched; try again later")
                victim, _ = max(idle, key=lambda item: item[1].idle_seconds())
                self._replays.pop(victim).close()
            replay = self._replays[key] = load_replay(path)
            if self._sweeper is None:
                self._sweeper = threading.Thread(target=self._sweep,
                                                 name="async_plotter-replays",
                                                 daemon=True)
                self._sweeper.start()
            return replay

    def close(self) -> None:
        """Close every replay; ``open`` refuses from now on."""
        with self._lock:
            self._closed.set()
            replays, self._replays = list(self._replays.values()), {}
        for replay in replays:
            replay.close()

    def _sweep(self) -> None:
        while not self._closed.wait(min(self.linger / 4, 5.0)):
            with self._lock:
                expired = [
                    key for key, replay in self._replays.items()
                    if replay.idle_seconds() > self.linger
                ]
                closing = [self._replays.pop(key) for key in expired]
            for replay in closing:
                replay.close()
