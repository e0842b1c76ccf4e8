"""The live page's front for the 3D view: viser's page, and its WebSocket proxied to the viser
server of ``async_plotter.view3d`` (on loopback, behind a secret header).

Every request reaches these handlers only through ``HttpServer``'s guard: the token (off
loopback), the Host name and, on loopback, the origin are checked on the WebSocket upgrade as on
any request, so a page on another origin cannot open the scene's socket in the user's browser.
viser's client connects its socket to the page's own address without the query string, so a
token given as ``?token=`` is also set as a cookie (``HttpOnly``, ``SameSite=Strict``, one per
port) when the page is served; a request that presents only the cookie must also pass the origin
checks (``server._refusal``).

A socket holds one of ``MAX_VIEWERS`` slots (a new one takes the oldest one's); ``viewers`` is
how many are open now, which is what decides whether the render process poses anything.
"""
import asyncio
import importlib.util
import logging
import os
import threading
from typing import Any, Optional, Tuple

import aiohttp
from aiohttp import web

from async_plotter.view3d.guarded import SECRET_HEADER

logger = logging.getLogger(__name__)

#: simultaneous 3D viewers; a new one takes the oldest one's slot
MAX_VIEWERS = 16
#: a socket whose browser takes none of a message for this long is dropped
SEND_TIMEOUT = 20.0
#: the cookie that carries the token for viser's socket, per port (cookies ignore ports)
TOKEN_COOKIE = "async_plotter_token_{port}"

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
        self._page: Optional[bytes] = None
        self._lock = threading.Lock()
        self._viewers = 0
        #: sockets opened in all, and bytes sent to browsers (for the benchmark)
        self.opened = 0
        self.bytes_sent = 0

    def connect(self, port: int, secret: str) -> None:
        """The viser server to proxy to (from the render process's thread)."""
        self._target = (port, secret)

    @property
    def viewers(self) -> int:
        """3D sockets open now."""
        return self._viewers

    async def page(self, request: web.Request, token_cookie: Optional[str]) -> web.Response:
        """viser's page; with ``token_cookie`` (``(name, token)``), the token as a cookie."""
        if self._page is None:
            self._page = viser_page()
        response = web.Response(body=self._page, content_type="text/html", charset="utf-8")
        response.headers["Content-Security-Policy"] = PAGE_POLICY
        if token_cookie is not None:
            name, token = token_cookie
            response.set_cookie(name, token, httponly=True, samesite="Strict", path="/")
        return response

    async def socket(self, request: web.Request, server: Any) -> web.StreamResponse:
        """Proxy one browser's socket to viser's, in one of ``MAX_VIEWERS`` slots."""
        target = self._target
        if target is None:
            return web.Response(status=503, text="the 3D view is starting; reload\n")
        port, secret = target
        protocols = [
            name.strip() for name in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
            if name.strip().startswith("viser-v")
        ][:1]
        key = server.claim_slot("view3d", request, MAX_VIEWERS)
        try:
            async with aiohttp.ClientSession() as session:
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
                browser = web.WebSocketResponse(protocols=protocols,
                                                max_msg_size=4 * 1024 * 1024,
                                                compress=False,
                                                heartbeat=15.0)
                await browser.prepare(request)
                with self._lock:
                    self._viewers += 1
                    self.opened += 1
                try:
                    await _pump(browser, upstream, self)
                finally:
                    with self._lock:
                        self._viewers -= 1
                    await upstream.close()
                    await browser.close()
                return browser
        finally:
            server.release_slot("view3d", key)


async def _pump(browser: web.WebSocketResponse, upstream: Any, front: View3DFront) -> None:
    """Relay messages both ways until either side closes."""

    async def down() -> None:
        async for message in upstream:
            if message.type == aiohttp.WSMsgType.BINARY:
                front.bytes_sent += len(message.data)
                await asyncio.wait_for(browser.send_bytes(message.data), SEND_TIMEOUT)
            elif message.type == aiohttp.WSMsgType.TEXT:
                await asyncio.wait_for(browser.send_str(message.data), SEND_TIMEOUT)
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

    tasks = [asyncio.ensure_future(down()), asyncio.ensure_future(up())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
