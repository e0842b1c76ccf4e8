"""``async-plotter render`` of a run's folder of recordings: one process against ``--jobs``.

Per env, ``--recordings`` state recordings of ``--steps`` steps (random actions from seed 0,
written as the history thread writes them: 480x480 at the env's own rate, drawn at the preset
``auto`` picks) go into a temporary folder. Each round then draws the whole folder three ways,
each a fresh ``python -m async_plotter.cli render`` process, in an order that rotates:

* ``threads``: one process with llvmpipe's own threads (one a core): ``render`` before
  ``--jobs`` and ``LP_NUM_THREADS=0`` ("before" in the table);
* ``one``: ``--jobs 1``;
* ``jobs``: ``--jobs`` at its default, one process a usable core.

Wall time and CPU (the command, its drawing processes and their ffmpeg) are medians over
``--rounds``; the table gives each against ``one``.

    python benchmarks/render_jobs.py [--envs Swimmer-v5,HalfCheetah-v5] [--rounds 3]

Takes ~2 minutes on 2 cores. Writes ``benchmarks/results/render_jobs.json``.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
from benchmarks.machine import write_results  # noqa: E402

RESULTS = os.path.join(HERE, "benchmarks", "results")
ARMS = ("threads", "one", "jobs")


def make_recordings(env_id: str, count: int, steps: int, folder: str) -> None:
    """``count`` recordings ``iter_NNNN.npz`` of ``steps`` random steps each (seeds 0, 1, ...)."""
    import gymnasium as gym
    import mujoco
    import numpy as np

    from async_plotter.render.recording import (RecordingBuilder, model_to_mjb, write_recording)

    env = gym.make(env_id)
    model, data = env.unwrapped.model, env.unwrapped.data
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    rate = env.metadata.get("render_fps") or 1 / env.unwrapped.dt
    for number in range(count):
        env.reset(seed=number)
        env.action_space.seed(number)
        meta = dict(update=number + 1,
                    iteration=number,
                    fps=float(rate),
                    width=480,
                    height=480,
                    size_chosen=False,
                    quality="auto",
                    preset=None,
                    camera=None,
                    camera_id=-1)
        builder = RecordingBuilder(model_to_mjb(model), meta)
        for _ in range(steps):
            action = env.action_space.sample()
            env.unwrapped.step(action)  # no time limit, no termination
            state = np.empty(mujoco.mj_stateSize(model, spec))
            mujoco.mj_getState(model, data, state, spec)
            builder.add(state, action, 0.0, 0)
        write_recording(os.path.join(folder, f"iter_{number:04d}.npz"), builder.build())
    env.close()


def draw_folder(arm: str, folder: str, out: str) -> dict:
    """One ``render`` command over ``folder``: wall seconds and CPU-seconds of its whole tree."""
    command = [sys.executable, "-m", "async_plotter.cli", "render", folder, "--out", out, "-q"]
    environment = dict(os.environ)
    environment.pop("LP_NUM_THREADS", None)
    if arm == "threads":
        environment["LP_NUM_THREADS"] = str(len(os.sched_getaffinity(0)))
        command += ["--jobs", "1"]
    elif arm == "one":
        command += ["--jobs", "1"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, env=environment, cwd=HERE)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    videos = [name for name in os.listdir(out) if name.endswith(".mp4")]
    return dict(wall_s=wall, cpu_s=cpu, videos=len(videos))


def measure_env(env_id: str, args: argparse.Namespace, scratch: str) -> dict:
    folder = os.path.join(scratch, env_id)
    os.makedirs(folder)
    make_recordings(env_id, args.recordings, args.steps, folder)
    runs = {arm: [] for arm in ARMS}
    for number in range(args.rounds):
        order = ARMS[number % len(ARMS):] + ARMS[:number % len(ARMS)]
        for arm in order:
            out = os.path.join(scratch, f"{env_id}_{arm}_{number}")
            runs[arm].append(draw_folder(arm, folder, out))
            print(
                f"  {env_id} round {number + 1} {arm}: {runs[arm][-1]['wall_s']:.2f} s, "
                f"{runs[arm][-1]['cpu_s']:.2f} CPU-s",
                flush=True)
    summary = {
        arm: {
            key: statistics.median(run[key] for run in arm_runs)
            for key in ("wall_s", "cpu_s", "videos")
        }
        for arm, arm_runs in runs.items()
    }
    summary["runs"] = runs
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", default="Swimmer-v5,HalfCheetah-v5")
    parser.add_argument("--recordings", type=int, default=8)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(RESULTS, "render_jobs.json"))
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    results, load_before = {}, os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="render_jobs_") as scratch:
        for env_id in args.envs.split(","):
            print(
                f"{env_id}: {args.recordings} recordings of {args.steps} steps, "
                f"{args.rounds} rounds...",
                flush=True)
            results[env_id] = measure_env(env_id, args, scratch)

    print("\n| env | arm | wall | / one | / before | CPU | / one | videos |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    names = {
        "threads": "--jobs 1, llvmpipe threads",
        "one": "--jobs 1",
        "jobs": f"--jobs {cores} (default)"
    }
    for env_id, summary in results.items():
        one, before = summary["one"], summary["threads"]
        for arm in ARMS:
            row = summary[arm]
            print(f"| {env_id} | {names[arm]} | {row['wall_s']:.2f} s | "
                  f"{row['wall_s'] / one['wall_s']:.2f}x | "
                  f"{row['wall_s'] / before['wall_s']:.2f}x | {row['cpu_s']:.2f} s | "
                  f"{row['cpu_s'] / one['cpu_s']:.2f}x | {row['videos']:.0f} |")
    write_results(args.out, args, load_before, cores=cores, results=results)


if __name__ == "__main__":
    main()
