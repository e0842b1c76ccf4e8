"""The HTTP server of the live page: a small event loop for requests, a thread per open stream.

Routes (all ``GET``; every one checks the token when one is configured):

* ``/``: the page (``page.html``: inline HTML, CSS and JS; nothing is fetched from elsewhere).
* ``/stream.mjpg``: the newest frames as MJPEG (``multipart/x-mixed-replace``). Each part carries
  ``X-Update``, ``X-Iteration``, ``X-Episode``, ``X-Step`` and ``X-Frame-Time`` headers, so that a
  client can tell which policy a frame shows and how old it is.
* ``/events``: server-sent events: ``status`` (update, iteration, frames/s, viewers, whether
  recorded videos are served; a few times a second and at once when a new policy's episode
  starts) and ``metrics`` (training-curve points; on connect the whole curve kept so far, then
  each new point).
* ``/videos.json`` and ``/videos/<name>``, with a video folder (``Plotter(video_dir=...)``): the
  run's recorded videos (``videos``: ``iter_NNNN.mp4`` and ``update_NNNN.mp4`` only) and one of
  them, with byte ranges so that a browser can seek. Without a folder both are 404.

Why MJPEG in an ``<img>`` rather than frames over a WebSocket: every browser plays it natively with
no script, the standard library serves it (it has no WebSocket server, and a hand-written RFC 6455
implementation is more code to get wrong), it passes through SSH tunnels and proxies as plain
HTTP, and ``curl`` or VLC can read it too. Its one weakness, no per-frame acknowledgement, does not
matter here: each stream has its own thread that always sends the newest frame, so a slow browser
is limited by its own TCP window and skips frames, while the others are not affected. The page
learns what it shows from the events stream instead of from the frames.

Hostile neighbours (anyone who can reach the port; on loopback, any page the user's browser opens)
must not lock the real user out, so a connection costs nothing until it has proven itself:

* One thread accepts connections and reads request headers for all of them, non-blocking. At most
  ``MAX_PENDING`` connections may be waiting for their headers (a new one evicts the oldest
  waiting), and the whole header block must arrive within ``HEADER_DEADLINE`` seconds, however
  slowly it trickles. Idle sockets therefore cost a file descriptor for a few seconds, no thread.
* Access is checked on the complete headers, in that thread: the token (off loopback), the Host
  name (DNS rebinding) and, without a token, the origin: a request a browser marks
  ``Sec-Fetch-Site: cross-site`` or ``same-site``, or whose ``Origin`` is not this server, is
  refused, so a page on another origin cannot read or hold the stream (an ``<img>`` tag sends
  those headers).
* Only then does a request get a thread: the page and the video list from a pool of
  ``PAGE_WORKERS``, a stream, an events stream or a video one of their own, within
  ``LiveFeed.max_viewers``, ``MAX_EVENT_STREAMS`` and ``MAX_VIDEO_SENDS``. When the slots are
  full, a new stream takes the slot of the slowest (``LiveFeed.add_viewer``), a new events stream
  or video that of the oldest; the loser's socket is shut down so its thread leaves at once.
  Responses close the connection: there is no keep-alive to hold open.
"""
import collections
import hmac
import json
import logging
import os
import selectors
import socket
import struct
import threading
import time
from http import HTTPStatus
from importlib import resources
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

from async_plotter.web.address import HttpConfig, is_loopback
from async_plotter.web.feed import FeedClosed, FrameMeta, LiveFeed, ViewerEvicted, unsent_bytes
from async_plotter.web.videos import VIDEO_NAME, list_videos, send_video, video_path

logger = logging.getLogger(__name__)

BOUNDARY = "async-plotter-frame"
STATUS_INTERVAL = 0.25  # s between status events while the picture plays
KEEPALIVE_INTERVAL = 15.0  # s; proxies and tunnels drop connections that stay silent
STREAM_SEND_BUFFER = 64 * 1024  # bytes (Linux doubles it): a few 480x480 JPEGs
# A browser that accepts no bytes for this long is dropped (its thread would otherwise wait on a
# full socket forever).
SOCKET_TIMEOUT = 20.0
#: seconds from accepting a connection to the end of its request headers, in total
HEADER_DEADLINE = 5.0
#: connections accepted whose headers have not arrived yet; a new one evicts the oldest
MAX_PENDING = 128
#: bytes of request line and headers accepted (browsers send under 2 KiB)
MAX_HEADER_BYTES = 16 * 1024
#: threads serving the page and other short answers
PAGE_WORKERS = 4
#: short answers waiting for a page worker; beyond this, 503
PAGE_QUEUE = 64
#: simultaneous /events streams; a new one takes the oldest one's slot
MAX_EVENT_STREAMS = 16
#: recorded videos being sent at once; a new one takes the oldest one's slot (a browser that
#: seeks abandons its earlier request for a new one)
MAX_VIDEO_SENDS = 8
# Connections accepted per turn of the loop, so that waiting headers are read between bursts.
_ACCEPT_BATCH = 32
_LISTEN_BACKLOG = 1024  # the kernel caps it at net.core.somaxconn

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


def load_page() -> bytes:
    """The page's HTML (package data next to this module)."""
    return resources.files("async_plotter.web").joinpath("page.html").read_bytes()


class _Pending:
    """An accepted connection whose request headers are still arriving."""

    __slots__ = ("sock", "address", "buffer", "deadline")

    def __init__(self, sock: socket.socket, address: Any, deadline: float) -> None:
        self.sock = sock
        self.address = address
        self.buffer = bytearray()
        self.deadline = deadline


class _Request:
    """A complete, parsed request head."""

    def __init__(self, method: str, target: str, headers: Dict[str, str]) -> None:
        self.method = method
        self.target = target
        parts = urlsplit(target)
        self.path = parts.path
        self.query = parse_qs(parts.query)
        self.headers = headers  # lower-case names


class LiveServer:
    """Serves one ``LiveFeed``. Binds in the constructor, so a taken port fails at once.

    ``serve_forever`` runs the accepting loop (call it in a thread); ``close`` from another
    thread stops everything.

    Args:
        config: where to serve (``parse_http_address``'s result).
        feed: the frames, status and curve to serve.
        video_dir: the folder of the run's recorded videos, served as ``videos.json`` and
            ``videos/<name>``; None: no videos (both routes are 404).
    """

    def __init__(self, config: HttpConfig, feed: LiveFeed, video_dir: Optional[str] = None) -> None:
        self.config = config
        self.feed = feed
        self.video_dir = None if video_dir is None else os.path.abspath(video_dir)
        self.page = load_page()
        family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            # A restarted worker gets its port back at once.
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((config.host, config.port))
            self._listener.listen(_LISTEN_BACKLOG)
            self._listener.setblocking(False)
        except OSError as error:
            self._listener.close()
            raise OSError(
                error.errno, f"cannot serve the live page on {_join(config.host, config.port)}: "
                f"{error.strerror or error}. Choose another port, or http=0 for a free one."
            ) from error
        self.server_address = self._listener.getsockname()
        self.port = self.server_address[1]
        self._lock = threading.Lock()
        self._pending: "collections.OrderedDict[int, _Pending]" = collections.OrderedDict()
        self._active: Dict[int, socket.socket] = {}  # sockets a thread is serving
        self._events: "collections.OrderedDict[int, Tuple[socket.socket, threading.Event]]" = (
            collections.OrderedDict())
        self._videos: "collections.OrderedDict[int, Tuple[socket.socket, threading.Event]]" = (
            collections.OrderedDict())
        # Each short answer is built by a page worker (listing a folder must not block the loop).
        self._page_queue: Deque[Tuple[socket.socket, Callable[[], bytes]]] = collections.deque()
        self._page_ready = threading.Condition(self._lock)
        self._workers: List[threading.Thread] = []
        self._stream_threads = 0
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._stopping = False
        self._serving = threading.Event()
        self._stopped = threading.Event()
        #: connections refused or dropped, by reason (for tests, benchmarks and the curious)
        self.dropped: Dict[str, int] = collections.Counter()

    @property
    def url(self) -> str:
        """Where a browser on this machine (or at the end of an SSH tunnel) opens the page."""
        host = self.server_address[0]  # the address bound ("localhost" resolved)
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()  # every interface: name the machine
        return f"http://{_join(host, self.port)}/"

    def connection_count(self) -> int:
        """Connections open now: waiting for their headers, or being served."""
        with self._lock:
            return len(self._pending) + len(self._active)

    def thread_count(self) -> int:
        """Threads serving requests now (page workers, streams, events streams, videos)."""
        with self._lock:
            return len(self._workers) + self._stream_threads

    # ------------------------------------------------------------------------ the loop

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Accept connections and read their headers until ``shutdown``."""
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ, "listen")
        selector.register(self._wake_read, selectors.EVENT_READ, "wake")
        for index in range(PAGE_WORKERS):
            worker = threading.Thread(target=self._page_worker,
                                      name=f"async_plotter-http-page-{index}",
                                      daemon=True)
            worker.start()
            self._workers.append(worker)
        self._serving.set()
        try:
            while not self._stopping:
                timeout = poll_interval
                with self._lock:
                    if self._pending:
                        oldest = next(iter(self._pending.values()))
                        timeout = max(min(timeout, oldest.deadline - time.monotonic()), 0.0)
                for key, _ in selector.select(timeout):
                    if key.data == "listen":
                        self._accept(selector)
                    elif key.data == "wake":
                        _drain(self._wake_read)
                    else:
                        self._read_head(selector, key.data)
                self._expire(selector)
        finally:
            with self._lock:
                pending = list(self._pending.values())
                self._pending.clear()
            for waiting in pending:
                _close(waiting.sock)
            selector.close()
            self._stopped.set()

    def _accept(self, selector: selectors.BaseSelector) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of file descriptors: make room, try next turn
                logger.debug("accept failed: %s", error)
                self._evict_oldest_pending(selector, "accept failed")
                return
            sock.setblocking(False)
            with self._lock:
                full = len(self._pending) >= MAX_PENDING
            if full:
                self._evict_oldest_pending(selector, "evicted while waiting for headers")
            waiting = _Pending(sock, address, time.monotonic() + HEADER_DEADLINE)
            with self._lock:
                self._pending[sock.fileno()] = waiting
            selector.register(sock, selectors.EVENT_READ, waiting)

    def _evict_oldest_pending(self, selector: selectors.BaseSelector, reason: str) -> None:
        with self._lock:
            if not self._pending:
                return
            _, oldest = self._pending.popitem(last=False)
        self._forget(selector, oldest, reason)

    def _forget(self, selector: selectors.BaseSelector, waiting: _Pending, reason: str) -> None:
        self.dropped[reason] += 1
        try:
            selector.unregister(waiting.sock)
        except (KeyError, ValueError):
            pass
        _close(waiting.sock)

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        while True:
            with self._lock:
                if not self._pending:
                    return
                oldest = next(iter(self._pending.values()))
                if oldest.deadline > now:
                    return
                self._pending.popitem(last=False)
            self._forget(selector, oldest, "headers too slow")

    def _read_head(self, selector: selectors.BaseSelector, waiting: _Pending) -> None:
        try:
            data = waiting.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            waiting.buffer += data
            end = waiting.buffer.find(b"\r\n\r\n")
            if end < 0 and len(waiting.buffer) <= MAX_HEADER_BYTES:
                return  # more to come (within the deadline)
        with self._lock:
            self._pending.pop(waiting.sock.fileno(), None)
        try:
            selector.unregister(waiting.sock)
        except (KeyError, ValueError):
            pass
        if not data:
            self.dropped["closed before its headers"] += 1
            _close(waiting.sock)
            return
        if end < 0:
            self._reply_now(waiting.sock, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                            "request headers too large")
            return
        self._dispatch(waiting.sock, waiting.address, bytes(waiting.buffer[:end]))

    # --------------------------------------------------------------------- dispatching

    def _dispatch(self, sock: socket.socket, address: Any, head: bytes) -> None:
        """Route a complete request; never blocks (this is the loop's thread)."""
        request = _parse(head)
        if request is None:
            self._reply_now(sock, HTTPStatus.BAD_REQUEST, "malformed request")
            return
        logger.debug("%s %s %s", address[0], request.method, request.path)
        if request.method != "GET":
            self._reply_now(sock, HTTPStatus.METHOD_NOT_ALLOWED, "only GET is served",
                            {"Allow": "GET"})
            return
        refusal = _refusal(self.config, request)
        if refusal is not None:
            code, text, extra = refusal
            self.dropped[f"refused {int(code)}"] += 1
            self._reply_now(sock, code, text, extra)
            return
        self._route(sock, request)

    def _route(self, sock: socket.socket, request: _Request) -> None:
        """Serve a request that passed the access checks (in the loop's thread: never block).

        Subclasses that serve other pages override this (``async_plotter.serve``); the header
        reading, the limits and the access checks above stay the same for them."""
        client = _first(request.query, "client")[:64]
        # Only the last segments count, so the page also works behind a proxy's path prefix.
        parent, _, route = request.path.rstrip("/").rpartition("/")
        if route in ("", "index.html"):
            self._queue_page(sock, self._page)
        elif route == "stream.mjpg":
            self._start_stream(sock, client)
        elif route == "events":
            self._start_events(sock, client)
        elif route == "videos.json" and self.video_dir is not None:
            self._queue_page(sock, self._video_list)
        elif (parent.rpartition("/")[2] == "videos" and self.video_dir is not None
              and VIDEO_NAME.fullmatch(route)):
            # The name is checked here, the file looked up in the video's thread (a disk).
            self._start_video(sock, route, request.headers.get("range", ""))
        else:
            self._reply_now(sock, HTTPStatus.NOT_FOUND, "not found; open / for the live page")

    def _reply_now(self,
                   sock: socket.socket,
                   code: int,
                   text: str,
                   extra: Optional[Dict[str, str]] = None) -> None:
        """A short answer from the loop's thread: one non-blocking send, then close. It fits in
        any socket buffer; a client that does not even read that much loses it."""
        try:
            sock.send(_plain(code, text, extra))
        except OSError:
            pass
        _close(sock)

    def _serving_socket(self, sock: socket.socket, thread: bool = False) -> None:
        with self._lock:
            self._active[id(sock)] = sock
            self._stream_threads += thread
        sock.setblocking(True)
        sock.settimeout(SOCKET_TIMEOUT)

    def _finished(self, sock: socket.socket, key: int, thread: bool = False) -> None:
        with self._lock:
            self._active.pop(key, None)
            self._stream_threads -= thread
        _close(sock)

    def _page(self) -> bytes:
        return _head(HTTPStatus.OK, "text/html; charset=utf-8", len(self.page)) + self.page

    def _video_list(self) -> bytes:
        videos = list_videos(self.video_dir) if self.video_dir is not None else []
        body = json.dumps({
            "videos": [video.as_json() for video in videos]
        }, separators=(",", ":")).encode("utf-8")
        return _head(HTTPStatus.OK, "application/json", len(body)) + body

    def _queue_page(self, sock: socket.socket, make: Callable[[], bytes]) -> None:
        """Have a page worker send ``make()`` (a whole response), or answer 503 when too many
        wait already."""
        with self._lock:
            full = len(self._page_queue) >= PAGE_QUEUE
            if not full:
                self._page_queue.append((sock, make))
                self._page_ready.notify()
        if full:
            self.dropped["page queue full"] += 1
            self._reply_now(sock, HTTPStatus.SERVICE_UNAVAILABLE, "busy; try again")

    def _page_worker(self) -> None:
        while True:
            with self._lock:
                while not self._page_queue and not self._stopping:
                    self._page_ready.wait()
                if self._stopping:
                    return
                sock, make = self._page_queue.popleft()
            key = id(sock)
            try:
                self._serving_socket(sock)
                sock.sendall(make())
            except OSError:
                pass
            except Exception:  # noqa: BLE001 - a bug answers 500; the worker must live on
                logger.exception("answering a request failed")
                try:
                    sock.sendall(_plain(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error"))
                except OSError:
                    pass
            finally:
                self._finished(sock, key)

    def _start_video(self, sock: socket.socket, name: str, range_header: str) -> None:
        self._claim_slot(self._videos, self._lock, sock, MAX_VIDEO_SENDS, "video")
        threading.Thread(target=self._video,
                         args=(sock, id(sock), name, range_header),
                         name="async_plotter-http-video",
                         daemon=True).start()

    def _video(self, sock: socket.socket, key: int, name: str, range_header: str) -> None:
        try:
            path = None if self.video_dir is None else video_path(self.video_dir, name)
            if path is None:
                sock.sendall(_plain(HTTPStatus.NOT_FOUND, "no such video"))
            else:
                self._send_video(sock, path, range_header)
        except OSError:
            pass  # the browser went away (or seeked: evicted), or the file was just pruned
        finally:
            with self._lock:
                if self._videos.get(key, (None, ))[0] is sock:
                    del self._videos[key]
            self._finished(sock, key, thread=True)

    def _send_video(self, sock: socket.socket, path: str, range_header: str) -> None:
        """Send the mp4 at ``path`` (or the range asked for) on the blocking ``sock``."""
        send_video(sock, path, range_header, _head)

    def _start_stream(self, sock: socket.socket, client: str) -> None:
        key = id(sock)
        try:
            viewer = self.feed.add_viewer(client,
                                          on_evict=lambda: self._evicted(sock, "stream"),
                                          unsent=lambda: unsent_bytes(sock))
        except FeedClosed:
            self._reply_now(sock, HTTPStatus.SERVICE_UNAVAILABLE, "stopping")
            return
        self._serving_socket(sock, thread=True)
        threading.Thread(target=self._stream,
                         args=(sock, key, viewer),
                         name="async_plotter-http-stream",
                         daemon=True).start()

    def _stream(self, sock: socket.socket, key: int, viewer: Any) -> None:
        feed = self.feed
        try:
            start_frame_stream(sock)
            while True:
                item = feed.next_jpeg(viewer, timeout=1.0)
                if item is not None:
                    # The boundary goes right after the frame, not before the next one: browsers
                    # show a part only once its boundary arrives.
                    part = _part(*item)
                    sock.sendall(part)
                    feed.frame_sent(viewer, len(part))
        except (FeedClosed, ViewerEvicted, OSError):
            pass  # stopping, or the browser went away (reset, broken pipe, timeout, evicted)
        finally:
            feed.remove_viewer(viewer)
            self._finished(sock, key, thread=True)

    def _evicted(self, sock: socket.socket, what: str) -> None:
        """A newer viewer took this one's slot (called in the loop's thread)."""
        self.dropped[f"{what} evicted"] += 1
        _shut(sock, abort=True)

    def _start_events(self, sock: socket.socket, client: str) -> None:
        leaving = self._claim_slot(self._events, self._lock, sock, MAX_EVENT_STREAMS, "events")
        threading.Thread(target=self._events_stream,
                         args=(sock, id(sock), client, leaving),
                         name="async_plotter-http-events",
                         daemon=True).start()

    def _claim_slot(self, slots: "collections.OrderedDict[int, Tuple[socket.socket, Any]]",
                    lock: Any, sock: socket.socket, limit: int, what: str) -> threading.Event:
        """Give ``sock`` one of ``limit`` slots in ``slots`` (the oldest holder is evicted when
        they are full) and count its thread; returns the event that tells the slot's thread to
        leave. The caller starts that thread."""
        leaving = threading.Event()
        with lock:
            victim = None
            if len(slots) >= limit:
                _, victim = slots.popitem(last=False)
            slots[id(sock)] = (sock, leaving)
        if victim is not None:
            victim[1].set()
            self._evicted(victim[0], what)
        self._serving_socket(sock, thread=True)
        return leaving

    def _events_stream(self, sock: socket.socket, key: int, client: str,
                       leaving: threading.Event) -> None:
        feed = self.feed
        seen: Tuple[int, int] = (0, 0)
        sent_points = 0
        last_status: Optional[Dict[str, Any]] = None
        last_write = 0.0
        try:
            sock.sendall(
                _head(HTTPStatus.OK, "text/event-stream; charset=utf-8", None) + b"retry: 1000\n\n")
            while not leaving.is_set():
                # Wakes at once for a new episode (a newer policy) or a curve point; otherwise
                # after STATUS_INTERVAL, which paces the step and frames/s updates.
                seen = feed.wait_for_change(seen, STATUS_INTERVAL)
                points, sent_points, reset = feed.metrics_since(sent_points)
                chunks = []
                if points or reset:
                    chunks.append(_event("metrics", {"points": points, "reset": reset}))
                # The page shows its strip of recorded videos only where there are some to fetch.
                status = dict(feed.status(client), videos=self.video_dir is not None)
                if status != last_status:
                    chunks.append(_event("status", status))
                    last_status = status
                now = time.monotonic()
                if not chunks and now - last_write > KEEPALIVE_INTERVAL:
                    chunks.append(b": keep-alive\n\n")
                if chunks:
                    sock.sendall(b"".join(chunks))
                    last_write = now
        except (FeedClosed, OSError):
            pass
        finally:
            with self._lock:
                if self._events.get(key, (None, ))[0] is sock:
                    del self._events[key]
            self._finished(sock, key, thread=True)

    # ------------------------------------------------------------------------ stopping

    def shutdown(self) -> None:
        """Stop the loop (returns once it has stopped, if it was running)."""
        with self._lock:
            self._stopping = True
            self._page_ready.notify_all()
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass
        if self._serving.is_set():
            self._stopped.wait(5.0)

    def server_close(self) -> None:
        """Release the port."""
        _close(self._listener)
        _close(self._wake_read)
        _close(self._wake_write)

    def close(self) -> None:
        """Stop accepting, end every stream, release the port. Call from another thread than
        ``serve_forever``'s."""
        self.feed.close()  # threads waiting for frames or events leave
        self.shutdown()
        with self._lock:
            connections = list(self._active.values())
            queued = [sock for sock, _ in self._page_queue]
            self._page_queue.clear()
        for sock in connections:
            _shut(sock)  # unblocks a thread stuck writing to a browser that stopped reading
        for sock in queued:
            _close(sock)
        self.server_close()


# ------------------------------------------------------------------------------ helpers


def _parse(head: bytes) -> Optional[_Request]:
    """The request line and headers, or None if they are not HTTP/1.x."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes everything
        return None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        return None
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        name = name.lower()
        if name in headers and name in ("host", "origin", "authorization", "sec-fetch-site"):
            return None  # two of a header that access depends on: ambiguous, refuse
        headers[name] = value.strip()
    return _Request(parts[0], parts[1], headers)


def _refusal(config: HttpConfig,
             request: _Request) -> Optional[Tuple[int, str, Optional[Dict[str, str]]]]:
    """Why the request is refused (status, text, extra headers), or None if it may proceed."""
    headers = request.headers
    token = config.token
    if token is None:
        # Loopback only. Refuse other Host names, so that a web page elsewhere cannot read the
        # stream through DNS rebinding (its name resolving to 127.0.0.1).
        host_header = headers.get("host") or "127.0.0.1"
        host = _host_name(host_header)
        if not is_loopback(host):
            return HTTPStatus.FORBIDDEN, f"Host {host!r} refused: serving on loopback", None
        # And no other origin: with no token, the user's browser is the only credential, and
        # any page it opens could otherwise hold the stream (<img> tags) or read it.
        site = headers.get("sec-fetch-site", "").lower()
        if site in ("cross-site", "same-site"):
            return HTTPStatus.FORBIDDEN, f"cross-origin request refused ({site})", None
        origin = headers.get("origin")
        if origin is not None and not _same_origin(origin, host_header):
            return HTTPStatus.FORBIDDEN, "cross-origin request refused (Origin)", None
        return None
    given = _first(request.query, "token") or _bearer(headers.get("authorization", ""))
    given = given or headers.get("x-async-plotter-token", "")
    if not given:
        return (HTTPStatus.UNAUTHORIZED, "a token is required: open /?token=<token>", {
            "WWW-Authenticate": 'Bearer realm="async_plotter"'
        })
    if not hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8")):
        return HTTPStatus.FORBIDDEN, "wrong token", None
    return None


def _same_origin(origin: str, host_header: str) -> bool:
    """Whether an ``Origin`` header names this server as the request's Host does."""
    try:
        parts = urlsplit(origin)
        origin_port = parts.port or 80
    except ValueError:
        return False
    if parts.scheme != "http" or not parts.hostname:
        return False  # includes "null" (sandboxed frames, file: pages)
    host = _host_name(host_header)
    port_text = host_header[len(host) + (2 if host_header.startswith("[") else 0):].lstrip(":")
    host_port = int(port_text) if port_text.isdigit() else 80
    return parts.hostname.lower() == host.lower() and origin_port == host_port


def _head(code: int,
          content_type: str,
          length: Optional[int],
          extra: Optional[Dict[str, str]] = None) -> bytes:
    status = HTTPStatus(code)
    lines = [f"HTTP/1.1 {status.value} {status.phrase}", f"Content-Type: {content_type}"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    else:
        lines.append("X-Accel-Buffering: no")  # nginx: pass streams through
    # Every response ends its connection: an open one would be a slot to hold.
    lines.append("Connection: close")
    lines.extend(f"{name}: {value}"
                 for name, value in dict(_SECURITY_HEADERS, **(extra or {})).items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def start_frame_stream(sock: socket.socket) -> None:
    """Answer a stream request: the multipart head and the first boundary, on a socket whose
    send buffer is kept small (newest-wins only works if the kernel does not queue seconds of
    frames for a slow browser; it would autotune up to megabytes)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SEND_BUFFER)
    sock.sendall(
        _head(HTTPStatus.OK, f"multipart/x-mixed-replace; boundary={BOUNDARY}", None) +
        f"--{BOUNDARY}\r\n".encode())


def _plain(code: int, text: str, extra: Optional[Dict[str, str]] = None) -> bytes:
    body = (text + "\n").encode("utf-8")
    return _head(code, "text/plain; charset=utf-8", len(body), extra) + body


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


def _shut(sock: socket.socket, abort: bool = False) -> None:
    """Wake a thread blocked on ``sock`` (its call fails at once); it then closes it.

    ``abort``: the close that follows resets the connection and drops what is still queued, so
    an evicted slow reader learns at once and its kernel buffers are freed, rather than being
    trickled the frames it was too slow for.
    """
    try:
        if abort:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except OSError:
        pass


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
