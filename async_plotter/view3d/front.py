"""The live page's front for the 3D view: viser's page, and its WebSocket proxied to the viser
server of ``async_plotter.view3d`` (on loopback, behind a secret header).

Every request reaches these handlers only through ``HttpServer``'s guard (``web/access.py``),
on the WebSocket upgrade as on any request, so a page on another origin cannot open the scene's
socket in the user's browser. viser's client connects its socket to the page's own address
without the query string, so a token given as ``?token=`` is also set as a cookie when the page
is served. Before it proxies to viser's server, the front asks it without the secret: if it
answers, the 3D view is refused (503), not served (``guard.open_to_strangers``).

A socket holds one of ``MAX_VIEWERS`` slots (a new one takes the oldest one's), taken only once
its own socket to viser is open (at most ``MAX_SETUPS`` are being opened at once): a burst of
sockets that never finish opening evicts nobody. ``viewers`` is how many are open now, which is
what decides whether the render process poses anything. The render process hands each frame's
poses, already encoded (``view3d/poses.py``, the fast path), to ``broadcast``; every viewer gets
the newest one once the previous has reached its socket (a slow browser skips frames, as with
MJPEG), and only after viser has replayed the scene to it. Poses by the public path come from
viser itself, relayed as its other messages.
"""
import asyncio
import collections
import importlib.util
import logging
import os
import threading
import time
from typing import Any, Deque, List, Optional, Tuple

import aiohttp
from aiohttp import web

try:
    from asyncio import timeout as _within  # Python 3.11+
except ImportError:  # before 3.11 aiohttp itself depends on async-timeout
    from async_timeout import timeout as _within

from async_plotter.render.timeline import now
from async_plotter.view3d.guard import SECRET_HEADER, open_to_strangers
from async_plotter.view3d.poses import replay_done
from async_plotter.web import access

logger = logging.getLogger(__name__)

#: simultaneous 3D viewers; a new one takes the oldest one's slot
MAX_VIEWERS = 16
#: sockets being connected to viser at once (the rest wait their turn)
MAX_SETUPS = 4
#: seconds a socket opened before the scene exists waits for it
SCENE_WAIT = 30.0
#: a socket whose browser takes none of a message for this long is dropped
SEND_TIMEOUT = 20.0

# viser's client is one HTML file whose script unpacks itself (zstd in WebAssembly) into an
# inline module and runs three.js; it fetches nothing from elsewhere (the environment map comes
# over the socket). What it needs beyond the live page's policy: WebAssembly, blob: workers,
# data:/blob: images and the socket back to this server.
PAGE_POLICY = ("default-src 'none'; script-src 'unsafe-inline' 'wasm-unsafe-eval' blob:; "
               "worker-src 'self' blob:; connect-src 'self' data: blob:; "
               "img-src 'self' data: blob:; style-src 'unsafe-inline'; font-src data:; "
               "media-src 'self' blob:; base-uri 'none'; form-action 'none'; "
               "frame-ancestors 'none'")


def viser_page() -> bytes:
    """viser's built client (package data of the ``viser`` wheel)."""
    spec = importlib.util.find_spec("viser")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("viser is not installed; pip install -e .[view3d]")
    folder = list(spec.submodule_search_locations)[0]
    with open(os.path.join(folder, "client", "build", "index.html"), "rb") as file:
        return file.read()


class View3DFront:
    """The 3D page and socket of one live server. ``connect`` names the viser server once the
    scene exists; until then both answer 503."""

    def __init__(self) -> None:
        self._target: Optional[Tuple[int, str]] = None
        #: why the 3D view is refused ("": it is not)
        self._refused = ""
        self._page: Optional[bytes] = None
        self._lock = threading.Lock()
        self._viewers = 0
        self._sockets: "set[_Viewer]" = set()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        #: ``(due, frame)`` poses not yet sent, oldest first
        self._due: Deque[Tuple[float, bytes]] = collections.deque()
        #: when the server's loop wakes next to send what is due (None: no wake pending), and
        #: the timer of that wake (touched in the loop only)
        self._wake_at: Optional[float] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self._setups: Optional[asyncio.Semaphore] = None
        #: sockets opened in all, and bytes sent to browsers (for the benchmark)
        self.opened = 0
        self.bytes_sent = 0

    def connect(self, port: int, secret: str) -> None:
        """The viser server to proxy to (from the render process's thread), once it is seen to
        refuse a request without ``secret``; if it does not, the 3D view is refused."""
        problem = open_to_strangers(port)
        if problem:
            self._refused = f"the 3D view is off: its viser server {problem}"
            logger.error("%s (is viser's guard in place?); refusing to serve it", self._refused)
            return
        self._target = (port, secret)

    def refuse(self, reason: str) -> None:
        """No 3D view after all (the scene turned out to be pixels only): sockets waiting for
        it, and requests from now on, get ``reason``."""
        self._refused = reason

    @property
    def viewers(self) -> int:
        """3D sockets open now."""
        return self._viewers

    def broadcast(self, frame: bytes, due: Optional[float] = None) -> None:
        """One frame's poses to every viewer at ``due`` (``render/timeline.now()``; None: now), from
        any thread; newest wins per viewer. A chunk's poses come at once, a little ahead of
        time: the server's loop is woken once for them and then at each one's time. The render
        process's rule holds here too: a pose handed later is newer, so poses still queued for
        its time or after it are dropped (the render process skipped ahead: a new policy), the
        loop wakes for it at its time even if it meant to wake later, and of the poses due at
        a wake only the newest is sent."""
        loop = self._loop
        if loop is None:
            return
        due = now() if due is None else due
        with self._lock:
            while self._due and self._due[-1][0] >= due:
                self._due.pop()
            self._due.append((due, frame))
            if self._wake_at is not None and self._wake_at <= due:
                return
            self._wake_at = due
        try:
            loop.call_soon_threadsafe(self._send_due)
        except RuntimeError:  # the server's loop is closed: stopping
            pass

    def _send_due(self) -> None:
        """In the loop: deliver the newest pose that is due, and set the wake for the next."""
        loop = asyncio.get_running_loop()
        newest = None
        if self._timer is not None:
            self._timer.cancel()  # this wake replaces it
            self._timer = None
        with self._lock:
            # the loop's timers run on now()'s clock; a millisecond early is on time
            while self._due and self._due[0][0] <= now() + 0.001:
                newest = self._due.popleft()[1]
            self._wake_at = self._due[0][0] if self._due else None
            if self._wake_at is not None:
                self._timer = loop.call_at(self._wake_at, self._send_due)
        if newest is not None:
            self._deliver(newest)

    def _deliver(self, frame: bytes) -> None:
        for viewer in self._sockets:
            viewer.latest = frame
            viewer.wake.set()

    async def _scene_ready(self) -> Optional[Tuple[int, str]]:
        """The viser server, once the render process has built the scene (the page is served
        as soon as the server listens, a moment before; viser's client does not retry a
        refused socket soon), waiting up to ``SCENE_WAIT`` seconds."""
        deadline = time.monotonic() + SCENE_WAIT
        while self._target is None and not self._refused and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self._target

    async def answer(self, request: web.Request, server: Any) -> web.StreamResponse:
        """What a request for the 3D page's address gets from ``server`` (an ``HttpServer``,
        whose guard has checked it): the page, or, for a WebSocket upgrade (viser's client opens
        its socket at the page's own address), the socket."""
        if self._refused:
            return web.Response(status=503, text=self._refused + "\n")
        if request.headers.get("upgrade", "").lower() != "websocket":
            return self._page_answer(request)
        with server.streaming():
            return await self._socket(request, server)

    def _page_answer(self, request: web.Request) -> web.Response:
        """viser's page; a token given in the query is also set as a cookie for the socket."""
        if self._page is None:
            self._page = viser_page()
        response = web.Response(body=self._page, content_type="text/html", charset="utf-8")
        response.headers["Content-Security-Policy"] = PAGE_POLICY
        access.remember_token(request, response)
        return response

    async def _socket(self, request: web.Request, server: Any) -> web.StreamResponse:
        """Proxy one browser's socket to viser's, in one of ``MAX_VIEWERS`` slots."""
        target = await self._scene_ready()
        if target is None:
            return web.Response(status=503,
                                text=(self._refused or "the 3D view is starting; reload") + "\n")
        port, secret = target
        protocols = [
            name.strip() for name in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
            if name.strip().startswith("viser-v")
        ][:1]
        self._loop = asyncio.get_running_loop()
        if self._setups is None:
            self._setups = asyncio.Semaphore(MAX_SETUPS)
        async with aiohttp.ClientSession() as session:
            # The socket to viser first, a few at a time: a slot is taken (and the oldest
            # viewer's lost) only by a socket that is about to open.
            async with self._setups:
                try:
                    upstream = await session.ws_connect(f"ws://127.0.0.1:{port}/",
                                                        protocols=protocols,
                                                        headers={SECRET_HEADER: secret},
                                                        max_msg_size=0,
                                                        compress=0,
                                                        autoping=True)
                except (aiohttp.ClientError, OSError) as error:
                    logger.warning("the 3D view's server did not answer: %s", error)
                    return web.Response(status=502, text="the 3D view is not available\n")
            try:
                with server.slot("view3d", request, MAX_VIEWERS):
                    return await self._serve(request, protocols, upstream)
            finally:
                await upstream.close()

    async def _serve(self, request: web.Request, protocols: List[str],
                     upstream: Any) -> web.WebSocketResponse:
        """The browser's side of the socket, relayed to ``upstream`` until either closes."""
        browser = web.WebSocketResponse(protocols=protocols,
                                        max_msg_size=4 * 1024 * 1024,
                                        compress=False,
                                        heartbeat=15.0)
        await browser.prepare(request)
        viewer = _Viewer()
        with self._lock:
            self._viewers += 1
            self.opened += 1
        self._sockets.add(viewer)
        try:
            await _pump(browser, upstream, self, viewer)
        finally:
            self._sockets.discard(viewer)
            with self._lock:
                self._viewers -= 1
            await browser.close()
        return browser


class _Viewer:
    """One browser's socket: the newest pose frame not yet sent to it."""

    __slots__ = ("latest", "wake", "ready")

    def __init__(self) -> None:
        self.latest: Optional[bytes] = None
        self.wake = asyncio.Event()
        #: viser has sent it the scene (poses before that would name nodes it does not have)
        self.ready = False


async def _pump(browser: web.WebSocketResponse, upstream: Any, front: View3DFront,
                viewer: _Viewer) -> None:
    """Relay messages both ways, and send the pose frames, until either side closes."""

    async def down() -> None:
        async for message in upstream:
            if message.type == aiohttp.WSMsgType.BINARY:
                front.bytes_sent += len(message.data)
                async with _within(SEND_TIMEOUT):
                    await browser.send_bytes(message.data)
                if not viewer.ready:
                    viewer.ready = replay_done(message.data)
            elif message.type == aiohttp.WSMsgType.TEXT:
                async with _within(SEND_TIMEOUT):
                    await browser.send_str(message.data)
            else:
                break

    async def up() -> None:
        async for message in browser:
            if message.type == aiohttp.WSMsgType.BINARY:
                await upstream.send_bytes(message.data)
            elif message.type == aiohttp.WSMsgType.TEXT:
                await upstream.send_str(message.data)
            else:
                break

    async def poses() -> None:
        while True:
            await viewer.wake.wait()
            viewer.wake.clear()
            frame, viewer.latest = viewer.latest, None
            if frame is None or not viewer.ready:
                continue
            front.bytes_sent += len(frame)
            # a timeout scope, not wait_for: no task made per frame sent
            async with _within(SEND_TIMEOUT):
                await browser.send_bytes(frame)

    tasks = [
        asyncio.ensure_future(down()),
        asyncio.ensure_future(up()),
        asyncio.ensure_future(poses())
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
