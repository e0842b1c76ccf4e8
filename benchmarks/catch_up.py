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
previous one, so that nearly all of each video (~70 steps) is caught up. Reported:

* the *freeze*: how long the page's picture stands still at a switch, from the last frame of the
  old policy to the first of the new one, by the render process's clock (each MJPEG part's
  ``X-Frame-Time``): what the catch-up costs the live view;
* the *switch*: from ``update_plot`` to the first streamed frame of the new policy, which also
  holds how far the render process runs behind the rollout process;
* the videos' length.

    python benchmarks/catch_up.py              # 3 rounds, ~2 min on 2 cores
    python benchmarks/catch_up.py --rounds 1 --priority normal

Writes ``benchmarks/results/catch_up.json``; the load average before and after is recorded
beside the figures (they only mean something on an otherwise idle machine).
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
    """Reads the page's MJPEG stream in a thread: when each update was first received, and the
    render process's time of each of its frames."""

    def __init__(self, url: str) -> None:
        from async_plotter.web.client import read_mjpeg

        self._frames = read_mjpeg(url + "stream.mjpg")
        self._first: Dict[int, float] = {}
        self._frame_times: Dict[int, List[float]] = {}
        self._lock = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for frame in self._frames:
                made = float(frame.headers.get("x-frame-time", frame.received))
                with self._lock:
                    self._frame_times.setdefault(frame.update, []).append(made)
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

    def freezes(self, updates: int) -> List[float]:
        """Per switch to updates 1..``updates``: the first frame of the new policy's time minus
        the last frame of the previous one's."""
        with self._lock:
            times = {update: list(made) for update, made in self._frame_times.items()}
        return [
            min(times[number]) - max(times[number - 1]) for number in range(1, updates + 1)
            if times.get(number) and times.get(number - 1)
        ]


def run_mode(mode: str, switches: int, priority: str) -> Dict[str, List[float]]:
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
                 priority=priority,
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
        time.sleep(DWELL)
        freezes = watcher.freezes(switches)
    seconds = [
        imageio_ffmpeg.count_frames_and_secs(os.path.join(folder, name))[1]
        for name in sorted(os.listdir(folder)) if name.endswith(".mp4")
    ]
    return {"switch": latencies, "freeze": freezes, "video_seconds": seconds}


def summarise(values: Dict[str, List[float]]) -> Dict[str, Any]:
    row: Dict[str, Any] = {"switches": len(values["switch"])}
    for key in ("freeze", "switch"):
        row[f"{key}_median_s"] = round(float(np.median(values[key])), 3)
        row[f"{key}_p95_s"] = round(float(np.percentile(values[key], 95)), 3)
    row["videos"] = len(values["video_seconds"])
    row["video_seconds_min"] = (round(min(values["video_seconds"]), 2)
                                if values["video_seconds"] else None)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--switches", type=int, default=8, help="new policies per run")
    parser.add_argument("--priority", default="low", choices=("idle", "low", "normal"))
    parser.add_argument("--out", default=os.path.join(RESULTS, "catch_up.json"))
    args = parser.parse_args()
    found = {mode: {"switch": [], "freeze": [], "video_seconds": []} for mode in MODES}
    load = os.getloadavg()[0]
    for round_number in range(args.rounds):
        order = MODES if round_number % 2 == 0 else MODES[::-1]
        for mode in order:
            result = run_mode(mode, args.switches, args.priority)
            for key, values in result.items():
                found[mode][key].extend(values)
            print(
                f"round {round_number + 1} {mode}: freeze "
                f"{np.median(result['freeze']) * 1e3:.0f} ms, switch "
                f"{np.median(result['switch']) * 1e3:.0f} ms (medians)",
                flush=True)
    summary = {mode: summarise(values) for mode, values in found.items()}
    base, held = summary["page"], summary["page+videos"]
    ratios = {
        "freeze_median": round(held["freeze_median_s"] / base["freeze_median_s"], 2),
        "freeze_extra_median_s": round(held["freeze_median_s"] - base["freeze_median_s"], 3),
        "switch_median": round(held["switch_median_s"] / base["switch_median_s"], 2),
        "switch_p95": round(held["switch_p95_s"] / base["switch_p95_s"], 2),
    }
    print(f"\n{'mode':<13}{'switches':>9}{'freeze s':>10}{'p95':>7}{'switch s':>10}{'p95':>7}"
          f"{'videos':>8}{'shortest s':>12}   (medians, p95)")
    for mode in MODES:
        row = summary[mode]
        shortest = "-" if row["video_seconds_min"] is None else f"{row['video_seconds_min']:.2f}"
        print(f"{mode:<13}{row['switches']:>9}{row['freeze_median_s']:>10.3f}"
              f"{row['freeze_p95_s']:>7.3f}{row['switch_median_s']:>10.3f}"
              f"{row['switch_p95_s']:>7.3f}{row['videos']:>8}{shortest:>12}")
    print(f"page+videos / page: freeze {ratios['freeze_median']}x "
          f"({ratios['freeze_extra_median_s'] * 1e3:+.0f} ms), switch {ratios['switch_median']}x"
          f" (medians), switch p95 {ratios['switch_p95']}x")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as handle:
        json.dump(
            {
                "benchmark": "catch_up",
                "env": "InvertedPendulum-v5",
                "min_video_seconds": MIN_VIDEO_SECONDS,
                "dwell_s": DWELL,
                "rounds": args.rounds,
                "priority": args.priority,
                "load_before": round(load, 2),
                "load_after": round(os.getloadavg()[0], 2),
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
