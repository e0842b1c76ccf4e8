"""``async-plotter serve``'s assembly: the catalog, the live views, the recorder and the server.
With no page open and no ``record_dir`` nothing runs but the server's accepting thread: the
catalog starts with the first events stream, a render worker with the first stream of an
experiment, and each stops a while after its last user.
"""
import logging
import threading
from typing import Any, Dict, Optional, Tuple

from async_plotter.channel.redis.urls import redact
from async_plotter.channel.redis.signing import Verifier
from async_plotter.until_stopped import until_interrupted
from async_plotter.serve.catalog import Catalog
from async_plotter.serve.history import History
from async_plotter.serve.live import LiveManager
from async_plotter.serve.options import ServeOptions
from async_plotter.serve.published import PublishedHistories
from async_plotter.serve.recorder import Recorder
from async_plotter.serve.server import ServeServer
from async_plotter.serve.viewer import ViewOptions
from async_plotter.view3d import missing_modules
from async_plotter.view3d.replay import ReplayPool

logger = logging.getLogger("async_plotter")


class ServeApp:
    """Runs ``async-plotter serve`` until ``close()`` (or, with ``run()``, Ctrl-C / SIGTERM)."""

    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        verifier = Verifier(options.secret, options.trust_unsigned)
        self.history = History(options.record_dir) if options.record_dir else None
        self.catalog = Catalog(options.url, verifier)
        self.live = LiveManager(self._live_view,
                                options.max_live,
                                options.grace,
                                on_change=self.catalog.poke)
        self.recorder: Optional[Recorder] = None
        if self.history is not None:
            self.recorder = Recorder(self.catalog,
                                     self.history,
                                     self._record_view,
                                     options.record_budget,
                                     options.record_every,
                                     on_video=lambda name: self.catalog.touch(name))
            self.catalog.extra = self._videos
        # State recordings replay in 3D where the extra is installed: those beside the
        # recorder's videos, and the histories trainers publish.
        self.replays: Optional[ReplayPool] = None
        self.published: Optional[PublishedHistories] = None
        if not missing_modules():
            self.replays = ReplayPool()
            self.published = PublishedHistories(options.url, verifier, self._watched)
        self.server = ServeServer(options.http, self.catalog, self.live, self.history, self._info,
                                  self.replays, self.published)
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        name="async_plotter-serve-http",
                                        daemon=True)
        self._closed = False

    @property
    def url(self) -> str:
        """The page's address (without the token)."""
        return self.server.url

    def start(self) -> "ServeApp":
        """Serve in background threads; returns at once."""
        self._thread.start()
        if self.recorder is not None:
            self.recorder.start()
        token = " (add ?token=<token>)" if self.options.http.token else ""
        logger.info("serving the experiments of %s at %s%s", redact(self.options.url), self.url,
                    token)
        return self

    def close(self) -> None:
        """Stop everything: the page, the live workers, the recorder (within ~10 s)."""
        if self._closed:
            return
        self._closed = True
        self.server.close()
        self._thread.join(5.0)
        # The pages first, then the folders of the published histories they follow.
        if self.replays is not None:
            self.replays.close()
        if self.published is not None:
            self.published.close()
        if self.recorder is not None:
            self.recorder.close()
        self.live.close()
        self.catalog.close()

    def run(self) -> int:
        """Serve until Ctrl-C or SIGTERM; returns the exit code."""
        with until_interrupted(self.close) as stop:
            self.start()
            stop.wait()
        return 0

    # ---------------------------------------------------------------------------- inside

    def _view(self, name: str, sinks: Tuple[Any, ...], **cpu: Any) -> ViewOptions:
        options = self.options
        return ViewOptions(options.url,
                           name,
                           options.secret,
                           options.trust_unsigned,
                           sinks,
                           fps=options.fps,
                           max_restarts=options.max_restarts,
                           **cpu)

    def _live_view(self, name: str, sinks: Tuple[Any, ...]) -> ViewOptions:
        return self._view(name, sinks, priority=self.options.priority, budget=self.options.budget)

    def _record_view(self, name: str, sinks: Tuple[Any, ...]) -> ViewOptions:
        # Nice 10, not SCHED_IDLE, where it starved (serve/recorder.py); the bucket bounds it.
        return self._view(name, sinks, priority="low")

    def _watched(self, folder: str) -> bool:
        replay = self.replays.get(folder)
        return replay is not None and bool(replay.front.viewers)

    def _videos(self, name: str) -> Dict[str, Any]:
        history = self.history
        return {"videos": [] if history is None else [v.as_json() for v in history.videos(name)]}

    def _info(self) -> Dict[str, Any]:
        recorder = self.recorder
        return {
            "server": redact(self.options.url),
            "record": recorder is not None,
            "replay3d": self.replays is not None,
            "record_every": self.options.record_every if recorder else None,
            "record_budget": self.options.record_budget if recorder else None,
            "signed_only": self.options.secret is not None,
        }
