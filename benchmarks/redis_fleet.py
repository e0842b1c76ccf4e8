"""A fleet of trainers on one Redis server: the history as state recordings against today's
parameter path (issue 34's figures, for what exists today).

Three modes, one after the other in one run, against one private ``redis-server`` (or
``--url``):

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
  extrapolated. This process subscribes to every experiment's readers channel, as a parameter
  reader (``view --rollouts``) would: the writers send every update whole, today's path when
  read, and the baseline of every ratio.
* ``unread``: the same trainers with nobody reading the parameters: each update goes as its
  signed header alone (``wire.FLAG_WITHHELD``), what a publishing trainer now sends beside its
  states while no viewer asks for its parameters.

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

Then ``live``, the live episode as states (``channel/redis/live.py``): each of the ``--trainers``
trainers runs a real ``LivePublisher`` (its target as ``RedisWriter.run_target()`` makes it)
fed by a thread that plays the recordings above in real time through the rollout process's own
``ShownSteps`` (scene once, with the env's pickled model; then per episode ``BEGIN``, quarter-second
chunks of MuJoCo states, ``END``). Unlike a rollout process, which runs no episode while nobody
watches, the threads play all the time (the publisher drops it all); once a viewer subscribes,
an episode that was not being published is cut and a new one begins, as a rollout process would
begin one then. Measured over ``--live-seconds`` (default 20) twice:

* nobody watching: bytes/s into Redis, redis-server CPU, the PUBLISH and PUBSUB NUMSUB the server
  ran (``INFO commandstats``: any PUBLISH at all would show), the fleet's CPU per trainer; the
  table also adds this mode's bytes/s to the states and unread modes' (what a trainer nobody
  watches sends: a sum of three windows, not one run of all three).
* ``WATCHED`` trainers watched (half of each env): per watched trainer one real ``async-plotter
  view URL -e E --states --video-dir D`` and one probe process that verifies each message with
  ``open_live`` and logs its arrival; the feeding threads log when each chunk was handed to
  ``LivePublisher.send``. Chunks are matched by experiment, update number and the first state's
  simulated time: send-to-verified-arrival p50 / p95. Each view's whole process tree's CPU (the
  view, its states source and render process, the encoder; children that ended count through
  their parent) per second of motion its probe received in the window, and whether any process
  of a tree maps a TensorFlow library (``/proc/PID/maps``). Then, after the viewers left, the
  PUBLISH commands the server ran in the next ``LIVE_TAIL`` s.

    python benchmarks/redis_fleet.py [--quick] [--trainers 100] [--param-trainers N]
                                     [--processes 10] [--seconds 30] [--live-seconds 20]
                                     [--url redis://...]

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
GOAL_LIVE_DELAY = 1.0
#: seconds counted after the last viewer of the live mode left
LIVE_TAIL = 3.0

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
    if mode == "live":
        with open(spec["log"] + ".json", "w") as handle:
            json.dump(live_worker(spec, stop, parent), handle)
        return
    if mode == "states":  # else "parameters" or "unread": the same writers
        from async_plotter.channel.redis.sealed import RunTarget
        from async_plotter.channel.redis.states import RecordingPublisher

        publishers = [
            RecordingPublisher(
                RunTarget(url, t["experiment"], SECRET.encode(), (t["run_id"], time.time_ns()),
                          3600.0)) for t in trainers
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
            # What a trainer's route sends of each history report: the recording and its return.
            publishers[index].add_report({
                "path": paths[counts[index] % len(paths)],
                "update": number,
                "iteration": number - 1,
                "episode_return": 100.0 + number,
                "length": STEPS,
                "time": moment,
                "cpu_seconds": 0.05
            })
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
                      withheld=sum(s["published_withheld"] for s in stats),
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
    from async_plotter.channel.redis.states_fetch import RecordingFetcher

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


# --------------------------------------------------------------------------------- live


def live_scene(env_id: str) -> Any:
    """``(model, SceneInfo)`` of ``env_id`` as a trainer's rollout process announces it: its
    own env's pickled model, camera plan, frame rate and stride."""
    import dataclasses
    import types

    import gymnasium

    from async_plotter.worker.playback import plan_playback
    from async_plotter.worker.rollout_process import describe_scene

    kwargs = {"terminate_when_unhealthy": False} if env_id.startswith("Humanoid") else {}
    env = gymnasium.make(env_id, render_mode="rgb_array", **kwargs)
    playback = plan_playback(env, PLOTTER_FPS)
    settings = types.SimpleNamespace(frame_size=None,
                                     camera=None,
                                     env=types.SimpleNamespace(label=env_id))
    scene = dataclasses.replace(describe_scene(env, settings),
                                fps=playback.fps,
                                stride=playback.stride,
                                env_rate=playback.rate)
    return env.unwrapped.model, scene


class TimedStream:
    """What a simulated rollout process sends to: the trainer's ``LivePublisher``; with a log,
    each chunk's hand-over is written as ``experiment update first-state-time rows
    time.time()``."""

    def __init__(self, publisher: Any, experiment: str, log: Any, lock: threading.Lock) -> None:
        self.publisher = publisher
        self.fed = 0
        self._experiment = experiment
        self._log = log
        self._lock = lock
        self._update = 0

    def send(self, message: Any) -> None:
        from async_plotter.render.stream import StreamKind

        kind, body = message
        if kind is StreamKind.BEGIN:
            self._update = body.update
        moment = time.time()
        self.publisher.send(message)
        self.fed += 1
        if self._log is not None and kind is StreamKind.STATES:
            with self._lock:
                self._log.write(f"{self._experiment} {self._update} {float(body.states[0, 0])!r} "
                                f"{len(body.states)} {moment:.6f}\n")


def play_live(stream: TimedStream, model: Any, scene: Any, recordings: List[Any], offset: float,
              stop: threading.Event) -> None:
    """A trainer's rollout process, watched from elsewhere: the scene once, then episode after
    episode (the recordings in turn), each ``BEGIN``, its shown steps through ``ShownSteps``
    (real time, quarter-second chunks) and ``END``. Unlike the rollout process, it plays while
    nobody watches too (the publisher drops it all); once a viewer comes, an episode it was
    not publishing is cut and a new one begins, as the rollout process begins one then."""
    import types

    import mujoco

    from async_plotter.render.stream import EpisodeEnd, EpisodeInfo, StreamKind
    from async_plotter.worker.shown_steps import ShownSteps

    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    data = mujoco.MjData(model)
    env = types.SimpleNamespace(unwrapped=types.SimpleNamespace(model=model, data=data))
    publisher = stream.publisher
    stream.send((StreamKind.SCENE, scene))
    shown = ShownSteps(env, scene, stream, True, scene.fps)
    stop.wait(offset)
    episode = 0
    while not stop.is_set():
        recording = recordings[episode % len(recordings)]
        published = publisher.watched
        stream.send((StreamKind.BEGIN, EpisodeInfo(episode + 1, episode, episode)))
        total, shown_rows, cut = 0.0, 0, False
        for row, state in enumerate(recording.states):
            if stop.is_set() or (publisher.watched and not published):
                cut = True
                break
            mujoco.mj_setState(model, data, state, spec)
            reward = float(recording.rewards[row])
            shown.add(None if row == 0 else recording.actions[row], reward)
            total += reward
            shown_rows = row + 1
        if cut:
            shown.drop()
        else:
            shown.flush()
        steps = int(recording.meta["length"]) if not cut else max(shown_rows - 1, 0) * scene.stride
        stream.send((StreamKind.END, EpisodeEnd(steps, total, completed=not cut)))
        episode += 1


def live_worker(spec: Dict[str, Any], stop: threading.Event, parent: int) -> Dict[str, Any]:
    """Some trainers' live streams, in this process: a ``LivePublisher`` each (as
    ``RedisWriter.run_target()`` makes its target) fed by ``play_live`` from a thread of its
    own; the watched trainers' chunks logged. Writes ``spec["ready"]`` once all are playing."""
    from async_plotter.channel.redis.live import LivePublisher
    from async_plotter.channel.redis.sealed import RunTarget
    from async_plotter.render.recording import read_recording

    trainers = spec["trainers"]
    scenes = {env_id: live_scene(env_id) for env_id in sorted({t["env"] for t in trainers})}
    recordings = {path: read_recording(path) for trainer in trainers for path in trainer["paths"]}
    log = open(spec["log"], "w")
    lock = threading.Lock()
    streams, threads = [], []
    for trainer in trainers:
        name = trainer["experiment"]
        target = RunTarget(spec["url"], name, SECRET.encode(), (trainer["run_id"], time.time_ns()),
                           3600.0)
        stream = TimedStream(LivePublisher(target), name, log if name in spec["watched"] else None,
                             lock)
        model, scene = scenes[trainer["env"]]
        thread = threading.Thread(target=play_live,
                                  args=(stream, model, scene,
                                        [recordings[p]
                                         for p in trainer["paths"]], trainer["offset"], stop),
                                  daemon=True)
        thread.start()
        streams.append(stream)
        threads.append(thread)
    open(spec["ready"], "w").close()
    while not stop.is_set() and not _parent_gone(parent):
        stop.wait(0.5)
    stop.set()
    for thread in threads:
        thread.join(2.0)
    for stream in streams:
        stream.publisher.close(1.0)
    with lock:
        log.close()
    return {
        "calls": sum(s.fed for s in streams),
        "published": sum(s.publisher.published for s in streams),
        "dropped": sum(s.publisher.dropped for s in streams),
    }


def live_subscriber(spec_path: str) -> None:
    """A watched trainer's delay probe: subscribed to its live channel, each message verified
    with ``open_live`` and each chunk's arrival logged as ``experiment update
    first-state-time rows time.time()`` (taken once it is verified)."""
    with open(spec_path) as handle:
        spec = json.load(handle)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    parent = os.getppid()
    import redis

    from async_plotter.channel.redis.live import live_channel, open_live
    from async_plotter.channel.redis.signing import PayloadRejected, Verifier
    from async_plotter.render.stream import StreamKind

    experiment, verifier = spec["experiment"], Verifier(SECRET.encode())
    client = redis.Redis.from_url(spec["url"])
    pubsub = client.pubsub()
    pubsub.subscribe(live_channel(experiment))
    counts = {"verified": 0, "refused": 0, "chunks": 0}
    with open(spec["log"], "w") as log:
        while not stop.is_set() and not _parent_gone(parent):
            message = pubsub.get_message(timeout=0.5)
            if message is None or message.get("type") != "message":
                continue
            try:
                sealed, kind, body = open_live(message["data"], verifier, experiment)
            except PayloadRejected:
                counts["refused"] += 1
                continue
            moment = time.time()
            counts["verified"] += 1
            if kind is StreamKind.STATES:
                counts["chunks"] += 1
                log.write(f"{experiment} {sealed.number} {float(body.states[0, 0])!r} "
                          f"{len(body.states)} {moment:.6f}\n")
                log.flush()
    pubsub.close()
    client.close()
    with open(spec["log"] + ".json", "w") as handle:
        json.dump(counts, handle)


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
    stats = client.info("stats")
    return {
        "wall": time.monotonic(),
        "net_in": stats["total_net_input_bytes"],
        "net_out": stats["total_net_output_bytes"],
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
        fleet.append(_start_role(children, work, "--fleet-worker", f"{mode}-{rank}", spec))
    watcher = reading = None
    if mode == "parameters":  # a reader of every experiment's parameters: they go whole
        from async_plotter.channel.redis.wire import ExperimentKeys

        reading = client.pubsub()
        reading.subscribe(*[ExperimentKeys(t["experiment"]).readers for t in trainers])
    # Phases spread over the interval, so the fetchers' 1 s poll is met at every phase.
    watched = sorted({trainers[i * count // WATCHED]["experiment"] for i in range(WATCHED)})
    viewer_log = os.path.join(work, "viewer.log")
    if mode == "states":
        watcher = _start_role(
            children, work, "--viewer", "viewer", {
                "url": url,
                "experiments": watched,
                "folder": os.path.join(work, "fetched"),
                "log": viewer_log
            })
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
    if mode != "unread":
        serve_timeout = 60.0 if mode == "parameters" else 15.0
        print(f"{mode}: measured; starting serve against the publishing fleet", flush=True)
        result["serve"] = measure_serve(children, url, [t["experiment"] for t in trainers],
                                        args.list_requests, work, serve_timeout)
    children.stop(fleet + ([watcher] if watcher is not None else []))
    if reading is not None:
        reading.close()
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


def process_tree(root: int) -> List[int]:
    """``root`` and every process below it, as /proc lists them now."""
    below: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            below.setdefault(parent, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(below.get(pid, []))
    return tree


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root``'s tree: each process's own, and those of its children it has
    reaped (so an encoder that ended still counts, through its parent)."""
    total = 0.0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")
    return total


def tree_facts(root: int) -> Dict[str, Any]:
    """The processes of ``root``'s tree by name, and those that map a TensorFlow library."""
    names: Dict[str, int] = {}
    mapping_tensorflow = []
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/comm") as handle:
                name = handle.read().strip()
            with open(f"/proc/{pid}/maps") as handle:
                if "tensorflow" in handle.read():
                    mapping_tensorflow.append(name)
        except OSError:
            continue
        names[name] = names.get(name, 0) + 1
    return {"processes": names, "mapping_tensorflow": mapping_tensorflow}


def command_calls(client: Any) -> Dict[str, int]:
    """How many PUBLISH and PUBSUB NUMSUB the server has run (``INFO commandstats``)."""
    stats = client.info("commandstats")
    return {
        name: int(stats.get(key, {}).get("calls", 0))
        for name, key in (("publish", "cmdstat_publish"), ("numsub", "cmdstat_pubsub|numsub"))
    }


def subscribers(client: Any, experiments: List[str]) -> List[int]:
    from async_plotter.channel.redis.live import live_channel

    return [int(n) for _, n in client.pubsub_numsub(*[live_channel(e) for e in experiments])]


def _start_role(children: Any, work: str, flag: str, name: str, spec: Dict[str, Any]) -> Any:
    """This script again, in the role ``flag`` names, given ``spec`` through
    ``<work>/<name>.json``; its output goes to ``<work>/<name>.out``."""
    spec_path = os.path.join(work, f"{name}.json")
    with open(spec_path, "w") as handle:
        json.dump(spec, handle)
    return children.start(
        [sys.executable, os.path.abspath(__file__), flag, spec_path],
        os.path.join(work, f"{name}.out"))


def wait_until(condition: Any, timeout: float, what: str, processes: List[Any]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        dead = [p.pid for p in processes if p.poll() is not None]
        if dead:
            raise RuntimeError(f"live: processes {dead} exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"live: no {what} after {timeout:.0f} s")
        time.sleep(0.2)


def read_chunks(path: str) -> Dict[tuple, tuple]:
    """A chunk log: (experiment, update, first state's time) -> (rows, time.time())."""
    chunks = {}
    if os.path.exists(path):
        with open(path) as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 5:
                    chunks[(parts[0], int(parts[1]), parts[2])] = (int(parts[3]), float(parts[4]))
    return chunks


def window_figures(before: Dict[str, Any], after: Dict[str, Any], calls_before: Dict[str, int],
                   calls_after: Dict[str, int], count: int) -> Dict[str, Any]:
    wall = after["wall"] - before["wall"]
    return {
        "window_s":
        round(wall, 2),
        "bytes_per_s_into_redis": (after["net_in"] - before["net_in"]) / wall,
        "bytes_per_s_out_of_redis": (after["net_out"] - before["net_out"]) / wall,
        "redis_cpu_of_a_core": ((after["redis_cpu"] - before["redis_cpu"]) /
                                wall if before["redis_cpu"] is not None else None),
        "publisher_cpu_of_a_core_per_trainer":
        (after["cpu"]["fleet"] - before["cpu"]["fleet"]) / wall / count,
        "publish_calls":
        calls_after["publish"] - calls_before["publish"],
        "numsub_calls":
        calls_after["numsub"] - calls_before["numsub"],
    }


def run_live(args: argparse.Namespace, url: str, client: Any, redis_pid: Optional[int],
             recordings: Dict[str, List[str]], work: str, children: Children) -> Dict[str, Any]:
    """The live path: every trainer's ``LivePublisher`` fed in real time; measured first with
    nobody watching, then with ``WATCHED`` trainers watched by an ``async-plotter view --states``
    and a delay probe each."""
    from async_plotter.render.recording import read_recording

    count = args.trainers
    delete_fleet_keys(client)
    trainers = [{
        "experiment": f"fleet-live-{index:03d}",
        "env": ENVS[index % len(ENVS)],
        "offset": INTERVAL * index / count,
        "run_id": 3000 + index,
        "paths": recordings[ENVS[index % len(ENVS)]],
    } for index in range(count)]
    # Half of each env (even indices are HalfCheetah's), as the states mode's watched ones.
    watched = sorted({trainers[i * count // WATCHED]["experiment"] for i in range(WATCHED)})
    env_of = {t["experiment"]: t["env"] for t in trainers}
    fps = {
        env_id: float(read_recording(paths[0]).meta["fps"])
        for env_id, paths in recordings.items()
    }
    processes = min(args.processes, count)
    fleet = []
    for rank in range(processes):
        spec = {
            "url": url,
            "mode": "live",
            "trainers": trainers[rank::processes],
            "watched": watched,
            "log": os.path.join(work, f"live-{rank}.log"),
            "ready": os.path.join(work, f"live-{rank}.ready"),
        }
        fleet.append(_start_role(children, work, "--fleet-worker", f"live-{rank}", spec))
    print(
        f"live: {count} trainers in {processes} processes, each a LivePublisher fed in real "
        "time; waiting for them to play",
        flush=True)
    wait_until(
        lambda: all(
            os.path.exists(os.path.join(work, f"live-{r}.ready")) for r in range(processes)), 120.0,
        "fleet ready", fleet)
    # Every feeder past its phase, every publisher has counted its subscribers (none) once.
    time.sleep(INTERVAL + 2 * 1.0)
    pids = {"fleet": [p.pid for p in fleet]}
    result: Dict[str, Any] = {
        "trainers": count,
        "processes": processes,
        "watched_experiments": watched
    }

    print(f"live: nobody watching, {args.live_seconds:.0f} s measured", flush=True)
    calls_before, before = command_calls(client), snapshot(client, redis_pid, pids)
    time.sleep(args.live_seconds)
    calls_after, after = command_calls(client), snapshot(client, redis_pid, pids)
    result["nobody_watching"] = window_figures(before, after, calls_before, calls_after, count)

    print(f"live: starting {len(watched)} async-plotter view --states and a delay probe each",
          flush=True)
    script = os.path.join(os.path.dirname(sys.executable), "async-plotter")
    cli = [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "async_plotter.cli"]
    video_dirs = {name: os.path.join(work, "live-videos", name) for name in watched}
    views = {
        name:
        children.start(cli + ["view", url, "-e", name, "--states", "--video-dir", video_dirs[name]],
                       os.path.join(work, f"view-{name}.out"))
        for name in watched
    }
    joined = time.monotonic()
    # The views first: their subscription starts the episode they draw from its beginning.
    wait_until(lambda: min(subscribers(client, watched)) >= 1, 120.0, "view subscribed",
               list(views.values()))
    probes = []
    for name in watched:
        probes.append(
            _start_role(children, work, "--live-probe", f"probe-{name}", {
                "url": url,
                "experiment": name,
                "log": os.path.join(work, f"probe-{name}.log")
            }))
    wait_until(
        lambda: all(
            os.path.exists(os.path.join(work, f"probe-{n}.log")) and os.path.getsize(
                os.path.join(work, f"probe-{n}.log")) > 0
            for n in watched), 60.0, "chunk at every probe", probes + list(views.values()))
    result["seconds_to_watch"] = round(time.monotonic() - joined, 2)
    time.sleep(2.0)  # the render processes' first frames (EGL's first is slow)

    print(f"live: {len(watched)} watched, {args.live_seconds:.0f} s measured", flush=True)
    view_cpu = {name: tree_cpu_seconds(view.pid) for name, view in views.items()}
    calls_before, before = command_calls(client), snapshot(client, redis_pid, pids)
    window_start = time.time()
    time.sleep(args.live_seconds)
    window_end = time.time()
    calls_after, after = command_calls(client), snapshot(client, redis_pid, pids)
    view_cpu = {name: tree_cpu_seconds(view.pid) - view_cpu[name] for name, view in views.items()}
    facts = {name: tree_facts(view.pid) for name, view in views.items()}
    result["watched_window"] = window_figures(before, after, calls_before, calls_after, count)
    children.stop(list(views.values()), signal.SIGINT)
    children.stop(probes)

    # After the last viewer left: what is still published (the episode under way).
    wait_until(lambda: max(subscribers(client, watched)) == 0, 30.0, "viewers gone", fleet)
    tail_before = command_calls(client)
    time.sleep(LIVE_TAIL)
    result["publish_calls_after_viewers_left"] = {
        "seconds": LIVE_TAIL,
        "calls": command_calls(client)["publish"] - tail_before["publish"],
    }
    children.stop(fleet)

    sent: Dict[tuple, tuple] = {}
    for rank in range(processes):
        sent.update(read_chunks(os.path.join(work, f"live-{rank}.log")))
    totals: Dict[str, int] = {}
    for rank in range(processes):
        path = os.path.join(work, f"live-{rank}.log.json")
        if os.path.exists(path):
            with open(path) as handle:
                for key, value in json.load(handle).items():
                    totals[key] = totals.get(key, 0) + value
    result["publisher_totals"] = totals
    delays, per_view = [], {}
    for name in watched:
        arrived = read_chunks(os.path.join(work, f"probe-{name}.log"))
        due = [
            key for key, (_, moment) in sent.items()
            if key[0] == name and window_start <= moment <= window_end
        ]
        delays.extend(arrived[key][1] - sent[key][1] for key in due if key in arrived)
        motion = sum(rows for rows, moment in arrived.values()
                     if window_start <= moment <= window_end) / fps[env_of[name]]
        report: Dict[str, Any] = {}
        if os.path.exists(os.path.join(work, f"probe-{name}.log.json")):
            with open(os.path.join(work, f"probe-{name}.log.json")) as handle:
                report = json.load(handle)
        videos = (os.listdir(video_dirs[name]) if os.path.isdir(video_dirs[name]) else [])
        per_view[name] = {
            "env": env_of[name],
            "chunks_sent_in_window": len(due),
            "chunks_verified_of_those": sum(1 for key in due if key in arrived),
            "motion_seconds_in_window": round(motion, 2),
            "view_tree_cpu_seconds": round(view_cpu[name], 3),
            "view_tree_cpu_per_motion_second": view_cpu[name] / motion if motion else None,
            "view_exit_code": views[name].returncode,
            "mp4s_written": sum(1 for v in videos if v.endswith(".mp4")),
            "probe": report,
            **facts[name],
        }
    motion_total = sum(v["motion_seconds_in_window"] for v in per_view.values())
    result["watched"] = {
        "views":
        per_view,
        "chunks_sent_in_window":
        sum(v["chunks_sent_in_window"] for v in per_view.values()),
        "chunks_verified_of_those":
        len(delays),
        "send_to_verified_s_p50":
        percentile(delays, 50),
        "send_to_verified_s_p95":
        percentile(delays, 95),
        "send_to_verified_s_max":
        round(max(delays), 4) if delays else None,
        "view_tree_cpu_per_motion_second":
        (sum(view_cpu.values()) / motion_total if motion_total else None),
        "views_mapping_tensorflow":
        sorted(n for n, v in per_view.items() if v["mapping_tensorflow"]),
    }
    delete_fleet_keys(client)
    return result


def recording_sizes(recordings: Dict[str, List[str]]) -> Dict[str, Any]:
    """What one recording of each env weighs on disk and as sent (without its model), and its
    model once, compressed as the publisher sends it."""
    import zlib

    from async_plotter.render.recording import compact_bytes, read_recording

    sizes = {}
    for env_id, paths in recordings.items():
        recording = read_recording(paths[0])
        model = len(zlib.compress(recording.model_mjb, 6))
        steps = len(recording.states)
        recording.model_mjb = b""
        sizes[env_id] = {
            "file_bytes": os.path.getsize(paths[0]),
            "sent_bytes_without_model": len(compact_bytes(recording)),
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
        ("bytes/s into Redis", _fmt_bytes(
            states["bytes_per_s_into_redis"]), _fmt_bytes(params["bytes_per_s_into_redis"]),
         _fmt_bytes(extrapolated["bytes_per_s_into_redis"]), f"{ratio_bytes:.0f}x",
         f">= {GOAL_BYTES_RATIO:.0f}x: {'met' if ratio_bytes >= GOAL_BYTES_RATIO else 'MISSED'}"),
        ("redis-server CPU (one core)", _fmt_pct(states["redis_cpu_of_a_core"]),
         _fmt_pct(params["redis_cpu_of_a_core"]), _fmt_pct(extrapolated["redis_cpu_of_a_core"]),
         "n/a" if ratio_cpu is None else f"{ratio_cpu:.0f}x", f"< 10% at {n}: " +
         ("met" if states["redis_cpu_of_a_core"] is not None
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
        ("viewer CPU (4 fetchers)", _fmt_pct(
            states.get("viewer_cpu_of_a_core")), "n/a", "", "", ""),
        ("viewer imports TensorFlow", "yes" if viewer.get("heavy_modules") else "no", "n/a", "", "",
         "no: " + ("MISSED" if viewer.get("heavy_modules") else "met")),
    ] + unread_rows(results, extrapolated["bytes_per_s_into_redis"]) + live_rows(
        results, extrapolated["bytes_per_s_into_redis"])
    if k == n:  # nothing extrapolated: no column for it
        rows = [row[:3] + row[4:] for row in rows]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for number, row in enumerate(rows):
        lines.append("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))
        if number == 0:
            lines.append("-" * len(lines[0]))
    return lines


def unread_rows(results: Dict[str, Any], param_bytes: float) -> List[tuple]:
    """The unread mode's rows: parameters nobody reads, sent as their headers alone."""
    unread = results["modes"]["unread"]
    scale = results["modes"]["states"]["trainers"] / unread["trainers"]
    value = unread["bytes_per_s_into_redis"] * scale
    totals = unread.get("publisher_totals", {})
    results["ratios_parameters_over_unread"] = {"bytes_per_s": param_bytes / value}
    return [
        ("parameters nobody reads: bytes/s into Redis", _fmt_bytes(value), "", "",
         f"{param_bytes / value:.0f}x", ""),
        ("parameters nobody reads: withheld / sent", f"{totals.get('withheld')} / "
         f"{totals.get('sent')}", "", "", "", ""),
        ("parameters nobody reads: redis-server CPU",
         _fmt_pct(None if unread["redis_cpu_of_a_core"] is None else unread["redis_cpu_of_a_core"] *
                  scale), "", "", "", ""),
    ]


def live_rows(results: Dict[str, Any], param_bytes: float) -> List[tuple]:
    """The live mode's rows (figures in the states column, the ratio to the parameter path at
    as many trainers in the ratio column)."""
    live, states = results["modes"]["live"], results["modes"]["states"]
    n = live["trainers"]
    nobody, seen, watched = live["nobody_watching"], live["watched_window"], live["watched"]
    alone = nobody["bytes_per_s_into_redis"]
    unread = results["modes"]["unread"]
    headers = unread["bytes_per_s_into_redis"] * states["trainers"] / unread["trainers"]
    both = alone + states["bytes_per_s_into_redis"] + headers
    results["ratios_parameters_over_live"] = {
        "nobody_watching_bytes_per_s": param_bytes / alone if alone else None,
        "trainer_nobody_watches_bytes_per_s": param_bytes / both,
    }

    def ratio(value: float) -> str:
        return f"{param_bytes / value:.0f}x" if value else "n/a"

    def goal_bytes(value: float) -> str:
        met = value and param_bytes / value >= GOAL_BYTES_RATIO
        return f">= {GOAL_BYTES_RATIO:.0f}x: {'met' if met else 'MISSED'}"

    def goal_cpu(value: Optional[float]) -> str:
        return f"< 10% at {n}: " + ("met"
                                    if value is not None and value < GOAL_REDIS_CPU else "MISSED")

    p95 = watched["send_to_verified_s_p95"]
    per_second = watched["view_tree_cpu_per_motion_second"]
    tensorflow = watched["views_mapping_tensorflow"]
    after = live["publish_calls_after_viewers_left"]
    return [
        ("live, nobody watching: bytes/s into Redis", _fmt_bytes(alone), "", "", ratio(alone),
         goal_bytes(alone)),
        ("a trainer nobody watches: history + live + unread parameters (sum)", _fmt_bytes(both), "",
         "", ratio(both), goal_bytes(both)),
        ("live, nobody watching: redis-server CPU", _fmt_pct(nobody["redis_cpu_of_a_core"]), "", "",
         "", goal_cpu(nobody["redis_cpu_of_a_core"])),
        ("live, nobody watching: PUBLISH (NUMSUB)",
         f"{nobody['publish_calls']} ({nobody['numsub_calls']} PUBSUB NUMSUB)", "", "", "",
         "0: " + ("met" if nobody["publish_calls"] == 0 else "MISSED")),
        ("live, nobody watching: publisher CPU/trainer",
         _fmt_pct(nobody["publisher_cpu_of_a_core_per_trainer"]), "", "", "", ""),
        (f"live, {len(live['watched_experiments'])} watched: bytes/s in (out)",
         f"{_fmt_bytes(seen['bytes_per_s_into_redis'])} "
         f"({_fmt_bytes(seen['bytes_per_s_out_of_redis'])})", "", "", "", ""),
        (f"live, {len(live['watched_experiments'])} watched: redis-server CPU",
         _fmt_pct(seen["redis_cpu_of_a_core"]), "", "", "", goal_cpu(seen["redis_cpu_of_a_core"])),
        ("live send -> verified arrival p50/p95",
         (f"{watched['send_to_verified_s_p50']:.3f} / {p95:.3f} s "
          f"({watched['chunks_verified_of_those']} of {watched['chunks_sent_in_window']} chunks)"
          if p95 is not None else "none"), "", "", "", f"<= {GOAL_LIVE_DELAY:g} s: " +
         ("met" if p95 is not None and p95 <= GOAL_LIVE_DELAY else "MISSED")),
        ("live view CPU per watched second",
         "n/a" if per_second is None else f"{100 * per_second:.1f}% of a core (process tree)", "",
         "", "", ""),
        ("live view maps TensorFlow", "yes" if tensorflow else "no", "", "", "",
         "no: " + ("MISSED" if tensorflow else "met")),
        (f"live PUBLISH {after['seconds']:g} s after viewers left", str(after["calls"]), "", "", "",
         ""),
    ]


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
                        "path), 2 processes, a 10 s window (8 s each live one)")
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
    parser.add_argument("--live-seconds",
                        type=float,
                        default=20.0,
                        help="measured window of the live mode, nobody watching and watched each")
    parser.add_argument("--viewer", help=argparse.SUPPRESS)
    parser.add_argument("--live-probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fleet_worker:
        fleet_worker(args.fleet_worker)
        return
    if args.viewer:
        viewer(args.viewer)
        return
    if args.live_probe:
        live_subscriber(args.live_probe)
        return
    if args.quick:
        args.trainers, args.param_trainers, args.processes = 10, 4, 2
        args.seconds, args.warmup, args.list_requests = 10.0, 5.0, 20
        args.live_seconds = 8.0
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
        for mode in ("states", "parameters", "unread"):
            modes[mode] = run_mode(mode, args, url, client, redis_pid, recordings, work, children)
        modes["live"] = run_live(args, url, client, redis_pid, recordings, work, children)
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
            "live_seconds": args.live_seconds,
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
            "serve list time with the states fleet (serve lists only the parameter path's keys)",
            "history and live publishing at once (each mode runs alone; their sum is computed)",
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
