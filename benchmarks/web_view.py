"""What watching training in a browser costs, and how fresh and smooth the picture is.

TRPO trains on Swimmer-v5 (``async_plotter.rl``, two sampler processes: both cores busy) in four
modes, interleaved in rounds (the order rotates) so that drift of the machine hits all alike:

* ``off``: no plotter at all.
* ``idle``: ``plot=True`` with ``http=0``; the page is served but nobody has it open.
* ``watch``: the same, with one client watching: a separate process reads the MJPEG stream and
  the events stream, like the browser at the far end of an SSH tunnel (decoding and painting
  happen on that other machine, so the client here only reads bytes).
* ``watch_low``: as ``watch``, with the worker at ``priority="low"`` (nice 10) instead of the
  default ``"idle"`` (``SCHED_IDLE``: it runs only on otherwise idle CPU).

Reported, side by side from the same run:

* the training loop's mean iteration time (``ItrTime``: sample + process + optimize, warm-up
  iterations dropped), as ratios: ``watch/idle`` (the web view's own cost), ``watch/off``,
  ``watch_low/off`` and ``idle/off``;
* frames/s delivered to the client while training;
* update-to-screen latency: from ``update_plot`` for iteration ``i`` to the first streamed frame
  showing iteration ``i`` (each MJPEG part carries ``X-Iteration``), median and p95.

    python benchmarks/web_view.py              # 3 rounds x 4 modes, ~6 min on 2 cores
    python benchmarks/web_view.py --quick      # 1 round, fewer iterations

Writes ``benchmarks/results/web_view.json``. The numbers only mean something on an otherwise idle
machine: the 1-minute load average before each run is recorded beside it (the trainer alone
brings it to about 2).
"""
import argparse
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # sampler processes inherit it

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
#: mode -> (plotting, worker priority, a client watches)
MODES = {
    "off": (False, "idle", False),
    "idle": (True, "idle", False),
    "watch": (True, "idle", True),
    "watch_low": (True, "low", True),
}
WATCHING = [mode for mode, (_, _, watching) in MODES.items() if watching]

# ------------------------------------------------------------------------ the watching client


def client_main(url: str, out_path: str) -> None:
    """Runs in its own process: read the stream (and the events) until SIGTERM; write one JSON
    line per frame: ``[received_time, update, iteration, bytes]``."""
    from async_plotter.web.client import read_events, read_mjpeg

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    threading.Thread(target=lambda: [None for _ in read_events(url + "events?client=bench")],
                     daemon=True).start()
    with open(out_path, "w", encoding="utf-8") as out:
        for number, frame in enumerate(read_mjpeg(url + "stream.mjpg?client=bench")):
            out.write(json.dumps([frame.received, frame.update, frame.iteration, len(frame.jpeg)]))
            out.write("\n")
            if number == 0:
                out.flush()  # the benchmark waits for this first line


# --------------------------------------------------------------------------- one training run


def run_once(mode: str, iterations: int, warmup: int, workdir: str, fps: float) -> Dict[str, Any]:
    """Train ``warmup + iterations`` TRPO iterations in ``mode``; returns timings and frames."""
    from async_plotter.rl import TRPO, GaussianMLPPolicy

    plotting, priority, watching = MODES[mode]
    sent: Dict[int, float] = {}  # iteration -> time.time() of its update_plot
    client: Dict[str, Any] = {}

    class Instrumented(TRPO):
        """TRPO whose update_plot calls are timed, and whose plotter gets a watching client."""

        def _start_plotter(self, plot_kwargs, video_dir, tensorboard_dir=None):
            plotter = super()._start_plotter(plot_kwargs, video_dir, tensorboard_dir)
            update_plot = plotter.update_plot

            def timed_update_plot(policy, iteration=None, **kwargs):
                # Older BatchPolopt versions sent no curve point; the page should get one.
                kwargs.setdefault("metrics",
                                  {"AverageReturn": float(self.history[-1]["AverageReturn"])})
                sent[iteration] = time.time()
                update_plot(policy, iteration=iteration, **kwargs)

            plotter.update_plot = timed_update_plot
            if watching:
                client.update(start_client(plotter, workdir))
            return plotter

        def _close_plotter(self):
            if watching:
                time.sleep(1.5)  # let the last iteration reach the screen (not timed)
            super()._close_plotter()

    algo = Instrumented("Swimmer-v5",
                        GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(32, 32), seed=0),
                        n_itr=warmup + iterations,
                        batch_size=2000,
                        max_path_length=500,
                        discount=0.995,
                        gae_lambda=0.97,
                        n_parallel=2,
                        seed=0,
                        plot=plotting,
                        plot_kwargs={
                            "http": 0,
                            "fps": fps,
                            "window": False,
                            "priority": priority
                        })
    load = os.getloadavg()[0]
    try:
        history = algo.train()
    finally:
        if "process" in client:
            client["process"].terminate()
            client["process"].wait(10)
    timed = history[warmup:]
    result: Dict[str, Any] = {
        "mode": mode,
        "load_before": load,
        "itr_times": [row["ItrTime"] for row in timed],
    }
    if watching:
        with open(client["path"], encoding="utf-8") as lines:
            frames = [json.loads(line) for line in lines if line.strip()]
        os.remove(client["path"])
        result.update(
            frame_stats(frames, [(row["Iteration"], sent[row["Iteration"]]) for row in timed]))
    return result


def start_client(plotter: Any, workdir: str) -> Dict[str, Any]:
    """Start the watching process once the page is served; return when it has a frame."""
    deadline = time.monotonic() + 120
    while not plotter.stats.get("http_url") and time.monotonic() < deadline:
        time.sleep(0.05)
    path = os.path.join(workdir, f"client_{time.monotonic_ns()}.jsonl")
    process = subprocess.Popen(
        [sys.executable,
         os.path.abspath(__file__), "--client", plotter.stats["http_url"], path])
    while time.monotonic() < deadline and not (os.path.exists(path) and os.path.getsize(path)):
        time.sleep(0.05)
    return {"process": process, "path": path}


def frame_stats(frames: List[list], sent: List[tuple]) -> Dict[str, Any]:
    """Frames/s while training, and for each ``(iteration, time sent)`` the time until the first
    frame showing that iteration (or a newer one) arrived."""
    first, last = sent[0][1], sent[-1][1]
    during = [f for f in frames if first <= f[0] <= last]
    span = during[-1][0] - during[0][0] if len(during) > 1 else 0.0
    latencies, missed = [], 0
    for iteration, when in sent:
        shown = next(
            (f[0] for f in frames if f[2] is not None and f[2] >= iteration and f[0] >= when), None)
        if shown is None:
            missed += 1
        else:
            latencies.append(shown - when)
    return {
        "fps": (len(during) - 1) / span if span > 0 else 0.0,
        "frame_bytes": float(np.mean([f[3] for f in during])) if during else 0.0,
        "latencies": latencies,
        "never_shown": missed,
    }


# ------------------------------------------------------------------------------- reporting


def summarize(runs: List[Dict[str, Any]], fps: float) -> Dict[str, Any]:
    """Pooled means and ratios per mode; frames/s and latency per watching mode."""
    by_mode = {mode: [r for r in runs if r["mode"] == mode] for mode in MODES}
    mean = {
        mode: float(np.mean([t for r in found for t in r["itr_times"]]))
        for mode, found in by_mode.items()
    }
    summary: Dict[str, Any] = {
        "mean_itr_time_s": mean,
        "ratio_watch_over_idle": mean["watch"] / mean["idle"],
        "ratio_watch_over_off": mean["watch"] / mean["off"],
        "ratio_watch_low_over_off": mean["watch_low"] / mean["off"],
        "ratio_idle_over_off": mean["idle"] / mean["off"],
        "fps_configured": fps,
        "max_load_before": max(r["load_before"] for r in runs),
    }
    for mode in WATCHING:
        latencies = [t for r in by_mode[mode] for t in r["latencies"]]
        summary[mode] = {
            "fps_delivered": float(np.mean([r["fps"] for r in by_mode[mode]])),
            "frame_kib": float(np.mean([r["frame_bytes"] for r in by_mode[mode]])) / 1024,
            "latency_median_s": float(np.median(latencies)) if latencies else None,
            "latency_p95_s": float(np.percentile(latencies, 95)) if latencies else None,
            "latency_max_s": float(np.max(latencies)) if latencies else None,
            "latency_samples": len(latencies),
            "updates_never_shown": sum(r["never_shown"] for r in by_mode[mode]),
        }
    return summary


def print_table(summary: Dict[str, Any]) -> None:
    """The summary as aligned rows."""
    mean = summary["mean_itr_time_s"]
    rows = [
        ("mean iteration time (s): " + " / ".join(MODES), " / ".join(f"{mean[mode]:.3f}"
                                                                     for mode in MODES)),
        ("ratio watch / idle (the web view's own cost)", f"{summary['ratio_watch_over_idle']:.3f}"),
        ("ratio watch / off", f"{summary['ratio_watch_over_off']:.3f}"),
        ("ratio watch_low / off", f"{summary['ratio_watch_low_over_off']:.3f}"),
        ("ratio idle / off", f"{summary['ratio_idle_over_off']:.3f}"),
    ]
    for mode in WATCHING:
        entry = summary[mode]
        rows.append((f"{mode}: frames/s delivered (cap {summary['fps_configured']:g})",
                     f"{entry['fps_delivered']:.1f}  ({entry['frame_kib']:.1f} KiB/frame)"))
        if entry["latency_samples"]:
            rows.append((f"{mode}: update-to-screen latency median / p95 / max (s)",
                         f"{entry['latency_median_s']:.3f} / {entry['latency_p95_s']:.3f} / "
                         f"{entry['latency_max_s']:.3f}  (n={entry['latency_samples']}, never "
                         f"shown {entry['updates_never_shown']})"))
    rows.append(("max 1-min load average before a run", f"{summary['max_load_before']:.2f}"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=8, help="timed iterations per run")
    parser.add_argument("--warmup", type=int, default=2, help="iterations dropped per run")
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true", help="1 round of 4 iterations")
    parser.add_argument("--client", nargs=2, metavar=("URL", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(*args.client)
        return
    if args.quick:
        args.rounds, args.iterations = 1, 4
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("async_plotter").setLevel(logging.WARNING)  # no per-iteration tables
    os.makedirs(RESULTS, exist_ok=True)
    runs = []
    names = list(MODES)
    for round_index in range(args.rounds):
        # Rotate the order so that no mode always runs first (cold caches) or last.
        shift = round_index % len(names)
        for mode in names[shift:] + names[:shift]:
            started = time.perf_counter()
            run = run_once(mode, args.iterations, args.warmup, RESULTS, args.fps)
            run["round"] = round_index
            runs.append(run)
            extra = ""
            if mode in WATCHING:
                extra = (f", {run['fps']:.1f} frames/s, latency median "
                         f"{np.median(run['latencies'] or [np.nan]):.3f} s")
            print(
                f"round {round_index + 1}/{args.rounds} {mode:>9}: mean iteration "
                f"{np.mean(run['itr_times']):.3f} s{extra} "
                f"(run {time.perf_counter() - started:.0f} s, load {run['load_before']:.2f})",
                flush=True)
    summary = summarize(runs, args.fps)
    print()
    print_table(summary)
    result = {
        "benchmark": "web_view",
        "trainer": "TRPO Swimmer-v5, GaussianMLPPolicy(32, 32), batch 2000, n_parallel=2",
        "client": "separate process reading /stream.mjpg and /events (no decoding)",
        "modes": {
            mode: dict(zip(("plotting", "priority", "client"), spec))
            for mode, spec in MODES.items()
        },
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform()
        },
        "settings": vars(args),
        "summary": summary,
        "runs": runs,
    }
    path = os.path.join(RESULTS, "web_view.json")
    with open(path + ".tmp", "w", encoding="utf-8") as out:
        json.dump(result, out, indent=1)
    os.replace(path + ".tmp", path)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
