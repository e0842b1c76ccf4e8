"""One real run that several test modules read recordings from, made once per test process.

A sled (``tests.policies.make_sled``) pushed towards +x, watched live (``http=0``: the worker
replays the policy in real time) with ``video_dir`` and ``record_states=True``: the video of the
initial policy has its state recording beside it (``update_0000.npz``, what ``async-plotter
replay`` and serve's history strip open), and every live episode has one in ``live/``.
"""
from typing import Any, Dict

from tests.conftest import wait_for
from tests.policies import LinearPolicy, make_sled

#: steps of each episode (2 s of the sled's simulated time, at 50 steps a second)
STEPS = 100
_RUN: Dict[str, Any] = {}


def sled_run(tmp_path_factory: Any) -> Dict[str, Any]:
    """``{"folder": the video folder, "stats": the Plotter's stats before close()}``."""
    if not _RUN:
        from async_plotter import Plotter

        folder = tmp_path_factory.mktemp("sled_videos")
        policy = LinearPolicy(1, 1)
        policy.fill(2.0)
        with Plotter(make_sled,
                     policy,
                     max_path_length=STEPS,
                     video_dir=str(folder),
                     min_video_seconds=0,
                     seed=0,
                     http=0,
                     record_states=True) as plotter:
            wait_for(lambda: (plotter.stats["state_recordings"] >= 1 and plotter.stats[
                "live_state_recordings"] >= 2),
                     120,
                     message="a video's recording and two live episodes'")
            stats = plotter.stats
        _RUN.update(folder=folder, stats=stats)
    return _RUN
