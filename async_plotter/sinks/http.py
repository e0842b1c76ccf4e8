"""``HttpSink``: the frame sink that serves the live page from the render process."""
import logging
import threading
from typing import Any, Callable, Dict, Optional

import numpy as np

from async_plotter.learning_curve import SHOWN_RETURN
from async_plotter.render.history import HistoryPoint
from async_plotter.sinks.base import FrameSink, ShownStep
from async_plotter.web.address import HttpConfig
from async_plotter.web.feed import LiveFeed
from async_plotter.web.server import LiveServer
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo

logger = logging.getLogger(__name__)


class HttpSink(FrameSink):
    """Serves the newest rollout as MJPEG plus a status/curve event stream (``web/server.py``),
    in daemon threads of the render process.

    Args:
        config: where to serve (``parse_http_address``'s result).
        on_url: called with the page's real address once it is serving (the trainer keeps it
            as ``stats["http_url"]``).
        title: shown on the page, e.g. the env's name.
        video_dir: the folder the run's videos are written to (``Plotter(video_dir=...)``): the
            page lists them and plays each, and ``/history/`` shows the run's state recordings
            in 3D (``view3d/replay.py``, opened on the first request for it); None: the page
            has no history strip.
        view: ``"3d"``: the browser draws the scene from body poses (``async_plotter.view3d``,
            at ``/``; the MJPEG page moves to ``/2d/``); ``"2d"``: the MJPEG page only. A scene
            that is not MuJoCo's always gets the MJPEG page.
        listener: the socket the supervisor bound once for the plotter's life
            (``web/listener.py``), so a restarted render process keeps the address; None: bind
            one here (a taken port is then this process's error).
    """

    def __init__(self,
                 config: HttpConfig,
                 on_url: Optional[Callable[[str], None]] = None,
                 title: Optional[str] = None,
                 video_dir: Optional[str] = None,
                 view: str = "2d",
                 listener: Any = None) -> None:
        self._feed = LiveFeed(title or "async_plotter")
        self._title = title or "async_plotter"
        self._front: Any = None
        self._scene3d: Any = None
        if view == "3d":
            from async_plotter.view3d.front import View3DFront

            self._front = View3DFront()
        self._history: Any = None
        if video_dir is not None:
            from async_plotter.view3d.replay import HistoryRoute  # imports no viser

            self._history = HistoryRoute(video_dir)
        try:
            self._server = LiveServer(config, self._feed, video_dir, self._front, listener,
                                      self._history)
        except BaseException:
            self._feed.close()
            raise
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="async_plotter-http",
                                        daemon=True)
        self._thread.start()
        self._closed = False
        self.url = self._server.url
        # The trainer's supervisor logs the address for the user; this is for the worker's log.
        logger.debug("live page at %s%s", self.url, " (token required)" if config.token else "")
        if on_url is not None:
            on_url(self.url)

    def retitle(self, title: str) -> None:
        """Name the page after the scene, known once it comes (the page serves before it)."""
        self._title = self._feed.title = title

    @property
    def port(self) -> int:
        """The port actually bound."""
        return self._server.port

    def attach(self, scene: Any) -> None:
        if self._front is None:
            return
        if scene is None:  # an env that draws its own frames: only pixels can show it
            # The page serves before the scene: a 3D page opened meanwhile is told at once.
            self._front.refuse("this env draws its own frames: reload the page for them")
            self._server.front = self._front = None
            return
        from async_plotter.view3d.scene import Scene3D

        self._scene3d = Scene3D(scene.source_model, scene.data, scene.camera, self._title)
        if self._history is not None:
            self._scene3d.server.gui.add_markdown("[every recording of this run, in 3D](history/)")
        self._front.connect(self._scene3d.port, self._scene3d.secret)

    @property
    def view3d(self) -> Any:
        """The 3D view's front (None without one): ``viewers``, ``bytes_sent``."""
        return self._front

    def wants_pixels(self) -> bool:
        # Nobody watching: no rendering and no encoding at all for this sink.
        return self._feed.has_viewers()

    def begin_episode(self, episode: EpisodeInfo) -> None:
        self._feed.begin_episode(episode)
        if self._scene3d is not None:
            self._scene3d.begin_episode(episode)

    def wants_real_time(self) -> bool:
        # The MJPEG page shows frames as they come, and so does viser for the 3D view's public
        # path; the fast path's front sends each pose when it is due.
        return self._feed.has_viewers() or (self._scene3d is not None and self._scene3d.fast is None
                                            and self._front.viewers > 0)

    def add_step(self, frame: Optional[np.ndarray], step: ShownStep) -> None:
        super().add_step(frame, step)  # the MJPEG page's frame
        # Poses are computed and sent only while a 3D viewer is connected.
        if self._scene3d is not None and self._front.viewers:
            message = self._scene3d.pose(step.data)
            if message is not None:
                self._front.broadcast(message, step.due)

    def add_frame(self, frame: Optional[np.ndarray], episode: EpisodeInfo) -> None:
        self._feed.add_frame(frame, episode)

    def end_episode(self, episode: EpisodeInfo, end: EpisodeEnd) -> None:
        if end.completed:  # a return cut short by a newer policy says nothing about either
            self._feed.end_episode(end.total_reward)
            if self._scene3d is not None:
                self._scene3d.end_episode(end.total_reward)

    def on_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> None:
        self._feed.add_metrics(iteration, metrics)
        if self._scene3d is not None:
            self._scene3d.add_metrics(iteration, metrics)

    def on_curve_restart(self) -> None:
        self._feed.restart_curve()
        if self._scene3d is not None:
            self._scene3d.restart_curve()

    def on_history(self, point: HistoryPoint) -> None:
        # The curve's second line: what the shown policies did, beside the training average.
        self._feed.add_metrics(point.x, {SHOWN_RETURN: point.episode_return})

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.close()
        if self._history is not None:
            self._history.close()
        if self._scene3d is not None:
            self._scene3d.close()
        self._thread.join(timeout=2.0)
