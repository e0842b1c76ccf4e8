"""What the run's history in 3D costs per watched second: one iteration shown, and four at once
(the one shown and three ghosts), with either way of posing (the fast path, and mjviser's
public ``update_from_mjdata`` forced with ``$ASYNC_PLOTTER_VIEW3D_POSES=public``), in the
process that serves it, with nobody watching as the base.

The recordings are HalfCheetah's (``tests/history_recordings.py``: 12 iterations of a gait,
200 shown steps each, 20 a second). Two servers:

* ``replay``: ``async-plotter replay DIR`` as a user starts it; its whole process is measured.
* ``render``: a real ``Plotter(HalfCheetah, http=0, view="3d", video_dir=...)`` whose video
  folder holds the history; its render process serves ``/history/`` (and records its own videos
  and plays the live view meanwhile, which is what the figure is measured against: windows of
  nobody watching, one shown and four shown alternate, ``--rounds`` times, medians kept).

One client in a separate process opens the page's socket (as a browser would, with the server's
Origin) and reads every message for ``--seconds``; ``?ghosts=0,4,8`` in the page's address
chooses the ghosts. Decoding and drawing happen in the viewer's browser, elsewhere.

    python benchmarks/history_cost.py                     # ~3 min
    python benchmarks/history_cost.py --servers replay --seconds 5

Writes ``benchmarks/results/history_cost.json``. Needs the view3d extra.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Dict, List

import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from async_plotter.view3d.scene import POSES_ENV  # noqa: E402 - after the path
from benchmarks.machine import machine_facts  # noqa: E402
from tests.history_recordings import write_history  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
GHOSTS = "0,4,8"

CLIENT = r"""
import json, sys, time
import viser
from websockets.sync.client import connect
url, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
origin = "/".join(url.split("/")[:3])
total = messages = 0
with connect(url.replace("http://", "ws://"), subprotocols=[f"viser-v{viser.__version__}"],
             origin=origin, max_size=None, open_timeout=60) as socket:
    socket.recv(timeout=60)  # the scene
    print("watching", flush=True)
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            message = socket.recv(timeout=1)
        except TimeoutError:
            continue
        total += len(message); messages += 1
json.dump({"bytes": total, "messages": messages, "seconds": time.monotonic() - started},
          open(out, "w"))
"""


def cheetah() -> Any:
    import gymnasium

    return gymnasium.make("HalfCheetah-v5")


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def watched(pid: int, url: str, seconds: float) -> Dict[str, float]:
    """CPU-seconds per watched second of ``pid`` while one client reads ``url``'s socket, and
    the bytes a second it gets."""
    process = psutil.Process(pid)
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        client = subprocess.Popen([sys.executable, "-c", CLIENT, url,
                                   str(seconds), out.name],
                                  stdout=subprocess.PIPE,
                                  text=True)
        assert client.stdout.readline().strip() == "watching", "the client saw no scene"
        before, started = cpu(process), time.monotonic()
        client.wait(seconds + 60)
        spent, elapsed = cpu(process) - before, time.monotonic() - started
        read = json.load(open(out.name))
    return {"cpu_per_second": spent / elapsed, "bytes_per_second": read["bytes"] / read["seconds"]}


def unwatched(pid: int, seconds: float) -> float:
    process = psutil.Process(pid)
    before = cpu(process)
    time.sleep(seconds)
    return (cpu(process) - before) / seconds


def ask(url: str) -> None:
    """GET the page (it applies ``?ghosts=``)."""
    origin = "/".join(url.split("/")[:3])
    request = urllib.request.Request(url, headers={"Origin": origin})
    with urllib.request.urlopen(request, timeout=60) as answer:
        answer.read()


def measure(pid: int, page: str, seconds: float, rounds: int) -> Dict[str, Any]:
    """Alternating windows: nobody watching, one iteration shown, four shown."""
    samples: Dict[str, List[Dict[str, float]]] = {"idle": [], "1": [], "4": []}
    for _ in range(rounds):
        samples["idle"].append({"cpu_per_second": unwatched(pid, seconds), "bytes_per_second": 0})
        ask(page + "?ghosts=")
        samples["1"].append(watched(pid, page, seconds))
        ask(page + "?ghosts=" + GHOSTS)
        samples["4"].append(watched(pid, page, seconds))
    row = {}
    for case, found in samples.items():
        row[case] = {
            key: statistics.median(sample[key] for sample in found)
            for key in ("cpu_per_second", "bytes_per_second")
        }
    for case in ("1", "4"):
        row[case]["over_idle_ms_per_second"] = 1000 * (row[case]["cpu_per_second"] -
                                                       row["idle"]["cpu_per_second"])
    return row


def replay_server(folder: str, seconds: float, rounds: int) -> Dict[str, Any]:
    process = subprocess.Popen(
        [sys.executable, "-m", "async_plotter.cli", "replay", folder, "--http", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        url = None
        while url is None:
            line = process.stderr.readline()
            if not line:
                raise RuntimeError("async-plotter replay ended")
            found = re.search(r"replay of .* at (http://\S+)", line)
            url = found[1] if found else None
        time.sleep(2.0)
        return measure(process.pid, url, seconds, rounds)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)


def render_server(video_dir: str, seconds: float, rounds: int) -> Dict[str, Any]:
    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    policy = LinearPolicy(17, 6)
    policy.set_param_values(np.random.default_rng(0).normal(0, 0.3, 102).astype(np.float32))
    with Plotter(cheetah,
                 policy,
                 max_path_length=1000,
                 http=0,
                 view="3d",
                 video_dir=video_dir,
                 priority="normal") as plotter:
        url = plotter.wait_for_http_url(60)
        while not plotter.stats.get("worker_pids"):
            time.sleep(0.2)
        pid = plotter.stats["worker_pids"]["render"]
        ask(url + "history/")  # opened once (the scene built), before anything is measured
        time.sleep(3.0)
        return measure(pid, url + "history/", seconds, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default="replay,render")
    parser.add_argument("--poses", default="fast,public")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(RESULTS, "history_cost.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="history_cost_") as root:
        folder = write_history(root, range(12), cheetah, steps=200)
        for poses in args.poses.split(","):
            if poses == "public":
                os.environ[POSES_ENV] = "public"
            else:
                os.environ.pop(POSES_ENV, None)
            for server in args.servers.split(","):
                if server == "replay":
                    row = replay_server(folder, args.seconds, args.rounds)
                else:
                    row = render_server(root, args.seconds, args.rounds)
                rows.append(dict(server=server, poses=poses, **row))
                print(
                    f"{server:7s} {poses:7s} idle {1000 * row['idle']['cpu_per_second']:6.1f} "
                    f"ms/s; over idle: 1 shown {row['1']['over_idle_ms_per_second']:6.1f} ms/s "
                    f"({row['1']['bytes_per_second'] / 1000:.1f} KB/s), 4 shown "
                    f"{row['4']['over_idle_ms_per_second']:6.1f} ms/s "
                    f"({row['4']['bytes_per_second'] / 1000:.1f} KB/s)",
                    flush=True)
    result = {
        "env": "HalfCheetah-v5",
        "shown_steps_per_second": 20,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "rows": rows,
        "machine": machine_facts(load_before, os.getloadavg()),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as file:
        json.dump(result, file, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
