"""The finished videos of one folder, as the video sink names them, and the bytes of one of them.

The video sink (``render/sinks/video.py``) writes ``iter_NNNN.mp4`` (numbered by iteration) or
``update_NNNN.mp4`` (by update), each under a hidden temporary name until it is complete. Only
those final names are listed and served, and only as plain files directly inside the folder, so
that a request can never name another file (``..``, a slash, a hidden file do not match).

Used by the live page (``server``, with ``Plotter(video_dir=...)``) and by ``async-plotter serve``,
whose ``serve.history`` keeps one such folder per experiment.
"""
import dataclasses
import os
import re
import socket
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = [
    "VIDEO_NAME", "VIDEO_CHUNK", "Video", "list_videos", "video_path", "byte_range", "send_video"
]

VIDEO_NAME = re.compile(r"(iter|update)_(\d{1,9})\.mp4")
#: bytes read and sent at a time: a video is streamed, never read whole into memory
VIDEO_CHUNK = 256 * 1024


@dataclasses.dataclass(frozen=True)
class Video:
    """One finished video."""

    name: str  # the file's name
    kind: str  # "iter" (numbered by iteration) or "update"
    number: int
    size: int
    mtime: float

    def as_json(self) -> Dict[str, Any]:
        """For the page."""
        return {"file": self.name, "kind": self.kind, "number": self.number, "size": self.size}


def list_videos(folder: str) -> List[Video]:
    """The finished videos in ``folder``, iteration-numbered first, each kind by number; an
    absent or unreadable folder has none."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = []
    for name in names:
        match = VIDEO_NAME.fullmatch(name)
        if match is None:
            continue
        try:
            stat = os.stat(os.path.join(folder, name))
        except OSError:
            continue  # removed meanwhile (pruned)
        found.append(Video(name, match[1], int(match[2]), stat.st_size, stat.st_mtime))
    # Iteration-numbered first (they order by training progress), then update-numbered.
    found.sort(key=lambda video: (video.kind != "iter", video.number))
    return found


def video_path(folder: str, name: str) -> Optional[str]:
    """The file to serve for a request naming ``name`` in ``folder``, or None if there is no
    such video (a name the sink does not write is never looked up)."""
    if VIDEO_NAME.fullmatch(name) is None:
        return None
    path = os.path.join(folder, name)
    return path if os.path.isfile(path) else None


def byte_range(header: str, size: int) -> Optional[Tuple[int, int]]:
    """The ``(first, last)`` bytes of a ``Range: bytes=...`` header for a file of ``size``
    bytes; None when it is absent, malformed, asks for several ranges or none of the file: the
    caller then sends the whole file (a server may always ignore a range)."""
    match = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", header or "")
    if match is None or size <= 0:
        return None
    first_text, last_text = match.groups()
    if not first_text and not last_text:
        return None
    if not first_text:  # the last N bytes
        length = int(last_text)
        if length == 0:
            return None
        return max(size - length, 0), size - 1
    first = int(first_text)
    last = int(last_text) if last_text else size - 1
    if first >= size or last < first:
        return None
    return first, min(last, size - 1)


#: ``head(code, content_type, length, extra_headers)``: a response's status line and headers
HeadBuilder = Callable[[int, str, int, Dict[str, str]], bytes]


def send_video(sock: socket.socket, path: str, range_header: str, head: HeadBuilder) -> None:
    """Send the mp4 at ``path`` on the blocking ``sock``: all of it (200), or the one range the
    ``Range`` header asks for (206), in ``VIDEO_CHUNK`` pieces. ``head`` builds the response's
    head (the server's own, with its security headers)."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        span = byte_range(range_header, size)
        # Browsers seek in a video only if the server says it serves ranges.
        extra = {"Accept-Ranges": "bytes"}
        if span is None:
            first, last, code = 0, size - 1, 200
        else:
            first, last = span
            code = 206
            extra["Content-Range"] = f"bytes {first}-{last}/{size}"
        sock.sendall(head(code, "video/mp4", last - first + 1, extra))
        handle.seek(first)
        left = last - first + 1
        while left > 0:
            chunk = handle.read(min(VIDEO_CHUNK, left))
            if not chunk:
                break  # the file shrank meanwhile: the client sees a short body
            sock.sendall(chunk)
            left -= len(chunk)
