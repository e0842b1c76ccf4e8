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

    python benchmarks/web_hostile.py            # ~1.5 min
    python benchmarks/web_hostile.py --quick    # fewer attackers and tries

Writes ``benchmarks/results/web_hostile.json``.
"""
import argparse
import json
import multiprocessing
import os
import platform
import selectors
import socket
import statistics
import sys
import threading
import time
from typing import Any, Dict, List

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ------------------------------------------------------------------------------ the server


def _serve(port_queue: Any, stop: Any, small: bool = False) -> None:
    """The render process's side: an HttpSink fed noisy frames until ``stop`` is set (``small``:
    96x64 plain frames of ~2 KB instead)."""
    import numpy as np

    from async_plotter.web.address import parse_http_address
    from async_plotter.web.sink import HttpSink
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
    """``readers`` clients take every slot, then ``stuck`` clients that never read arrive; after
    ``seconds`` (evicted readers come back 1.5 s later): what each kind holds and gets."""
    stop = threading.Event()
    times: List[List[float]] = [[] for _ in range(readers)]
    evictions: List[List[float]] = [[] for _ in range(readers)]

    def read(index: int) -> None:
        request = b"GET /stream.mjpg?client=reader HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                    sock.sendall(request)
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
                        times[index].extend([time.monotonic()] * data.count(b"\xff\xd9"))
                        tail = data[-1:]
            except OSError:
                pass
            if not stop.is_set():
                evictions[index].append(time.monotonic())
                stop.wait(1.5)

    threads = [threading.Thread(target=read, args=(i, ), daemon=True) for i in range(readers)]
    for thread in threads:
        thread.start()
        time.sleep(0.1)
    time.sleep(3.0)
    arrived = time.monotonic()
    stuck_sockets = []
    for _ in range(stuck):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /stream.mjpg?client=stuck HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        stuck_sockets.append(sock)
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
    rates = sorted(sum(1 for t in frame_times if t > now - 3.0) / 3.0 for frame_times in times)
    stop.set()
    for thread in threads:
        thread.join(5)
    for sock in stuck_sockets:
        sock.close()
    after = [len([e for e in reader if e > arrived]) for reader in evictions]
    return {
        "readers": readers,
        "stuck": stuck,
        "seconds": seconds,
        "stuck_slots_lost": len(lost_at),
        "stuck_slots_lost_within_s": round(max(lost_at.values()) - arrived, 2) if lost_at else None,
        "reader_evictions_after_stuck_arrived": sum(after),
        "reader_fps_last_3s": {
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    attackers, tries = (300, 8) if args.quick else (1000, 20)
    ctx = multiprocessing.get_context("spawn")
    result: Dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_1min_before": os.getloadavg()[0]
        }
    }

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
    result["stuck_and_reading"] = _stuck_and_reading(port, 20, 9, 8.0 if args.quick else 15.0)
    stop_server.set()
    server.join(10)

    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "web_hostile.json"), "w") as out:
        json.dump(result, out, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
