"""With nobody watching, the 3D view costs the render process nothing beyond what the MJPEG
page costs it: no pose is computed for the browser or sent (real processes, 20 s each)."""
import time

import numpy as np
import psutil
import pytest

pytest.importorskip("viser")
pytest.importorskip("mjviser")

from async_plotter import Plotter  # noqa: E402 - after the skip
from tests.conftest import wait_for  # noqa: E402
from tests.policies import LinearPolicy  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
SECONDS = 20.0


def unwatched_render_cpu(view):
    policy = LinearPolicy(17, 6)
    policy.set_param_values(np.random.default_rng(0).normal(0, 0.3, 102).astype(np.float32))
    with Plotter("HalfCheetah-v5",
                 policy,
                 max_path_length=1000,
                 http=0,
                 view=view,
                 seed=0,
                 priority="normal") as plotter:
        plotter.wait_for_http_url(60)
        pids = wait_for(lambda: plotter.stats.get("worker_pids"), 60, message="the worker")
        wait_for(lambda: plotter.stats["frames"] > 20, 60, message="episodes playing")
        render = psutil.Process(pids["render"])
        time.sleep(2.0)  # past start-up
        before, frames = render.cpu_times(), plotter.stats["frames"]
        time.sleep(SECONDS)
        after = render.cpu_times()
        played = plotter.stats["frames"] - frames
    return (after.user + after.system) - (before.user + before.system), played


def test_an_unwatched_3d_view_costs_what_an_unwatched_page_does():
    page, page_frames = unwatched_render_cpu("2d")
    scene, scene_frames = unwatched_render_cpu("3d")
    # Both play the live episodes all along (the rollout streams states either way).
    assert page_frames > 100 and scene_frames > 100
    print(f"render process CPU over {SECONDS:g} s, nobody watching: 2d {page:.3f} s "
          f"({page_frames} frames), 3d {scene:.3f} s ({scene_frames} frames)")
    # Measured: ~0.2 CPU-s each over 20 s; a pose sent per frame would add ~0.3 or more.
    assert scene < page * 1.3 + 0.06, (scene, page)
