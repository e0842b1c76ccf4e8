"""``async-plotter replay``: a state recording in the 3D viewer, with play/pause, a time slider and
a speed, served by the live page's server (the same token, Host and Origin checks).

Needs no env code, no TensorFlow and no GL: the recording holds the model; the browser draws.
The playback thread poses the model at the recording's frame rate times the speed, and only
while a viewer is connected; the slider (dragged in the browser) seeks.
"""
import logging
import threading
import time
from typing import Any, Optional

from aiohttp import web

from async_plotter.render.recording import StateRecording
from async_plotter.web.address import HttpConfig
from async_plotter.web.server import HttpServer
from async_plotter.web.view3d import View3DFront

logger = logging.getLogger(__name__)

SPEEDS = ("0.25", "0.5", "1", "2", "4")


class ReplayServer(HttpServer):
    """Serves only the 3D page and its socket."""

    def __init__(self, config: HttpConfig, front: View3DFront) -> None:
        super().__init__(config, what="the replay")
        self.front = front

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/{path:.*}", self._route, allow_head=False)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        from async_plotter.web.server import plain, token_cookie_name

        if request.rel_url.raw_path not in ("/", "/index.html"):
            return plain(404, "not found; open / for the replay")
        if request.headers.get("upgrade", "").lower() != "websocket":
            token = request.query.get("token", "")
            cookie = (token_cookie_name(request), token) if token else None
            return await self.front.page(request, cookie)
        self._short -= 1  # a stream: bounded by its own slots
        try:
            return await self.front.socket(request, self)
        finally:
            self._short += 1


class Replay:
    """Plays ``recording`` to every browser connected to ``config``'s address."""

    def __init__(self, recording: StateRecording, config: HttpConfig, title: str) -> None:
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
        self.server = ReplayServer(config, self.front)
        self.url = self.server.url
        self.fps = float(meta.get("fps") or 30.0)
        self.index = 0
        self.playing = True
        self.speed = 1.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._add_controls()
        self._threads = [
            threading.Thread(target=self.server.serve_forever, name="replay-http", daemon=True),
            threading.Thread(target=self._play, name="replay-play", daemon=True),
        ]

    @property
    def steps(self) -> int:
        """Shown steps in the recording."""
        return len(self.recording.states)

    def start(self) -> None:
        """Serve and play (in threads)."""
        for thread in self._threads:
            thread.start()

    def seek(self, index: int) -> None:
        """Show step ``index`` (clamped), as the slider does."""
        with self._lock:
            self.index = max(0, min(int(index), self.steps - 1))
            self._show()

    def close(self) -> None:
        """Stop playing and serving."""
        self._stop.set()
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
            next_due += 1.0 / (self.fps * self.speed)
            delay = next_due - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_due = time.monotonic()
            if not self.playing or not self.front.viewers:
                continue  # nothing is posed while nobody watches or while paused
            with self._lock:
                self.index = (self.index + 1) % self.steps
                self._show()
                self._slider.value = self.index

    def _show(self) -> None:
        self._set(self.index)
        self._time.content = f"t = {self.recording.times[self.index]:.2f} s"
        if self.front.viewers:
            self.front.broadcast(self.scene.encode_poses(self.data))

    def _set(self, index: int) -> None:
        mujoco = self._mujoco
        mujoco.mj_setState(self.model, self.data, self.recording.states[index],
                           mujoco.mjtState.mjSTATE_FULLPHYSICS)
        mujoco.mj_forward(self.model, self.data)


def open_replay(path: str, config: HttpConfig) -> Replay:
    """A started ``Replay`` of the recording at ``path``."""
    import os

    from async_plotter.render.recording import read_recording

    recording = read_recording(path)
    title = recording.meta.get("label") or os.path.basename(path)
    replay = Replay(recording, config, f"{title}: {os.path.basename(path)}")
    replay.start()
    return replay


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
