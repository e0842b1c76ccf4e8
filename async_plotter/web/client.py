"""Small readers of the live page's streams, for scripts, tests and benchmarks (stdlib only), and
the parser of MJPEG parts they share with ``serve``'s relay (``iter_parts``, on aiohttp's client).

    for frame in read_mjpeg("http://127.0.0.1:8080/stream.mjpg"):
        print(frame.update, frame.iteration, len(frame.jpeg))
"""
import asyncio
import dataclasses
import http.client
import json
import time
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit


class StreamError(Exception):
    """The server refused the request or sent something that is not the expected stream."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class StreamedFrame:
    """One JPEG from ``/stream.mjpg`` and the headers that came with it."""

    jpeg: bytes
    headers: Dict[str, str]
    received: float  # ``time.time()`` when its last byte arrived

    @property
    def update(self) -> int:
        """The parameter update the frame shows (0 = the initial policy)."""
        return int(self.headers["x-update"])

    @property
    def iteration(self) -> Optional[int]:
        """The training iteration passed to ``update_plot``, if any."""
        value = self.headers.get("x-iteration", "")
        return int(value) if value else None


def open_stream(
        url: str,
        token: Optional[str] = None,
        timeout: float = 10.0) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """GET ``url`` and return the connection and its response (status 200 checked).

    Raises:
        StreamError: on any other status (``.status`` holds it, e.g. 401 or 403).
    """
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    if response.status != 200:
        body = response.read(2000).decode("utf-8", "replace").strip()
        connection.close()
        raise StreamError(f"GET {parts.path} answered {response.status}: {body}", response.status)
    return connection, response


def on_page(url: str, route: str) -> str:
    """``route`` (``stream.mjpg``, ``events``) of the live page at ``url`` when ``url`` is the
    page's own address (``http://127.0.0.1:8080/``, ``.../index.html``, what ``stats["http_url"]``
    says); any other address as it is. The query (a token) is kept."""
    parts = urlsplit(url)
    head, _, last = (parts.path or "/").rpartition("/")
    if last not in ("", "index.html"):
        return url
    return urlunsplit(parts._replace(path=f"{head}/{route}"))


def read_mjpeg(url: str,
               token: Optional[str] = None,
               timeout: float = 10.0) -> Iterator[StreamedFrame]:
    """Yield the frames of an MJPEG stream until the server closes it. ``url``: the stream's
    address (``.../stream.mjpg``) or the live page's (``stats["http_url"]``)."""
    connection, response = open_stream(on_page(url, "stream.mjpg"), token, timeout)
    try:
        content_type = response.getheader("Content-Type", "")
        if not content_type.startswith("multipart/x-mixed-replace"):
            raise StreamError(f"not an MJPEG stream: Content-Type {content_type!r}")
        while True:
            headers = _read_part_headers(response)
            if headers is None:
                return
            jpeg = _read_exactly(response, int(headers["content-length"]))
            if jpeg is None:
                return
            yield StreamedFrame(jpeg, headers, time.time())
    finally:
        connection.close()


def read_events(url: str,
                token: Optional[str] = None,
                timeout: float = 10.0) -> Iterator[Tuple[str, Any]]:
    """Yield ``(event_name, decoded_json_data)`` from a server-sent events stream. ``url``: the
    stream's address (``.../events``) or the live page's."""
    connection, response = open_stream(on_page(url, "events"), token, timeout)
    try:
        name, data = "message", []
        while True:
            line = response.readline()
            if not line:
                return
            line = line.decode("utf-8").rstrip("\r\n")
            if not line:
                if data:
                    yield name, json.loads("\n".join(data))
                name, data = "message", []
            elif line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
    finally:
        connection.close()


def part_head(lines: List[bytes]) -> Tuple[Dict[str, str], int]:
    """A part's headers (lower-cased names) from the lines before it (``\r\n`` kept), and the
    index of its first header line: blank lines and boundaries before it are skipped."""
    headers: Dict[str, str] = {}
    first = len(lines)
    for index, line in enumerate(lines):
        text = line.decode("latin-1").rstrip("\r\n")
        if not headers and (not text or text.startswith("--")):
            continue  # before the headers: a boundary, or the line ending a part
        if not text:
            break
        if not headers:
            first = index
        name, _, value = text.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers, first


async def iter_parts(content: Any) -> AsyncIterator[Tuple[bytes, Dict[str, str]]]:
    """The parts of an MJPEG stream from an aiohttp ``StreamReader``: each one's bytes as this
    server sends them (its headers, the JPEG, the boundary after it) and its headers."""
    from async_plotter.web.feed import BOUNDARY

    trailer = f"\r\n--{BOUNDARY}\r\n".encode()
    while True:
        try:
            block = await content.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return
        if not block.endswith(b"\r\n\r\n"):
            return  # the stream ended
        lines = block.splitlines(keepends=True)
        headers, first = part_head(lines)
        if not headers:
            continue
        try:
            jpeg = await content.readexactly(int(headers["content-length"]))
        except asyncio.IncompleteReadError:
            return
        yield b"".join(lines[first:]) + jpeg + trailer, headers


def _read_part_headers(response: http.client.HTTPResponse) -> Optional[Dict[str, str]]:
    """Skip boundary and blank lines, then read one part's headers (lower-cased names)."""
    lines: List[bytes] = []
    started = False
    while True:
        line = response.readline()
        if not line:
            return None
        lines.append(line)
        text = line.strip()
        if not text and started:
            return part_head(lines)[0]
        started = started or bool(text and not text.startswith(b"--"))


def _read_exactly(response: http.client.HTTPResponse, length: int) -> Optional[bytes]:
    """``length`` bytes, or None if the stream ends first."""
    chunks, missing = [], length
    while missing > 0:
        chunk = response.read(missing)
        if not chunk:
            return None
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)
