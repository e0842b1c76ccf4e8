"""Shared fixtures of the RL host tests (real TensorFlow, real environments, real processes)."""
import os
import sys
import time

import psutil
import pytest

# Helpers that spawned children import by name (spawn pickles functions by reference) live next to
# this file; the children inherit sys.path, so this works whatever pytest's import mode.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_configure(config: pytest.Config) -> None:
    # Registered here too (pytest.ini has them as well) so tests/rl runs on its own.
    config.addinivalue_line("markers",
                            "slow: takes more than a few seconds (worker processes, training)")
    config.addinivalue_line(
        "markers",
        "plotter_core: needs the core Plotter (async_plotter.trainer.plotter_handle); deselect with "
        "-m 'not plotter_core' until it exists")


def _is_leftover(process: psutil.Process) -> bool:
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        # multiprocessing's resource tracker is one helper per interpreter, started by the first
        # lock or shared-memory block anyone creates, and it lives until the interpreter exits.
        return "multiprocessing.resource_tracker" not in " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def no_leftover_children():
    """Fail if the test leaves child processes of this process behind (waits a little)."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    deadline = time.monotonic() + 10.0
    leftover = []
    while time.monotonic() < deadline:
        leftover = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        leftover = [p for p in leftover if _is_leftover(p)]
        if not leftover:
            break
        time.sleep(0.1)
    assert not leftover, f"child processes left behind: {[(p.pid, p.name()) for p in leftover]}"
