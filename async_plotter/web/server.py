"""The HTTP server of the live page: aiohttp on one event loop thread of the render process.

Routes (all ``GET``, behind ``web/access.py``'s checks): ``/`` (``page.html``, self-contained),
``/stream.mjpg`` (the newest frames as MJPEG; each part's ``X-Update``, ``X-Iteration``,
``X-Episode``, ``X-Step`` and ``X-Frame-Time`` say which policy it shows and how old it is),
``/events`` (server-sent ``status`` and ``metrics``, the curve kept so far on connect) and, with a
video folder, ``/videos.json`` and ``/videos/<name>`` (byte ranges, so a browser can seek).
MJPEG in an ``<img>`` plays in every browser without a script and passes proxies and SSH tunnels;
each stream sends the newest frame once the previous one reached the kernel, so a slow browser
only skips its own frames.

``HttpServer`` is what the live page and ``async-plotter serve`` share: a connection costs a
socket and a buffer until its headers are complete (``_Waiting``), then access is checked before
any route, then streams hold slots; the limits below and why are in docs/security.md.
"""
import asyncio
import collections
import contextlib
import json
import logging
import os
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from importlib import resources
from typing import (Any, Awaitable, Callable, Dict, Iterator, List, Optional, Set, Tuple, TypeVar)

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from async_plotter.web import access
from async_plotter.web.address import HttpConfig
from async_plotter.web.listener import bind_listener, join_host_port
from async_plotter.web.feed import (BOUNDARY, FeedClosed, FrameMeta, LiveFeed, NewestSlots, Viewer,
                                    ViewerEvicted, unsent_bytes)
from async_plotter.render.videos import list_videos, video_path

logger = logging.getLogger(__name__)

STATUS_INTERVAL = 0.25  # s between status events while the picture plays
KEEPALIVE_INTERVAL = 15.0  # s; proxies and tunnels drop connections that stay silent
STREAM_SEND_BUFFER = 64 * 1024  # bytes (Linux doubles it): a few 480x480 JPEGs
# A client that takes no bytes of an answer for this long is dropped.
SOCKET_TIMEOUT = 20.0
#: seconds from accepting a connection to the end of its request headers, in total
HEADER_DEADLINE = 5.0
#: connections accepted whose headers have not arrived yet; a new one evicts the oldest
MAX_PENDING = 128
#: bytes of request line and headers accepted (browsers send under 2 KiB)
MAX_HEADER_BYTES = 16 * 1024
#: threads for the answers that touch the disk (listing a folder)
PAGE_WORKERS = 4
#: short answers at once (being made or sent); beyond this, 503
PAGE_QUEUE = 64
#: simultaneous /events streams; a new one takes the oldest one's slot
MAX_EVENT_STREAMS = 16
#: recorded videos being sent at once; a new one takes the oldest one's slot (a browser that
#: seeks abandons its earlier request for a new one)
MAX_VIDEO_SENDS = 8
# Connections accepted per turn of the loop, so that waiting headers are read between bursts.
_ACCEPT_BATCH = 32
# aiohttp's connection settings: no lingering to read a body nobody asked for; the header limits
# are ours (MAX_HEADER_BYTES in all, checked before aiohttp sees them).
_CONNECTION = dict(keepalive_timeout=HEADER_DEADLINE,
                   lingering_time=0.0,
                   max_line_size=MAX_HEADER_BYTES,
                   max_field_size=MAX_HEADER_BYTES,
                   max_headers=128,
                   access_log=None)

_SECURITY_HEADERS = {
    "Cache-Control":
    "no-store",
    "X-Content-Type-Options":
    "nosniff",
    # The token may be in the page's URL; never leak it to other sites.
    "Referrer-Policy":
    "no-referrer",
    # The page is self-contained: forbid the browser from fetching anything from elsewhere.
    # Media from this server only: the pages play the recorded videos in a <video>.
    "Content-Security-Policy": ("default-src 'none'; img-src 'self' data:; media-src 'self'; "
                                "connect-src 'self'; style-src 'unsafe-inline'; "
                                "script-src 'unsafe-inline'; base-uri 'none'; "
                                "form-action 'none'; frame-ancestors 'none'"),
    # Other origins may not read our responses (a browser enforces it for <img> and fetch).
    "Cross-Origin-Resource-Policy":
    "same-origin",
}

Result = TypeVar("Result")


def load_page(package: str = "async_plotter.web") -> bytes:
    """A page's HTML (``page.html``, package data of ``package``)."""
    return resources.files(package).joinpath("page.html").read_bytes()


class _Waiting:
    """An accepted connection whose request headers are still arriving: a socket and a buffer
    on the loop, no aiohttp handler yet, which would cost ~20 times as much (docs/security.md)."""

    __slots__ = ("sock", "head", "timer")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.head = bytearray()
        self.timer: Optional[asyncio.TimerHandle] = None


class _Connection(RequestHandler):
    """aiohttp's connection handler, given a connection whose request headers are complete."""

    def __init__(self, owner: "HttpServer", manager: web.Server, head: bytes,
                 **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.owner = owner
        self._head = head

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.owner._open[self] = None
        head, self._head = self._head, b""
        self.data_received(head)  # before anything the transport reads after it

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self.owner._open.pop(self, None)
        super().connection_lost(exc)

    def handle_error(self,
                     request: Any,
                     status: int = 500,
                     exc: Optional[BaseException] = None,
                     message: Optional[str] = None) -> web.StreamResponse:
        if status >= 500:
            return super().handle_error(request, status, exc, message)
        # A malformed request: anybody can send one, so it is counted, not logged.
        self.owner.dropped[f"malformed {status}"] += 1
        response = plain(status, "malformed request")
        response.headers.update(_SECURITY_HEADERS)
        response.force_close()
        return response


class _Video(web.FileResponse):
    """A file sent in the handler (within a slot), so not again by aiohttp afterwards."""

    async def prepare(self, request: web.BaseRequest) -> Any:
        if self.prepared:
            return None
        return await super().prepare(request)


class HttpServer:
    """The shared part of the live page's and ``serve``'s servers. Binds in the constructor, so
    a taken port fails at once; ``serve_forever`` runs the event loop (call it in a thread);
    ``close`` from another thread stops everything. Subclasses add their routes
    (``add_routes``).

    Args:
        config: where to serve (``parse_http_address``'s result).
        what: what is served, for the error of a taken port.
        listener: a socket already listening on ``config``'s address (``web/listener.py``:
            the live page's, bound once for the plotter's life); None: bind one here. Closed
            with the server either way (a copy handed to this process: the original stays).
    """

    def __init__(self,
                 config: HttpConfig,
                 what: str = "the live page",
                 listener: Optional[socket.socket] = None) -> None:
        self.config = config
        if listener is None:
            listener = bind_listener(config, what)
        else:
            listener.setblocking(False)
        self._listener = listener
        self.server_address = self._listener.getsockname()
        self.port = self.server_address[1]
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop: Optional["asyncio.Future[None]"] = None
        self._stopping = False
        # Whether serve_forever has begun, decided against close() under this lock: close
        # before it began closes the listener and serve_forever returns at once; after, the
        # loop owns the listener and close() waits for it to end.
        self._state_lock = threading.Lock()
        self._began = False
        self._stopped = threading.Event()
        self._open: Dict[Any, None] = {}  # every connection, in order
        self._pending: "collections.OrderedDict[int, _Waiting]" = collections.OrderedDict()
        self._handler: Optional[Callable[[bytes], _Connection]] = None
        self._handing_over: Set["asyncio.Task[None]"] = set()
        #: the connections holding a slot, by kind (a kind is made by its first ``slot``)
        self._slots: Dict[str, "collections.OrderedDict[Any, asyncio.BaseTransport]"] = (
            collections.defaultdict(collections.OrderedDict))
        self._short = 0  # short answers being made or sent
        self._workers = ThreadPoolExecutor(PAGE_WORKERS, thread_name_prefix="async_plotter-http")
        #: connections refused or dropped, by reason (for tests, benchmarks and the curious)
        self.dropped: Dict[str, int] = collections.Counter()

    @property
    def url(self) -> str:
        """Where a browser on this machine (or at the end of an SSH tunnel) opens the page."""
        host = self.server_address[0]  # the address bound ("localhost" resolved)
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()  # every interface: name the machine
        return f"http://{join_host_port(host, self.port)}/"

    def connection_count(self) -> int:
        """Connections open now: waiting for their headers, or being served."""
        return len(self._pending) + len(self._open)

    def add_routes(self, router: web.UrlDispatcher) -> None:
        """Add the server's routes (called in the loop, once)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------ the loop

    def serve_forever(self) -> None:
        """Serve until ``close`` (at once if it was called first)."""
        with self._state_lock:
            if self._stopping:
                return
            self._began = True
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)  # this thread's
        self.loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            try:
                left = asyncio.all_tasks(loop)  # e.g. serve's relays reading upstream
                for task in left:
                    task.cancel()
                if left:
                    loop.run_until_complete(asyncio.wait(left))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                self._listener.close()
                self._stopped.set()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        with self._state_lock:  # close() sees either the future or, below, _stopping set
            self._stop = loop.create_future()
        self._bind(loop)
        app = web.Application(middlewares=[self._guard])
        app.on_response_prepare.append(_secure)
        self.add_routes(app.router)
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0, **_CONNECTION)
        await runner.setup()
        manager = runner.server
        self._handler = lambda head: _Connection(self, manager, head, loop=loop, **_CONNECTION)
        loop.add_reader(self._listener.fileno(), self._accept)
        try:
            if not self._stopping:
                await self._stop
        finally:
            loop.remove_reader(self._listener.fileno())
            for waiting in list(self._pending.values()):
                self._forget(waiting, None)
            # Streams end on their own (their feeds are closed, or they see _stopping): each
            # connection closes after its answer, within shutdown_timeout; what is left after
            # (a client that takes nothing) is reset.
            await runner.cleanup()
            for connection in list(self._open):
                _abort(connection.transport)  # type: ignore[attr-defined]
            self._workers.shutdown(wait=False, cancel_futures=True)

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind what wakes coroutines to this loop (subclasses: their pulses)."""

    # -------------------------------------------------------------- connections

    def _accept(self) -> None:
        assert self.loop is not None
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of file descriptors: make room, try next turn
                logger.debug("accept failed: %s", error)
                if self._pending:
                    self._forget(next(iter(self._pending.values())), "accept failed")
                return
            sock.setblocking(False)
            while len(self._pending) >= MAX_PENDING:
                self._forget(next(iter(self._pending.values())),
                             "evicted while waiting for headers")
            waiting = _Waiting(sock)
            fd = sock.fileno()
            self._pending[fd] = waiting
            self.loop.add_reader(fd, self._read_head, waiting)
            waiting.timer = self.loop.call_later(HEADER_DEADLINE, self._forget, waiting,
                                                 "headers too slow")

    def _forget(self, waiting: _Waiting, reason: Optional[str], close: bool = True) -> None:
        """Stop waiting for ``waiting``'s headers (and close it, counted under ``reason``)."""
        if self._pending.pop(waiting.sock.fileno(), None) is None:
            return
        assert self.loop is not None
        self.loop.remove_reader(waiting.sock.fileno())
        if waiting.timer is not None:
            waiting.timer.cancel()
        if reason is not None:
            self.dropped[reason] += 1
        if close:
            waiting.sock.close()

    def _read_head(self, waiting: _Waiting) -> None:
        try:
            data = waiting.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._forget(waiting, "closed before its headers")
            return
        start = max(len(waiting.head) - 3, 0)
        waiting.head += data
        if waiting.head.find(b"\r\n\r\n", start) >= 0:
            self._forget(waiting, None, close=False)
            assert self.loop is not None
            task = self.loop.create_task(self._hand_over(waiting))
            self._handing_over.add(task)  # the loop keeps only a weak reference
            task.add_done_callback(self._handing_over.discard)
        elif len(waiting.head) > MAX_HEADER_BYTES:
            try:
                waiting.sock.send(
                    _plain_bytes(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                                 "request headers too large"))
            except OSError:
                pass
            self._forget(waiting, "request headers too large")

    async def _hand_over(self, waiting: _Waiting) -> None:
        """The headers are complete: aiohttp takes the connection from here."""
        assert self.loop is not None and self._handler is not None
        head, handler = bytes(waiting.head), self._handler
        try:
            await self.loop.connect_accepted_socket(lambda: handler(head), waiting.sock)
        except OSError:
            waiting.sock.close()

    # -------------------------------------------------------------- every request

    @web.middleware
    async def _guard(
            self, request: web.Request,
            handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """The checks before any route, and the sending of short answers."""
        # POST reaches only the routes that take it (the 3D history's clicks), after the same
        # checks: a page on another origin cannot send one (its Origin, Sec-Fetch-Site).
        if request.method not in ("GET", "POST"):
            return plain(HTTPStatus.METHOD_NOT_ALLOWED, "only GET and POST are served",
                         {"Allow": "GET, POST"})
        if access.ambiguous(request):
            self.dropped["malformed 400"] += 1
            return plain(HTTPStatus.BAD_REQUEST, "malformed request")
        refusal = access.refusal(self.config, request)
        if refusal is not None:
            code, text, extra = refusal
            self.dropped[f"refused {int(code)}"] += 1
            return plain(code, text, extra)
        logger.debug("%s %s", request.remote, request.path)
        if self._short >= PAGE_QUEUE:
            self.dropped["page queue full"] += 1
            return plain(HTTPStatus.SERVICE_UNAVAILABLE, "busy; try again")
        self._short += 1
        try:
            try:
                response = await handler(request)
            except web.HTTPException as error:
                response = plain(error.status, error.reason.lower())
            if response.prepared:  # a stream: it has sent itself
                return response
            # A short answer: sent here, so that one a client does not take is dropped.
            deadline = self._deadline(request.transport, "too slow to take an answer")
            try:
                await response.prepare(request)
                await response.write_eof()
            except ConnectionError:
                pass  # the client went away
            finally:
                deadline.cancel()
            return response
        finally:
            self._short -= 1

    async def in_worker(self, make: Callable[..., Result], *args: Any) -> Result:
        """``make(*args)`` on a page worker thread (for what touches the disk)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._workers, make, *args)

    def _deadline(self, transport: Optional[asyncio.BaseTransport], reason: str) -> Any:
        """Drop the connection unless cancelled within ``SOCKET_TIMEOUT``."""
        assert self.loop is not None
        return self.loop.call_later(SOCKET_TIMEOUT, self._drop, transport, reason)

    def _drop(self, transport: Optional[asyncio.BaseTransport], reason: str) -> None:
        if transport is not None and not transport.is_closing():
            self.dropped[reason] += 1
            _abort(transport)

    def evict(self, transport: Optional[asyncio.BaseTransport], what: str) -> None:
        """A newer client took this one's slot: reset its connection (from any thread)."""
        loop = self.loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._drop, transport, f"{what} evicted")
        except RuntimeError:  # the loop is closed
            pass

    # -------------------------------------------------------------- what streams share

    @contextlib.contextmanager
    def streaming(self) -> Iterator[None]:
        """While a stream (MJPEG, events, a video, a 3D socket) is sent: it is bounded by its
        own slots, so the guard stops counting it among the ``PAGE_QUEUE`` short answers."""
        self._short -= 1
        try:
            yield
        finally:
            self._short += 1

    async def send_frames(self, request: web.Request, slots: NewestSlots[Tuple[bytes, FrameMeta]],
                          viewer: Viewer) -> web.StreamResponse:
        """Send ``slots``' newest MJPEG parts (``mjpeg_part``) to ``viewer`` until it leaves or
        loses its slot.

        A part is taken once the previous one has reached the kernel, whose send buffer is kept
        small: newest-wins only works if the kernel does not queue seconds of frames for a slow
        browser (it would autotune up to megabytes)."""
        with self.streaming():
            transport = request.transport
            assert transport is not None
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SEND_BUFFER)
                # asyncio turns Nagle's algorithm off; a stream keeps it on, as plain sockets
                # have it: one write per frame coalesces the same, and with it a client that
                # reads nothing acknowledges more slowly, and loses its slot sooner (with it
                # off, 8-11 readers lost theirs to 9 stuck clients instead of 7).
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
            # Writing waits whenever anything is left in user space (see _send).
            transport.set_write_buffer_limits(high=0)
            response = web.StreamResponse(
                headers={
                    "Content-Type": f"multipart/x-mixed-replace; boundary={BOUNDARY}",
                    "X-Accel-Buffering": "no",  # nginx: pass streams through
                })
            await response.prepare(request)
            await self._send(request, response, f"--{BOUNDARY}\r\n".encode())
            try:
                while True:
                    part = (await slots.next(viewer))[0]
                    # The boundary goes right after the frame, not before the next one:
                    # browsers show a part only once its boundary arrives.
                    await self._send(request, response, part)
                    slots.frame_sent(viewer, len(part))
            except (FeedClosed, ViewerEvicted, ConnectionError):
                pass  # stopping, or the browser went away (reset, broken pipe, evicted)
            return response

    async def send_events(self, request: web.Request, produce: Callable[[], List[bytes]],
                          wait: Callable[[], Awaitable[Any]]) -> web.StreamResponse:
        """A server-sent events stream: ``produce()``'s events whenever ``wait()`` returns, a
        keep-alive comment when there were none for ``KEEPALIVE_INTERVAL``. Holds one of
        ``MAX_EVENT_STREAMS`` slots (a new stream takes the oldest one's)."""
        with self.streaming(), self.slot("events", request, MAX_EVENT_STREAMS):
            response = web.StreamResponse(headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "X-Accel-Buffering": "no"
            })
            await response.prepare(request)
            await self._send(request, response, b"retry: 1000\n\n")
            last_write = 0.0
            try:
                while not self._stopping:
                    chunks = produce()
                    now = time.monotonic()
                    if not chunks and now - last_write > KEEPALIVE_INTERVAL:
                        chunks.append(b": keep-alive\n\n")
                    if chunks:
                        await self._send(request, response, b"".join(chunks))
                        last_write = now
                    await wait()
            except (FeedClosed, ConnectionError):
                pass
            return response

    async def send_video(self, request: web.Request, path: str) -> web.StreamResponse:
        """The mp4 at ``path``, all of it or the range asked for (aiohttp's ``FileResponse``),
        in one of ``MAX_VIDEO_SENDS`` slots (a new one takes the oldest one's)."""
        with self.streaming(), self.slot("video", request, MAX_VIDEO_SENDS):
            response = _Video(path, headers={"Content-Type": "video/mp4"})
            try:
                await response.prepare(request)  # a file pruned meanwhile: 404
                await response.write_eof()
            except ConnectionError:
                pass  # the browser went away (or seeked: evicted)
            return response

    @contextlib.contextmanager
    def slot(self, kind: str, request: web.Request, limit: int) -> Iterator[None]:
        """One of ``limit`` slots of ``kind`` for this request's connection while it is held
        (a full set loses its oldest: that connection is reset)."""
        slots = self._slots[kind]
        if len(slots) >= limit:
            _, victim = slots.popitem(last=False)
            self._drop(victim, f"{kind} evicted")
        key = object()
        slots[key] = request.transport
        try:
            yield
        finally:
            slots.pop(key, None)

    async def _send(self, request: web.Request, response: web.StreamResponse, data: bytes) -> None:
        """Write ``data`` and wait until all of it has reached the kernel; a client that takes
        none of it for ``SOCKET_TIMEOUT`` is dropped."""
        deadline = self._deadline(request.transport, "stream too slow")
        try:
            await response.write(data)
            transport = request.transport
            if transport is not None and transport.get_write_buffer_size():
                await request.writer.drain()
        finally:
            deadline.cancel()

    # ------------------------------------------------------------------------ stopping

    def close(self) -> None:
        """Stop accepting, end every stream, release the port. Call from another thread than
        ``serve_forever``'s."""
        with self._state_lock:
            self._stopping = True
            began, stop = self._began, self._stop
        if not began:
            self._listener.close()
            return
        if stop is not None:
            try:
                stop.get_loop().call_soon_threadsafe(lambda: stop.done() or stop.set_result(None))
            except RuntimeError:  # already closed
                pass
        self._stopped.wait(5.0)


class LiveServer(HttpServer):
    """Serves one ``LiveFeed``.

    Args:
        config: where to serve (``parse_http_address``'s result).
        feed: the frames, status and curve to serve.
        video_dir: the folder of the run's recorded videos, served as ``videos.json`` and
            ``videos/<name>``; None: no videos (both routes are 404).
        front: what answers for ``/`` (the 3D view's, ``View3DFront``: ``answer(request,
            server)``), the MJPEG page then at ``/2d/``; None: the MJPEG page at ``/``.
        listener: as ``HttpServer``'s.
        history: what answers for ``/history/`` and ``POST /history/pick`` (the run's history
            in 3D, ``view3d.replay.HistoryRoute``: ``answer(request, server)``); None: 404.
    """

    def __init__(self,
                 config: HttpConfig,
                 feed: LiveFeed,
                 video_dir: Optional[str] = None,
                 front: Any = None,
                 listener: Optional[socket.socket] = None,
                 history: Any = None) -> None:
        super().__init__(config, listener=listener)
        self.feed = feed
        self.video_dir = None if video_dir is None else os.path.abspath(video_dir)
        self.page = load_page()
        self.front = front
        self.history = history

    def close(self) -> None:
        self.feed.close()  # streams and events streams end
        super().close()

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.feed.frames.pulse.bind(loop)
        self.feed.changes.bind(loop)

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/{path:.*}", self._route, allow_head=False)
        router.add_post("/history/pick", self._route)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        client = request.query.get("client", "")[:64]
        # Only the last segments count, so the page also works behind a proxy's path prefix.
        raw_path = request.rel_url.raw_path
        parent, _, route = raw_path.rstrip("/").rpartition("/")
        if self.history is not None and (parent, route) in (("", "history"), ("/history", "pick")):
            if raw_path == "/history":  # the page's own requests are relative to its folder
                query = f"?{request.query_string}" if request.query_string else ""
                return web.Response(status=HTTPStatus.FOUND,
                                    headers={"Location": "history/" + query})
            return await self.history.answer(request, self)
        if request.method != "GET":
            return plain(HTTPStatus.METHOD_NOT_ALLOWED, "not here", {"Allow": "GET"})
        if self.front is not None and parent == "" and route in ("", "index.html"):
            return await self.front.answer(request, self)
        if route in ("", "index.html", "2d"):
            return web.Response(body=self.page, content_type="text/html", charset="utf-8")
        if route == "stream.mjpg":
            return await self._stream(request, client)
        if route == "events":
            return await self._events(request, client)
        if route == "videos.json" and self.video_dir is not None:
            videos = await self.in_worker(list_videos, self.video_dir)
            return json_answer({"videos": [video.as_json() for video in videos]})
        if parent.rpartition("/")[2] == "videos" and self.video_dir is not None:
            path = await self.in_worker(video_path, self.video_dir, route)
            if path is None:
                return plain(HTTPStatus.NOT_FOUND, "no such video")
            return await self.send_video(request, path)
        return plain(HTTPStatus.NOT_FOUND, "not found; open / for the live page")

    async def _stream(self, request: web.Request, client: str) -> web.StreamResponse:
        transport = request.transport
        sock = None if transport is None else transport.get_extra_info("socket")
        try:
            viewer = self.feed.add_viewer(client,
                                          on_evict=lambda: self.evict(transport, "stream"),
                                          unsent=lambda: unsent_bytes(sock))
        except FeedClosed:
            return plain(HTTPStatus.SERVICE_UNAVAILABLE, "stopping")
        try:
            return await self.send_frames(request, self.feed.frames, viewer)
        finally:
            self.feed.remove_viewer(viewer)

    async def _events(self, request: web.Request, client: str) -> web.StreamResponse:
        feed = self.feed
        changes = feed.changes
        state: Dict[str, Any] = {"points": 0, "status": None, "seen": changes.generation}

        def produce() -> List[bytes]:
            if feed.closed:
                raise FeedClosed()
            state["seen"] = changes.generation
            points, state["points"], reset, shown = feed.metrics_since(state["points"])
            chunks = []
            if points or reset:
                chunks.append(event("metrics", {"points": points, "reset": reset, "shown": shown}))
            # The page shows its strip of recorded videos only where there are some to fetch.
            status = dict(feed.status(client), videos=self.video_dir is not None)
            if status != state["status"]:
                chunks.append(event("status", status))
                state["status"] = status
            return chunks

        # Wakes at once for a new episode (a newer policy) or a curve point; otherwise after
        # STATUS_INTERVAL, which paces the step and frames/s updates.
        return await self.send_events(request, produce,
                                      lambda: changes.wait(state["seen"], STATUS_INTERVAL))


# ------------------------------------------------------------------------------ helpers


async def _secure(request: web.Request, response: web.StreamResponse) -> None:
    """Every response: the security headers, and the connection closes after it (an open one
    would be a slot to hold)."""
    for name, value in _SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    response.force_close()


def plain(code: int, text: str, extra: Optional[Dict[str, str]] = None) -> web.Response:
    """A short text answer."""
    return web.Response(status=int(code),
                        text=text + "\n",
                        content_type="text/plain",
                        charset="utf-8",
                        headers=extra)


def json_answer(data: Any) -> web.Response:
    """A JSON answer (no NaN: a browser's JSON.parse rejects it)."""
    return web.Response(body=json.dumps(data, separators=(",", ":"),
                                        allow_nan=False).encode("utf-8"),
                        content_type="application/json")


def _plain_bytes(code: int, text: str) -> bytes:
    """A whole text answer, for a connection aiohttp has no request for."""
    status = HTTPStatus(code)
    body = (text + "\n").encode("utf-8")
    return (f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: text/plain; charset=utf-8"
            f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def event(name: str, data: Any) -> bytes:
    """One server-sent event."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _abort(transport: Optional[asyncio.BaseTransport]) -> None:
    """Reset the connection: what is still queued is dropped, so an evicted slow reader learns
    at once and its kernel buffers are freed, rather than being trickled the frames it was too
    slow for."""
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    transport.abort()
