"""A fleet of trainers on one Redis server: the history as state recordings against today's
parameter path (issue 34's figures, for what exists today).

Two modes, one after the other in one run, against one private ``redis-server`` (or ``--url``):

* ``states``: ``--trainers`` simulated trainers (default 100), each publishing under its own
  experiment name with a ``RecordingPublisher`` of its own (a distinct run id), one real state
  recording every 3 s (the same cadence as the parameter path below), trainers alternating
  HalfCheetah-v5 and Humanoid-v5. The recordings are made once, before anything is timed: real
  MuJoCo (gymnasium, reset with seed 0), 500 steps (the project's ``max_path_length`` for both),
  actions from the fixed gait of ``tests/history_recordings.py``, Humanoid built with
  ``terminate_when_unhealthy=False`` so that its episode is the whole 500 steps. They are kept as
  the worker keeps history (``worker/history.py``): full physics state every ``stride`` steps,
  the stride the worker derives from the env's rate and the Plotter's default 30 fps cap
  (HalfCheetah 1, Humanoid 3), written by ``RecordingBuilder`` / ``write_recording``.
  ``RECORDINGS_PER_ENV`` recordings per env (the gait grows with the iteration) are cycled.
* ``parameters``: ``--param-trainers`` trainers (default: as many as ``--trainers``) each with a
  ``RedisWriter`` publishing 1e6 float32 every 3 s (signed, as a trainer's). On a machine that
  cannot sustain that many (the row "parameter bytes delivered / due" falls below 1), run fewer:
  their bytes/s and redis-server CPU are then scaled to ``--trainers`` in a column marked
  extrapolated.

The trainers run as ``--processes`` processes (default 10), several trainers in each: one
scheduling thread per process calls ``add`` / ``publish`` at each trainer's due time, and each
publisher or writer sends from its own thread, as in a trainer. The trainers' phases are spread
evenly over the 3 s, so they do not all publish at one instant.

Measured per mode over ``--seconds`` (default 30) after a warm-up: bytes/s into Redis (``INFO
stats`` ``total_net_input_bytes``), redis-server CPU (``/proc/<pid>/stat``, as a fraction of one
core), ``used_memory`` at the end, and the publishing processes' CPU per trainer. In states mode,
one viewer process follows 4 experiments, a ``RecordingFetcher`` each: the time from a trainer's
``add`` to the viewer's ``on_written`` of that recording (``time.time()`` of both, matched by
experiment and update number), its CPU, and whether it imported TensorFlow or Keras. A fetcher
polls the server once a second, so that time is the poll's wait plus the transfer: the 4
watched trainers' phases are spread over the 3 s (and so over the poll's second) to sample it
fairly. Then, with
the fleet still publishing, ``async-plotter serve`` is started against the server, an events
stream held open (as an open overview tab: it is what makes serve follow the server), and
``/experiments.json`` fetched ``--list-requests`` times (default 50): p50 / p95. Serve lists
experiments by the parameter path's structure key, so it lists none of the states-only fleet: its
list time is measured with the parameter-mode fleet (the table says so).

Not measured (not built yet): live episode chunks, the "watching" mark, a watched live view's
delay, viewer CPU per watched live second. The table lists them as such.

    python benchmarks/redis_fleet.py [--quick] [--trainers 100] [--param-trainers N]
                                     [--processes 10] [--seconds 30] [--url redis://...]

Writes benchmarks/results/redis_fleet.json (``--quick``: redis_fleet_quick.json).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.machine import machine_facts  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results")
SECRET = "benchmark secret, 32 bytes long!"
INTERVAL = 3.0
PARAMS = 1_000_000
ENVS = ("HalfCheetah-v5", "Humanoid-v5")
STEPS = 500
RECORDINGS_PER_ENV = 4
WATCHED = 4
#: the Plotter's default frame-rate cap, from which the worker derives the history's stride
PLOTTER_FPS = 30.0
KEY_PATTERN = "async_plotter:fleet-*"
GOAL_BYTES_RATIO = 100.0
GOAL_REDIS_CPU = 0.10

# ------------------------------------------------------------------------------ recordings


def make_recordings(folder: str) -> Dict[str, List[str]]:
    """``RECORDINGS_PER_ENV`` history recordings of each env in ``ENVS``, by env id."""
    import gymnasium
    import mujoco

    from async_plotter.render.recording import RecordingBuilder, model_to_mjb, write_recording
    from async_plotter.worker.playback import plan_playback
    from tests.history_recordings import gait

    os.makedirs(folder, exist_ok=True)
    made = {}
    for env_id in ENVS:
        kwargs = {"terminate_when_unhealthy": False} if env_id.startswith("Humanoid") else {}
        env = gymnasium.make(env_id, **kwargs)
        model, data = env.unwrapped.model, env.unwrapped.data
        playback = plan_playback(env, PLOTTER_FPS)
        stride = playback.stride
        mjb = model_to_mjb(model)
        spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        state = np.empty(mujoco.mj_stateSize(model, spec))
        dt = float(env.unwrapped.dt)
        paths = []
        for iteration in range(RECORDINGS_PER_ENV):
            env.reset(seed=0)
            builder = RecordingBuilder(mjb, {})
            mujoco.mj_getState(model, data, state, spec)
            builder.add(state, None, 0.0, 0)
            total, unsent, ended, steps = 0.0, 0.0, False, 0
            for steps in range(1, STEPS + 1):
                action = gait(iteration, (steps - 1) * dt, model.nu)
                _, reward, ended, _, _ = env.step(action)
                total += float(reward)
                unsent += float(reward)
                if ended or steps == STEPS or steps % stride == 0:
                    mujoco.mj_getState(model, data, state, spec)
                    builder.add(state, action, unsent, 0)
                    unsent = 0.0
                if ended:
                    break
            builder.meta.update(
                dict(update=iteration + 1,
                     iteration=iteration,
                     fps=playback.rate / stride,
                     stride=stride,
                     env_rate=playback.rate,
                     label=env_id,
                     camera=None,
                     camera_id=-1,
                     width=480,
                     height=480,
                     size_chosen=False,
                     quality="auto",
                     preset=None,
                     pause_seconds=0.0,
                     history=True,
                     deterministic=True,
                     start_seed=0,
                     max_path_length=STEPS,
                     length=steps,
                     completed=bool(ended),
                     **{"return": total}))
            path = os.path.join(folder, f"{env_id}-{iteration}.npz")
            write_recording(path, builder.build())
            paths.append(path)
        env.close()
        made[env_id] = paths
    return made


# -------------------------------------------------------------------- the fleet's processes


def _parent_gone(parent: int) -> bool:
    return os.getppid() != parent


def fleet_worker(spec_path: str) -> None:
    """Some trainers of one mode, in this process: each publishes at its own phase of every
    ``INTERVAL`` s until SIGTERM; every call is logged with its ``time.time()``."""
    with open(spec_path) as handle:
        spec = json.load(handle)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    parent = os.getppid()
    url, mode, trainers = spec["url"], spec["mode"], spec["trainers"]
    if mode == "states":
        from async_plotter.channel.redis.states import RecordingPublisher

        publishers = [
            RecordingPublisher(url, t["experiment"], SECRET.encode(), (t["run_id"], time.time_ns()),
                               3600.0) for t in trainers
        ]
    else:
        from async_plotter.channel.redis.writer import RedisWriter
        from async_plotter.env.recipe import describe_env
        from async_plotter.policy.recipe import PolicyRecipe
        from async_plotter.worker.config import WorkerConfig
        from async_plotter.worker.parameters import ParameterLayout

        params = np.random.default_rng(0).standard_normal(PARAMS).astype(np.float32)
        stats = [{} for _ in trainers]
        publishers = []
        for trainer, stat in zip(trainers, stats):
            config = WorkerConfig(env=describe_env(trainer["env"]),
                                  policy=PolicyRecipe("protocol", b"unused", False, "benchmark"),
                                  max_path_length=STEPS,
                                  fps=PLOTTER_FPS,
                                  deterministic=False,
                                  quality="auto",
                                  priority="normal",
                                  frame_size=None,
                                  mujoco_gl="egl",
                                  seed=None,
                                  parameters=ParameterLayout(PARAMS, np.dtype(np.float32)))
            publishers.append(
                RedisWriter(url, trainer["experiment"], config, PARAMS, np.float32, SECRET, stat))
    log = open(spec["log"], "w")
    start = spec["start"]
    due = [start + t["offset"] for t in trainers]
    counts = [0] * len(trainers)
    while not stop.is_set() and not _parent_gone(parent):
        index = int(np.argmin(due))
        wait = due[index] - time.time()
        if wait > 0:
            stop.wait(min(wait, 0.5))
            continue
        trainer, number = trainers[index], counts[index] + 1
        moment = time.time()
        if mode == "states":
            paths = trainer["paths"]
            publishers[index].add(paths[counts[index] % len(paths)], number, number - 1)
        else:
            publishers[index].publish(params, number - 1, STEPS, number=number)
        log.write(f"{trainer['experiment']} {number} {moment:.6f}\n")
        counts[index] = number
        due[index] += INTERVAL
    log.flush()
    report: Dict[str, Any] = {"calls": sum(counts)}
    if mode == "states":
        for publisher in publishers:
            publisher.close(2.0)
        report.update(sent=sum(p.sent for p in publishers),
                      failed=sum(p.failed for p in publishers))
    else:
        for publisher in publishers:
            publisher.close(2.0)
        report.update(sent=sum(s["published"] for s in stats),
                      replaced=sum(s["publish_replaced"] for s in stats),
                      errors=sum(s["publish_errors"] for s in stats))
    with open(spec["log"] + ".json", "w") as handle:
        json.dump(report, handle)


def viewer(spec_path: str) -> None:
    """One viewer: a ``RecordingFetcher`` for each watched experiment, each file written logged
    with its ``time.time()``; at SIGTERM, what it imported."""
    with open(spec_path) as handle:
        spec = json.load(handle)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    parent = os.getppid()
    from async_plotter.channel.redis.signing import Verifier
    from async_plotter.channel.redis.states import RecordingFetcher

    log = open(spec["log"], "w")
    lock = threading.Lock()

    def written(experiment: str, path: str) -> None:
        moment = time.time()
        # iter_NNNN.npz, the trainer's update N + 1 (it publishes iteration = update - 1)
        number = int(os.path.basename(path)[len("iter_"):-len(".npz")]) + 1
        with lock:
            log.write(f"{experiment} {number} {moment:.6f}\n")
            log.flush()

    fetchers = [
        RecordingFetcher(spec["url"],
                         name,
                         Verifier(SECRET.encode()),
                         os.path.join(spec["folder"], name),
                         on_written=lambda path, name=name: written(name, path))
        for name in spec["experiments"]
    ]
    while not stop.is_set() and not _parent_gone(parent):
        stop.wait(0.5)
    for fetcher in fetchers:
        fetcher.close()
    heavy = sorted(m for m in ("tensorflow", "keras", "tf_keras") if m in sys.modules)
    with open(spec["log"] + ".json", "w") as handle:
        json.dump(
            {
                "written": sum(f.written for f in fetchers),
                "refused": sum(f.refused for f in fetchers),
                "heavy_modules": heavy
            }, handle)


# ---------------------------------------------------------------------------- measuring


def proc_cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU seconds of process ``pid`` (None: not readable here)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def snapshot(client: Any, redis_pid: Optional[int], pids: Dict[str, List[int]]) -> Dict[str, Any]:
    cpu = {
        role: sum(proc_cpu_seconds(pid) or 0.0 for pid in role_pids)
        for role, role_pids in pids.items()
    }
    return {
        "wall": time.monotonic(),
        "net_in": client.info("stats")["total_net_input_bytes"],
        "redis_cpu": proc_cpu_seconds(redis_pid) if redis_pid else None,
        "cpu": cpu,
    }


def delete_fleet_keys(client: Any) -> None:
    keys = list(client.scan_iter(match=KEY_PATTERN, count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start:start + 500])


def child_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["ASYNC_PLOTTER_SECRET"] = SECRET
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("DISPLAY", None)
    return env


class Children:
    """Every process this benchmark started, stopped in ``stop_all`` whatever happened."""

    def __init__(self) -> None:
        self.processes: List[subprocess.Popen] = []

    def start(self, args: List[str], log_path: str) -> subprocess.Popen:
        process = subprocess.Popen(args,
                                   cwd=ROOT,
                                   env=child_env(),
                                   stdin=subprocess.DEVNULL,
                                   stdout=open(log_path, "ab"),
                                   stderr=subprocess.STDOUT,
                                   start_new_session=True)
        self.processes.append(process)
        return process

    def stop(self, processes: List[subprocess.Popen], sig: int = signal.SIGTERM) -> None:
        for process in processes:
            if process.poll() is None:
                process.send_signal(sig)
        deadline = time.monotonic() + 15
        for process in processes:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)

    def stop_all(self) -> None:
        self.stop(self.processes)


def percentile(values: List[float], q: float) -> Optional[float]:
    return round(float(np.percentile(values, q)), 4) if values else None


def read_log(path: str) -> Dict[tuple, float]:
    moments = {}
    if os.path.exists(path):
        with open(path) as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 3:
                    moments[(parts[0], int(parts[1]))] = float(parts[2])
    return moments


def measure_serve(children: Children, url: str, expected: List[str], requests: int, work: str,
                  list_timeout: float) -> Dict[str, Any]:
    """``async-plotter serve`` against ``url``: how long until it lists ``expected``, then the
    time of ``requests`` fetches of ``/experiments.json``."""
    import urllib.request

    from async_plotter.web.client import read_events
    from tests.redis_server import free_port

    port = free_port()
    script = os.path.join(os.path.dirname(sys.executable), "async-plotter")
    cli = [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "async_plotter.cli"]
    started = time.monotonic()
    serve = children.start(cli + ["serve", url, "--http", str(port), "-q"],
                           os.path.join(work, "serve.log"))
    base = f"http://127.0.0.1:{port}"
    stop = threading.Event()

    def hold_events() -> None:  # an open overview tab: the catalog follows the server meanwhile
        while not stop.is_set():
            try:
                for _ in read_events(base + "/events", timeout=20):
                    if stop.is_set():
                        return
            except Exception:  # noqa: BLE001 - serve still starting
                time.sleep(0.2)

    def fetch() -> List[Dict[str, Any]]:
        with urllib.request.urlopen(base + "/experiments.json", timeout=20) as response:
            return json.loads(response.read())["experiments"]

    holder = threading.Thread(target=hold_events, daemon=True)
    holder.start()
    result: Dict[str, Any] = {"expected": len(expected)}
    try:
        listed: List[Dict[str, Any]] = []
        deadline = started + list_timeout
        wanted = set(expected)
        while time.monotonic() < deadline:
            try:
                listed = fetch()
            except OSError:
                listed = []
            if wanted <= {row.get("name") for row in listed}:
                result["seconds_to_list_all"] = round(time.monotonic() - started, 2)
                break
            time.sleep(0.25)
        result["listed"] = len(wanted & {row.get("name") for row in listed})
        if result["listed"] == len(wanted):
            times = []
            for _ in range(requests):
                begun = time.perf_counter()
                rows = fetch()
                times.append(time.perf_counter() - begun)
                time.sleep(0.05)
            result.update(rows=len(rows),
                          requests=requests,
                          list_ms_p50=round(1e3 * float(np.percentile(times, 50)), 2),
                          list_ms_p95=round(1e3 * float(np.percentile(times, 95)), 2),
                          list_ms_max=round(1e3 * max(times), 2))
    finally:
        stop.set()
        children.stop([serve], signal.SIGINT)
    return result


def run_mode(mode: str, args: argparse.Namespace, url: str, client: Any, redis_pid: Optional[int],
             recordings: Dict[str, List[str]], work: str, children: Children) -> Dict[str, Any]:
    count = args.trainers if mode == "states" else args.param_trainers
    delete_fleet_keys(client)
    time.sleep(0.5)
    memory_before = client.info("memory")["used_memory"]
    start = time.time() + args.startup
    trainers = []
    for index in range(count):
        env_id = ENVS[index % len(ENVS)]
        trainers.append({
            "experiment": f"fleet-{mode}-{index:03d}",
            "env": env_id,
            "offset": INTERVAL * index / count,
            "run_id": 1000 + index,
            "paths": recordings[env_id],
        })
    processes = min(args.processes, count)
    fleet = []
    for rank in range(processes):
        spec = {
            "url": url,
            "mode": mode,
            "start": start,
            "trainers": trainers[rank::processes],
            "log": os.path.join(work, f"{mode}-{rank}.log"),
        }
        spec_path = os.path.join(work, f"{mode}-{rank}.json")
        with open(spec_path, "w") as handle:
            json.dump(spec, handle)
        fleet.append(
            children.start([sys.executable,
                            os.path.abspath(__file__), "--fleet-worker", spec_path],
                           os.path.join(work, f"{mode}-{rank}.out")))
    watcher = None
    # Phases spread over the interval, so the fetchers' 1 s poll is met at every phase.
    watched = sorted({trainers[i * count // WATCHED]["experiment"] for i in range(WATCHED)})
    viewer_log = os.path.join(work, "viewer.log")
    if mode == "states":
        spec_path = os.path.join(work, "viewer.json")
        with open(spec_path, "w") as handle:
            json.dump(
                {
                    "url": url,
                    "experiments": watched,
                    "folder": os.path.join(work, "fetched"),
                    "log": viewer_log
                }, handle)
        watcher = children.start(
            [sys.executable, os.path.abspath(__file__), "--viewer", spec_path],
            os.path.join(work, "viewer.out"))
    pids = {"fleet": [p.pid for p in fleet]}
    if watcher is not None:
        pids["viewer"] = [watcher.pid]
    print(
        f"{mode}: {count} trainers in {processes} processes; warm-up until "
        f"{args.startup + args.warmup:.0f} s, then {args.seconds:.0f} s measured",
        flush=True)
    time.sleep(max(start + args.warmup - time.time(), 0.0))
    dead = [p.pid for p in fleet if p.poll() is not None]
    if dead:
        raise RuntimeError(f"{mode}: fleet processes {dead} exited; see {work}")
    window_start = time.time()
    before = snapshot(client, redis_pid, pids)
    time.sleep(args.seconds)
    after = snapshot(client, redis_pid, pids)
    window_end = time.time()
    wall = after["wall"] - before["wall"]
    result: Dict[str, Any] = {
        "trainers":
        count,
        "processes":
        processes,
        "window_s":
        round(wall, 2),
        "bytes_per_s_into_redis": (after["net_in"] - before["net_in"]) / wall,
        "redis_cpu_of_a_core": (after["redis_cpu"] - before["redis_cpu"]) /
        wall if before["redis_cpu"] is not None else None,
        "redis_used_memory_bytes":
        client.info("memory")["used_memory"],
        "redis_used_memory_before_bytes":
        memory_before,
        "publisher_cpu_of_a_core_per_trainer":
        (after["cpu"]["fleet"] - before["cpu"]["fleet"]) / wall / count,
    }
    if mode == "parameters":
        from async_plotter.channel.redis.wire import update_bytes

        # What the schedule asks for: below about 1, the fleet or the server did not keep up.
        due_bytes = count * update_bytes(PARAMS, np.dtype(np.float32)) / INTERVAL
        result["delivered_fraction_of_schedule"] = result["bytes_per_s_into_redis"] / due_bytes
    if mode == "states":
        result["viewer_cpu_of_a_core"] = (after["cpu"]["viewer"] - before["cpu"]["viewer"]) / wall
    serve_timeout = 60.0 if mode == "parameters" else 15.0
    print(f"{mode}: measured; starting serve against the publishing fleet", flush=True)
    result["serve"] = measure_serve(children, url, [t["experiment"] for t in trainers],
                                    args.list_requests, work, serve_timeout)
    children.stop(fleet + ([watcher] if watcher is not None else []))
    calls = {}  # the logs are complete once their writers stopped
    for rank in range(processes):
        calls.update(read_log(os.path.join(work, f"{mode}-{rank}.log")))
    in_window = sum(1 for moment in calls.values() if window_start <= moment <= window_end)
    result["publish_calls_in_window"] = in_window
    result["publish_calls_due_in_window"] = round(count * wall / INTERVAL)
    reports = []
    for rank in range(processes):
        path = os.path.join(work, f"{mode}-{rank}.log.json")
        if os.path.exists(path):
            with open(path) as handle:
                reports.append(json.load(handle))
    totals: Dict[str, int] = {}
    for report in reports:
        for key, value in report.items():
            totals[key] = totals.get(key, 0) + value
    result["publisher_totals"] = totals
    if watcher is not None:
        written = read_log(viewer_log)
        delays = [
            written[key] - moment for key, moment in calls.items()
            if key in written and window_start <= moment <= window_end
        ]
        due = sum(1 for (name, _), moment in calls.items()
                  if name in watched and window_start <= moment <= window_end)
        result["viewer"] = {
            "watched": watched,
            "recordings_added_in_window": due,
            "recordings_fetched_of_those": len(delays),
            "add_to_written_s_p50": percentile(delays, 50),
            "add_to_written_s_p95": percentile(delays, 95),
            "add_to_written_s_max": round(max(delays), 4) if delays else None,
        }
        report_path = viewer_log + ".json"
        if os.path.exists(report_path):
            with open(report_path) as handle:
                result["viewer"].update(json.load(handle))
    return result


def recording_sizes(recordings: Dict[str, List[str]]) -> Dict[str, Any]:
    """What one recording of each env weighs on disk and as sent (without its model), and its
    model once, compressed as the publisher sends it."""
    import zlib

    from async_plotter.render.recording import read_recording, recording_bytes

    sizes = {}
    for env_id, paths in recordings.items():
        recording = read_recording(paths[0])
        model = len(zlib.compress(recording.model_mjb, 6))
        steps = len(recording.states)
        recording.model_mjb = b""
        sizes[env_id] = {
            "file_bytes": os.path.getsize(paths[0]),
            "sent_bytes_without_model": len(recording_bytes(recording)),
            "model_bytes_compressed": model,
            "recorded_states": steps,
            "state_floats": int(recording.states.shape[1]),
        }
    return sizes


# -------------------------------------------------------------------------------- report


def _fmt_bytes(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def _fmt_pct(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


def table(results: Dict[str, Any]) -> List[str]:
    states, params = results["modes"]["states"], results["modes"]["parameters"]
    n, k = states["trainers"], params["trainers"]
    scale = n / k
    extrapolated = {
        "bytes_per_s_into_redis":
        params["bytes_per_s_into_redis"] * scale,
        "redis_cpu_of_a_core": (params["redis_cpu_of_a_core"] *
                                scale if params["redis_cpu_of_a_core"] is not None else None),
    }
    results["parameters_extrapolated_to_trainers"] = dict(extrapolated, trainers=n, factor=scale)
    ratio_bytes = extrapolated["bytes_per_s_into_redis"] / states["bytes_per_s_into_redis"]
    ratio_cpu = (extrapolated["redis_cpu_of_a_core"] / states["redis_cpu_of_a_core"]
                 if states["redis_cpu_of_a_core"] and extrapolated["redis_cpu_of_a_core"] else None)
    results["ratios_parameters_over_states"] = {"bytes_per_s": ratio_bytes, "redis_cpu": ratio_cpu}
    sustained = params["delivered_fraction_of_schedule"]
    viewer = states.get("viewer", {})
    serve = params["serve"]
    extra = "" if k == n else f" (x{scale:g}: extrapolated)"
    rows = [
        ("", f"states, {n} trainers", f"parameters, {k} trainers", f"parameters at {n}{extra}",
         "params/states", "goal"),
        ("bytes/s into Redis", _fmt_bytes(states["bytes_per_s_into_redis"]),
         _fmt_bytes(params["bytes_per_s_into_redis"]),
         _fmt_bytes(extrapolated["bytes_per_s_into_redis"]), f"{ratio_bytes:.0f}x",
         f">= {GOAL_BYTES_RATIO:.0f}x: {'met' if ratio_bytes >= GOAL_BYTES_RATIO else 'MISSED'}"),
        ("redis-server CPU (one core)", _fmt_pct(states["redis_cpu_of_a_core"]),
         _fmt_pct(params["redis_cpu_of_a_core"]), _fmt_pct(extrapolated["redis_cpu_of_a_core"]),
         "n/a" if ratio_cpu is None else f"{ratio_cpu:.0f}x",
         f"< 10% at {n}: " + ("met" if states["redis_cpu_of_a_core"] is not None
                              and states["redis_cpu_of_a_core"] < GOAL_REDIS_CPU else "MISSED")),
        ("parameter bytes delivered / due", "", f"{sustained:.2f}", "", "", ""),
        ("redis used_memory (end)", _fmt_bytes(states["redis_used_memory_bytes"]),
         _fmt_bytes(params["redis_used_memory_bytes"]), "not extrapolated", "", ""),
        ("publisher CPU per trainer", _fmt_pct(states["publisher_cpu_of_a_core_per_trainer"]),
         _fmt_pct(params["publisher_cpu_of_a_core_per_trainer"]), "(same per trainer)", "", ""),
        ("publish calls in window (due)",
         f"{states['publish_calls_in_window']} ({states['publish_calls_due_in_window']})",
         f"{params['publish_calls_in_window']} ({params['publish_calls_due_in_window']})", "", "",
         ""),
        ("serve /experiments.json p95",
         f"listed {states['serve'].get('listed')} of {n} (it lists the parameter path's keys)",
         (f"{serve['list_ms_p95']:.1f} ms ({serve['rows']} rows)" if "list_ms_p95" in serve else
          f"listed {serve.get('listed')} of {serve['expected']}"), "not measured", "", ""),
        ("add -> viewer on_written p50/p95",
         (f"{viewer['add_to_written_s_p50']:.2f} / {viewer['add_to_written_s_p95']:.2f} s"
          if viewer.get("add_to_written_s_p95") is not None else "none"), "n/a", "", "", ""),
        ("viewer CPU (4 fetchers)", _fmt_pct(states.get("viewer_cpu_of_a_core")), "n/a", "", "",
         ""),
        ("viewer imports TensorFlow", "yes" if viewer.get("heavy_modules") else "no", "n/a", "", "",
         "no: " + ("MISSED" if viewer.get("heavy_modules") else "met")),
        ("live chunks, watching mark", "not measured yet (not built)", "", "", "", ""),
        ("watched live view delay p95", "not measured yet (not built)", "", "", "", "<= 1 s"),
    ]
    if k == n:  # nothing extrapolated: no column for it
        rows = [row[:3] + row[4:] for row in rows]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for number, row in enumerate(rows):
        lines.append("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))
        if number == 0:
            lines.append("-" * len(lines[0]))
    return lines


def git_commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"],
                              cwd=ROOT,
                              capture_output=True,
                              text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick",
                        action="store_true",
                        help="10 trainers (4 on the parameter "
                        "path), 2 processes, a 10 s window")
    parser.add_argument("--trainers", type=int, default=100, help="states-path trainers")
    parser.add_argument("--param-trainers",
                        type=int,
                        help="parameter-path trainers actually run (default: --trainers); fewer "
                        "are extrapolated to --trainers")
    parser.add_argument("--processes", type=int, default=10, help="processes the fleet runs in")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window per mode")
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds before the window")
    parser.add_argument("--startup",
                        type=float,
                        default=6.0,
                        help="seconds the fleet is given "
                        "to import before its first publish")
    parser.add_argument("--list-requests", type=int, default=50)
    parser.add_argument("--url", help="an existing Redis server (default: start a private one)")
    parser.add_argument("--fleet-worker", help=argparse.SUPPRESS)
    parser.add_argument("--viewer", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fleet_worker:
        fleet_worker(args.fleet_worker)
        return
    if args.viewer:
        viewer(args.viewer)
        return
    if args.quick:
        args.trainers, args.param_trainers, args.processes = 10, 4, 2
        args.seconds, args.warmup, args.list_requests = 10.0, 5.0, 20
    if min(args.trainers, args.param_trainers or 1, args.processes) < 1:
        parser.error("--trainers, --param-trainers and --processes must be 1 or more")
    args.param_trainers = min(args.param_trainers or args.trainers, args.trainers)
    # Ctrl-C: SIGINT unwinds main (the children run in sessions of their own); SIGTERM the same.
    signal.signal(signal.SIGTERM, _interrupt)
    load_before = os.getloadavg()
    children = Children()
    server = None
    work = tempfile.mkdtemp(prefix="redis_fleet_")
    import redis

    try:
        url = args.url
        if url is None:
            from tests.redis_server import MISSING_MESSAGE, RedisServer, find_redis_server

            executable = find_redis_server()
            if executable is None:
                sys.exit(MISSING_MESSAGE)
            server = RedisServer(executable).start()
            url = server.url
        client = redis.Redis.from_url(url)
        redis_pid = int(client.info("server")["process_id"])
        if proc_cpu_seconds(redis_pid) is None:
            print(f"redis-server pid {redis_pid} is not on this machine: no CPU figures for it")
            redis_pid = None
        print(f"making {RECORDINGS_PER_ENV} recordings of {', '.join(ENVS)}, {STEPS} steps ...",
              flush=True)
        recordings = make_recordings(os.path.join(work, "recordings"))
        sizes = recording_sizes(recordings)
        for env_id, size in sizes.items():
            print(
                f"  {env_id}: {size['recorded_states']} states of {size['state_floats']} floats,"
                f" {_fmt_bytes(size['sent_bytes_without_model'])} sent per recording, model "
                f"{_fmt_bytes(size['model_bytes_compressed'])} once",
                flush=True)
        modes = {}
        for mode in ("states", "parameters"):
            modes[mode] = run_mode(mode, args, url, client, redis_pid, recordings, work, children)
        delete_fleet_keys(client)
        client.close()
    except KeyboardInterrupt:
        print("interrupted: stopping every process", file=sys.stderr)
        raise SystemExit(130)
    except BaseException:
        print(f"the processes' logs are in {work}", file=sys.stderr)
        raise
    else:
        shutil.rmtree(work, ignore_errors=True)
    finally:
        children.stop_all()
        if server is not None:
            server.stop()
    load_after = os.getloadavg()
    results: Dict[str, Any] = {
        "commit":
        git_commit(),
        "machine":
        machine_facts(load_before, load_after),
        "settings": {
            "trainers": args.trainers,
            "param_trainers": args.param_trainers,
            "processes": args.processes,
            "seconds": args.seconds,
            "warmup_s": args.warmup,
            "interval_s": INTERVAL,
            "params": PARAMS,
            "steps": STEPS,
            "envs": ENVS,
            "watched": WATCHED,
            "quick": args.quick,
            "private_redis": args.url is None,
        },
        "recordings":
        sizes,
        "modes":
        modes,
        "not_measured": [
            "live chunks and the watching mark (not built)",
            "a watched live view's delay (not built)",
            "viewer CPU per watched live second (not built)",
            "serve list time with the states fleet (serve lists only the parameter path's keys)",
        ],
    }
    lines = table(results)
    print()
    print(f"{args.trainers} trainers, one publish per {INTERVAL:g} s each, measured over "
          f"{args.seconds:g} s per mode")
    for line in lines:
        print(line)
    print(f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} "
          f"({os.cpu_count()} CPUs)")
    results["table"] = lines
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "redis_fleet_quick.json" if args.quick else "redis_fleet.json")
    with open(path, "w") as handle:
        json.dump(results, handle, indent=1)
    print(f"wrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
