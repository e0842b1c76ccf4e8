"""How long finishing a short video holds a live view back (``worker/video_chain.py``).

With a live page open and a video folder, a policy whose episodes end within a few steps makes
videos of several chained episodes (``min_video_seconds``). When a newer policy arrives while
the current update's video is still short, the rest of the video is simulated at once and drawn
and encoded for the video only; then the page shows the newer policy. This measures what that
costs the page, side by side in one run, interleaved in rounds:

* ``page``: ``http=0`` without a video folder: nothing to finish, the page switches at once;
* ``page+videos``: ``http=0`` with a video folder: each switch first finishes the video.

InvertedPendulum-v5 (25 steps/s, 4-5 steps an episode with this policy), 3 s videos, a client
reading the MJPEG stream; each new policy is published 0.3 s after the page first showed the
previous one, so that nearly all of each video (~70 steps) is caught up. Reported: the time
from ``update_plot`` to the first streamed frame of the new policy (median, p95, and their
ratio), and the videos' length.

    python benchmarks/catch_up.py              # 3 rounds, ~2 min on 2 cores
    python benchmarks/catch_up.py --rounds 1

Writes ``benchmarks/results/catch_up.json``.
"""
import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MODES = ("page", "page+videos")
MIN_VIDEO_SECONDS = 3.0
#: seconds between the page first showing a policy and the next one being published
DWELL = 0.3


class StreamWatcher:
    """Reads the page's MJPEG stream in a thread; tells when an update was first shown."""

    def __init__(self, url: str) -> None:
        from async_plotter.web.client import read_mjpeg

        self._frames = read_mjpeg(url + "stream.mjpg")
        self._first: Dict[int, float] = {}
        self._lock = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for frame in self._frames:
                with self._lock:
                    if frame.update not in self._first:
                        self._first[frame.update] = frame.received
                        self._lock.notify_all()
        except Exception:  # noqa: BLE001 - the server went away at close()
            pass

    def first_shown(self, update: int, timeout: float) -> Optional[float]:
        """``time.time()`` of the first frame of ``update`` (or a newer one)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                shown = [at for number, at in self._first.items() if number >= update]
                if shown:
                    return min(shown)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._lock.wait(left)


def run_mode(mode: str, switches: int) -> Dict[str, Any]:
    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    import imageio_ffmpeg

    folder = tempfile.mkdtemp(prefix="catch_up_")
    policy = LinearPolicy(4, 1)
    policy.fill(-50.0)  # the pole falls within 4-5 steps
    latencies: List[float] = []
    with Plotter("InvertedPendulum-v5",
                 policy,
                 max_path_length=1000,
                 http=0,
                 window=False,
                 video_dir=folder if mode == "page+videos" else None,
                 min_video_seconds=MIN_VIDEO_SECONDS,
                 seed=0,
                 priority="low",
                 verbose=0) as plotter:
        url = plotter.wait_for_http_url(60)
        watcher = StreamWatcher(url)  # its stream ends when the plotter closes
        if watcher.first_shown(0, 60) is None:
            raise RuntimeError("the page showed nothing")
        for number in range(1, switches + 1):
            time.sleep(DWELL)
            policy.fill(-50.0 - number)
            sent = time.time()
            plotter.update_plot(policy, iteration=number)
            shown = watcher.first_shown(number, 30)
            if shown is None:
                raise RuntimeError(f"the page never showed update {number}")
            latencies.append(shown - sent)
    seconds = [
        imageio_ffmpeg.count_frames_and_secs(os.path.join(folder, name))[1]
        for name in sorted(os.listdir(folder)) if name.endswith(".mp4")
    ]
    return {"latencies": latencies, "video_seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--switches", type=int, default=8, help="new policies per run")
    parser.add_argument("--out", default=os.path.join(RESULTS, "catch_up.json"))
    args = parser.parse_args()
    found: Dict[str, Dict[str, List[float]]] = {
        mode: {
            "latencies": [],
            "video_seconds": []
        }
        for mode in MODES
    }
    load = os.getloadavg()[0]
    for round_number in range(args.rounds):
        order = MODES if round_number % 2 == 0 else MODES[::-1]
        for mode in order:
            result = run_mode(mode, args.switches)
            for key, values in result.items():
                found[mode][key].extend(values)
            print(
                f"round {round_number + 1} {mode}: switch "
                f"{np.median(result['latencies']) * 1e3:.0f} ms median",
                flush=True)
    summary: Dict[str, Any] = {}
    for mode, values in found.items():
        latencies = np.asarray(values["latencies"])
        summary[mode] = {
            "switches":
            int(latencies.size),
            "switch_median_s":
            round(float(np.median(latencies)), 3),
            "switch_p95_s":
            round(float(np.percentile(latencies, 95)), 3),
            "videos":
            len(values["video_seconds"]),
            "video_seconds_min":
            (round(min(values["video_seconds"]), 2) if values["video_seconds"] else None),
        }
    base, held = summary["page"], summary["page+videos"]
    ratios = {
        "median": round(held["switch_median_s"] / base["switch_median_s"], 2),
        "p95": round(held["switch_p95_s"] / base["switch_p95_s"], 2),
        "extra_median_s": round(held["switch_median_s"] - base["switch_median_s"], 3),
    }
    print(f"\n{'mode':<13}{'switches':>9}{'median s':>10}{'p95 s':>8}{'videos':>8}"
          f"{'shortest s':>12}")
    for mode in MODES:
        row = summary[mode]
        shortest = "-" if row["video_seconds_min"] is None else f"{row['video_seconds_min']:.2f}"
        print(f"{mode:<13}{row['switches']:>9}{row['switch_median_s']:>10.3f}"
              f"{row['switch_p95_s']:>8.3f}{row['videos']:>8}{shortest:>12}")
    print(f"page+videos / page: {ratios['median']}x median ({ratios['extra_median_s'] * 1e3:+.0f}"
          f" ms), {ratios['p95']}x p95")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as handle:
        json.dump(
            {
                "benchmark": "catch_up",
                "env": "InvertedPendulum-v5",
                "min_video_seconds": MIN_VIDEO_SECONDS,
                "dwell_s": DWELL,
                "rounds": args.rounds,
                "load_before": round(load, 2),
                "machine": platform.machine(),
                "cores": os.cpu_count(),
                "modes": summary,
                "ratios": ratios,
            },
            handle,
            indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
