"""What a watched second of motion costs: the 3D view (the browser draws, poses are sent) against
the MJPEG page (drawn with llvmpipe and JPEG-encoded here), per env, side by side in one run; and
the 3D view's two ways to pose its scene against each other: the fast path (``3d``: one message
of our own a frame, ``view3d/poses.py``) and mjviser's public ``update_from_mjdata`` (``3d-public``,
forced with ``$ASYNC_PLOTTER_VIEW3D_POSES=public``).

For each env and view, a real ``Plotter(http=0, view=...)`` plays a fixed random linear policy
(``priority="normal"``: no budget throttles either view) and one client in a separate process
watches for ``--seconds``: for ``2d`` it reads the MJPEG stream, for ``3d`` it opens the scene's
WebSocket through the live page's server, as a browser would (with this server's Origin), and
reads every message. Decoding and drawing happen in the viewer's browser, elsewhere, so the client
here only reads bytes. Then nobody watches for ``--idle-seconds``.

Reported per env and view: CPU-seconds of the worker's two processes (rollout: policy and
physics, the same work for both views; render: drawing and encoding, or posing) per second of
motion shown (frames shown / the videos' frame rate), the render process's share alone, bytes per
second to the client, time from connecting to the first frame (3D: to the first message, which
carries the scene, and its size), and the render process's CPU while nobody watches.

    python benchmarks/view_cost.py                 # HalfCheetah, Hopper, Humanoid; ~5 min
    python benchmarks/view_cost.py --envs HalfCheetah-v5 --views 3d,3d-public --seconds 10

Writes ``benchmarks/results/view_cost.json``: ``rows`` and ``ratios`` (2D against 3D) when both
were measured, ``poses`` (public against fast) when both 3D ways were; other keys are kept.
Needs the view3d extra.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from async_plotter import Plotter  # noqa: E402 - after the path
from async_plotter.cpu import tree_cpu_seconds  # noqa: E402
from async_plotter.view3d.scene import POSES_ENV  # noqa: E402
from benchmarks.machine import machine_facts  # noqa: E402
from tests.policies import LinearPolicy  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ENVS = {"HalfCheetah-v5": (17, 6), "Hopper-v5": (11, 3), "Humanoid-v5": (348, 17)}

CLIENT = r"""
import json, sys, time
view, url, seconds, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
started = time.monotonic()
first, first_size, total, messages = None, 0, 0, 0
if view == "2d":
    from async_plotter.web.client import read_mjpeg
    stream = read_mjpeg(url + "stream.mjpg", None, timeout=20)
    for frame in stream:
        now = time.monotonic()
        if first is None:
            first, first_size = now - started, len(frame.jpeg)
        total += len(frame.jpeg); messages += 1
        if now - started > seconds:
            break
    stream.close()
else:
    import viser
    from websockets.sync.client import connect
    port = url.rstrip("/").rsplit(":", 1)[1]
    with connect(url.replace("http://", "ws://").rstrip("/"), subprotocols=[f"viser-v{viser.__version__}"],
                 origin=url.rstrip("/"), max_size=None) as socket:
        while time.monotonic() - started < seconds:
            try:
                message = socket.recv(timeout=1)
            except TimeoutError:
                continue
            now = time.monotonic()
            if first is None:
                first, first_size = now - started, len(message)
            total += len(message); messages += 1
json.dump({"first_seconds": first, "first_bytes": first_size, "bytes": total,
           "messages": messages, "seconds": time.monotonic() - started}, open(out, "w"))
"""


def cpu_of(pids: List[int]) -> float:
    return sum(tree_cpu_seconds(pid) or 0.0 for pid in pids)


def measure(env_id: str, view: str, seconds: float, idle_seconds: float,
            workdir: str) -> Dict[str, Any]:
    if view == "3d-public":  # the worker's processes inherit it, also when restarted
        os.environ[POSES_ENV] = "public"
    try:
        return _measure(env_id, view, seconds, idle_seconds, workdir)
    finally:
        os.environ.pop(POSES_ENV, None)


def _measure(env_id: str, view: str, seconds: float, idle_seconds: float,
             workdir: str) -> Dict[str, Any]:
    obs_dim, act_dim = ENVS[env_id]
    policy = LinearPolicy(obs_dim, act_dim)
    policy.set_param_values(
        np.random.default_rng(0).normal(0, 0.3, obs_dim * act_dim).astype(np.float32))
    with Plotter(env_id,
                 policy,
                 max_path_length=1000,
                 http=0,
                 view=view[:2],
                 seed=0,
                 priority="normal") as plotter:
        url = plotter.wait_for_http_url(120)
        deadline = time.monotonic() + 60
        while not plotter.stats.get("worker_pids") or plotter.stats.get("video_fps") is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the worker did not start")
            time.sleep(0.2)
        time.sleep(2.0)  # past start-up
        pids = plotter.stats["worker_pids"]
        render, rollout = pids["render"], pids["rollout"]
        fps = plotter.stats["video_fps"]

        # Nobody watching first.
        idle_start = (cpu_of([render]), cpu_of([rollout]), time.monotonic())
        time.sleep(idle_seconds)
        idle = {
            "render_cpu_per_second":
            (cpu_of([render]) - idle_start[0]) / (time.monotonic() - idle_start[2]),
            "rollout_cpu_per_second":
            (cpu_of([rollout]) - idle_start[1]) / (time.monotonic() - idle_start[2]),
        }

        out = os.path.join(workdir, f"{env_id}-{view}.json")
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, view[:2], url,
             str(seconds + 3), out],
            env=dict(os.environ, PYTHONPATH=os.getcwd()))
        time.sleep(3.0)  # connected and past the first frame
        start = (cpu_of([render]), cpu_of([rollout]), plotter.stats["frames"], time.monotonic())
        time.sleep(seconds)
        end = (cpu_of([render]), cpu_of([rollout]), plotter.stats["frames"], time.monotonic())
        client.wait(60)
        with open(out) as file:
            received = json.load(file)
    frames = end[2] - start[2]
    motion = frames / fps
    render_cpu, rollout_cpu = end[0] - start[0], end[1] - start[1]
    return {
        "env": env_id,
        "view": view,
        "video_fps": fps,
        "seconds_watched": end[3] - start[3],
        "frames_shown": frames,
        "motion_seconds": motion,
        "cpu_per_motion_second": (render_cpu + rollout_cpu) / motion if motion else None,
        "render_cpu_per_motion_second": render_cpu / motion if motion else None,
        "rollout_cpu_per_motion_second": rollout_cpu / motion if motion else None,
        "bytes_per_second": received["bytes"] / received["seconds"],
        "first_frame_seconds": received["first_seconds"],
        "first_message_bytes": received["first_bytes"],
        "idle": idle,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=",".join(ENVS))
    parser.add_argument("--views", default="2d,3d,3d-public")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--idle-seconds", type=float, default=6.0)
    parser.add_argument("--out", default=os.path.join(RESULTS, "view_cost.json"))
    args = parser.parse_args()
    import tempfile

    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for env_id in args.envs.split(","):
            for view in args.views.split(","):
                row = measure(env_id, view, args.seconds, args.idle_seconds, workdir)
                rows.append(row)
                print(
                    f"{env_id:16s} {view}: {row['cpu_per_motion_second'] * 1000:6.1f} ms CPU "
                    f"per second of motion (render {row['render_cpu_per_motion_second'] * 1000:6.1f}"
                    f" ms), {row['bytes_per_second'] / 1000:7.1f} KB/s, first frame "
                    f"{row['first_frame_seconds']:.3f} s, idle render "
                    f"{row['idle']['render_cpu_per_second'] * 1000:.1f} ms/s",
                    flush=True)
    machine = machine_facts(load_before, os.getloadavg())
    results: Dict[str, Any] = {}
    if os.path.exists(args.out):
        with open(args.out) as file:
            results = json.load(file)
    envs = args.envs.split(",")
    for first, second, key in (("2d", "3d", None), ("3d-public", "3d", "poses")):
        if {first, second} - set(args.views.split(",")):
            continue
        ratios = {env_id: _ratios(rows, env_id, first, second) for env_id in envs}
        measured = {
            "rows": [row for row in rows if row["view"] in (first, second)],
            "ratios": ratios,
            "settings": vars(args),
            "machine": machine
        }
        if key is None:
            results.update(measured)
        else:
            results[key] = measured
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".tmp", "w") as file:
        json.dump(results, file, indent=1)
    os.replace(args.out + ".tmp", args.out)


def _ratios(rows: List[Dict[str, Any]], env_id: str, first: str, second: str) -> Dict[str, float]:
    """``first``'s CPU over ``second``'s per second of motion (both processes; render alone)."""
    by_view = {row["view"]: row for row in rows if row["env"] == env_id}
    names = {"2d": "2d", "3d": "3d", "3d-public": "public"}
    prefix = f"{names[first]}_over_{'fast' if first == '3d-public' else names[second]}"
    ratios = {
        f"cpu_{prefix}":
        by_view[first]["cpu_per_motion_second"] / by_view[second]["cpu_per_motion_second"],
        f"render_cpu_{prefix}":
        by_view[first]["render_cpu_per_motion_second"] /
        by_view[second]["render_cpu_per_motion_second"],
    }
    print(f"{env_id:16s} {first}/{second}: {ratios[f'cpu_{prefix}']:.2f}x both processes, "
          f"{ratios[f'render_cpu_{prefix}']:.2f}x the render process")
    return ratios


if __name__ == "__main__":
    main()
