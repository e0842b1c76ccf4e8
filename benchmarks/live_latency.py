"""How soon a live view shows a new policy: from ``update_plot`` to the first frame of that policy
on the MJPEG page and on the 3D page, with the machine idle and with every core busy, side by
side in one run.

Each cell is one fresh ``Plotter(..., http=0, view=...)`` in its own process
(``priority="low"`` as the live page's tests use: nice 10), watched by one client in another
process (nice -10 where allowed: it stands for a browser on another machine, and must not be
what the burners slow down). The cell sends ``--updates`` new policies, ``--gap`` to
``--gap + 1`` seconds apart, and times each:

* ``2d``: HalfCheetah-v5 at its own 480x480 with random linear policies; the client reads
  ``/stream.mjpg``, whose parts each carry the update they show (``X-Update``). Latency: until
  the first part of that update or a newer one.
* ``3d``: the sled of ``tests/policies.make_sled``, whose policy pushes it one way, each new one
  the other way; the client opens the scene's socket as viser's page does. Poses name no policy,
  but the sled's position does: latency until the first pose of the new episode (the sled back
  at its start, or past it on the new side).

``saturated``: ``cores + 1`` busy processes at normal priority (the way a trainer with
``n_parallel`` equal to the core count keeps the machine busy), started by the benchmark once
the page shows its first frame and stopped after the cell. ``idle``: none (other users of the
machine are not controlled: the load averages around each cell are recorded).

``--before PATH`` measures another checkout's library too (``PYTHONPATH=PATH``), its cells
interleaved with this checkout's, so that both see the same machine.

    python benchmarks/live_latency.py                        # ~4 min: 2 views x 2 loads
    python benchmarks/live_latency.py --before /path/to/old/checkout   # ~8 min, both codes

Writes ``benchmarks/results/live_latency.json``.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
VIEWS = ("2d", "3d")
LOADS = ("idle", "saturated")
#: the MJPEG page's env and its observation and action sizes
ENV, OBS, ACT = "HalfCheetah-v5", 17, 6

# ----------------------------------------------------------------------------- the clients


def client_2d(url: str, out_path: str) -> None:
    """Write ``[time.time(), update]`` per MJPEG part received, until killed."""
    from async_plotter.web.client import read_mjpeg

    with open(out_path, "w", encoding="utf-8") as out:
        for frame in read_mjpeg(url + "stream.mjpg?client=latency", timeout=60):
            out.write(json.dumps([frame.received, frame.update]) + "\n")
            out.flush()


def client_3d(url: str, out_path: str) -> None:
    """Write ``[time.time(), sled's x]`` per pose message, until killed."""
    from tests.clients import view3d_shows, view3d_socket

    with view3d_socket(url, origin=url.rstrip("/"), timeout=60) as socket, \
            open(out_path, "w", encoding="utf-8") as out:
        while True:
            message = socket.recv()
            received = time.time()
            offset, _ = view3d_shows(message)
            if offset is not None:  # the view keeps the sled at the origin: minus its position
                out.write(json.dumps([received, -offset[0]]) + "\n")
                out.flush()


def run_client(view: str, url: str, out_path: str) -> None:
    """A client of this checkout (a measuring instrument, whichever library is measured)."""
    sys.path.insert(0, ROOT)
    try:
        os.nice(-10)  # a browser elsewhere: not slowed by this machine's burners
    except OSError:
        pass
    (client_2d if view == "2d" else client_3d)(url, out_path)


# ------------------------------------------------------------------------------- one cell


def run_cell(view: str, updates: int, gap: float, priority: str, workdir: str,
             saturate: bool) -> Dict[str, Any]:
    """One Plotter, one client, ``updates`` new policies (this runs in the cell's process,
    with the library of the checkout under test first on the path)."""
    from async_plotter import Plotter
    from tests.policies import LinearPolicy, make_sled

    rng = np.random.default_rng(0)
    if view == "2d":
        env: Any = ENV
        policy = LinearPolicy(OBS, ACT)

        def new_parameters(update: int) -> np.ndarray:
            return rng.normal(0, 0.5, OBS * ACT).astype(np.float32)
    else:
        env, policy = make_sled, LinearPolicy(1, 1)

        def new_parameters(update: int) -> np.ndarray:
            return np.full(1, push(update), np.float32)

    policy.set_param_values(new_parameters(0))
    out_path = os.path.join(workdir, f"client-{view}-{os.getpid()}.jsonl")
    sent: List[tuple] = []
    burners: List[subprocess.Popen] = []
    load_before = os.getloadavg()
    with Plotter(env,
                 policy,
                 max_path_length=1000 if view == "2d" else 5000,
                 http=0,
                 view=view,
                 window=False,
                 seed=0,
                 priority=priority) as plotter:
        url = plotter.wait_for_http_url(120)
        client = subprocess.Popen(
            [sys.executable,
             os.path.abspath(__file__), "--client", view, url, out_path])
        try:
            wait_for_lines(out_path, 120)
            time.sleep(1.0)
            if saturate:
                burners = start_burners()
                time.sleep(2.0)
            for number in range(1, updates + 1):
                update = plotter.stats["updates_sent"] + 1
                policy.set_param_values(new_parameters(update))
                when = time.time()
                plotter.update_plot(policy, iteration=number)
                sent.append((update, when))
                time.sleep(gap + rng.random())
            time.sleep(3.0)  # the last one reaches the screen (or not)
            stats = plotter.stats
        finally:
            for burner in burners:
                burner.kill()
            for burner in burners:
                burner.wait(10)
            client.kill()
            client.wait(10)
    with open(out_path, encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    os.remove(out_path)
    latencies = latencies_2d(rows, sent) if view == "2d" else latencies_3d(rows, sent)
    return {
        "view": view,
        "env": ENV if view == "2d" else "make_sled",
        "load": "saturated" if saturate else "idle",
        "latencies": [value for value in latencies if value is not None],
        "never_shown": sum(value is None for value in latencies),
        "frames_per_second": frames_per_second(rows, sent),
        "restarts": stats.get("restarts"),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
    }


def push(update: int) -> float:
    """How hard, and which way (the sign is the side it pushes the sled to), the sled's policy
    of update ``update`` pushes."""
    return 2.0 if update % 2 == 0 else -2.0


def wait_for_lines(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the client showed nothing in {timeout} s")


def start_burners() -> List[subprocess.Popen]:
    loop = "# live_latency burner\nwhile True: pass"
    return [
        subprocess.Popen([sys.executable, "-c", loop]) for _ in range((os.cpu_count() or 1) + 1)
    ]


def latencies_2d(rows: List[list], sent: List[tuple]) -> List[Optional[float]]:
    """Per update sent: seconds until the first part showing it (or a newer one)."""
    found = []
    for update, when in sent:
        shown = next(
            (t for t, number in rows if t >= when and number is not None and number >= update),
            None)
        found.append(None if shown is None else shown - when)
    return found


def latencies_3d(rows: List[list], sent: List[tuple]) -> List[Optional[float]]:
    """Per update sent: seconds until the first pose of its episode. Each policy pushes the
    sled away from its start, each new one the other way, so an episode begins where the
    sled is back at its start or has jumped to the other side; those beginnings are matched
    to the updates in order, each to the first one after it was sent on its side (a page
    that lags by more than the gap between updates still gets each its own)."""
    starts = episode_starts(rows)
    found: List[Optional[float]] = []
    index = 0
    for update, when in sent:
        side = 1.0 if push(update) > 0 else -1.0
        while index < len(starts) and (starts[index][0] < when or starts[index][1] != side):
            index += 1  # an earlier update's episode, or one whose start was not seen
        if index == len(starts):
            found.append(None)
        else:
            found.append(starts[index][0] - when)
            index += 1
    return found


def episode_starts(rows: List[list]) -> List[tuple]:
    """``(time, side)`` where an episode begins in the sled's poses ``[time, x]``: x back at 0,
    or on the other side of 0 than the pose before; ``side`` is where it then moves."""
    starts = []
    for index in range(1, len(rows)):
        before, x = rows[index - 1][1], rows[index][1]
        at_start = abs(x) < 1e-9 and abs(before) >= 1e-9
        if not (at_start or x * before < 0):
            continue
        ahead = next((later[1] for later in rows[index:] if abs(later[1]) >= 1e-9), 0.0)
        starts.append((rows[index][0], 1.0 if ahead > 0 else -1.0))
    return starts


def frames_per_second(rows: List[list], sent: List[tuple]) -> float:
    """Frames (2d) or poses (3d) received per second while updates were being sent."""
    first, last = sent[0][1], sent[-1][1]
    during = [row for row in rows if first <= row[0] <= last]
    return (len(during) - 1) / (last - first) if len(during) > 1 and last > first else 0.0


# ------------------------------------------------------------------------------ the run


def measure(tree: str, view: str, load: str, args: argparse.Namespace,
            workdir: str) -> Dict[str, Any]:
    """Run one cell in a process that imports the library from ``tree``."""
    out = os.path.join(workdir, f"cell-{time.monotonic_ns()}.json")
    env = dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL="2")
    command = [
        sys.executable,
        os.path.abspath(__file__), "--cell", view, load, tree, out, "--updates",
        str(args.updates), "--gap",
        str(args.gap), "--priority", args.priority
    ]
    subprocess.run(command, env=env, check=True, timeout=args.updates * (args.gap + 1) + 600)
    with open(out, encoding="utf-8") as file:
        return json.load(file)


def summarize(cells: List[Dict[str, Any]]) -> Dict[str, Any]:
    summary: Dict[str, Any] = {}
    for code in dict.fromkeys(cell["code"] for cell in cells):
        for view in VIEWS:
            for load in LOADS:
                found = [
                    c for c in cells
                    if c["code"] == code and c["view"] == view and c["load"] == load
                ]
                if not found:
                    continue
                values = [value for cell in found for value in cell["latencies"]]
                summary[f"{code}/{view}/{load}"] = {
                    "median_s": float(np.median(values)) if values else None,
                    "p95_s": float(np.percentile(values, 95)) if values else None,
                    "max_s": float(np.max(values)) if values else None,
                    "samples": len(values),
                    "never_shown": sum(cell["never_shown"] for cell in found),
                    "frames_per_second": float(np.mean([c["frames_per_second"] for c in found])),
                }
    return summary


def print_table(summary: Dict[str, Any]) -> None:
    print(f"{'code / view / load':<26} {'median':>7} {'p95':>7} {'max':>7} {'n':>4} "
          f"{'never':>5} {'fps':>5}")
    for name, entry in summary.items():

        def seconds(key: str) -> str:
            return "-" if entry[key] is None else f"{entry[key]:.2f}"

        print(f"{name:<26} {seconds('median_s'):>7} {seconds('p95_s'):>7} {seconds('max_s'):>7}"
              f" {entry['samples']:>4} {entry['never_shown']:>5} "
              f"{entry['frames_per_second']:>5.1f}")
    codes = list(dict.fromkeys(name.split("/")[0] for name in summary))
    if "before" in codes and "this" in codes:
        print("\np95 before / this:")
        for view in VIEWS:
            for load in LOADS:
                before = summary.get(f"before/{view}/{load}", {}).get("p95_s")
                this = summary.get(f"this/{view}/{load}", {}).get("p95_s")
                if before and this:
                    print(f"  {view} {load}: {before / this:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=20, help="new policies per cell")
    parser.add_argument("--gap", type=float, default=1.5, help="seconds between them (+0-1 s)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--priority", default="low", help="the Plotter's priority")
    parser.add_argument("--before", help="another checkout whose library is measured too")
    parser.add_argument("--out", default=os.path.join(RESULTS, "live_latency.json"))
    parser.add_argument("--client", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--cell", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        run_client(*args.client)
        return
    if args.cell:
        view, load, tree, out = args.cell
        sys.path.insert(0, tree)
        with tempfile.TemporaryDirectory() as workdir:
            cell = run_cell(view, args.updates, args.gap, args.priority, workdir,
                            load == "saturated")
        with open(out, "w", encoding="utf-8") as file:
            json.dump(cell, file)
        return
    trees = {"this": ROOT}
    if args.before:
        trees["before"] = os.path.abspath(args.before)
    plan = [(code, view, load) for load in LOADS for view in VIEWS for code in trees]
    cells = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as workdir:
        for round_index in range(args.rounds):
            shift = round_index % len(plan)
            for code, view, load in plan[shift:] + plan[:shift]:
                started = time.monotonic()
                cell = measure(trees[code], view, load, args, workdir)
                cell.update(code=code, round=round_index)
                cells.append(cell)
                values = cell["latencies"]
                print(
                    f"{code:>6} {view} {load:>9}: p95 "
                    f"{np.percentile(values, 95) if values else float('nan'):.2f} s, median "
                    f"{np.median(values) if values else float('nan'):.2f} s, never shown "
                    f"{cell['never_shown']}, {cell['frames_per_second']:.1f} frames/s "
                    f"({time.monotonic() - started:.0f} s, load "
                    f"{cell['load_average_before'][0]:.2f})",
                    flush=True)
    summary = summarize(cells)
    print()
    print_table(summary)
    sys.path.insert(0, ROOT)
    from benchmarks.machine import machine_facts

    result = {
        "benchmark": "live_latency",
        "what": "update_plot to the first frame of that policy on the live page: MJPEG "
        "(HalfCheetah-v5, 480x480) and 3D (make_sled)",
        "trees": trees,
        "settings": {
            key: value
            for key, value in vars(args).items() if key not in ("client", "cell")
        },
        "machine": machine_facts(load_before, os.getloadavg()),
        "summary": summary,
        "cells": cells,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".tmp", "w", encoding="utf-8") as file:
        json.dump(result, file, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
