"""The CPU governor's counts, against a real busy process: what ``stats["boot_cpu_seconds"]``
and the budget's charge are made of."""
import subprocess
import sys
import time

import pytest

from async_plotter.cpu import process_cpu_seconds
from async_plotter.supervision.budget import CpuGovernor, Phase


@pytest.fixture
def busy_process():
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def test_each_phase_counts_the_cpu_used_until_it_ends_not_until_the_next_tick(busy_process):
    """The start-up ended between two ticks: its CPU up to that moment is the start-up's (a
    tick's worth went to the governed phase before, and ``boot_cpu_seconds`` read low)."""
    governor = CpuGovernor(0.03, tick=3600.0)  # no tick comes: only the phase changes count
    governor.track(busy_process)
    time.sleep(0.5)
    governor.set_phase(Phase.GOVERNED)
    at_the_end_of_the_start_up = process_cpu_seconds(busy_process)
    assert at_the_end_of_the_start_up > 0.01, "the busy process got no CPU"
    # Read a moment after the governor's reading: a few ms more on a loaded machine, never less.
    assert at_the_end_of_the_start_up - 0.05 <= governor.boot_cpu_seconds \
        <= at_the_end_of_the_start_up + 1e-6
    time.sleep(0.3)
    governor.set_phase(Phase.UNLIMITED)
    in_all = process_cpu_seconds(busy_process)
    boot = governor.boot_cpu_seconds
    assert boot <= at_the_end_of_the_start_up + 1e-6, "the governed phase's CPU went to the boot"
    assert in_all - 0.05 <= governor.cpu_seconds <= in_all + 1e-6
    assert governor.charged_seconds == pytest.approx(governor.cpu_seconds - boot, abs=1e-6)
    governor.stop()
