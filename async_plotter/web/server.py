"""The HTTP server of the live page: the standard library's ``ThreadingHTTPServer``, no framework.

Routes (all ``GET``; every one checks the token when one is configured):

* ``/``: the page (``page.html``: inline HTML, CSS and JS; nothing is fetched from elsewhere).
* ``/stream.mjpg``: the newest frames as MJPEG (``multipart/x-mixed-replace``). Each part carries
  ``X-Update``, ``X-Iteration``, ``X-Episode``, ``X-Step`` and ``X-Frame-Time`` headers, so that a
  client can tell which policy a frame shows and how old it is.
* ``/events``: server-sent events: ``status`` (update, iteration, frames/s, viewers; a few times a
  second and at once when a new policy's episode starts) and ``metrics`` (training-curve points;
  on connect the whole curve kept so far, then each new point).

Why MJPEG in an ``<img>`` rather than frames over a WebSocket: every browser plays it natively with
no script, the standard library serves it (it has no WebSocket server, and a hand-written RFC 6455
implementation is more code to get wrong), it passes through SSH tunnels and proxies as plain
HTTP, and ``curl`` or VLC can read it too. Its one weakness, no per-frame acknowledgement, does not
matter here: each connection has its own thread that always sends the newest frame, so a slow
browser is limited by its own TCP window and skips frames, while the others are not affected.
The page learns what it shows from the events stream instead of from the frames.
"""
import hmac
import json
import logging
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Dict, Optional, Set, Tuple
from urllib.parse import parse_qs, urlsplit

from async_plotter.web.address import HttpConfig, is_loopback
from async_plotter.web.feed import FeedClosed, FrameMeta, LiveFeed, TooManyViewers

logger = logging.getLogger(__name__)

BOUNDARY = "async-plotter-frame"
STATUS_INTERVAL = 0.25  # s between status events while the picture plays
KEEPALIVE_INTERVAL = 15.0  # s; proxies and tunnels drop connections that stay silent
MAX_CONNECTIONS = 64
STREAM_SEND_BUFFER = 64 * 1024  # bytes (Linux doubles it): a few 480x480 JPEGs
# A browser that accepts no bytes for this long is dropped (its thread would otherwise wait on a
# full socket forever). Reads have the same limit: a request must arrive within it.
SOCKET_TIMEOUT = 20.0

_SECURITY_HEADERS = {
    "Cache-Control":
    "no-store",
    "X-Content-Type-Options":
    "nosniff",
    # The token may be in the page's URL; never leak it to other sites.
    "Referrer-Policy":
    "no-referrer",
    # The page is self-contained: forbid the browser from fetching anything from elsewhere.
    "Content-Security-Policy": ("default-src 'none'; img-src 'self' data:; connect-src 'self'; "
                                "style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
                                "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
}


def load_page() -> bytes:
    """The page's HTML (package data next to this module)."""
    return resources.files("async_plotter.web").joinpath("page.html").read_bytes()


class LiveServer(ThreadingHTTPServer):
    """Serves one ``LiveFeed``. Binds in the constructor, so a taken port fails at once."""

    daemon_threads = True  # a stuck browser must never keep the render process alive
    allow_reuse_address = True  # a restarted worker gets its port back at once
    request_queue_size = 16

    def __init__(self, config: HttpConfig, feed: LiveFeed) -> None:
        self.config = config
        self.feed = feed
        self.page = load_page()
        self._connections: Set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self.address_family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
        try:
            super().__init__((config.host, config.port), _Handler)
        except OSError as error:
            raise OSError(
                error.errno, f"cannot serve the live page on {_join(config.host, config.port)}: "
                f"{error.strerror or error}. Choose another port, or http=0 for a free one."
            ) from error
        self.port = self.server_address[1]

    @property
    def url(self) -> str:
        """Where a browser on this machine (or at the end of an SSH tunnel) opens the page."""
        host = self.server_address[0]  # the address bound ("localhost" resolved)
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()  # every interface: name the machine
        return f"http://{_join(host, self.port)}/"

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A browser closing its tab mid-request is routine for a streaming server: no traceback
        # on stderr for that. Anything else is a bug worth a warning.
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            logger.debug("connection from %s ended: %s", client_address[0], error)
        else:
            logger.warning("request from %s failed", client_address[0], exc_info=True)

    def connection_count(self) -> int:
        """Connections being served now."""
        with self._connections_lock:
            return len(self._connections)

    def close(self) -> None:
        """Stop accepting, end every stream, release the port. Call from another thread than
        ``serve_forever``'s."""
        self.feed.close()  # threads waiting for frames or events leave
        self.shutdown()
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            # Unblocks a thread stuck writing to a browser that stopped reading.
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: LiveServer
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT
    server_version = "async_plotter"
    sys_version = ""

    # ------------------------------------------------------------------------------ routing

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        """Check access, then serve the page, the stream or the events."""
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if not self._allowed(query):
            return
        if self.server.connection_count() > MAX_CONNECTIONS:
            self._plain(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections")
            return
        client = _first(query, "client")[:64]
        route = parts.path.rstrip("/").rsplit("/", 1)[-1]
        if route in ("", "index.html"):
            self._page()
        elif route == "stream.mjpg":
            self._stream(client)
        elif route == "events":
            self._events(client)
        else:
            self._plain(HTTPStatus.NOT_FOUND, "not found; open / for the live page")

    def _allowed(self, query: Dict[str, list]) -> bool:
        token = self.server.config.token
        if token is None:
            # Loopback only. Refuse other Host names, so that a web page elsewhere cannot read
            # the stream through DNS rebinding (its name resolving to 127.0.0.1).
            host = _host_name(self.headers.get("Host") or "127.0.0.1")
            if not is_loopback(host):
                self._plain(HTTPStatus.FORBIDDEN, f"Host {host!r} refused: serving on loopback")
                return False
            return True
        given = _first(query, "token") or _bearer(self.headers.get("Authorization", ""))
        given = given or self.headers.get("X-Async-Plotter-Token", "")
        if not given:
            self._plain(HTTPStatus.UNAUTHORIZED, "a token is required: open /?token=<token>",
                        {"WWW-Authenticate": 'Bearer realm="async_plotter"'})
            return False
        if not hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8")):
            self._plain(HTTPStatus.FORBIDDEN, "wrong token")
            return False
        return True

    # ---------------------------------------------------------------------------- responses

    def _page(self) -> None:
        self._head(HTTPStatus.OK, "text/html; charset=utf-8", len(self.server.page))
        self.wfile.write(self.server.page)

    def _stream(self, client: str) -> None:
        feed = self.server.feed
        try:
            viewer = feed.add_viewer(client)
        except (TooManyViewers, FeedClosed):
            self._plain(HTTPStatus.SERVICE_UNAVAILABLE, "too many streams open")
            return
        try:
            # A small send buffer: newest-wins only works if the kernel does not queue seconds
            # of frames for a slow browser (it would autotune up to megabytes).
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SEND_BUFFER)
            self._head(HTTPStatus.OK, f"multipart/x-mixed-replace; boundary={BOUNDARY}", None)
            self.wfile.write(f"--{BOUNDARY}\r\n".encode())
            while True:
                item = feed.next_jpeg(viewer, timeout=1.0)
                if item is not None:
                    # The boundary goes right after the frame, not before the next one: browsers
                    # show a part only once its boundary arrives.
                    self.wfile.write(_part(*item))
                    feed.frame_sent(viewer)
        except (FeedClosed, OSError):
            pass  # stopping, or the browser went away (reset, broken pipe, timeout)
        finally:
            feed.remove_viewer(viewer)
            self.close_connection = True

    def _events(self, client: str) -> None:
        feed = self.server.feed
        self._head(HTTPStatus.OK, "text/event-stream; charset=utf-8", None)
        seen: Tuple[int, int] = (0, 0)
        sent_points = 0
        last_status: Optional[Dict[str, Any]] = None
        last_write = 0.0
        try:
            self.wfile.write(b"retry: 1000\n\n")
            while True:
                # Wakes at once for a new episode (a newer policy) or a curve point; otherwise
                # after STATUS_INTERVAL, which paces the step and frames/s updates.
                seen = feed.wait_for_change(seen, STATUS_INTERVAL)
                points, sent_points, reset = feed.metrics_since(sent_points)
                chunks = []
                if points or reset:
                    chunks.append(_event("metrics", {"points": points, "reset": reset}))
                status = feed.status(client)
                if status != last_status:
                    chunks.append(_event("status", status))
                    last_status = status
                now = time.monotonic()
                if not chunks and now - last_write > KEEPALIVE_INTERVAL:
                    chunks.append(b": keep-alive\n\n")
                if chunks:
                    self.wfile.write(b"".join(chunks))
                    last_write = now
        except (FeedClosed, OSError):
            pass
        finally:
            self.close_connection = True

    def _head(self,
              code: int,
              content_type: str,
              length: Optional[int],
              extra: Optional[Dict[str, str]] = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        if length is not None:
            self.send_header("Content-Length", str(length))
        else:
            self.send_header("Connection", "close")  # the body ends when the connection does
            self.send_header("X-Accel-Buffering", "no")  # nginx: pass streams through
        for name, value in dict(_SECURITY_HEADERS, **(extra or {})).items():
            self.send_header(name, value)
        self.end_headers()

    def _plain(self, code: int, text: str, extra: Optional[Dict[str, str]] = None) -> None:
        body = (text + "\n").encode("utf-8")
        self._head(code, "text/plain; charset=utf-8", len(body), extra)
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        # Requests go to debug logging, never to stderr, and never with their query (the token).
        logger.debug("%s %s", self.address_string(), (format % args).split("?", 1)[0])


def _part(jpeg: bytes, meta: FrameMeta) -> bytes:
    iteration = "" if meta.iteration is None else str(meta.iteration)
    head = (f"Content-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n"
            f"X-Update: {meta.update}\r\nX-Iteration: {iteration}\r\nX-Episode: {meta.episode}\r\n"
            f"X-Step: {meta.step}\r\nX-Frame-Time: {meta.time:.6f}\r\n\r\n")
    # One write per frame: a browser never sees half a part from us waiting on the next.
    return head.encode() + jpeg + f"\r\n--{BOUNDARY}\r\n".encode()


def _event(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _first(query: Dict[str, list], name: str) -> str:
    values = query.get(name)
    return values[0] if values else ""


def _host_name(header: str) -> str:
    """The name in a Host header: ``"[::1]:8080"`` -> ``"::1"``, ``"localhost:80"`` ->
    ``"localhost"``."""
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if ":" in header else header


def _bearer(header: str) -> str:
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
