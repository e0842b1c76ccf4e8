"""A real ``redis-server`` for tests and benchmarks: a private instance on a free loopback port,
without persistence (a restart loses everything, like a crashed server without a disk).

Tests fail, not skip, when ``redis-server`` is missing: the Redis channel is only tested against a
real server, and CI installs one (``apt-get install redis-server``).
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Optional, Sequence

import pytest

MISSING_MESSAGE = ("redis-server was not found on PATH or in /usr/bin, so the Redis channel cannot "
                   "be tested. Install it (Debian/Ubuntu: apt-get install redis-server) or set "
                   "REDIS_SERVER=/path/to/redis-server.")


def find_redis_server() -> Optional[str]:
    """The redis-server executable, or None."""
    candidate = os.environ.get("REDIS_SERVER")
    if candidate and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("redis-server")
    if found:
        return found
    return "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """One redis-server process. ``kill`` and ``start`` again keep the port (and so the URL)."""

    def __init__(self,
                 executable: str,
                 port: Optional[int] = None,
                 password: Optional[str] = None,
                 extra_args: Sequence[str] = ()) -> None:
        self.executable = executable
        self.port = port or free_port()
        self.password = password
        #: more redis-server options (a later one wins over an earlier one, e.g. ``--port 0``)
        self.extra_args = list(extra_args)
        self.directory = tempfile.mkdtemp(prefix="async_plotter_redis_")
        self.process: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> "RedisServer":
        """Start the server and wait until it answers PING."""
        command = [
            self.executable, "--port",
            str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir",
            self.directory, "--daemonize", "no", "--loglevel", "warning"
        ]
        if self.password:
            command += ["--requirepass", self.password]
        command += self.extra_args
        self.process = subprocess.Popen(command,
                                        stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with code {self.process.returncode} "
                                   f"(port {self.port} taken?)")
            if self._answers():
                return self
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout} s")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                reply = sock.recv(64)
        except OSError:
            return False
        return reply.startswith(b"+PONG") or reply.startswith(b"-NOAUTH")

    def kill(self) -> None:
        """SIGKILL: the server vanishes with everything it held."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def stop(self) -> None:
        """Stop it and remove its directory."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def redis_server():
    """A fresh redis-server for one test (fails the test if redis-server is not installed)."""
    executable = find_redis_server()
    if executable is None:
        pytest.fail(MISSING_MESSAGE)
    server = RedisServer(executable).start()
    yield server
    server.stop()
