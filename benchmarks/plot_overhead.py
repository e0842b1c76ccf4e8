"""Headline benchmark: over whole training runs, what did the user get to see, and what did it cost?

Whole runs as users run them: ``run_experiment_lite`` with TRPO, ``n_parallel=2``, batch 5000
(``--batch-size``), 500-step training paths, 60 iterations, each run a fresh Python process, the modes interleaved
over rounds and rotated by one each round (A B C, B C A, C A B, ...: ``--order rotate``, the
default; ``fixed`` runs A B C every round), so that over as many rounds as modes each mode runs
once in each place and neither machine drift nor the order within a round favours one mode (in
fixed order the mode run second had the higher steady ratio in 6 of 8 pairs, and the lower in 6
of 8 with the order swapped: ``docs/benchmarks.md``). Modes:

* ``off``: no plotting.
* ``off-again``: no plotting, a second time in the round: the A/A control. Its ratios against
  ``off`` are what the machine's noise alone makes of two identical runs (not run by default).
* ``defaults``: ``plot=True`` and nothing else (the library's CPU budget, 0.03, 8-s videos
  while training, a whole rollout of the final policy).
* ``budget-0.05`` / ``budget-0.10``: larger budgets; ``budget-0.02`` / ``budget-0.01``: the floor.
* ``long-videos``: the defaults with whole 500-step videos while training (``video_length=None``,
  what this library did before), for comparison (not run by default).
* ``idle``: ``priority="idle"`` (SCHED_IDLE after start-up), for comparison (not run by default).
* ``sync-every-K``: what SB3/CleanRL users do today: every K iterations the trainer stops and
  waits for a video of the current policy (rendered by the same worker at normal priority, as
  TensorFlow and software GL cannot share a process), K chosen per env so that it makes as many
  videos as ``defaults`` did in the same round.
* ``no-history``: the defaults without the run's history (``history=False``), to see what
  recording every policy once more costs (not run by default).
* ``uncapped``: the defaults with ``fps=1000``: videos drawn as fast as the budget and the idle
  CPU allow rather than at most at the frame cap's rate of wall time (not run by default).
* ``before``: ``defaults`` of another checkout of this library (``--before-tree``, e.g. a
  ``git worktree`` of an earlier commit), to compare what a change bought in the same round.
* ``off-before``: plotting off in that checkout: what a change to the RL host itself (its
  samplers) did to training.

Envs: ``Swimmer-v5`` and ``HalfCheetah-v5`` train with the RL host (above); ``Hopper-v5-keras``
is the direct route: a Keras policy (11-64-64-3) trained by ``model.fit`` (a regression on fixed
data, ~1.5 s an iteration on 2 cores) and handed to ``Plotter.update_plot`` each iteration.

Per mode: training time (start to the last iteration's end) and end-to-end time (including the
final video at close) as ratios to ``off`` of the same round (mean and median of the rounds);
videos and seconds of motion shown per 10 iterations (the env's simulated seconds the videos
show: a video in slow motion shows fewer than it lasts); for every
iteration, how many iterations old the newest finished video then was (p50/p95); time from start
to the first video; whether a video of the final policy exists; the worker's share of the
machine's CPU; the training time each video cost (extra seconds over ``off`` per video); and the
one-off start-up cost (extra seconds over ``off`` in the first 5 iterations); the steady-state
ratio (iterations past the first two against ``off``'s) and the seconds start-up and ``close()``
add outside them; the share of iterations the history recorded; the CPU a second of motion costs
recorded (the history's thread, simulated and written) against videoed (the rest of the worker's
CPU past its boot, drawn and encoded); the bytes the video folder holds per iteration (videos,
their recordings, the history); and the longest ``update_plot`` call.

    python benchmarks/plot_overhead.py                 # Swimmer-v5 and HalfCheetah-v5, 2 rounds
    python benchmarks/plot_overhead.py --quick         # smoke run: tiny batches, one round
    python benchmarks/plot_overhead.py --n-parallel 1 --envs Swimmer-v5 --modes off,defaults,sync \
        --n-itr 40 \
        --out benchmarks/results/plot_overhead_one_sampler.json   # a core left to plotting
    python benchmarks/plot_overhead.py --batch-size 12000 --n-itr 40 \
        --out benchmarks/results/plot_overhead_long_itr.json      # ~1-s iterations
    git worktree add /tmp/before <commit>
    python benchmarks/plot_overhead.py --envs Swimmer-v5,HalfCheetah-v5,Hopper-v5-keras \
        --modes off,defaults,before --before-tree /tmp/before --rounds 3 --n-itr 40 \
        --out benchmarks/results/plot_overhead_issue21.json

Writes benchmarks/results/plot_overhead.json and plot_overhead.png.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
# A child of mode "before" imports the library from the other checkout.
sys.path.insert(0, os.environ.get("PLOT_OVERHEAD_LIBRARY") or ROOT)

#: mode -> plotter keyword arguments (None: no plotting). "sync" is handled by the child.
MODES = {
    "off": None,
    # Plotting off once more in the same round: the A/A control, whose ratios against `off`
    # are what this machine's noise alone makes of two identical runs.
    "off-again": None,
    "defaults": {},
    "budget-0.01": {
        "budget": 0.01
    },
    "budget-0.02": {
        "budget": 0.02
    },
    "long-videos": {
        "video_length": None
    },
    "budget-0.05": {
        "budget": 0.05
    },
    "budget-0.10": {
        "budget": 0.10
    },
    "idle": {
        "priority": "idle"
    },
    # As fast as the worker can record (no frame-rate cap): what a synchronous recorder does.
    "sync": {
        "priority": "normal",
        "final_video_timeout": 0,
        "fps": 1000
    },
    "before": {},
    "off-before": None,
    # The defaults without the run's history (every policy recorded once more, undrawn).
    "no-history": {
        "history": False
    },
    # The defaults with no frame-rate cap to speak of: videos drawn as fast as the budget and
    # the idle CPU allow, instead of at most at the cap's rate of wall time.
    "uncapped": {
        "fps": 1000
    },
}
DEFAULT_MODES = ["off", "defaults", "budget-0.02", "budget-0.10", "sync"]
ENVS = ("Swimmer-v5", "HalfCheetah-v5", "Hopper-v5-keras")
DEFAULT_ENVS = ("Swimmer-v5", "HalfCheetah-v5")
KERAS_SUFFIX = "-keras"
STARTUP_ITERATIONS = 5

# ----------------------------------------------------------------------------- one run (child)


def _child(mode: str, env_id: str, n_itr: int, batch_size: int, max_path_length: int, seed: int,
           sync_every: int, n_parallel: int) -> dict:
    if env_id.endswith(KERAS_SUFFIX):
        return _keras_child(mode, env_id[:-len(KERAS_SUFFIX)], n_itr, max_path_length, seed)
    import logging

    from async_plotter.rl import TRPO, GaussianMLPPolicy, LinearFeatureBaseline
    from async_plotter.rl.batch_polopt import BatchPolopt
    from async_plotter.rl.experiment import run_experiment_lite

    logging.basicConfig(level=logging.WARNING)
    iteration_ends = []
    original_iteration = BatchPolopt._iteration

    def timed_iteration(self, itr, *args, **kwargs):
        original_iteration(self, itr, *args, **kwargs)
        iteration_ends.append(time.time())
        iteration_idle.append(machine_idle_seconds())

    BatchPolopt._iteration = timed_iteration
    update_plot_times = _time_update_plot()
    sync_waits = []
    if mode == "sync":
        _make_update_plot_synchronous(BatchPolopt, sync_every, n_itr, sync_waits)

    algo = TRPO(env_id,
                GaussianMLPPolicy(env_id, hidden_sizes=(32, 32), seed=seed),
                LinearFeatureBaseline(),
                batch_size=batch_size,
                max_path_length=max_path_length,
                n_itr=n_itr,
                discount=0.99,
                gae_lambda=0.97,
                step_size=0.01)
    plot_kwargs = MODES[mode]
    log_dir = tempfile.mkdtemp(prefix="plot_overhead_")
    from async_plotter.supervision.budget import machine_idle_seconds

    idle_at_start = machine_idle_seconds()
    iteration_idle = []
    started = time.time()
    result = run_experiment_lite(
        algo,
        n_parallel=n_parallel,
        plot=plot_kwargs is not None,
        seed=seed,
        log_dir=log_dir,
        snapshot_mode="last",
        **(dict(plot_kwargs, window=False) if plot_kwargs is not None else {}))
    finished = time.time()
    return _run_record(mode,
                       env_id,
                       env_id,
                       result.algo.plotter,
                       started,
                       finished,
                       iteration_ends, [idle - idle_at_start for idle in iteration_idle],
                       update_plot_times,
                       sync_waits=sync_waits,
                       sync_every=sync_every if mode == "sync" else None,
                       final_return=result.history[-1]["AverageReturn"])


def _time_update_plot() -> list:
    """Time every ``Plotter.update_plot`` call of this process (seconds, appended to the list
    returned): the worst is what a trainer waits at most for plotting at an iteration's end."""
    from async_plotter import Plotter

    times = []
    original = Plotter.update_plot

    def timed(self, *args, **kwargs):
        called = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            times.append(time.perf_counter() - called)

    Plotter.update_plot = timed
    return times


def _folder_bytes(folder) -> int:
    """Bytes of every file under ``folder`` (videos, their recordings, the history)."""
    total = 0
    if folder is None:
        return total
    for parent, _, names in os.walk(folder):
        total += sum(os.path.getsize(os.path.join(parent, name)) for name in names)
    return total


def _history_cost(stats: dict) -> dict:
    """CPU the history recordings took (their thread's), and the env seconds they hold."""
    entries = stats.get("history", [])
    rate = stats.get("env_rate") or 0.0
    cpu = [e["cpu_seconds"] for e in entries if e.get("cpu_seconds") is not None]
    if not cpu or not rate:
        return {"history_cpu_seconds": None, "history_motion_seconds": None}
    steps = sum(e.get("length") or 0 for e in entries)
    return {"history_cpu_seconds": float(sum(cpu)), "history_motion_seconds": steps / rate}


def _run_record(mode: str, label: str, env_id: str, plotter, started: float, finished: float,
                iteration_ends: list, iteration_idle: list, update_plot_times: list,
                **extra) -> dict:
    """What a child reports of one run (``plotter``: its closed Plotter, None without plotting);
    ``iteration_idle``: the machine's idle CPU-seconds from the start to each iteration's end."""
    stats = dict(plotter.stats) if plotter is not None else {}
    record = {
        "mode": mode,
        "env": label,
        "started": started,
        "iteration_ends": iteration_ends,
        "iteration_idle": iteration_idle,
        "finished": finished,
        "videos": stats.get("video_log", []),
        "final_video": stats.get("final_video"),
        "worker_cpu_seconds": stats.get("worker_cpu_seconds"),
        "boot_cpu_seconds": stats.get("boot_cpu_seconds"),
        "boot_seconds": stats.get("boot_seconds"),
        "frames": stats.get("frames", 0),
        "cores": os.cpu_count(),
        "motion_seconds": _motion_seconds(stats, env_id),
        "policy_call": stats.get("policy_call"),
        "sync_waits": [],
        "sync_every": None,
        "final_return": None,
        "history": stats.get("history", []),
        "update_plot_times": update_plot_times,
        "disk_bytes": _folder_bytes(plotter.video_dir if plotter is not None else None),
        **_history_cost(stats),
    }
    record.update(extra)
    return record


def _keras_child(mode: str, env_id: str, n_itr: int, max_path_length: int, seed: int) -> dict:
    """A Keras policy trained by ``model.fit`` and plotted through ``Plotter.update_plot``."""
    import logging

    import gymnasium
    import keras

    from async_plotter import Plotter
    from async_plotter.supervision.budget import machine_idle_seconds

    logging.basicConfig(level=logging.WARNING)
    keras.utils.set_random_seed(seed)
    env = gymnasium.make(env_id)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    model = keras.Sequential([
        keras.Input((obs_dim, )),
        keras.layers.Dense(64, activation="tanh"),
        keras.layers.Dense(64, activation="tanh"),
        keras.layers.Dense(act_dim, activation="tanh")
    ])
    model.compile(optimizer="adam", loss="mse")
    rng = np.random.default_rng(seed)
    inputs = rng.normal(size=(16384, obs_dim)).astype(np.float32)
    targets = np.tanh(inputs[:, :act_dim] * 0.5).astype(np.float32)
    plot_kwargs = MODES[mode]
    idle_at_start = machine_idle_seconds()
    iteration_ends, iteration_idle = [], []
    update_plot_times = _time_update_plot()
    started = time.time()
    plotter = None
    if plot_kwargs is not None:
        plotter = Plotter(env_id,
                          model,
                          max_path_length=max_path_length,
                          video_dir=tempfile.mkdtemp(prefix="plot_overhead_"),
                          window=False,
                          **plot_kwargs).start()
    for itr in range(n_itr):
        model.fit(inputs, targets, batch_size=64, epochs=1, verbose=0)
        if plotter is not None:
            plotter.update_plot(model, iteration=itr)
        iteration_ends.append(time.time())
        iteration_idle.append(machine_idle_seconds())
    if plotter is not None:
        plotter.close()
    finished = time.time()
    return _run_record(mode, env_id + KERAS_SUFFIX, env_id, plotter, started, finished,
                       iteration_ends, [idle - idle_at_start for idle in iteration_idle],
                       update_plot_times)


def _motion_seconds(stats: dict, env_id: str) -> float:
    """Simulated seconds the videos show: each frame is ``frame_stride`` env steps (1 where the
    library draws every step), each step ``1 / render_fps`` seconds of the env's time."""
    import gymnasium

    env = gymnasium.make(env_id)
    rate = float(env.metadata.get("render_fps") or 1.0 / env.unwrapped.dt)
    env.close()
    stride = stats.get("frame_stride") or 1
    frames = sum(video.get("frames", 0) for video in stats.get("video_log", []))
    return frames * stride / rate


def _make_update_plot_synchronous(batch_polopt, every: int, n_itr: int, waits: list) -> None:
    """The baseline: hand the plotter only every ``every``-th iteration (and the last), then wait
    until its video exists, the way a synchronous video recorder holds up training."""
    original_start = batch_polopt._start_plotter

    def start_plotter(self, *args):
        plotter = original_start(self, *args)
        update = plotter.update_plot

        def update_and_wait(policy, iteration=None, **rest):
            if iteration is None or ((iteration + 1) % every and iteration != n_itr - 1):
                return
            waited = time.perf_counter()
            update(policy, iteration=iteration, **rest)
            number = plotter.stats["updates_sent"]
            while not any(v.get("update") == number for v in plotter.stats["video_log"]):
                if plotter.stats["disabled"] or time.perf_counter() - waited > 300:
                    break
                time.sleep(0.01)
            waits.append(time.perf_counter() - waited)

        plotter.update_plot = update_and_wait
        return plotter

    batch_polopt._start_plotter = start_plotter


# ------------------------------------------------------------------------------ driver (parent)


def run_child(mode, env_id, args, sync_every=0):
    max_path_length, batch_size = (100, 1000) if args.quick else (500, args.batch_size)
    environment = dict(os.environ)
    if mode in ("before", "off-before"):
        environment["PLOT_OVERHEAD_LIBRARY"] = os.path.abspath(args.before_tree)
    command = [
        sys.executable, __file__, "--child", mode, env_id,
        str(args.n_itr),
        str(batch_size),
        str(max_path_length),
        str(args.seed),
        str(sync_every),
        str(args.n_parallel)
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=3600, env=environment)
    for line in result.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{mode} on {env_id} failed:\n{result.stderr[-4000:]}")


def measure(run: dict, off: dict) -> dict:
    """The per-run figures, against the ``off`` run of the same round."""
    ends = np.array(run["iteration_ends"]) - run["started"]
    training = float(ends[-1])
    end_to_end = run["finished"] - run["started"]
    off_training = off["iteration_ends"][-1] - off["started"]
    off_end_to_end = off["finished"] - off["started"]
    videos = sorted(run["videos"], key=lambda v: v["time"])
    n_itr = len(ends)
    # For every iteration: the newest finished video's iteration at that moment (the initial
    # policy's video counts as iteration -1); none yet counts as showing nothing (age = itr + 1).
    ages = []
    for itr, end in enumerate(ends):
        shown = [(-1 if v["iteration"] is None else v["iteration"]) for v in videos
                 if v["time"] - run["started"] <= end]
        ages.append(itr - max(shown) if shown else itr + 1)
    extra = training - off_training
    startup_extra = (run["iteration_ends"][STARTUP_ITERATIONS - 1] - run["started"]) - (
        off["iteration_ends"][STARTUP_ITERATIONS - 1] - off["started"])
    cpu = run.get("worker_cpu_seconds")
    if run["mode"] == "sync" and not cpu:
        cpu = None
    final_iteration = n_itr - 1
    # Past the first two iterations (the worker's boot), and what lies outside them.
    steady = ends[-1] - ends[1]
    off_ends = np.array(off["iteration_ends"]) - off["started"]
    off_steady = off_ends[-1] - off_ends[1]
    recorded = {e["iteration"] for e in run.get("history", []) if e.get("iteration") is not None}
    # CPU a second of motion costs: simulated and written (the history's thread) against drawn and
    # encoded (the rest of the worker's CPU past its boot, over the seconds the videos show)
    history_cpu, history_motion = run.get("history_cpu_seconds"), run.get("history_motion_seconds")
    video_motion = run.get("motion_seconds") or 0.0
    per_recorded = per_videoed = None
    if history_cpu and history_motion:
        per_recorded = history_cpu / history_motion
    if cpu and video_motion:
        drawn = cpu - (run.get("boot_cpu_seconds") or 0.0) - (history_cpu or 0.0)
        per_videoed = drawn / video_motion
    times = run.get("update_plot_times") or []
    return {
        "cpu_per_recorded_s": per_recorded,
        "cpu_per_videoed_s": per_videoed,
        "disk_kb_per_itr": run.get("disk_bytes", 0) / 1024 / n_itr if cpu else None,
        "worst_update_plot_ms": 1000 * max(times) if times else None,
        "steady_ratio": steady / off_steady,
        "fixed_extra_s": (end_to_end - steady) - (off_end_to_end - off_steady),
        "history_share": len(recorded) / n_itr,
        "training_ratio": training / off_training,
        "end_to_end_ratio": end_to_end / off_end_to_end,
        "videos": len(videos),
        "videos_per_10_itr": 10.0 * len(videos) / n_itr,
        "motion_seconds_per_10_itr": 10.0 * run.get("motion_seconds", 0.0) / n_itr,
        "staleness_p50": float(np.percentile(ages, 50)),
        "staleness_p95": float(np.percentile(ages, 95)),
        "first_video_s": (videos[0]["time"] - run["started"]) if videos else None,
        "final_video": any(v["iteration"] == final_iteration for v in videos),
        "worker_cpu_share": (cpu / (end_to_end * run["cores"])) if cpu else None,
        "cost_per_video_s": (extra / len(videos)) if videos else None,
        "startup_cost_s": startup_extra,
        "boot_seconds": run.get("boot_seconds"),
        "boot_cpu_seconds": run.get("boot_cpu_seconds"),
        "sync_every": run.get("sync_every"),
        # CPU nobody used during training: all a worker could take without slowing it
        "machine_idle_share": run["iteration_idle"][-1] / (training * run["cores"]),
    }


def round_order(modes: list, round_number: int, rotate: bool) -> list:
    """The modes in the order one round runs them: rotated by one place a round (``rotate``),
    else as given; ``sync`` last either way, since it needs the defaults' video count of its
    round."""
    plain = [m for m in modes if m != "sync"]
    if rotate:
        shift = round_number % len(plain)
        plain = plain[shift:] + plain[:shift]
    return plain + (["sync"] if "sync" in modes else [])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child",
                        nargs=8,
                        metavar=("MODE", "ENV", "N_ITR", "BATCH", "PATH", "SEED", "SYNC_EVERY",
                                 "N_PARALLEL"))
    parser.add_argument("--envs", default=",".join(DEFAULT_ENVS))
    parser.add_argument("--before-tree",
                        help="another checkout of this library, for the mode 'before'")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--n-itr", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch-size",
                        type=int,
                        default=5000,
                        help="env steps per iteration (5000: ~0.45 s iterations on 2 cores; "
                        "12000: ~1 s, the iteration of the figures issue 36 set)")
    parser.add_argument("--n-parallel",
                        type=int,
                        default=2,
                        help="sampler processes (2: both cores busy; 1 leaves a core to plotting)")
    parser.add_argument("--order",
                        choices=("rotate", "fixed"),
                        default="rotate",
                        help="the modes' order in each round: rotated by one a round, or as given")
    parser.add_argument("--quick", action="store_true", help="tiny settings: a smoke run")
    parser.add_argument("--out", default=os.path.join(RESULTS, "plot_overhead.json"))
    args = parser.parse_args()
    if args.child:
        mode, env_id, n_itr, batch, path, seed, sync_every, n_parallel = args.child
        result = _child(mode, env_id, int(n_itr), int(batch), int(path), int(seed), int(sync_every),
                        int(n_parallel))
        print("RESULT " + json.dumps(result), flush=True)
        return
    if args.quick:
        args.rounds, args.n_itr = 1, 8
    envs, modes = args.envs.split(","), args.modes.split(",")
    unknown = [m for m in modes if m not in MODES] + [e for e in envs if e not in ENVS]
    if unknown or "off" not in modes:
        parser.error(f"unknown modes/envs {unknown} (modes: {sorted(MODES)}, envs: {ENVS}); "
                     "'off' is needed as the reference")
    if {"before", "off-before"} & set(modes) and not args.before_tree:
        parser.error("the modes 'before' and 'off-before' need --before-tree PATH (another "
                     "checkout)")
    runs, measured = [], []
    total = args.rounds * len(envs) * len(modes)
    started = time.time()
    for round_number in range(args.rounds):
        for env_id in envs:
            done = {}
            for mode in round_order(modes, round_number, args.order == "rotate"):
                sync_every = 0
                if mode == "sync":
                    reference = done.get("defaults") or done.get("budget-0.10")
                    count = max(len(reference["videos"]), 1) if reference else 6
                    sync_every = max(1, round(args.n_itr / count))
                run = run_child(mode, env_id, args, sync_every)
                done[mode] = run
                runs.append(run)
                print(
                    f"[{len(runs)}/{total}] round {round_number + 1} {env_id:15} {mode:12} "
                    f"{run['iteration_ends'][-1] - run['started']:.0f} s training, "
                    f"{len(run['videos'])} videos ({time.time() - started:.0f} s elapsed)",
                    flush=True)
            for place, mode in enumerate(done):
                figures = measure(done[mode], done["off"])
                measured.append(
                    dict(figures, env=env_id, mode=mode, round=round_number + 1, place=place + 1))
    summary = _summarize(measured, envs, modes)
    _print_table(summary, envs, modes)
    _print_by_place(measured, envs, modes)
    report = {"settings": vars(args), "summary": summary, "per_run": measured, "runs": runs}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump(report, out, indent=2)
    chart = os.path.splitext(args.out)[0] + ".png"
    _chart(summary, envs, modes, chart, args)
    print(f"\nwrote {args.out} and {chart} ({time.time() - started:.0f} s)")


def _summarize(measured, envs, modes):
    summary = {}
    for env_id in envs:
        for mode in modes:
            rows = [m for m in measured if m["env"] == env_id and m["mode"] == mode]

            def mean(key):
                values = [r[key] for r in rows if r[key] is not None]
                return float(np.mean(values)) if values else None

            def median(key):
                values = [r[key] for r in rows if r[key] is not None]
                return float(np.median(values)) if values else None

            def worst(key):
                values = [r[key] for r in rows if r[key] is not None]
                return float(max(values)) if values else None

            summary.setdefault(env_id, {})[mode] = {
                "training_ratio": mean("training_ratio"),
                "training_ratio_median": median("training_ratio"),
                "steady_ratio": mean("steady_ratio"),
                "fixed_extra_s": mean("fixed_extra_s"),
                "history_share": mean("history_share"),
                "motion_seconds_per_10_itr": mean("motion_seconds_per_10_itr"),
                "end_to_end_ratio": mean("end_to_end_ratio"),
                "videos_per_10_itr": mean("videos_per_10_itr"),
                "staleness_p50": mean("staleness_p50"),
                "staleness_p95": mean("staleness_p95"),
                "first_video_s": mean("first_video_s"),
                "final_video_runs": f"{sum(r['final_video'] for r in rows)}/{len(rows)}",
                "worker_cpu_share": mean("worker_cpu_share"),
                "cost_per_video_s": mean("cost_per_video_s"),
                "startup_cost_s": mean("startup_cost_s"),
                "boot_seconds": mean("boot_seconds"),
                "sync_every": rows[0]["sync_every"] if rows else None,
                "machine_idle_share": mean("machine_idle_share"),
                "cpu_per_recorded_s": mean("cpu_per_recorded_s"),
                "cpu_per_videoed_s": mean("cpu_per_videoed_s"),
                "disk_kb_per_itr": mean("disk_kb_per_itr"),
                "worst_update_plot_ms": worst("worst_update_plot_ms"),
            }
    return summary


def _print_table(summary, envs, modes):
    print()
    header = ("| env | mode | training / off (median) | end-to-end / off | videos / 10 itr | "
              "seconds shown / 10 itr | staleness p50 / p95 (itr) | first video | final video | "
              "worker CPU | training s per video | start-up cost | steady / off | start-up + "
              "close extra | history recorded | CPU per recorded / videoed s | disk per itr | "
              "worst update_plot |")
    print(header)
    print("|" + " --- |" * 2 + " ---: |" * 16)
    for env_id in envs:
        for mode in modes:
            row = summary[env_id][mode]

            def f(key, spec, suffix=""):
                value = row[key]
                return "-" if value is None else format(value, spec) + suffix

            label = mode if mode != "sync" else f"sync-every-{row['sync_every']}"
            print(
                f"| {env_id} | {label} | {f('training_ratio', '.3f')} "
                f"({f('training_ratio_median', '.3f')}) | "
                f"{f('end_to_end_ratio', '.3f')} | {f('videos_per_10_itr', '.2f')} | "
                f"{f('motion_seconds_per_10_itr', '.1f', ' s')} | "
                f"{f('staleness_p50', '.1f')} / {f('staleness_p95', '.1f')} | "
                f"{f('first_video_s', '.0f', ' s')} | {row['final_video_runs']} | "
                f"{'-' if row['worker_cpu_share'] is None else format(row['worker_cpu_share'] * 100, '.1f') + '%'} | "
                f"{f('cost_per_video_s', '.2f', ' s')} | {f('startup_cost_s', '.1f', ' s')} | "
                f"{f('steady_ratio', '.3f')} | {f('fixed_extra_s', '.1f', ' s')} | "
                f"{'-' if row['history_share'] is None else format(row['history_share'] * 100, '.0f') + '%'} | "
                f"{f('cpu_per_recorded_s', '.3f', ' s')} / {f('cpu_per_videoed_s', '.3f', ' s')} | "
                f"{f('disk_kb_per_itr', '.0f', ' KB')} | {f('worst_update_plot_ms', '.1f', ' ms')} |"
            )
    for env_id in envs:
        idle = summary[env_id]["off"]["machine_idle_share"]
        print(f"\n{env_id}: {idle * 100:.1f}% of the machine's CPU was idle during the `off` "
              "runs' training (all a worker could use without taking it from training)")


def _print_by_place(measured, envs, modes):
    """Each round's steady ratio with the place the mode ran in that round: what the order
    did, next to what the mode did."""
    for env_id in envs:
        print(f"\n{env_id}, steady / off by round (the mode's place in its round):")
        for mode in modes:
            if mode == "off":
                continue
            rows = [m for m in measured if m["env"] == env_id and m["mode"] == mode]
            print(f"  {mode}: " + ", ".join(f"{m['steady_ratio']:.3f} ({m['place']})"
                                            for m in rows))


def _chart(summary, envs, modes, path, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in modes if m != "off"]
    figure, (cost, seen) = plt.subplots(1, 2, figsize=(10, 3.6))
    width = 0.8 / len(shown)
    for index, mode in enumerate(shown):
        x = np.arange(len(envs)) + index * width
        ratios = [summary[env][mode]["training_ratio"] for env in envs]
        bars = cost.bar(x, ratios, width, label=mode)
        cost.bar_label(bars, fmt="%.2f", fontsize=7)
        rates = [summary[env][mode]["videos_per_10_itr"] for env in envs]
        bars = seen.bar(x, rates, width, label=mode)
        seen.bar_label(bars, fmt="%.1f", fontsize=7)
    for axis in (cost, seen):
        axis.set_xticks(np.arange(len(envs)) + width * (len(shown) - 1) / 2, envs)
    cost.axhline(1.0, color="black", linewidth=0.8)
    cost.axhline(1.05, color="red", linewidth=0.8, linestyle="--", label="goal 1.05")
    cost.set_ylabel("training time / no plotting")
    cost.set_title(
        f"What plotting cost ({args.n_itr}-iteration TRPO runs, n_parallel={args.n_parallel})",
        fontsize=9)
    seen.axhline(1.0, color="red", linewidth=0.8, linestyle="--", label="goal 1")
    seen.set_ylabel("videos per 10 iterations")
    seen.set_title("What the user got to see", fontsize=9)
    seen.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


if __name__ == "__main__":
    threading.current_thread().name = "benchmark"
    main()
