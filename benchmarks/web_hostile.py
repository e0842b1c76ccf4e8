"""The live page under hostile neighbours: what the real user waits with attackers connected.

Three processes, all on loopback (127.0.0.1 only): the server (a real ``HttpSink`` fed synthetic
320x240 frames at 30 frames/s by a fake render loop), the attackers, and the measuring user (this
process). Measured:

* **slowloris**: 1000 idle connections (half send nothing, half a partial request line), each
  reopened as soon as the server drops it, so that 1000 are always connected or connecting. The
  user's time to first byte of ``/``, to the first frame of ``/stream.mjpg`` and to the first
  ``/events`` event, against the same without attackers; and the server's thread count.
* **hoarders**: 16 stream readers that trickle ~1.8 KiB/s to hold every slot (an evicted one
  reconnects at once). The time for a new viewer to get its first frame.
* **stuck and reading**: 20 clients that read every frame (an evicted one reconnects 1.5 s
  later, as the page does) and 9 that never read, arriving once the readers hold every slot.
  Small frames (~2 KB), so the kernel's buffers take seconds of them for a client that reads
  nothing. The readers' frames per second, their evictions, and the slots stuck clients hold.

The 3D view's socket (``view3d``) and the replay's (``replay``): the same patterns against the
WebSocket a browser opens for the 3D scene, through the live page's server to viser's: a real
``Plotter("HalfCheetah-v5", http=0, view="3d")`` (loopback, no token) and ``async-plotter replay``
of that run's first state recording (with a token), each in its own processes. The user's time
from connecting the socket to its first message (the scene), without attackers and with each of:

* **refused**: what each hostile upgrade gets (another ``Origin``, ``Origin: null``,
  ``Sec-Fetch-Site: cross-site``, a rebinding ``Host``; for the replay no token, a wrong one, and
  the token's cookie sent from another origin), and a flood of them (the user's wait meanwhile);
* **slowloris**: idle connections, as above, against the 3D server;
* **churn**: twice ``MAX_VIEWERS`` clients that pass the checks (a local process can) open the
  socket, read, and reconnect at once when evicted: the user's wait, and how long the user's
  socket keeps its slot;
* **stuck and reading**: ``MAX_VIEWERS`` readers, then 9 clients that never read arrive: the
  slots they hold and for how long, the readers' messages per second.

    python benchmarks/web_hostile.py                # ~5 min
    python benchmarks/web_hostile.py --quick        # fewer attackers and tries
    python benchmarks/web_hostile.py --part 3d      # only the 3D sockets (the rest kept)

Writes ``benchmarks/results/web_hostile.json`` (with ``--part``, only that part's entries).
"""
import argparse
import json
import multiprocessing
import os
import platform
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ------------------------------------------------------------------------------ the server


def _serve(port_queue: Any, stop: Any, small: bool = False) -> None:
    """The render process's side: an HttpSink fed noisy frames until ``stop`` is set (``small``:
    96x64 plain frames of ~2 KB instead)."""
    import numpy as np

    from async_plotter.web.address import parse_http_address
    from async_plotter.sinks.http import HttpSink
    from async_plotter.render.stream import EpisodeInfo

    sink = HttpSink(parse_http_address(0, None), title="Fake-v0")
    port_queue.put(sink.port)
    episode = EpisodeInfo(0, None, 0)
    sink.begin_episode(episode)
    rng = np.random.default_rng(0)
    height, width = (64, 96) if small else (240, 320)
    frame = np.zeros((height, width, 3), np.uint8)
    index = 0
    while not stop.is_set():
        index += 1
        if sink.wants_pixels():
            if small:
                frame[:, :, 0] = (index * 9) % 256
            else:
                frame[:, :, 2] = rng.integers(0, 256, (height, width), np.uint8)
            sink.add_frame(frame.copy(), episode)
        else:
            sink.add_frame(None, episode)
        time.sleep(1 / 30)
    sink.close()


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


# --------------------------------------------------------------------------- the attackers


def _slowloris(port: int, count: int, ready: Any, stop: Any) -> None:
    """Keep ``count`` idle connections open; reopen each one the server drops."""
    selector = selectors.DefaultSelector()
    partial = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"

    def open_one(index: int) -> None:
        sock = socket.socket()
        sock.setblocking(False)
        try:
            sock.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, index)

    for index in range(count):
        open_one(index)
    ready.set()
    while not stop.is_set():
        for key, mask in selector.select(0.2):
            sock = key.fileobj
            if mask & selectors.EVENT_WRITE:  # connected: maybe send a partial request
                if key.data % 2:
                    try:
                        sock.send(partial)
                    except OSError:
                        pass
                selector.modify(sock, selectors.EVENT_READ, key.data)
                continue
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data:  # dropped by the server: reopen at once
                selector.unregister(sock)
                sock.close()
                open_one(key.data)


def _hoard(port: int, count: int, stop: Any) -> None:
    """``count`` stream readers trickling ~1.8 KiB/s; an evicted one reconnects."""

    def reader() -> None:
        while not stop.is_set():
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            try:
                sock.connect(("127.0.0.1", port))
                sock.sendall(b"GET /stream.mjpg?client=hoarder HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                sock.settimeout(1.0)
                while not stop.is_set():
                    try:
                        if not sock.recv(460):
                            break
                    except socket.timeout:
                        continue
                    time.sleep(0.25)
            except OSError:
                pass
            finally:
                sock.close()

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    while not stop.is_set():
        time.sleep(0.2)


# --------------------------------------------------------------------------------- the user


def _ttfb(port: int, request: bytes, marker: bytes, timeout: float = 30.0) -> float:
    """Seconds from connecting to receiving ``marker`` (a response's first byte, or a frame)."""
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        received = b""
        while marker not in received:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed before {marker!r}: {received[:80]!r}")
            received += chunk
    return time.perf_counter() - started


def _user(port: int, tries: int) -> Dict[str, Any]:
    host = b"Host: 127.0.0.1\r\n\r\n"
    cases = {
        "page": (b"GET / HTTP/1.1\r\n" + host, b"HTTP/1.1 200"),
        "stream_first_frame": (b"GET /stream.mjpg HTTP/1.1\r\n" + host, b"\xff\xd9"),
        "events_first_event": (b"GET /events HTTP/1.1\r\n" + host, b"event: status"),
    }
    result = {}
    for name, (request, marker) in cases.items():
        times, failures = [], 0
        for _ in range(tries):
            try:
                times.append(_ttfb(port, request, marker))
            except OSError:
                failures += 1
            time.sleep(0.05)
        result[name] = _summary(times, failures)
    return result


def _summary(times: List[float], failures: int) -> Dict[str, Any]:
    times = sorted(times)
    if not times:
        return {"failures": failures}
    return {
        "median_ms": round(1000 * statistics.median(times), 2),
        "p95_ms": round(1000 * times[min(len(times) - 1, int(0.95 * len(times)))], 2),
        "max_ms": round(1000 * times[-1], 2),
        "tries": len(times),
        "failures": failures,
    }


def _stuck_and_reading(port: int, readers: int, stuck: int, seconds: float) -> Dict[str, Any]:
    """``readers`` stream clients take every slot, then ``stuck`` clients that never read
    arrive (``_stuck_among_readers``)."""

    from tests.clients import read_mjpeg_stream

    def read_one(stop: threading.Event, seen: Callable[[int], None]) -> None:
        read_mjpeg_stream(port, stop, seen)

    def open_stuck() -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /stream.mjpg?client=stuck HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        return sock

    return _stuck_among_readers(read_one, open_stuck, readers, stuck, seconds, 3.0,
                                "reader_fps_last_3s")


def _stuck_among_readers(read_one: Callable[[threading.Event, Callable[[int], None]], None],
                         open_stuck: Callable[[], socket.socket], readers: int, stuck: int,
                         seconds: float, settle: float, rate: str) -> Dict[str, Any]:
    """``readers`` clients (``read_one(stop, seen)`` reads one connection until it closes,
    calling ``seen(count)`` for what arrives) take every slot, then after ``settle`` s ``stuck``
    clients that never read arrive (``open_stuck()``); after ``seconds`` (an evicted reader
    comes back 1.5 s later): what each kind holds and gets (``rate``: the readers' per second)."""
    stop = threading.Event()
    times: List[List[float]] = [[] for _ in range(readers)]
    evictions: List[List[float]] = [[] for _ in range(readers)]

    def read(index: int) -> None:
        while not stop.is_set():
            try:
                read_one(stop, lambda count: times[index].extend([time.monotonic()] * count))
            except Exception:  # noqa: BLE001 - reset, refused, closed: evicted
                pass
            if not stop.is_set():
                evictions[index].append(time.monotonic())
                stop.wait(1.5)

    threads = [threading.Thread(target=read, args=(i, ), daemon=True) for i in range(readers)]
    for thread in threads:
        thread.start()
        time.sleep(0.1)
    time.sleep(settle)
    arrived = time.monotonic()
    stuck_sockets = []
    for _ in range(stuck):
        stuck_sockets.append(open_stuck())
        time.sleep(0.2)
    # A stuck client lost its slot when the server closed (reset) its connection: its TCP state
    # is no longer ESTABLISHED (read without reading a byte of the stream).
    lost_at: Dict[int, float] = {}
    deadline = arrived + seconds
    while time.monotonic() < deadline:
        for index, sock in enumerate(stuck_sockets):
            if index not in lost_at and _tcp_state(sock) != 1:
                lost_at[index] = time.monotonic()
        time.sleep(0.05)
    now = time.monotonic()
    rates = sorted(sum(1 for t in seen if t > now - 3.0) / 3.0 for seen in times)
    stop.set()
    for thread in threads:
        thread.join(5)
    for sock in stuck_sockets:
        sock.close()
    return {
        "readers":
        readers,
        "stuck":
        stuck,
        "seconds":
        seconds,
        "stuck_slots_lost":
        len(lost_at),
        "stuck_slots_lost_within_s":
        round(max(lost_at.values()) - arrived, 2) if lost_at else None,
        "reader_evictions_after_stuck_arrived":
        sum(len([e for e in reader if e > arrived]) for reader in evictions),
        rate: {
            "min": round(rates[0], 1),
            "median": round(statistics.median(rates), 1),
            "max": round(rates[-1], 1)
        },
    }


def _tcp_state(sock: socket.socket) -> int:
    """The socket's TCP state (Linux ``TCP_INFO``: 1 is ESTABLISHED); 0 once it is unreadable."""
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
    except OSError:
        return 0


def _start_server(ctx: Any, small: bool = False) -> Any:
    port_queue, stop = ctx.Queue(), ctx.Event()
    process = ctx.Process(target=_serve, args=(port_queue, stop, small), daemon=True)
    process.start()
    return process, stop, port_queue.get(timeout=60)


# ------------------------------------------------------------------- the 3D view's socket

TOKEN = "hostile-benchmark-token"
#: the headers of a WebSocket upgrade (the key is any 16 bytes, base64)
_UPGRADE = ("GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: {protocol}\r\n{extra}\r\n")


def _protocol() -> str:
    import viser

    return f"viser-v{viser.__version__}"


def _upgrade(port: int, path: str = "/", host: str = "", extra: str = "") -> bytes:
    return _UPGRADE.format(path=path,
                           host=host or f"127.0.0.1:{port}",
                           protocol=_protocol(),
                           extra=extra).encode()


def _upgrade_status(port: int, request: bytes) -> int:
    """The status a raw upgrade request gets (101: the socket opened)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        head = b""
        while b"\r\n" not in head:
            chunk = sock.recv(100)
            if not chunk:
                return 0
            head += chunk
        return int(head.split()[1])


def _ws_connect(url: str, origin: Optional[str]) -> Any:
    from websockets.sync.client import connect

    return connect(url.replace("http://", "ws://"),
                   subprotocols=[_protocol()],
                   origin=origin,
                   open_timeout=30,
                   close_timeout=1,
                   max_size=None)


def _first_message(url: str, origin: Optional[str], window: float = 0.0) -> Tuple[float, float]:
    """``(seconds to the socket's first message, seconds it then kept its slot, at most
    window)``."""
    started = time.perf_counter()
    with _ws_connect(url, origin) as ws:
        ws.recv(timeout=30)
        first = time.perf_counter() - started
        opened = time.perf_counter()
        try:
            while time.perf_counter() - opened < window:
                try:
                    ws.recv(timeout=0.5)
                except TimeoutError:
                    continue
        except Exception:  # noqa: BLE001 - closed by the server: evicted
            return first, time.perf_counter() - opened
        return first, window


def _ws_user(url: str, origin: Optional[str], tries: int, window: float = 0.0) -> Dict[str, Any]:
    """The user's first message, ``tries`` times; with a window, how long the slot was kept."""
    times, kept, failures = [], [], 0
    for _ in range(tries):
        try:
            first, held = _first_message(url, origin, window)
            times.append(first)
            kept.append(held)
        except Exception:  # noqa: BLE001 - refused, reset, timed out: a failure to count
            failures += 1
        time.sleep(0.1)
    result = _summary(times, failures)
    if window and kept:
        result["slot_kept_s"] = {
            "window": window,
            "median": round(statistics.median(kept), 2),
            "min": round(min(kept), 2),
            "evicted": sum(1 for held in kept if held < window),
        }
    return result


def _ws_churn(url: str, origin: Optional[str], count: int, stop: Any, connects: Any) -> None:
    """``count`` clients that pass the checks, read everything and reconnect at once when
    evicted (``connects`` counts their sockets)."""

    def client() -> None:
        while not stop.is_set():
            try:
                with _ws_connect(url, origin) as ws:
                    with connects.get_lock():
                        connects.value += 1
                    while not stop.is_set():
                        try:
                            ws.recv(timeout=0.5)
                        except TimeoutError:
                            continue
            except Exception:  # noqa: BLE001 - evicted or refused: again
                time.sleep(0.01)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    while not stop.is_set():
        time.sleep(0.2)


def _refused_flood(port: int, request: bytes, stop: Any, answers: Any) -> None:
    """Refused upgrades, back to back on 4 connections at a time (``answers`` counts them)."""

    def flood() -> None:
        while not stop.is_set():
            try:
                _upgrade_status(port, request)
                with answers.get_lock():
                    answers.value += 1
            except OSError:
                time.sleep(0.01)

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    while not stop.is_set():
        time.sleep(0.2)


def _ws_stuck_and_reading(url: str, port: int, origin: Optional[str], path: str, readers: int,
                          stuck: int, seconds: float) -> Dict[str, Any]:
    """``readers`` 3D sockets take every slot, then ``stuck`` clients that never read arrive
    (their upgrade sent on a 4 KiB receive buffer; ``_stuck_among_readers``)."""

    def read_one(stop: threading.Event, seen: Callable[[int], None]) -> None:
        with _ws_connect(url, origin) as ws:
            while not stop.is_set():
                try:
                    ws.recv(timeout=0.5)
                except TimeoutError:
                    continue
                seen(1)

    def open_stuck() -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(_upgrade(port, path, extra=f"Origin: {origin}\r\n" if origin else ""))
        return sock

    return _stuck_among_readers(read_one, open_stuck, readers, stuck, seconds, 4.0,
                                "reader_messages_per_s_last_3s")


def _cpu_seconds(pid: Optional[int]) -> float:
    from async_plotter.cpu import process_cpu_seconds

    return (process_cpu_seconds(pid) if pid is not None else None) or 0.0


def _while(ctx: Any, target: Callable[..., None], args: tuple, settle: float,
           measure: Callable[[], Dict[str, Any]], pid: Optional[int]) -> Dict[str, Any]:
    """``measure()`` while ``target(*args, stop, counter)`` attacks in its own process, after
    ``settle`` s; with the attacker's count per second and the server's CPU share."""
    stop, counter = ctx.Event(), ctx.Value("i", 0)
    process = ctx.Process(target=target, args=args + (stop, counter), daemon=True)
    process.start()
    time.sleep(settle)
    started, cpu, counted = time.monotonic(), _cpu_seconds(pid), counter.value
    result = measure()
    elapsed = time.monotonic() - started
    result["attacker_count_per_s"] = round((counter.value - counted) / elapsed, 1)
    result["server_cpu_percent_of_a_core"] = round(100 * (_cpu_seconds(pid) - cpu) / elapsed, 1)
    stop.set()
    process.join(10)
    return result


def _probe_3d(ctx: Any, url: str, port: int, pid: Optional[int], refusals: Dict[str, bytes],
              flood: bytes, origin: Optional[str], quick: bool) -> Dict[str, Any]:
    """Every pattern against one 3D socket (``url``: where it opens, token included)."""
    from async_plotter.view3d.front import MAX_VIEWERS

    tries = 5 if quick else 10
    path = "/" + url.split("/", 3)[3]
    result: Dict[str, Any] = {"without_attackers": _ws_user(url, origin, tries)}
    result["refused"] = {name: _upgrade_status(port, request) for name, request in refusals.items()}
    result["refused_flood"] = _while(ctx, _refused_flood, (port, flood), 1.0,
                                     lambda: _ws_user(url, origin, tries), pid)
    attackers = 300 if quick else 1000
    stop, ready = ctx.Event(), ctx.Event()
    loris = ctx.Process(target=_slowloris, args=(port, attackers, ready, stop), daemon=True)
    loris.start()
    ready.wait(60)
    time.sleep(3.0)
    threads_before = _threads(pid) if pid else None
    result["slowloris"] = dict(_ws_user(url, origin, tries),
                               attackers=attackers,
                               server_threads=threads_before)
    stop.set()
    loris.join(10)
    result["churn"] = dict(_while(ctx, _ws_churn, (url, origin, 2 * MAX_VIEWERS), 5.0,
                                  lambda: _ws_user(url, origin, 3 if quick else 5, 8.0), pid),
                           churners=2 * MAX_VIEWERS)
    result["stuck_and_reading"] = _ws_stuck_and_reading(url, port, origin, path, MAX_VIEWERS, 9,
                                                        12.0 if quick else 25.0)
    return result


def _view3d_part(ctx: Any, quick: bool) -> Dict[str, Any]:
    """The live 3D view's socket (a real Plotter) and the replay's (``async-plotter replay``
    of its first state recording)."""
    import numpy as np

    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    results: Dict[str, Any] = {}
    policy = LinearPolicy(17, 6)
    policy.set_param_values(np.random.default_rng(0).normal(0, 0.3, 17 * 6).astype(np.float32))
    with tempfile.TemporaryDirectory() as folder:
        with Plotter("HalfCheetah-v5",
                     policy,
                     max_path_length=200,
                     http=0,
                     view="3d",
                     video_dir=folder,
                     min_video_seconds=0,
                     seed=0,
                     priority="normal",
                     verbose=0) as plotter:
            url = plotter.wait_for_http_url(120)
            deadline = time.monotonic() + 120
            while not plotter.stats["state_recordings"] and time.monotonic() < deadline:
                time.sleep(0.2)
            port = int(url.rstrip("/").rsplit(":", 1)[1])
            own = url.rstrip("/")
            pid = plotter.stats["worker_pids"]["render"]
            refusals = {
                "other_origin":
                _upgrade(port, extra="Origin: http://evil.example\r\n"),
                "origin_null":
                _upgrade(port, extra="Origin: null\r\n"),
                "sec_fetch_site_cross_site":
                _upgrade(port, extra=f"Origin: {own}\r\n"
                         "Sec-Fetch-Site: cross-site\r\n"),
                "rebinding_host":
                _upgrade(port, host="evil.example", extra="Origin: http://evil.example\r\n"),
                "same_origin (opens)":
                _upgrade(port, extra=f"Origin: {own}\r\n"),
            }
            results["view3d"] = _probe_3d(ctx, url, port, pid, refusals, refusals["other_origin"],
                                          own, quick)
            results["view3d"]["worker_restarts"] = plotter.stats["restarts"]
            recording = os.path.join(folder, "update_0000.npz")
        results["replay"] = _replay_part(ctx, recording, quick)
    return results


def _replay_part(ctx: Any, recording: str, quick: bool) -> Dict[str, Any]:
    import urllib.request

    from tests.clients import start_replay

    process, base = start_replay(recording, "--http-token", TOKEN)
    try:
        if base is None:
            raise RuntimeError("async-plotter replay did not say where it serves")
        threading.Thread(target=process.stderr.read, daemon=True).start()  # drain its log
        port = int(base.rstrip("/").rsplit(":", 1)[1])
        with urllib.request.urlopen(f"{base}?token={TOKEN}", timeout=30) as answer:
            cookie = answer.headers["Set-Cookie"].split(";")[0]
        own = base.rstrip("/")
        refusals = {
            "no_token":
            _upgrade(port, extra=f"Origin: {own}\r\n"),
            "wrong_token":
            _upgrade(port, "/?token=wrong", extra=f"Origin: {own}\r\n"),
            "cookie_from_other_origin":
            _upgrade(port, extra=f"Cookie: {cookie}\r\n"
                     "Origin: http://evil.example\r\n"),
            "cookie_same_site_page":
            _upgrade(port, extra=f"Cookie: {cookie}\r\n"
                     "Sec-Fetch-Site: same-site\r\n"),
            "cookie_same_origin (opens)":
            _upgrade(port, extra=f"Cookie: {cookie}\r\nOrigin: {own}\r\n"),
        }
        result = _probe_3d(ctx, f"{base}?token={TOKEN}", port, process.pid, refusals,
                           refusals["no_token"], own, quick)
        result["token"] = True
        return result
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()


# ------------------------------------------------------------------------------------ main


def _mjpeg_part(ctx: Any, attackers: int, tries: int, quick: bool) -> Dict[str, Any]:
    result: Dict[str, Any] = {}
    server, stop_server, port = _start_server(ctx)
    threads_idle = _threads(server.pid)
    baseline = _user(port, tries)
    stop = ctx.Event()
    ready = ctx.Event()
    loris = ctx.Process(target=_slowloris, args=(port, attackers, ready, stop), daemon=True)
    loris.start()
    ready.wait(60)
    time.sleep(3.0)  # all connected, the first ones dropped and reopened
    attacked = _user(port, tries)
    threads_attacked = _threads(server.pid)
    stop.set()
    loris.join(10)
    stop_server.set()
    server.join(10)
    result["slowloris"] = {
        "attackers": attackers,
        "without_attackers": baseline,
        "with_attackers": attacked,
        "server_threads_idle": threads_idle,
        "server_threads_with_attackers": threads_attacked,
    }

    server, stop_server, port = _start_server(ctx)
    stop = ctx.Event()
    hoarders = ctx.Process(target=_hoard, args=(port, 16, stop), daemon=True)
    hoarders.start()
    time.sleep(5.0)  # every slot held, the trickle measured
    picture = []
    failures = 0
    for _ in range(tries):
        try:
            picture.append(
                _ttfb(port, b"GET /stream.mjpg HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"\xff\xd9"))
        except OSError:
            failures += 1
        time.sleep(1.5)  # the hoarders take the slot back
    stop.set()
    hoarders.join(10)
    stop_server.set()
    server.join(10)
    result["hoarders"] = {"hoarders": 16, "new_viewer_first_frame": _summary(picture, failures)}

    server, stop_server, port = _start_server(ctx, small=True)
    result["stuck_and_reading"] = _stuck_and_reading(port, 20, 9, 8.0 if quick else 15.0)
    stop_server.set()
    server.join(10)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--part",
                        choices=("all", "2d", "3d"),
                        default="all",
                        help="measure only the MJPEG page (2d) or the 3D sockets (3d); the "
                        "results file keeps the other part's entries")
    args = parser.parse_args()
    attackers, tries = (300, 8) if args.quick else (1000, 20)
    ctx = multiprocessing.get_context("spawn")
    path = os.path.join(RESULTS, "web_hostile.json")
    result: Dict[str, Any] = {}
    if args.part != "all" and os.path.exists(path):
        with open(path) as existing:
            result = json.load(existing)
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_1min_before": os.getloadavg()[0]
    }
    if args.part in ("all", "2d"):
        result["machine"] = machine
        result.update(_mjpeg_part(ctx, attackers, tries, args.quick))
    if args.part in ("all", "3d"):
        result["view3d_machine"] = dict(machine, quick=args.quick)
        result.update(_view3d_part(ctx, args.quick))
        result["view3d_machine"]["load_1min_after"] = os.getloadavg()[0]

    os.makedirs(RESULTS, exist_ok=True)
    with open(path + ".tmp", "w") as out:
        json.dump(result, out, indent=1)
    os.replace(path + ".tmp", path)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
