"""update_plot never waits for the worker, and the worker always ends on the newest update."""
import time

import numpy as np
import pytest

from async_plotter import Plotter
from tests.conftest import wait_for
from tests.policies import UniformCheckPolicy

pytestmark = pytest.mark.slow


def slow_frame(frame, info):
    time.sleep(0.2)  # a renderer far slower than the trainer


def test_update_plot_does_not_wait_for_a_slow_worker(no_leftovers):
    policy = UniformCheckPolicy(8, 2, extra=100_000)
    with Plotter("Swimmer-v5", policy, max_path_length=10, on_frame=slow_frame,
                 fps=1000) as plotter:
        wait_for(lambda: plotter.stats["frames"] > 0, 60, message="the worker to render")
        durations = []
        for number in range(1, 301):
            policy.fill(number)
            started = time.perf_counter()
            plotter.update_plot(policy, iteration=number)
            durations.append(time.perf_counter() - started)
        # 300 updates while the worker renders one frame every 0.2 s: it can apply only a few.
        stats = plotter.stats
        assert stats["updates_sent"] == 300
        assert stats["updates_applied"] < 30
        # Waiting for the worker would cost 0.2 s a call, 60 s in all. A call costs one 400 kB
        # copy instead (the total allows for a busy machine descheduling the test now and then).
        assert sum(durations) < 3.0, f"300 update_plot calls took {sum(durations):.2f} s"
        assert np.median(durations) < 0.01, f"median update_plot {np.median(durations):.4f} s"
        wait_for(lambda: plotter.stats["last_applied_iteration"] == 300,
                 60,
                 message="the worker to apply the newest update")
        assert plotter.stats["last_error"] is None


def test_rapid_large_updates_are_never_torn(no_leftovers):
    policy = UniformCheckPolicy(8, 2, extra=1_000_000)  # 4 MB per copy
    errors = []
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=1,
                 fps=1000,
                 on_frame=lambda f, i: None,
                 on_event=lambda kind, payload: errors.append(payload)
                 if kind == "error" else None) as plotter:
        for number in range(1, 401):
            policy.fill(number)
            plotter.update_plot(policy)
        wait_for(lambda: plotter.stats["last_applied_update"] == 400,
                 60,
                 message="the newest update to be applied")
        stats = plotter.stats
    assert not errors, errors[0]["traceback"]
    assert stats["restarts"] == 0
    assert 1 <= stats["updates_applied"] <= 400
