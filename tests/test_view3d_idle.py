"""With nobody watching, the 3D view costs the render process nothing beyond what the MJPEG
page costs it: no pose is computed for the browser or sent (real processes, side by side
for 12 s)."""
import time

import numpy as np
import psutil
import pytest

pytest.importorskip("viser")
pytest.importorskip("mjviser")

from async_plotter import Plotter  # noqa: E402 - after the skip
from tests.conftest import wait_for  # noqa: E402
from tests.policies import LinearPolicy  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(300)]
SECONDS = 12.0


def playing(view):
    """A live HalfCheetah page (``view``) that nobody opens, once its episodes play."""
    policy = LinearPolicy(17, 6)
    policy.set_param_values(np.random.default_rng(0).normal(0, 0.3, 102).astype(np.float32))
    plotter = Plotter("HalfCheetah-v5",
                      policy,
                      max_path_length=1000,
                      http=0,
                      view=view,
                      seed=0,
                      priority="normal").start()
    plotter.wait_for_http_url(60)
    wait_for(lambda: plotter.stats.get("worker_pids"), 60, message="the worker")
    wait_for(lambda: plotter.stats["frames"] > 20, 60, message="episodes playing")
    return plotter


def test_an_unwatched_3d_view_costs_what_an_unwatched_page_does():
    # Both at once, over the same 12 s: whatever else the machine does weighs on both alike.
    plotters = {}
    try:
        for view in ("2d", "3d"):
            plotters[view] = playing(view)
        time.sleep(2.0)  # past start-up
        renders = {
            view: psutil.Process(plotter.stats["worker_pids"]["render"])
            for view, plotter in plotters.items()
        }
        before = {view: sum(render.cpu_times()[:2]) for view, render in renders.items()}
        frames = {view: plotter.stats["frames"] for view, plotter in plotters.items()}
        time.sleep(SECONDS)
        cpu = {view: sum(render.cpu_times()[:2]) - before[view] for view, render in renders.items()}
        played = {
            view: plotter.stats["frames"] - frames[view]
            for view, plotter in plotters.items()
        }
    finally:
        for plotter in plotters.values():
            plotter.close()
    page, scene = cpu["2d"], cpu["3d"]
    # Both play the live episodes all along (the rollout streams states either way).
    assert played["2d"] > 100 and played["3d"] > 100, played
    print(f"render process CPU over {SECONDS:g} s, nobody watching: 2d {page:.3f} s "
          f"({played['2d']} frames), 3d {scene:.3f} s ({played['3d']} frames)")
    # Measured: 0.03-0.07 CPU-s each over 20 s; a pose sent per frame would add ~0.3 or more
    # (~15 ms a second of motion).
    assert scene < page * 1.3 + 0.003 * SECONDS, (scene, page)
