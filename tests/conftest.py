"""Shared fixtures: leak checks for processes and shared memory, an Xvfb display, waiting."""
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from async_plotter.channel.shm import SEGMENT_PREFIX  # noqa: E402 - after the TF setting


def default_sigint():
    """``preexec_fn`` for a child the test will send SIGINT: SIGINT at its default, so that the
    child's Python raises KeyboardInterrupt, also when the tests run with SIGINT ignored (a
    background job, ``nohup``, some CI runners), which children inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(params=["fast", "public"])
def view3d_poses(request, monkeypatch):
    """Each way the 3D view poses its scene, for what this process and the processes it starts
    build (``view3d/scene.py``'s ``POSES_ENV``): the fast path where detected, or mjviser's
    public path, forced."""
    if request.param == "public":
        monkeypatch.setenv("ASYNC_PLOTTER_VIEW3D_POSES", "public")
    else:
        monkeypatch.delenv("ASYNC_PLOTTER_VIEW3D_POSES", raising=False)
    return request.param


def wait_for(predicate, timeout, interval=0.1, message="condition"):
    """Poll ``predicate`` until it is truthy; fail the test with ``message`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message}")


def worker_children():
    """This test process's live children that belong to plot workers (not the resource tracker)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if ("resource_tracker" in cmdline or "redis-server" in cmdline or "Xvfb" in cmdline
                or BURNER_MARK in cmdline):
            continue
        found.append(child)
    return found


def shm_segments():
    """Shared-memory segments currently in /dev/shm created by this library (or Python's
    shared_memory with its own names)."""
    try:
        return {
            name
            for name in os.listdir("/dev/shm") if name.startswith(("psm_", SEGMENT_PREFIX))
        }
    except FileNotFoundError:
        return set()


@pytest.fixture
def no_leftovers(monkeypatch):
    """Asserts that the test leaves no worker processes and none of the shared-memory segments
    it created behind (other processes on the machine may create their own meanwhile)."""
    from async_plotter.channel.shm import SharedMemoryWriter

    created = []
    original_init = SharedMemoryWriter.__init__

    def recording_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        created.append(self.name.lstrip("/"))

    monkeypatch.setattr(SharedMemoryWriter, "__init__", recording_init)
    yield
    wait_for(lambda: not worker_children(), 10, message="worker processes to exit")
    leaked = set(created) & shm_segments()
    assert not leaked, f"leaked shared memory segments: {leaked}"


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt in this process for the test's length, as in a terminal,
    also when the tests run with SIGINT ignored (``make test &``, some CI runners): Python then
    leaves it ignored, and a test that sends itself SIGINT would wait for nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


BURNER_MARK = "async_plotter_test_cpu_burner"


@pytest.fixture
def saturated_machine():
    """Keeps every core busy for the test's length, the way a trainer with n_parallel equal to
    the core count does: one more busy process than there are cores, at normal priority."""
    loop = f"# {BURNER_MARK}\nwhile True: pass"
    burners = [
        subprocess.Popen([sys.executable, "-c", loop]) for _ in range((os.cpu_count() or 1) + 1)
    ]
    yield burners
    for burner in burners:
        burner.kill()
    for burner in burners:
        burner.wait(10)


@pytest.fixture
def xvfb(monkeypatch):
    """A real X server (Xvfb) for window tests; sets DISPLAY for the test and its children."""
    if shutil.which("Xvfb") is None:
        pytest.fail("Xvfb is not installed; `make test` installs it (Debian package xvfb)")
    read_end, write_end = os.pipe()
    server = subprocess.Popen(
        ["Xvfb", "-displayfd",
         str(write_end), "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
        pass_fds=(write_end, ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    os.close(write_end)
    with os.fdopen(read_end) as display_out:
        number = display_out.readline().strip()
    assert number.isdigit(), "Xvfb did not report a display number"
    monkeypatch.setenv("DISPLAY", f":{number}")
    yield f":{number}"
    server.terminate()
    server.wait(10)
