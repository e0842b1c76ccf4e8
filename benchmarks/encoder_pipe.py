"""What the pipe to ffmpeg costs a video: Linux's default 64 KiB pipe against the encoder's own.

A video is drawn by the render process and encoded by an ffmpeg child fed raw RGB frames through a
pipe (``async_plotter/sinks/encoder.py``). A 320x320 frame is 300 KiB, so through the default pipe
each write waits several times for ffmpeg to read; the encoder now widens its pipe to hold whole
frames (``widen_pipe``). Per env, the same recorded physics states (a whole episode of random
actions, drawn with the library's scene and preset) are drawn and encoded into an mp4 both ways,
alternating, in one process:

* ``64 KiB``: the pipe set back to Linux's default size after the encoder starts (as before);
* ``widened``: the encoder as it is.

Reported per frame: wall time (what the final video at ``close()`` waits for), the render
process's CPU and ffmpeg's CPU (what the budget pays for), and their ratios widened / 64 KiB.

    python benchmarks/encoder_pipe.py [--envs Swimmer-v5,HalfCheetah-v5,Hopper-v5] [--rounds 3]

Takes ~40 s on 2 cores. Writes benchmarks/results/encoder_pipe.json.
"""
import argparse
import json
import os
import pickle
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("LP_NUM_THREADS", "0")  # as the render process draws files

import numpy as np  # noqa: E402

from benchmarks.machine import machine_facts  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DEFAULT_PIPE_BYTES = 64 * 1024
ARMS = ("64 KiB", "widened")


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def recorded_states(env_id: str, steps: int) -> tuple:
    """The model's bytes and ``steps`` full physics states of random actions from seed 0."""
    import gymnasium as gym
    import mujoco

    env = gym.make(env_id)
    env.reset(seed=0)
    env.action_space.seed(0)
    model, data = env.unwrapped.model, env.unwrapped.data
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    states = []
    for _ in range(steps):
        env.unwrapped.step(env.action_space.sample())  # no time limit, no termination
        state = np.empty(mujoco.mj_stateSize(model, spec))
        mujoco.mj_getState(model, data, state, spec)
        states.append(state)
    model_bytes = pickle.dumps(model)
    env.close()
    return model_bytes, states


def encode_once(scene, states: list, path: str, fps: float, arm: str) -> dict:
    """Draw and encode ``states`` into ``path``; wall and CPU per frame."""
    import fcntl

    from async_plotter.sinks.encoder import Encoder

    wall, own, children = time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(
        resource.RUSAGE_CHILDREN)
    encoder = Encoder(path, scene.width, scene.height, fps)
    pipe = encoder._process.stdin.fileno()
    if arm == "64 KiB":
        fcntl.fcntl(pipe, fcntl.F_SETPIPE_SZ, DEFAULT_PIPE_BYTES)
    pipe_bytes = fcntl.fcntl(pipe, fcntl.F_GETPIPE_SZ)
    for state in states:
        scene.set_state(state)
        encoder.write(scene.render())
    encoder.finish()
    frames = len(states)
    return {
        "wall_ms": 1000 * (time.perf_counter() - wall) / frames,
        "render_cpu_ms": 1000 * (_cpu(resource.RUSAGE_SELF) - own) / frames,
        "ffmpeg_cpu_ms": 1000 * (_cpu(resource.RUSAGE_CHILDREN) - children) / frames,
        "pipe_bytes": pipe_bytes,
    }


def measure_env(env_id: str, frames: int, rounds: int, folder: str) -> dict:
    from async_plotter.render.mujoco_scene import MujocoScene

    model_bytes, states = recorded_states(env_id, frames)
    scene = MujocoScene(model_bytes, None, -1, 480, 480, "auto")
    model = pickle.loads(model_bytes)
    fps = 1.0 / (model.opt.timestep * 4)  # a rate for the file; it does not change the cost
    path = os.path.join(folder, f"{env_id}.mp4")
    encode_once(scene, states[:30], path, fps, "widened")  # warm-up: GL, ffmpeg's first start
    runs = {arm: [] for arm in ARMS}
    for round_number in range(rounds):
        # Alternating which goes first: a machine that gets busier mid-round hits both.
        order = ARMS if round_number % 2 == 0 else ARMS[::-1]
        for arm in order:
            runs[arm].append(encode_once(scene, states, path, fps, arm))
    scene.close()
    summary = {}
    for arm, results in runs.items():
        summary[arm] = {
            key: float(np.median([result[key] for result in results]))
            for key in ("wall_ms", "render_cpu_ms", "ffmpeg_cpu_ms", "pipe_bytes")
        }
    before, after = summary["64 KiB"], summary["widened"]
    summary["ratios"] = {
        key: after[key] / before[key]
        for key in ("wall_ms", "render_cpu_ms", "ffmpeg_cpu_ms")
    }
    summary["frame_size"] = [scene.width, scene.height]
    summary["runs"] = runs
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", default="Swimmer-v5,HalfCheetah-v5,Hopper-v5")
    parser.add_argument("--frames", type=int, default=501, help="frames per video")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(RESULTS, "encoder_pipe.json"))
    args = parser.parse_args()
    import tempfile

    results, load_before = {}, os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="encoder_pipe_") as folder:
        for env_id in args.envs.split(","):
            print(f"{env_id}: {args.rounds} rounds of {args.frames} frames each way...", flush=True)
            results[env_id] = measure_env(env_id, args.frames, args.rounds, folder)

    print("| env | frame | pipe | wall / frame | render CPU / frame | ffmpeg CPU / frame |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for env_id, summary in results.items():
        size = "x".join(str(side) for side in summary["frame_size"])
        for arm in ARMS:
            row = summary[arm]
            print(f"| {env_id} | {size} | {arm} ({int(row['pipe_bytes']) // 1024} KiB) | "
                  f"{row['wall_ms']:.2f} ms | {row['render_cpu_ms']:.2f} ms | "
                  f"{row['ffmpeg_cpu_ms']:.2f} ms |")
        ratios = summary["ratios"]
        print(f"| {env_id} | | widened / 64 KiB | {ratios['wall_ms']:.2f}x | "
              f"{ratios['render_cpu_ms']:.2f}x | {ratios['ffmpeg_cpu_ms']:.2f}x |")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump(
            {
                "settings": vars(args),
                "machine": machine_facts(load_before, os.getloadavg()),
                "results": results
            },
            out,
            indent=1)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
