"""The HTTP side of ``async-plotter serve``: ``web.server.HttpServer`` (the live page's connection
handling, access checks and slots) with the overview's routes (``add_routes``): the page, its
events (``hello``, ``rows``, ``live``), each watched experiment's relayed stream (its render
worker started on demand; 503 with the reason over the live limit), its status, recorded videos,
its history in 3D (every state recording, on a scrubber: the recorder's, and the trainer's own
published over Redis at ``x/NAME/history/``), and ``/experiments.json`` for scripts.
Streams are bounded by the relays' ``MAX_VIEWERS`` per experiment and ``MAX_STREAMS`` in all.
"""
import asyncio
import logging
import time
from http import HTTPStatus
from typing import Any, Callable, Dict, List, Optional

from aiohttp import web

from async_plotter.channel.redis.wire import valid_experiment
from async_plotter.render.recording import RecordingError
from async_plotter.serve.history import History
from async_plotter.serve.live import LiveLimit, LiveManager
from async_plotter.serve.published import PublishedHistories
from async_plotter.web.address import HttpConfig
from async_plotter.web.feed import unsent_bytes
from async_plotter.view3d.replay import ReplayBusy, ReplayPool
from async_plotter.web.server import HttpServer, event, json_answer, load_page, plain

logger = logging.getLogger("async_plotter")

#: streams in all (each relay also caps its own viewers)
MAX_STREAMS = 128
#: seconds ``/experiments.json`` waits for the catalog's first scan when no page started it
SCRIPT_WAIT = 5.0
#: seconds a first request for a published history waits for its first recording
PUBLISHED_WAIT = 10.0
#: seconds between two sends of an events stream (changes in between are sent together)
EVENTS_INTERVAL = 0.5
#: seconds an events stream waits for news before it sends the live views' figures anyway
LIVE_REFRESH = 1.0
# Seconds between looks at the catalog's version while an events stream waits for news.
_CATALOG_POLL = 0.1


class ServeServer(HttpServer):
    """Serves the overview page, its events, the relayed streams and the recorded videos.

    Args:
        config: where to serve (``parse_http_address``'s result: loopback, or a token).
        catalog: the experiments (``Catalog``); held while an events stream is open.
        live: the live views (``LiveManager``).
        history: the recorded videos, or None without ``--record-dir``.
        info: extra fields for the ``hello`` event (e.g. the recorder's settings).
        replays: the 3D replays of state recordings, or None (the 3D view's extra is not
            installed).
        published: the histories trainers publish (``serve/published.py``), or None.
    """

    def __init__(self,
                 config: HttpConfig,
                 catalog: Any,
                 live: LiveManager,
                 history: Optional[History] = None,
                 info: Optional[Callable[[], Dict[str, Any]]] = None,
                 replays: Optional[ReplayPool] = None,
                 published: Optional[PublishedHistories] = None) -> None:
        super().__init__(config, "the experiments' page")
        self.page = load_page("async_plotter.serve")
        self.catalog = catalog
        self.live = live
        self.history = history
        self.replays = replays
        self.published = published
        self._info = info or (lambda: {})
        self._streams = 0

    # ------------------------------------------------------------------------ routing

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/", self._page, allow_head=False)
        router.add_get("/index.html", self._page, allow_head=False)
        router.add_get("/events", self._overview, allow_head=False)
        router.add_get("/experiments.json", self._experiments, allow_head=False)
        router.add_get("/x/{name}/stream.mjpg", self._live_stream, allow_head=False)
        router.add_get("/x/{name}/status", self._status, allow_head=False)
        router.add_get("/x/{name}/video/{file}", self._video, allow_head=False)
        router.add_get("/x/{name}/replay/{file}", self._replay, allow_head=False)
        router.add_post("/x/{name}/replay/pick", self._pick)
        router.add_get("/x/{name}/history/", self._published_history, allow_head=False)
        router.add_post("/x/{name}/history/pick", self._published_history)

    async def _page(self, request: web.Request) -> web.StreamResponse:
        # The base Content-Security-Policy already lets it play recorded videos (media-src).
        return web.Response(body=self.page, content_type="text/html", charset="utf-8")

    async def _experiments(self, request: web.Request) -> web.StreamResponse:
        # A script's call is a user of the catalog as a page is: no page open, it starts it.
        rows = await self.in_worker(self.catalog.rows_for_a_script, SCRIPT_WAIT)
        return json_answer({"experiments": rows})

    async def _status(self, request: web.Request) -> web.StreamResponse:
        name = _experiment(request)
        session = self.live.session(name)
        videos = [] if self.history is None else await self.in_worker(self.history.videos, name)
        return json_answer({
            "name": name,
            "live": None if session is None else session.status(),
            "refused": self.live.limit_problem(name),
            "videos": [video.as_json() for video in videos],
        })

    async def _video(self, request: web.Request) -> web.StreamResponse:
        name = _experiment(request)
        history = self.history
        path = None if history is None else await self.in_worker(history.path, name,
                                                                 request.match_info["file"])
        if path is None:
            return plain(HTTPStatus.NOT_FOUND, "no such video")
        return await self.send_video(request, path)

    async def _replay(self, request: web.Request) -> web.StreamResponse:
        name = _experiment(request)
        history, replays = self.history, self.replays
        if history is None or replays is None:
            return plain(
                HTTPStatus.NOT_FOUND, "no 3D replays here: they need --record-dir and "
                "the 3D view (pip install -e .[view3d])")
        path = await self.in_worker(history.path, name, request.match_info["file"], True)
        if path is None:
            return plain(HTTPStatus.NOT_FOUND, "no such recording")
        return await self._open_replay(request, path, select=request.match_info["file"])

    async def _published_history(self, request: web.Request) -> web.StreamResponse:
        """The run's history its trainer publishes, in 3D: the page, its socket, a curve click."""
        name = _experiment(request)
        if self.published is None or self.replays is None:
            return plain(HTTPStatus.NOT_FOUND,
                         "no 3D history here: it needs the 3D view (pip install -e .[view3d])")
        folder = await self.in_worker(self.published.folder, name, PUBLISHED_WAIT)
        if folder is None:
            return plain(
                HTTPStatus.NOT_FOUND, f"no history recording of {name} came within "
                f"{PUBLISHED_WAIT:g} s: its trainer publishes them with channel=... and a MuJoCo "
                "env (history=True, the default); this server's log names any it refused")
        return await self._open_replay(request, folder)

    async def _open_replay(self,
                           request: web.Request,
                           path: str,
                           select: Optional[str] = None) -> web.StreamResponse:
        try:
            replay = await self.in_worker(self.replays.open, path)
        except ReplayBusy as busy:
            self.dropped["replays busy"] += 1
            return plain(HTTPStatus.SERVICE_UNAVAILABLE, str(busy), {"Retry-After": "5"})
        except (RecordingError, OSError, ValueError) as error:
            logger.warning("serve: cannot replay %s: %s", path, error)
            return plain(HTTPStatus.NOT_FOUND, "not a readable recording")
        return await replay.answer(request, self, select=select)

    async def _pick(self, request: web.Request) -> web.StreamResponse:
        """A click on the curve of an experiment's history open here."""
        name = _experiment(request)
        history, replays = self.history, self.replays
        replay = None
        if history is not None and replays is not None:
            folder = await self.in_worker(history.folder, name)
            replay = replays.get(folder)
        if replay is None:
            return plain(HTTPStatus.NOT_FOUND, "no such history open")
        return await replay.answer(request, self)

    # ------------------------------------------------------------------- events

    async def _overview(self, request: web.Request) -> web.StreamResponse:
        catalog = self.catalog
        state: Dict[str, Any] = {"seen": 0, "live": None, "problem": None, "hello": True}

        def produce() -> List[bytes]:
            chunks = []
            if state.pop("hello", False):
                hello = dict(self._info(), max_live=self.live.max_live, grace=self.live.grace)
                chunks.append(event("hello", hello))
            rows, removed, state["seen"] = catalog.changes_since(state["seen"])
            if rows or removed or removed is None or catalog.problem != state["problem"]:
                state["problem"] = catalog.problem
                chunks.append(
                    event(
                        "rows", {
                            "rows": rows,
                            "removed": removed or [],
                            "reset": removed is None,
                            "problem": state["problem"],
                            "now": time.time()
                        }))
            live = self.live.status()
            if live != state["live"]:
                chunks.append(event("live", dict(live, now=time.time())))
                state["live"] = live
            return chunks

        async def wait() -> None:
            # Changes that come meanwhile are sent together, at most every EVENTS_INTERVAL;
            # without any, the live views' figures (frames/s) are refreshed at least every
            # EVENTS_INTERVAL + LIVE_REFRESH.
            await asyncio.sleep(EVENTS_INTERVAL)
            deadline = time.monotonic() + LIVE_REFRESH
            while catalog.version == state["seen"] and time.monotonic() < deadline:
                await asyncio.sleep(_CATALOG_POLL)

        catalog.acquire()
        try:
            return await self.send_events(request, produce, wait)
        finally:
            catalog.release()

    # ------------------------------------------------------------------- streams

    async def _live_stream(self, request: web.Request) -> web.StreamResponse:
        name = _experiment(request)
        client = request.query.get("client", "")[:64]
        if self._streams >= MAX_STREAMS:
            self.dropped["streams full"] += 1
            return plain(HTTPStatus.SERVICE_UNAVAILABLE, "too many streams; try again")
        self._streams += 1
        try:
            transport = request.transport
            sock = None if transport is None else transport.get_extra_info("socket")
            loop = asyncio.get_running_loop()
            # watch() may wait for a live view to stop and make room: not in the loop.
            watching = loop.run_in_executor(None, self.live.watch, name, client,
                                            lambda: self.evict(transport, "stream"),
                                            lambda: unsent_bytes(sock))
            try:
                session, viewer = await asyncio.shield(watching)
            except LiveLimit as refusal:
                self.dropped["over the live limit"] += 1
                return plain(HTTPStatus.SERVICE_UNAVAILABLE, str(refusal), {"Retry-After": "5"})
            except asyncio.CancelledError:  # the browser left while it waited: free its slot
                watching.add_done_callback(self._leave_later)
                raise
            try:
                session.relay.pull_on(loop)
                return await self.send_frames(request, session.relay.parts, viewer)
            finally:
                self.live.leave(session, viewer)
        finally:
            self._streams -= 1

    def _leave_later(self, watching: "asyncio.Future[Any]") -> None:
        if not watching.cancelled() and watching.exception() is None:
            self.live.leave(*watching.result())


def _experiment(request: web.Request) -> str:
    """The experiment a route names (404 for a name no experiment can have)."""
    name = request.match_info["name"]
    if not valid_experiment(name):
        raise web.HTTPNotFound()
    return name
