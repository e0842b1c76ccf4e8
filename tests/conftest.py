"""Shared fixtures: leak checks for processes and shared memory, an Xvfb display, waiting; the
check for what each test leaves behind (``tests/leftovers.py``); busy processes for the whole run
with ``TEST_BURNERS=N`` (or ``--burners N``), to bring out races before a loaded CI does."""
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
from tests.leftovers import BURNER_MARK, Tracker, snapshot  # noqa: E402


def default_sigint():
    """``preexec_fn`` for a child the test will send SIGINT: SIGINT at its default, so that the
    child's Python raises KeyboardInterrupt, also when the tests run with SIGINT ignored (a
    background job, ``nohup``, some CI runners), which children inherit; and not blocked: the
    mask of the thread that started the child survives exec, and a blocked Ctrl-C stays pending
    for ever, whatever handler the child sets."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


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


def settles(read, expected, timeout, interval=0.1):
    """Poll ``read()`` until it gives ``expected``; after ``timeout`` s, fail showing what it gave
    last (``wait_for``'s message is made before the wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = read()
        if last == expected:
            return
        time.sleep(interval)
    last = read()
    assert last == expected, f"after {timeout} s: {last!r}, not {expected!r}"


def mapped_libraries(pid):
    """The files process ``pid`` has mapped (its shared libraries among them)."""
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split()[-1] for line in maps if "/" in line}


def loads_tensorflow(libraries):
    """Whether any of ``libraries`` (``mapped_libraries``) is TensorFlow's."""
    return any("tensorflow" in path for path in libraries)


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


def start_burners(count):
    """``count`` busy processes at normal priority; each exits by itself once its parent has
    gone (a killed test run leaves none spinning)."""
    loop = (f"# {BURNER_MARK}\nimport os\nparent = os.getppid()\n"
            "while os.getppid() == parent:\n    for _ in range(1000000): pass")
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(count)]


def stop_burners(burners):
    for burner in burners:
        burner.kill()
    for burner in burners:
        burner.wait(10)


@pytest.fixture
def saturated_machine():
    """Keeps every core busy for the test's length, the way a trainer with n_parallel equal to
    the core count does: one more busy process than there are cores, at normal priority."""
    burners = start_burners((os.cpu_count() or 1) + 1)
    yield burners
    stop_burners(burners)


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


# ------------------------------------------------------------------ a machine busy on purpose


def pytest_addoption(parser):
    parser.addoption("--burners",
                     type=int,
                     default=int(os.environ.get("TEST_BURNERS") or 0),
                     help="keep N processes busy for the whole run (default: $TEST_BURNERS, "
                     "else 0); `make test-busy` runs the suite's parallel part with one a core")


def pytest_configure(config):
    # Started once, by the process that runs the session (xdist's controller with -n): N busy
    # processes in all, however many workers run the tests.
    count = config.getoption("burners")
    if count > 0 and not hasattr(config, "workerinput"):
        config.stash[_BURNERS] = start_burners(count)


def pytest_unconfigure(config):
    stop_burners(config.stash.get(_BURNERS, []))


def pytest_report_header(config):
    count = config.getoption("burners")
    return [f"busy processes for the whole run: {count}"] if count > 0 else []


_BURNERS = pytest.StashKey()

# ------------------------------------------------------------- what each test leaves behind

_LEFTOVERS = Tracker()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    _LEFTOVERS.start_test()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.scope == "function":
        return (yield)
    before = snapshot()
    try:
        return (yield)
    finally:
        _LEFTOVERS.fixture_set_up(fixturedef.argname, before)


def pytest_fixture_post_finalizer(fixturedef, request):
    if fixturedef.scope != "function":
        _LEFTOVERS.fixture_torn_down(fixturedef.argname)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    finally:
        _LEFTOVERS.observe()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    torn_down = False
    try:
        result = yield
        torn_down = True
        return result
    finally:
        # After every fixture's teardown (this test's, and a module's that ends here). What was
        # left is removed in any case; a teardown that failed already is reported as it failed.
        left = _LEFTOVERS.end_test()
        if left and torn_down:
            pytest.fail(f"{item.nodeid}: {left}", pytrace=False)
        elif left:
            item.add_report_section("teardown", "leftovers", left)


def hold(fixture_name, pids):
    """A module- or session-scoped ``fixture_name`` owns the processes ``pids()`` returns (and
    their descendants) from now until its teardown, whenever they start: they are checked at the
    end of its scope, not of the test that was running when they started."""
    _LEFTOVERS.hold(fixture_name, pids)
