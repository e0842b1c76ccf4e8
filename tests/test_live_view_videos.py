"""Videos keep their minimum length whatever else is open, and a live view is not held back by
them: with the live page open, an update's short episodes are chained into its video, and what
a short video still needs when a newer policy arrives is caught up for the video only, after
which the page shows the newer policy (``worker/video_chain.py``)."""
import os
import threading
import time

import imageio_ffmpeg
import pytest

from async_plotter import Plotter
from async_plotter.web.client import read_mjpeg
from tests.policies import LinearPolicy

pytestmark = pytest.mark.slow

MIN_VIDEO_SECONDS = 3.0


class FirstFrames:
    """Reads a live page's MJPEG stream in a thread: when each update was first shown."""

    def __init__(self, url):
        self._first = {}
        self._changed = threading.Condition()
        self._stream = read_mjpeg(url + "stream.mjpg")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for frame in self._stream:
                with self._changed:
                    self._first.setdefault(frame.update, frame.received)
                    self._changed.notify_all()
        except Exception:  # noqa: BLE001 - the plotter closed the stream
            pass

    def first_shown(self, update, timeout):
        """``time.time()`` when a frame of ``update`` (or a newer one) first arrived."""
        with self._changed:
            self._changed.wait_for(lambda: any(number >= update for number in self._first), timeout)
            return min((at for number, at in self._first.items() if number >= update), default=None)


@pytest.mark.alone  # times the page's switch to each new policy
def test_videos_last_their_minimum_with_the_live_page_open_and_it_still_switches_promptly(
        tmp_path, no_leftovers):
    policy = LinearPolicy(4, 1)
    policy.fill(-50.0)  # pushes the cart the wrong way: the pole falls within 4-5 steps
    with Plotter("InvertedPendulum-v5",
                 policy,
                 max_path_length=1000,
                 http=0,
                 window=False,
                 video_dir=str(tmp_path),
                 min_video_seconds=MIN_VIDEO_SECONDS,
                 seed=0,
                 priority="low") as plotter:
        page = FirstFrames(plotter.wait_for_http_url(60))
        assert page.first_shown(0, 60) is not None, "the page showed nothing"
        for number in range(1, 5):
            # Each policy is replaced 0.3 s after the page first showed it: its video has a
            # few steps and wants ~70 more.
            time.sleep(0.3)
            policy.fill(-50.0 - number)
            sent = time.time()
            plotter.update_plot(policy, iteration=number)
            shown = page.first_shown(number, 30)
            assert shown is not None, f"the page never showed update {number}"
            assert shown - sent < 5.0, f"the page showed update {number} {shown - sent:.1f} s late"
        log = plotter.stats["video_log"]
    videos = sorted(name for name in os.listdir(tmp_path) if name.endswith(".mp4"))
    assert len(videos) == 5, videos  # the initial policy's and iterations 1-4
    for name in videos:
        frames, seconds = imageio_ffmpeg.count_frames_and_secs(str(tmp_path / name))
        assert seconds >= MIN_VIDEO_SECONDS, f"{name}: {frames} frames, {seconds:.2f} s"
    assert all(entry["episodes"] > 1 for entry in log), "short episodes were not chained"
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".partial_")]
