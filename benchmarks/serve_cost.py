"""What ``async-plotter serve`` costs with ten experiments publishing, watched or not.

Ten fake trainers (LinearPolicy on CartPole-v1, each publishing an update and a curve point every
~0.5 s through a private redis-server, signed) run for the whole benchmark. Measured, one case
after the other, over the same window length:

* ``idle``: ``async-plotter serve`` with no page open;
* ``page``: the overview page's events stream open (what a browser tab costs the server), no
  experiment watched;
* ``serve 1`` / ``serve 3``: the page open and 1 / 3 experiments watched, each by a client that
  reads its relayed MJPEG stream (``x/NAME/stream.mjpg``) as a browser at the end of an SSH
  tunnel would (decoding and painting happen there);
* ``view 1``: the baseline, ``async-plotter view --http`` of one experiment read the same way:
  what "one viewer's worth" means.

For each case: the CPU of the serve (or view) process and all its descendants, from ``/proc``
(``async_plotter.cpu``), as a percentage of one core; and, for the watched ones, the
update-to-screen latency: from the trainer's ``update_plot`` of update ``n`` to the first frame
showing update ``n`` or newer reaching the client (``X-Update`` of each part), p50 and p95 over
all watched experiments. Clocks are the same machine's.

    python benchmarks/serve_cost.py            # ~4 minutes on 2 cores
    python benchmarks/serve_cost.py --quick    # shorter windows

Writes ``benchmarks/results/serve_cost.json``. Run it on an otherwise idle machine (the load
average before and after is recorded beside the results).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.machine import machine_facts  # noqa: E402
from async_plotter.cpu import tree_cpu_seconds  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results")
SECRET = "benchmark secret, 32 bytes long!"
TRAINERS = 10
PUBLISH_INTERVAL = 0.5
WATCHED = ("exp-00", "exp-04", "exp-08")

# ---------------------------------------------------------------------------- the trainer


def trainer_main(url: str, experiment: str, log_path: str) -> None:
    """A fake training loop: an update and a curve point every ~0.5 s, each logged with the
    moment ``update_plot`` was called."""
    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    policy = LinearPolicy(4, 2)
    rng = np.random.default_rng(int(experiment[-2:]))
    plotter = Plotter("CartPole-v1",
                      policy,
                      max_path_length=200,
                      channel=url,
                      experiment=experiment,
                      secret=SECRET).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    time.sleep(rng.uniform(0, PUBLISH_INTERVAL))  # not all in step
    with open(log_path, "a") as log:
        iteration = 0
        while not stop.is_set():
            policy.set_param_values(rng.normal(0, 1, 8).astype(np.float32))
            published = time.time()
            plotter.update_plot(policy,
                                iteration=iteration,
                                metrics={"AverageReturn": float(iteration + rng.normal())})
            log.write(f"{plotter.stats['updates_sent']} {published:.6f}\n")
            log.flush()
            iteration += 1
            stop.wait(PUBLISH_INTERVAL * rng.uniform(0.9, 1.1))
    plotter.close()


def _published(log_dir: str, experiment: str) -> Dict[int, float]:
    times = {}
    with open(os.path.join(log_dir, f"{experiment}.log")) as log:
        for line in log:
            number, moment = line.split()
            times[int(number)] = float(moment)
    return times


# ----------------------------------------------------------------------------- clients


class StreamClient:
    """Reads an MJPEG stream in a thread and keeps when each update's first frame arrived."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.first_seen: Dict[int, float] = {}
        self.frames = 0
        self.error: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        from async_plotter.web.client import read_mjpeg

        while not self._stop.is_set():
            try:
                for frame in read_mjpeg(self.url, timeout=20):
                    self.frames += 1
                    self.first_seen.setdefault(frame.update, frame.received)
                    if self._stop.is_set():
                        return
            except Exception as error:  # noqa: BLE001 - retried; the worker may be starting
                self.error = f"{type(error).__name__}: {error}"
                time.sleep(0.5)

    def close(self) -> None:
        self._stop.set()


class EventsClient:
    """Keeps the overview's events stream open, as an open browser tab does."""

    def __init__(self, url: str) -> None:
        self.events = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url, ), daemon=True)
        self._thread.start()

    def _read(self, url: str) -> None:
        from async_plotter.web.client import read_events

        while not self._stop.is_set():
            try:
                for _ in read_events(url, timeout=20):
                    self.events += 1
                    if self._stop.is_set():
                        return
            except Exception:  # noqa: BLE001
                time.sleep(0.5)

    def close(self) -> None:
        self._stop.set()


def latencies(client: StreamClient, published: Dict[int, float], start: float,
              end: float) -> List[float]:
    """For each update published in [start, end]: first frame showing it (or newer) minus its
    publication time."""
    arrivals = sorted(client.first_seen.items())
    values = []
    for number, moment in published.items():
        if not start <= moment <= end:
            continue
        seen = [t for update, t in arrivals if update >= number]
        if seen:
            values.append(min(seen) - moment)
    return values


# ----------------------------------------------------------------------------- a case


def free_port() -> int:
    from tests.redis_server import free_port as pick

    return pick()


def child_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["ASYNC_PLOTTER_SECRET"] = SECRET
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("DISPLAY", None)
    return env


def command() -> List[str]:
    script = os.path.join(os.path.dirname(sys.executable), "async-plotter")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "async_plotter.cli"]


def start_process(args: List[str], log_path: str) -> subprocess.Popen:
    return subprocess.Popen(command() + args + ["-q"],
                            cwd=ROOT,
                            env=child_env(),
                            stdin=subprocess.DEVNULL,
                            stdout=open(log_path, "ab"),
                            stderr=subprocess.STDOUT)


def stop_process(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def measure(process: subprocess.Popen, window: float) -> Dict[str, float]:
    """CPU of ``process`` and its descendants over ``window`` seconds."""
    started, before = time.monotonic(), (tree_cpu_seconds(process.pid) or 0.0)
    time.sleep(window)
    elapsed, used = time.monotonic() - started, (tree_cpu_seconds(process.pid) or 0.0) - before
    return {
        "window_s": round(elapsed, 2),
        "cpu_s": round(used, 3),
        "cpu_percent_of_a_core": round(100 * used / elapsed, 2)
    }


def run_case(name: str, process: subprocess.Popen, stream_urls: List[str],
             events_url: Optional[str], log_dir: str, warmup: float,
             window: float) -> Dict[str, Any]:
    events = EventsClient(events_url) if events_url else None
    clients = [StreamClient(url) for url in stream_urls]
    # Until every watched stream delivers frames (the workers booted), then a short settle.
    deadline = time.monotonic() + 60
    while any(client.frames == 0 for client in clients) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(warmup)
    start = time.time()
    result = measure(process, window)
    end = time.time() - 2.0  # updates of the last 2 s may not have been shown yet
    time.sleep(2.0)
    values: List[float] = []
    frames = []
    for url, client in zip(stream_urls, clients):
        experiment = url.split("/x/")[-1].split("/")[0] if "/x/" in url else WATCHED[0]
        values.extend(latencies(client, _published(log_dir, experiment), start, end))
        frames.append(client.frames)
        client.close()
    if events is not None:
        events.close()
    result.update(case=name, watched=len(stream_urls), frames_received=frames)
    if values:
        result.update(latency_p50_s=round(float(np.percentile(values, 50)), 3),
                      latency_p95_s=round(float(np.percentile(values, 95)), 3),
                      latency_samples=len(values))
    print(f"  {name:>8}: {result['cpu_percent_of_a_core']:6.2f}% of a core" +
          (f", latency p50 {result['latency_p50_s']:.3f} s p95 {result['latency_p95_s']:.3f} s"
           if values else ""),
          flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 s windows")
    parser.add_argument("--trainer",
                        nargs=3,
                        metavar=("URL", "EXPERIMENT", "LOG"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trainer:
        trainer_main(*args.trainer)
        return
    window, warmup = (10.0, 3.0) if args.quick else (30.0, 5.0)
    from tests.redis_server import MISSING_MESSAGE, RedisServer, find_redis_server

    executable = find_redis_server()
    if executable is None:
        sys.exit(MISSING_MESSAGE)
    import tempfile

    log_dir = tempfile.mkdtemp(prefix="serve_cost_")
    redis_server = RedisServer(executable).start()
    url = redis_server.url
    load_before = os.getloadavg()
    trainers = [
        subprocess.Popen([
            sys.executable,
            os.path.abspath(__file__), "--trainer", url, f"exp-{index:02d}",
            os.path.join(log_dir, f"exp-{index:02d}.log")
        ],
                         cwd=ROOT,
                         env=child_env(),
                         stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(log_dir, "trainers.err"), "ab"))
        for index in range(TRAINERS)
    ]
    results = []
    try:
        print(
            f"{TRAINERS} trainers publishing every {PUBLISH_INTERVAL} s; windows of "
            f"{window:.0f} s",
            flush=True)
        time.sleep(8.0)  # their imports and first updates
        port = free_port()
        serve = start_process(
            ["serve", url, "--http",
             str(port), "--max-live", "3", "--grace", "2"], os.path.join(log_dir, "serve.log"))
        base = f"http://127.0.0.1:{port}/"
        try:
            time.sleep(3.0)
            results.append(run_case("idle", serve, [], None, log_dir, warmup, window))
            results.append(run_case("page", serve, [], base + "events", log_dir, warmup, window))
            for count in (1, 3):
                streams = [base + f"x/{name}/stream.mjpg" for name in WATCHED[:count]]
                results.append(
                    run_case(f"serve {count}", serve, streams, base + "events", log_dir, warmup,
                             window))
                time.sleep(6.0)  # the workers' grace time and stop
        finally:
            stop_process(serve)
        view_port = free_port()
        view = start_process(
            ["view", url, "-e", WATCHED[0], "--http",
             str(view_port), "--fps", "20"], os.path.join(log_dir, "view.log"))
        try:
            results.append(
                run_case("view 1", view, [f"http://127.0.0.1:{view_port}/stream.mjpg"], None,
                         log_dir, warmup, window))
        finally:
            stop_process(view)
    finally:
        for trainer in trainers:
            trainer.send_signal(signal.SIGTERM)
        for trainer in trainers:
            try:
                trainer.wait(15)
            except subprocess.TimeoutExpired:
                trainer.kill()
        redis_server.stop()
    load_after = os.getloadavg()
    report(results, load_before, load_after, window, log_dir)


def report(results: List[Dict[str, Any]], load_before: Any, load_after: Any, window: float,
           log_dir: str) -> None:
    by_case = {row["case"]: row for row in results}
    one_viewer = by_case["view 1"]["cpu_percent_of_a_core"]
    print()
    print(f"serve process tree CPU with {TRAINERS} experiments publishing every "
          f"{PUBLISH_INTERVAL} s (% of one core; {os.cpu_count()} cores), over {window:.0f} s")
    header = (f"{'case':>8}  {'watched':>7}  {'CPU %':>7}  {'/ view 1':>8}  {'p50 s':>6}  "
              f"{'p95 s':>6}")
    print(header)
    print("-" * len(header))
    for row in results:
        row["ratio_to_view_1"] = round(row["cpu_percent_of_a_core"] / one_viewer, 3)
        p50 = row.get("latency_p50_s")
        p95 = row.get("latency_p95_s")
        print(f"{row['case']:>8}  {row['watched']:>7}  {row['cpu_percent_of_a_core']:>7.2f}  "
              f"{row['ratio_to_view_1']:>8.2f}  {'-' if p50 is None else f'{p50:.3f}':>6}  "
              f"{'-' if p95 is None else f'{p95:.3f}':>6}")
    watched = [row for row in results if row["watched"]]
    goal = all(row.get("latency_p95_s", 99) < 1.0 for row in watched)
    print()
    print(f"goal, update-to-screen p95 < 1 s for every watched case: "
          f"{'met' if goal else 'MISSED'}")
    print(f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} "
          f"({os.cpu_count()} CPUs); logs in {log_dir}")
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "serve_cost.json")
    with open(path, "w") as handle:
        json.dump(
            {
                "machine": machine_facts(load_before, load_after),
                "trainers": TRAINERS,
                "publish_interval_s": PUBLISH_INTERVAL,
                "window_s": window,
                "goal_latency_p95_under_1s": goal,
                "results": results,
            },
            handle,
            indent=1)
    print(f"wrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
