"""Long runs and many plotters: no growth in memory or descriptors, nothing leaked."""
import os
import threading

import psutil
import pytest

from async_plotter import Plotter
from tests.conftest import settles, wait_for, worker_children
from tests.policies import LinearPolicy

pytestmark = pytest.mark.slow


def _noop(frame, info):
    pass


def _rss(pid):
    return psutil.Process(pid).memory_info().rss


def test_soak_20000_updates_while_rendering(no_leftovers):
    policy = LinearPolicy(8, 2, extra=100_000)
    trainer = psutil.Process()
    with Plotter("Swimmer-v5", policy, max_path_length=20, on_frame=_noop, fps=1000) as plotter:
        wait_for(lambda: plotter.stats["frames"] > 0, 60, message="the worker to render")
        for number in range(1000):  # warm up allocator pools and page tables
            policy.extra[0] = number
            plotter.update_plot(policy, iteration=number)
        pids = plotter.stats["worker_pids"]
        rss_before = {"trainer": trainer.memory_info().rss, **{r: _rss(p) for r, p in pids.items()}}
        fds_before = trainer.num_fds()
        frames_before = plotter.stats["frames"]
        for number in range(1000, 21000):
            policy.extra[0] = number
            plotter.update_plot(policy, iteration=number)
        wait_for(lambda: plotter.stats["last_applied_iteration"] == 20999,
                 60,
                 message="the newest update to be applied")
        rss_after = {"trainer": trainer.memory_info().rss, **{r: _rss(p) for r, p in pids.items()}}
        stats = plotter.stats
        assert trainer.num_fds() == fds_before
    assert stats["updates_sent"] == 21000
    assert stats["restarts"] == 0 and stats["last_error"] is None
    assert stats["frames"] > frames_before, "the worker kept rendering during the soak"
    for role in rss_before:
        growth = rss_after[role] - rss_before[role]
        assert growth < 16 * 2**20, f"{role} grew by {growth / 2**20:.1f} MiB"


def test_two_plotters_on_different_envs_at_once(tmp_path, no_leftovers):
    swimmer_policy, cartpole_policy = LinearPolicy(8, 2), LinearPolicy(4, 2)
    with Plotter("Swimmer-v5", swimmer_policy, max_path_length=10,
                 video_dir=str(tmp_path / "swimmer"), fps=500) as swimmer, \
            Plotter("CartPole-v1", cartpole_policy, max_path_length=10,
                    video_dir=str(tmp_path / "cartpole"), fps=500) as cartpole:
        for iteration in range(3):
            swimmer.update_plot(swimmer_policy, iteration=iteration)
            cartpole.update_plot(cartpole_policy, iteration=iteration)
        for plotter in (swimmer, cartpole):
            wait_for(lambda: plotter.stats["last_applied_iteration"] == 2,
                     60,
                     message="each plotter's newest update")
            wait_for(lambda: plotter.stats["videos"] >= 1, 60, message="videos from each")
        assert len(worker_children()) == 4
    assert os.listdir(tmp_path / "swimmer") and os.listdir(tmp_path / "cartpole")


def test_start_and_close_fifty_times(no_leftovers):
    trainer = psutil.Process()
    policy = LinearPolicy(8, 2)
    # One round first, so lazily opened descriptors (logging, tracker) are already counted.
    Plotter("Swimmer-v5", policy, on_frame=_noop).start().close()
    fds_before, threads_before = trainer.num_fds(), trainer.num_threads()
    ours_before = {thread.ident for thread in threading.enumerate()}
    for round_number in range(50):
        plotter = Plotter("Swimmer-v5", policy, max_path_length=5, on_frame=_noop, fps=500)
        plotter.start()
        if round_number % 5 == 0:  # sometimes let it get going, sometimes close at once
            wait_for(lambda: plotter.stats["frames"] > 0, 60, message="frames")
        plotter.close(timeout=5)
    wait_for(lambda: not worker_children(), 10, message="all workers to exit")
    assert trainer.num_fds() <= fds_before
    # Every thread the plotters started has ended. Native pools (TensorFlow's, BLAS's) of the
    # tests run before in this process may still grow by one or two; a thread left a round
    # would be 50 more.
    settles(lambda: [t.name for t in threading.enumerate() if t.ident not in ours_before], [], 10)
    assert trainer.num_threads() <= threads_before + 2
