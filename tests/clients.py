"""Clients the tests and the benchmarks (``web_hostile.py``, ``live_latency.py``) share (nothing
of the test suite is imported here): a reader of the live page's MJPEG stream, a 3D page's socket
as viser's client opens it and what its messages show, and ``async-plotter replay`` started as a
user starts it."""
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Optional, Tuple

from tests.conftest import default_sigint


def read_mjpeg_stream(port: int, stop: threading.Event, seen: Callable[[int], None]) -> None:
    """Read ``/stream.mjpg`` on one connection as a browser does (everything, at once) until it
    closes or ``stop`` is set; ``seen(count)`` is told of the frames that ended in each read."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /stream.mjpg?client=reader HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.settimeout(0.5)
        tail = b""
        while not stop.is_set():
            try:
                chunk = sock.recv(262144)
            except socket.timeout:
                continue
            if not chunk:
                break
            data = tail + chunk
            seen(data.count(b"\xff\xd9"))
            tail = data[-1:]


def view3d_socket(url: str,
                  origin: Optional[str] = None,
                  headers: Optional[dict] = None,
                  timeout: float = 10.0) -> Any:
    """A WebSocket to the 3D page at ``url`` (``http://...``: viser's client opens its socket at
    the page's own address), with viser's subprotocol."""
    import viser
    from websockets.sync.client import connect

    return connect(url.replace("http://", "ws://", 1),
                   subprotocols=[f"viser-v{viser.__version__}"],
                   origin=origin,
                   additional_headers=headers or {},
                   open_timeout=timeout,
                   max_size=None)


#: the 3D view's panel names the policy it shows: "... (update 3), episode 12"
_UPDATE_IN_PANEL = re.compile(r"\(update (\d+)\)")


def view3d_shows(message: Any) -> Tuple[Optional[Tuple[float, float, float]], Optional[int]]:
    """What one message on a 3D page's socket shows: ``(the offset its poses give the world,
    i.e. minus the tracked body's position (the view keeps that body at the origin), or None
    if it carries no poses; the update the panel's text now names, or None)``. Poses name no
    policy; the panel's text, set when the render process begins an episode, does."""
    import msgspec
    import zstandard

    if isinstance(message, str):
        return None, None
    inner_size = int.from_bytes(message[:8], "little")
    size = int.from_bytes(message[8:16], "little")
    batch = msgspec.msgpack.decode(zstandard.ZstdDecompressor().decompress(
        message[16:16 + size], max_output_size=inner_size))
    offset, update = None, None
    for item in batch.get("messages", ()):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "SetPositionMessage" and str(item.get("name", "")).endswith("fixed_bodies"):
            offset = tuple(float(value) for value in item["position"])
        found = (_UPDATE_IN_PANEL.search(str(item.get("updates", "")))
                 if kind == "GuiUpdateMessage" else None)
        if found:
            update = int(found[1])
    return offset, update


def start_replay(path: str, *args: str, timeout: float = 60.0) -> Tuple[Any, Optional[str]]:
    """``(the process, its URL)``: ``async-plotter replay path --http 0 *args``, its stderr
    read until it names its address (None if it does not within ``timeout`` s)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "async_plotter.cli", "replay", path, "--http", "0", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1"),
        preexec_fn=default_sigint)  # stopped with SIGINT (stop_with_ctrl_c)
    url = None
    deadline = time.monotonic() + timeout
    while url is None and time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        found = re.search(r"replay of .* at (http://\S+)", line)
        url = found[1] if found else None
    return process, url


def stop_with_ctrl_c(process: Any, timeout: float = 60.0) -> str:
    """Send ``process`` (a command started with its stderr piped) SIGINT and wait for it to end,
    at most ``timeout`` s; what it wrote on stderr meanwhile. One that does not end fails the
    test with what tells why: its signal state (blocked, ignored and caught, from /proc) and,
    where it runs with ``PYTHONFAULTHANDLER=1``, every thread's stack (SIGABRT)."""
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=timeout)[1] or ""
    except subprocess.TimeoutExpired:
        pass
    try:
        with open(f"/proc/{process.pid}/status") as status:
            masks = [
                line.strip() for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))
            ]
    except OSError:
        masks = []
    process.send_signal(signal.SIGABRT)
    try:
        stacks = process.communicate(timeout=10)[1] or ""
    except subprocess.TimeoutExpired:
        process.kill()
        stacks = process.communicate()[1] or ""
    raise AssertionError(f"still running {timeout:.0f} s after Ctrl-C; {', '.join(masks)}; "
                         f"its stderr then:\n{stacks}")
