"""The HTTP side of ``async-plotter serve``: the live page's server with other routes.

It is ``web.server.LiveServer`` (one thread reads every request's headers within a deadline, the
token or the loopback Host and origin checks come before anything else, every response closes
its connection), routing to:

* ``/``: the overview page (``page.html``);
* ``/events``: server-sent events: ``hello`` (the limits), ``rows`` (experiments that changed,
  those removed; all of them on connect) and ``live`` (the live views' states and figures);
* ``/x/NAME/stream.mjpg``: NAME's newest policy acting, relayed from its render worker, which
  this request starts if need be (503 with the reason when every live slot is watched);
* ``/x/NAME/status``: what ``live`` says of NAME, and why a stream would be refused;
* ``/x/NAME/video/FILE``: a recorded video (byte ranges served, for seeking);
* ``/experiments.json``: every row, for scripts.

Each stream and events stream gets a thread of its own, within limits (``MAX_EVENT_STREAMS``,
the relays' ``MAX_VIEWERS`` per experiment, ``MAX_STREAM_THREADS`` in all); short answers are
served by ``SHORT_WORKERS`` threads from a bounded queue. When the events slots are full, a new
one takes the oldest one's slot, as on the live page.
"""
import collections
import json
import logging
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from importlib import resources
from typing import Any, Callable, Dict, Optional, Tuple

from async_plotter.channel.redis.wire import valid_experiment
from async_plotter.serve.history import History
from async_plotter.serve.live import LiveLimit, LiveManager
from async_plotter.web.address import HttpConfig
from async_plotter.web.feed import FeedClosed, LiveFeed, ViewerEvicted, unsent_bytes
from async_plotter.web.server import (KEEPALIVE_INTERVAL, LiveServer, _event, _first, _head, _plain,
                                      _Request, start_frame_stream)

logger = logging.getLogger("async_plotter")

#: simultaneous /events streams; a new one takes the oldest one's slot
MAX_EVENT_STREAMS = 16
#: stream threads in all (each relay also caps its own viewers)
MAX_STREAM_THREADS = 128
#: threads serving the page, JSON and videos, and the answers that may wait for one
SHORT_WORKERS = 4
SHORT_QUEUE = 64
#: seconds between two sends of an events stream (changes in between are sent together)
EVENTS_INTERVAL = 0.5
#: seconds an events stream waits for news before it sends the live views' figures anyway
LIVE_REFRESH = 1.0


def load_page() -> bytes:
    """The overview page's HTML (package data next to this module)."""
    return resources.files("async_plotter.serve").joinpath("page.html").read_bytes()


class ServeServer(LiveServer):
    """Serves the overview page, its events, the relayed streams and the recorded videos.

    Args:
        config: where to serve (``parse_http_address``'s result: loopback, or a token).
        catalog: the experiments (``Catalog``); held while an events stream is open.
        live: the live views (``LiveManager``).
        history: the recorded videos, or None without ``--record-dir``.
        info: extra fields for the ``hello`` event (e.g. the recorder's settings).
    """

    def __init__(self,
                 config: HttpConfig,
                 catalog: Any,
                 live: LiveManager,
                 history: Optional[History] = None,
                 info: Optional[Callable[[], Dict[str, Any]]] = None) -> None:
        # The live page's feed is never fed here; it only gives close() something to close.
        super().__init__(config, LiveFeed("async-plotter serve"))
        self.page = load_page()
        self.catalog = catalog
        self.live = live
        self.history = history
        self._info = info or (lambda: {})
        self._short = ThreadPoolExecutor(SHORT_WORKERS, thread_name_prefix="async_plotter-serve")
        self._short_waiting = 0
        self._serve_lock = threading.Lock()
        self._overview: "collections.OrderedDict[int, Tuple[socket.socket, threading.Event]]" = (
            collections.OrderedDict())
        self._stream_count = 0

    # ------------------------------------------------------------------------ routing

    def _route(self, sock: socket.socket, request: _Request) -> None:
        client = _first(request.query, "client")[:64]
        parts = [part for part in request.path.split("/") if part]
        if not parts or parts == ["index.html"]:
            self._short_answer(sock, lambda: self._page(), "page")
        elif parts == ["events"]:
            self._start_overview(sock)
        elif parts == ["experiments.json"]:
            self._short_answer(sock, lambda: _json({"experiments": self.catalog.rows()}), "json")
        elif len(parts) >= 3 and parts[0] == "x" and valid_experiment(parts[1]):
            name = parts[1]
            if parts[2:] == ["stream.mjpg"]:
                self._start_live_stream(sock, name, client)
            elif parts[2:] == ["status"]:
                self._short_answer(sock, lambda: _json(self._status(name)), "json")
            elif len(parts) == 4 and parts[2] == "video" and self.history is not None:
                path = self.history.path(name, parts[3])
                if path is None:
                    self._reply_now(sock, HTTPStatus.NOT_FOUND, "no such video")
                else:
                    range_header = request.headers.get("range", "")
                    self._short_answer(sock, None, "video", (path, range_header))
            else:
                self._reply_now(sock, HTTPStatus.NOT_FOUND, "not found")
        else:
            self._reply_now(sock, HTTPStatus.NOT_FOUND, "not found; open / for the overview")

    def _status(self, name: str) -> Dict[str, Any]:
        session = self.live.session(name)
        return {
            "name":
            name,
            "live":
            None if session is None else session.status(),
            "refused":
            self.live.limit_problem(name),
            "videos": []
            if self.history is None else [video.as_json() for video in self.history.videos(name)],
        }

    def _page(self) -> bytes:
        # The base Content-Security-Policy already lets it play recorded videos (media-src).
        return _head(HTTPStatus.OK, "text/html; charset=utf-8", len(self.page)) + self.page

    # ---------------------------------------------------------------- short answers

    def _short_answer(self,
                      sock: socket.socket,
                      make: Optional[Callable[[], bytes]],
                      what: str,
                      video: Optional[Tuple[str, str]] = None) -> None:
        with self._serve_lock:
            full = self._short_waiting >= SHORT_QUEUE
            if not full:
                self._short_waiting += 1
        if full:
            self.dropped[f"{what} queue full"] += 1
            self._reply_now(sock, HTTPStatus.SERVICE_UNAVAILABLE, "busy; try again")
            return
        self._short.submit(self._answer, sock, make, video)

    def _answer(self, sock: socket.socket, make: Optional[Callable[[], bytes]],
                video: Optional[Tuple[str, str]]) -> None:
        key = id(sock)
        try:
            self._serving_socket(sock)
            if video is not None:
                self._send_video(sock, *video)
            elif make is not None:
                sock.sendall(make())
        except OSError:
            pass
        except Exception:  # noqa: BLE001 - a bug answers 500, and the server carries on
            logger.exception("serve: answering a request failed")
            try:
                sock.sendall(_plain(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error"))
            except OSError:
                pass
        finally:
            with self._serve_lock:
                self._short_waiting -= 1
            self._finished(sock, key)

    # ------------------------------------------------------------------- events

    def _start_overview(self, sock: socket.socket) -> None:
        leaving = self._claim_slot(self._overview, self._serve_lock, sock, MAX_EVENT_STREAMS,
                                   "events")
        threading.Thread(target=self._overview_stream,
                         args=(sock, id(sock), leaving),
                         name="async_plotter-serve-events",
                         daemon=True).start()

    def _overview_stream(self, sock: socket.socket, key: int, leaving: threading.Event) -> None:
        catalog = self.catalog
        catalog.acquire()
        seen, live_seen = 0, None
        last_write = 0.0
        problem_seen: Optional[str] = None
        try:
            hello = dict(self._info(), max_live=self.live.max_live, grace=self.live.grace)
            sock.sendall(
                _head(HTTPStatus.OK, "text/event-stream; charset=utf-8", None) +
                b"retry: 1000\n\n" + _event("hello", hello))
            while not leaving.is_set() and not self._stopping:
                rows, removed, seen = catalog.changes_since(seen)
                live = self.live.status()
                chunks = []
                if rows or removed or removed is None or catalog.problem != problem_seen:
                    problem_seen = catalog.problem
                    chunks.append(
                        _event(
                            "rows", {
                                "rows": rows,
                                "removed": removed or [],
                                "reset": removed is None,
                                "problem": problem_seen,
                                "now": time.time()
                            }))
                if live != live_seen:
                    chunks.append(_event("live", dict(live, now=time.time())))
                    live_seen = live
                now = time.monotonic()
                if not chunks and now - last_write > KEEPALIVE_INTERVAL:
                    chunks.append(b": keep-alive\n\n")
                if chunks:
                    sock.sendall(b"".join(chunks))
                    last_write = now
                # Changes that come meanwhile are sent together, at most every EVENTS_INTERVAL;
                # without any, the live views' figures (frames/s) are refreshed at least every
                # EVENTS_INTERVAL + LIVE_REFRESH.
                leaving.wait(EVENTS_INTERVAL)
                if not leaving.is_set():
                    catalog.wait_for_change(seen, LIVE_REFRESH)
        except OSError:
            pass
        finally:
            catalog.release()
            with self._serve_lock:
                if self._overview.get(key, (None, ))[0] is sock:
                    del self._overview[key]
            self._finished(sock, key, thread=True)

    # ------------------------------------------------------------------- streams

    def _start_live_stream(self, sock: socket.socket, name: str, client: str) -> None:
        with self._serve_lock:
            full = self._stream_count >= MAX_STREAM_THREADS
            if not full:
                self._stream_count += 1
        if full:
            self.dropped["streams full"] += 1
            self._reply_now(sock, HTTPStatus.SERVICE_UNAVAILABLE, "too many streams; try again")
            return
        key = id(sock)
        self._serving_socket(sock, thread=True)
        threading.Thread(target=self._live_stream,
                         args=(sock, key, name, client),
                         name="async_plotter-serve-stream",
                         daemon=True).start()

    def _live_stream(self, sock: socket.socket, key: int, name: str, client: str) -> None:
        try:
            try:
                session, viewer = self.live.watch(name,
                                                  client,
                                                  lambda: self._evicted(sock, "stream"),
                                                  unsent=lambda: unsent_bytes(sock))
            except LiveLimit as refusal:
                self.dropped["over the live limit"] += 1
                sock.sendall(
                    _plain(HTTPStatus.SERVICE_UNAVAILABLE, str(refusal), {"Retry-After": "5"}))
                return
            relay = session.relay
            try:
                start_frame_stream(sock)
                while True:
                    part = relay.next_part(viewer, timeout=1.0)
                    if part is None:
                        # No frame (the worker is starting): notice a browser that left anyway,
                        # or its slot would keep the worker alive.
                        if _peer_closed(sock):
                            return
                        continue
                    sock.sendall(part)
                    relay.frame_sent(viewer, len(part))
            finally:
                self.live.leave(session, viewer)
        except (FeedClosed, ViewerEvicted, OSError):
            pass
        finally:
            with self._serve_lock:
                self._stream_count -= 1
            self._finished(sock, key, thread=True)

    # ------------------------------------------------------------------ stopping

    def close(self) -> None:
        """Stop serving: every stream and events stream ends, the port is released."""
        with self._serve_lock:
            overview = list(self._overview.values())
        for _, leaving in overview:
            leaving.set()
        super().close()
        self._short.shutdown(wait=False, cancel_futures=True)


def _json(data: Any) -> bytes:
    body = json.dumps(data, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return _head(HTTPStatus.OK, "application/json", len(body)) + body


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the other end closed the connection (without blocking)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True
