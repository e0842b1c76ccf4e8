"""What a video's frame costs, one change at a time: the same states drawn and encoded two ways.

A video is drawn by the render process (``MujocoScene``) and encoded by an ffmpeg child fed raw
RGB frames through a pipe (``async_plotter/sinks/encoder.py``). Per env, the same recorded physics
states (an episode of random actions) are drawn and encoded into an mp4 both ways, alternating,
in one process, and reported per frame: wall time (what the final video at ``close()`` waits
for), this process's CPU (the render process's) and ffmpeg's (what the budget pays for), and
their ratios now / before. ``--compare`` picks the change:

* ``pipe``: Linux's default 64 KiB pipe (set back after the encoder starts) against the encoder's
  widened one (``widen_pipe``): a 320x320 frame is 300 KiB, so each write waited several times
  for ffmpeg to read. Writes ``benchmarks/results/frame_cost_pipe.json``.
* ``detail``: the cheap preset's round geoms at MuJoCo's default tessellation (28 slices, 16
  stacks) against the preset's own (``CHEAP_TESSELLATION``), with how far the frames drawn
  apart are (mean absolute difference in colour levels, and the share of pixels more than 8
  levels apart). Writes ``benchmarks/results/frame_cost_detail.json``.
* ``x264``: the encoder's ``superfast`` preset against ``ultrafast`` (the files' sizes
  beside). Writes ``benchmarks/results/frame_cost_x264.json``.
* ``texture``: the cheap preset with MuJoCo's trilinear texture filtering against its own
  (``_sample_one_mipmap_level``: the nearest mipmap level), with how far the frames are apart as
  for ``detail``. Writes ``benchmarks/results/frame_cost_texture.json``.

    python benchmarks/frame_cost.py --compare detail [--envs Swimmer-v5,HalfCheetah-v5] [--rounds 5]

Takes ~40 s on 2 cores.
"""
import argparse
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

from benchmarks.machine import write_results  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DEFAULT_PIPE_BYTES = 64 * 1024
#: per comparison, its two arms: before, then now
COMPARISONS = {
    "pipe": ("64 KiB", "widened"),
    "detail": ("28/16 slices", "cheap preset"),
    "x264": ("superfast", "ultrafast"),
    "texture": ("trilinear", "one mipmap level"),
}
MUJOCO_TESSELLATION = (28, 16)  # MuJoCo's defaults of numslices, numstacks


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


def encode_once(scene, states: list, path: str, fps: float, arm: tuple) -> dict:
    """Draw and encode ``states`` into ``path`` as ``arm`` says (through Linux's default pipe;
    with which x264 preset); wall and CPU per frame."""
    import fcntl

    from async_plotter.sinks.encoder import Encoder

    wall, own, children = time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(
        resource.RUSAGE_CHILDREN)
    from async_plotter.sinks import encoder as encoder_module

    _, narrow_pipe, preset = arm
    params = encoder_module._ENCODER_PARAMS  # "-preset", its name, then the rest
    encoder_module._ENCODER_PARAMS = ["-preset", preset or params[1]] + params[2:]
    try:
        encoder = Encoder(path, scene.width, scene.height, fps)
    finally:
        encoder_module._ENCODER_PARAMS = params
    pipe = encoder._process.stdin.fileno()
    if narrow_pipe:
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


def make_arms(compare: str, model_bytes: bytes) -> dict:
    """Each arm: its scene, whether it writes through the narrow pipe, its x264 preset (None:
    the encoder's own)."""
    from async_plotter.render import mujoco_scene

    before, now = COMPARISONS[compare]
    scene = mujoco_scene.MujocoScene(model_bytes, None, -1, 480, 480, "auto")
    if compare == "pipe":
        return {before: (scene, True, None), now: (scene, False, None)}
    if compare == "x264":
        return {before: (scene, False, before), now: (scene, False, now)}
    if compare == "texture":
        name, value = "_sample_one_mipmap_level", lambda renderer: None  # MuJoCo's own filter
    else:
        name, value = "CHEAP_TESSELLATION", MUJOCO_TESSELLATION
    own = getattr(mujoco_scene, name)
    setattr(mujoco_scene, name, value)
    try:
        other = mujoco_scene.MujocoScene(model_bytes, None, -1, 480, 480, "auto")
    finally:
        setattr(mujoco_scene, name, own)
    return {before: (other, False, None), now: (scene, False, None)}


def picture_difference(scenes: list, states: list) -> dict:
    """How far the two arms' frames of the same states are apart, in colour levels."""
    total, far, pixels = 0.0, 0, 0
    for state in states:
        frames = []
        for scene in scenes:
            scene.set_state(state)
            frames.append(scene.render().astype(np.int16))
        difference = np.abs(frames[0] - frames[1])
        total += float(difference.sum())
        far += int((difference.max(axis=-1) > 8).sum())
        pixels += difference.shape[0] * difference.shape[1]
    return {"mean_levels": total / (3 * pixels), "pixels_over_8_levels": far / pixels}


def measure_env(compare: str, env_id: str, frames: int, rounds: int, folder: str) -> dict:
    model_bytes, states = recorded_states(env_id, frames)
    scenes = make_arms(compare, model_bytes)  # arm name: (scene, narrow pipe, preset)
    arms = COMPARISONS[compare]
    model = pickle.loads(model_bytes)
    fps = 1.0 / (model.opt.timestep * 4)  # a rate for the file; it does not change the cost
    path = os.path.join(folder, f"{env_id}.mp4")
    for arm in scenes.values():  # warm-up: GL, ffmpeg's first start
        encode_once(arm[0], states[:30], path, fps, arm)
    runs = {arm: [] for arm in arms}
    for round_number in range(rounds):
        # Alternating which goes first: a machine that gets busier mid-round hits both.
        for arm in (arms if round_number % 2 == 0 else arms[::-1]):
            runs[arm].append(encode_once(scenes[arm][0], states, path, fps, scenes[arm]))
            runs[arm][-1]["mp4_bytes"] = os.path.getsize(path)
    summary = {}
    for arm, results in runs.items():
        summary[arm] = {
            key: float(np.median([result[key] for result in results]))
            for key in ("wall_ms", "render_cpu_ms", "ffmpeg_cpu_ms", "pipe_bytes", "mp4_bytes")
        }
    before, after = summary[arms[0]], summary[arms[1]]
    summary["ratios"] = {
        key: after[key] / before[key]
        for key in ("wall_ms", "render_cpu_ms", "ffmpeg_cpu_ms")
    }
    first = next(iter(scenes.values()))[0]
    summary["frame_size"] = [first.width, first.height]
    if compare in ("detail", "texture"):
        summary["difference"] = picture_difference([scenes[arm][0] for arm in arms], states)
    for scene in {id(arm[0]): arm[0] for arm in scenes.values()}.values():
        scene.close()
    summary["runs"] = runs
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="detail")
    parser.add_argument("--envs", default="Swimmer-v5,HalfCheetah-v5,Hopper-v5")
    parser.add_argument("--frames", type=int, default=501, help="frames per video")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="default: benchmarks/results/frame_cost_<compare>.json")
    args = parser.parse_args()
    args.out = args.out or os.path.join(RESULTS, f"frame_cost_{args.compare}.json")
    import tempfile

    arms = COMPARISONS[args.compare]
    results, load_before = {}, os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="frame_cost_") as folder:
        for env_id in args.envs.split(","):
            print(f"{env_id}: {args.rounds} rounds of {args.frames} frames each way...", flush=True)
            results[env_id] = measure_env(args.compare, env_id, args.frames, args.rounds, folder)

    print("| env | frame | arm | wall / frame | render CPU / frame | ffmpeg CPU / frame | mp4 |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for env_id, summary in results.items():
        size = "x".join(str(side) for side in summary["frame_size"])
        for arm in arms:
            row = summary[arm]
            print(f"| {env_id} | {size} | {arm} ({int(row['pipe_bytes']) // 1024} KiB pipe) | "
                  f"{row['wall_ms']:.2f} ms | {row['render_cpu_ms']:.2f} ms | "
                  f"{row['ffmpeg_cpu_ms']:.2f} ms | {row['mp4_bytes'] / 1024:.0f} KB |")
        ratios = summary["ratios"]
        print(f"| {env_id} | | {arms[1]} / {arms[0]} | {ratios['wall_ms']:.2f}x | "
              f"{ratios['render_cpu_ms']:.2f}x | {ratios['ffmpeg_cpu_ms']:.2f}x | |")
    for env_id, summary in results.items():
        if "difference" in summary:
            difference = summary["difference"]
            print(f"{env_id}: frames {difference['mean_levels']:.3f} colour levels apart on "
                  f"average, {100 * difference['pixels_over_8_levels']:.2f}% of pixels more "
                  "than 8 levels")
    write_results(args.out, args, load_before, results=results)


if __name__ == "__main__":
    main()
