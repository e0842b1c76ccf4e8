"""A real window on a real X server (Xvfb): MuJoCo's viewer for MuJoCo envs, a pixel window for
self-drawing envs, and the automatic choice between a window and videos."""
import subprocess

import pytest

from async_plotter import Plotter
from tests.conftest import wait_for
from tests.policies import LinearPolicy

pytestmark = pytest.mark.slow


def window_names():
    tree = subprocess.run(["xwininfo", "-root", "-tree"],
                          capture_output=True,
                          text=True,
                          timeout=10).stdout
    return tree


def test_mujoco_viewer_window_under_xvfb(xvfb, no_leftovers):
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5", policy, max_path_length=20, window=True, fps=60) as plotter:
        assert plotter.window
        wait_for(lambda: plotter.stats["frames"] >= 30, 60, message="frames shown in the window")
        wait_for(lambda: "MuJoCo" in window_names(), 10, message="a MuJoCo window on the display")
        # Live mode: the window keeps replaying the newest policy (several episodes, one update).
        wait_for(lambda: plotter.stats["episodes"] >= 2, 30, message="replayed episodes")
        policy.fill(0.3)
        plotter.update_plot(policy, iteration=4)
        wait_for(lambda: plotter.stats["last_applied_iteration"] == 4, 30, message="the update")
        assert plotter.stats["restarts"] == 0 and plotter.stats["last_error"] is None


def test_pixel_window_for_a_self_drawing_env(xvfb, no_leftovers):
    with Plotter("CartPole-v1", LinearPolicy(4, 2), max_path_length=10, window=True,
                 fps=60) as plotter:
        wait_for(lambda: plotter.stats["frames"] >= 10, 60, message="CartPole frames")
        wait_for(lambda: "async_plotter" in window_names(), 10, message="the pygame window")
        assert plotter.stats["last_error"] is None


def test_auto_opens_a_window_with_a_display_and_records_videos_without(xvfb, tmp_path, monkeypatch):
    with_display = Plotter("Swimmer-v5", LinearPolicy(8, 2), video_dir=str(tmp_path))
    assert with_display.window is True
    with_display.close()
    monkeypatch.delenv("DISPLAY")
    without = Plotter("Swimmer-v5", LinearPolicy(8, 2), video_dir=str(tmp_path))
    assert without.window is False and without.video_dir == str(tmp_path)
    without.close()
