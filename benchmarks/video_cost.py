"""What a second of video costs the worker, per env: before real-time playback, now, and the floor.

For the 11 Gymnasium MuJoCo v5 envs and CartPole-v1, one video of a fixed span of simulated
time (``--seconds``, 4 by default) with a trivial numpy policy (zeros: the policy step is not what
is measured; termination is ignored, so every rollout has the same length), three ways:

* ``old``: every step drawn and the file played at 30 frames/s whatever the env's rate (the
  behaviour before real-time playback; reproduced by telling the worker the env runs at 30).
* ``new``: the defaults (``Plotter(fps=30)`` is the cap; the video plays at the env's rate, every
  k-th step drawn where that is above the cap).
* ``floor``: drawing (MuJoCo scene, same preset and size; CartPole's own ``render()``) and
  encoding (the same ``VideoSink``) the new run's frames and nothing else, in one process
  without TensorFlow, from physics states recorded beforehand.

Worker CPU is both processes' CPU and their children's (the x264 encoder), from psutil,
over the second video of a Plotter (the first includes start-up). The figure that matters is
CPU per second of *simulated time shown*: a second of real-speed video. (The old file of a
Hopper rollout plays 4.2 times as long as its motion took, in slow motion; per second of file
it draws 30 frames, as the new one does 31.25.) Both plotters run at ``priority="normal"`` so
that a busy machine does not stretch the run (CPU per video does not depend on it).

    python benchmarks/video_cost.py [--seconds 4] [--rounds 1] [--envs Hopper-v5,Swimmer-v5]

One round of all 12 envs takes ~5 minutes on 2 cores.

Writes benchmarks/results/video_cost.json. Goals (issue 21): new within 1.3x of the floor on
every env; Hopper and Walker2d at least 3x cheaper per second than old; every file's frame rate
the env's own (``real time``: file fps x stride = env rate).
"""
import argparse
import json
import os
import resource
import sys
import tempfile
import time
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from async_plotter import Plotter  # noqa: E402
from async_plotter.cpu import tree_cpu_seconds  # noqa: E402
from benchmarks.machine import child_result, machine_facts  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ENVS = [
    "Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "HumanoidStandup-v5",
    "InvertedDoublePendulum-v5", "InvertedPendulum-v5", "Pusher-v5", "Reacher-v5", "Swimmer-v5",
    "Walker2d-v5", "CartPole-v1"
]
OLD_FPS = 30.0


class ZeroPolicy:
    """rllab's protocol, numpy only: the action is all zeros (CartPole: logits -> action 0)."""

    def __init__(self, action_size):
        self.action_size = action_size
        self.params = np.zeros(1, np.float32)

    def get_param_values(self):
        return self.params

    def set_param_values(self, flat):
        self.params = np.asarray(flat, np.float32)

    def get_action(self, observation):
        return np.zeros(self.action_size, np.float32), {}


class EnvFactory:
    """Builds ``env_id`` that never terminates (a fixed-length rollout); ``old``: it says it
    runs at 30 steps/s, so the worker draws every step and plays the file at 30 frames/s."""

    def __init__(self, env_id, old):
        self.env_id = env_id
        self.old = old

    def __call__(self, render_mode=None):
        import gymnasium

        class Fixed(gymnasium.Wrapper):

            def step(self, action):
                observation, reward, _, truncated, info = self.env.step(action)
                return observation, reward, False, truncated, info

        env = Fixed(gymnasium.make(self.env_id, render_mode=render_mode))
        if self.old:
            env.metadata = dict(env.metadata, render_fps=OLD_FPS)
        return env


def action_size(env_id):
    import gymnasium

    env = gymnasium.make(env_id)
    try:
        space = env.action_space
        return int(space.n) if hasattr(space, "n") else int(np.prod(space.shape))
    finally:
        env.close()


def worker_cpu(pids):
    """CPU seconds of the worker's processes and their children (the encoder)."""
    return sum(tree_cpu_seconds(pid) or 0.0 for pid in pids)


def wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(f"no {what} after {timeout:.0f} s")


def video_info(path):
    import imageio.v2 as imageio

    reader = imageio.get_reader(path)
    try:
        return float(reader.get_meta_data()["fps"]), reader.count_frames()
    finally:
        reader.close()


def measure_plotter(env_id, old, steps, folder):
    """The worker's CPU for the second video (iteration 1) of a ``steps``-step rollout."""
    policy = ZeroPolicy(action_size(env_id))
    episodes = []
    plotter = Plotter(EnvFactory(env_id, old),
                      policy,
                      max_path_length=steps,
                      video_dir=folder,
                      video_length=None,
                      min_video_seconds=0,
                      priority="normal",
                      seed=0,
                      on_event=lambda kind, payload: kind == "episode" and episodes.append(payload))
    try:
        plotter.start()
        wait(lambda: plotter.stats["videos"] >= 1, 180, "first video")
        pids = list(plotter.stats["worker_pids"].values())
        before = worker_cpu(pids)
        plotter.update_plot(policy, iteration=1)
        wait(lambda: any(v["iteration"] == 1 for v in plotter.stats["video_log"]), 300,
             "measured video")
        cpu = worker_cpu(pids) - before
        stats = plotter.stats
    finally:
        plotter.close(final_video=False)
    path = next(v["path"] for v in stats["video_log"] if v["iteration"] == 1)
    file_fps, frames = video_info(path)
    return {
        "cpu_s": cpu,
        "steps": episodes[-1]["steps"],
        "frames": frames,
        "file_fps": file_fps,
        "env_rate": stats["env_rate"],
        "stride": stats["frame_stride"],
        "gl_renderer": stats["gl_renderer"],
        "preset": stats["visual_preset"],
    }


# ------------------------------------------------------------------------------------ floor


def floor_child(env_id, steps, stride, fps, folder):
    """In a fresh process without TensorFlow: record the states of the shown steps, then time
    drawing and encoding them (and nothing else); prints the figures as JSON."""
    from async_plotter.display import offscreen_gl_backend
    from async_plotter.worker import render_process

    # The render process's own set-up for recorded videos (GL backend, llvmpipe threads).
    render_process._set_up(
        types.SimpleNamespace(mujoco_gl=offscreen_gl_backend(), live=False, sinks=()))
    import mujoco

    from async_plotter.sinks.video import VideoSink
    from async_plotter.render.stream import EpisodeEnd, EpisodeInfo
    from async_plotter.worker.rollout_process import describe_scene

    env = EnvFactory(env_id, old=False)(render_mode="rgb_array")
    config = types.SimpleNamespace(frame_size=None,
                                   camera=None,
                                   env=types.SimpleNamespace(label=env_id))
    scene_info = describe_scene(env, config)
    zeros = ZeroPolicy(action_size(env_id)).get_action(None)[0]
    action = 0 if hasattr(env.action_space, "n") else zeros.reshape(env.action_space.shape)
    shown = [s for s in range(steps + 1) if s % stride == 0 or s == steps]
    states = []
    env.reset(seed=0)
    unwrapped = env.unwrapped
    for step in range(steps + 1):
        if step:
            env.step(action)
        if step in shown:
            if scene_info.kind == "mujoco":
                spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
                state = np.empty(mujoco.mj_stateSize(unwrapped.model, spec))
                mujoco.mj_getState(unwrapped.model, unwrapped.data, state, spec)
            else:
                state = np.array(unwrapped.state, copy=True)
            states.append(state)
    if scene_info.kind == "mujoco":
        from async_plotter.render.mujoco_scene import MujocoScene

        scene = MujocoScene(scene_info.model, scene_info.camera, scene_info.camera_id,
                            scene_info.width, scene_info.height, "auto")

        def draw(state):
            scene.set_state(state)
            return scene.render()
    else:

        def draw(state):
            unwrapped.state = state
            return env.render()

    draw(states[0])  # the first frame of a fresh GL context is not a frame's cost
    sink = VideoSink(folder, fps)
    episode = EpisodeInfo(0, 1, 0)
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    sink.begin_episode(episode)
    for state in states:
        sink.add_frame(draw(state), episode)
    sink.end_episode(episode, EpisodeEnd(steps, 0.0, True))
    after = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, usage))
    print(json.dumps({"cpu_s": cpu, "frames": len(states)}))


def measure_floor(env_id, steps, stride, fps):
    with tempfile.TemporaryDirectory() as folder:
        return child_result(
            __file__,
            ["--floor-child", env_id,
             str(steps), str(stride),
             repr(fps), folder],
            timeout=300)


# ------------------------------------------------------------------------------------- main


def per_second(run, rate):
    """CPU per second of simulated time shown (a second of real-speed video)."""
    return run["cpu_s"] / (run["steps"] / rate)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="simulated time per video")
    parser.add_argument("--envs", default=",".join(ENVS), help="comma-separated env ids")
    parser.add_argument("--rounds",
                        type=int,
                        default=1,
                        help="measurements per env (the median is reported); ~5 min each")
    parser.add_argument("--out", default=os.path.join(RESULTS, "video_cost.json"))
    parser.add_argument("--floor-child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_child:
        env_id, steps, stride, fps, folder = args.floor_child
        floor_child(env_id, int(steps), int(stride), float(fps), folder)
        return

    import gymnasium

    from async_plotter.worker.playback import plan_playback

    load_before = os.getloadavg()
    started = time.monotonic()
    rows = []
    header = (f"{'env':<26} | {'rate':>5} | {'k':>2} | {'file fps':>8} | {'real':>4} | "
              f"{'frames old/new':>14} | {'CPU-s per s: old':>16} | {'new':>6} | {'floor':>6} | "
              f"{'new/floor':>9} | {'old/new':>7}")
    print(header, flush=True)
    print("-" * len(header), flush=True)
    for env_id in args.envs.split(","):
        probe = gymnasium.make(env_id)
        rate = plan_playback(probe, 30).rate
        probe.close()
        steps = int(round(args.seconds * rate))
        runs = {"new": [], "old": [], "floor": []}
        for _ in range(args.rounds):  # interleaved, so that drift hits all three alike
            with tempfile.TemporaryDirectory() as folder:
                new = measure_plotter(env_id, False, steps, os.path.join(folder, "new"))
                old = measure_plotter(env_id, True, steps, os.path.join(folder, "old"))
            floor = measure_floor(env_id, new["steps"], new["stride"], new["file_fps"])
            floor["steps"] = new["steps"]
            for name, run in (("new", new), ("old", old), ("floor", floor)):
                runs[name].append(run)
        # The median round of each (a busy machine makes single figures wobble by ~20%).
        new, old, floor = (sorted(
            runs[name], key=lambda run: run["cpu_s"] / run["steps"])[(args.rounds - 1) // 2]
                           for name in ("new", "old", "floor"))
        new_s, old_s, floor_s = (per_second(run, rate) for run in (new, old, floor))
        real = abs(new["file_fps"] * new["stride"] - rate) < 0.01 * rate
        row = {
            "env": env_id,
            "env_rate": rate,
            "steps": new["steps"],  # fewer than asked where the env's time limit is shorter
            "simulated_seconds": new["steps"] / rate,
            "rounds": runs,
            "stride": new["stride"],
            "file_fps": new["file_fps"],
            "old_file_fps": old["file_fps"],
            "real_time": real,
            "old": old,
            "new": new,
            "floor": floor,
            "cpu_per_simulated_second": {
                "old": old_s,
                "new": new_s,
                "floor": floor_s
            },
            "cpu_per_file_second": {
                "old": old["cpu_s"] / (old["frames"] / old["file_fps"]),
                "new": new["cpu_s"] / (new["frames"] / new["file_fps"]),
            },
            "new_over_floor": new_s / floor_s,
            "old_over_new": old_s / new_s,
        }
        rows.append(row)
        print(
            f"{env_id:<26} | {rate:>5.0f} | {new['stride']:>2} | {new['file_fps']:>8.2f} | "
            f"{'yes' if real else 'NO':>4} | {old['frames']:>6}/{new['frames']:<7} | "
            f"{old_s:>16.3f} | {new_s:>6.3f} | {floor_s:>6.3f} | {row['new_over_floor']:>9.2f} | "
            f"{row['old_over_new']:>7.2f}",
            flush=True)
    goals = {
        "every_env_within_1.3x_of_floor":
        all(r["new_over_floor"] <= 1.3 for r in rows),
        "hopper_walker2d_3x_cheaper":
        all(r["old_over_new"] >= 3 for r in rows
            if r["env"].split("-")[0] in ("Hopper", "Walker2d")),
        "every_video_real_time":
        all(r["real_time"] for r in rows),
    }
    print(f"\ngoals: {goals}; {time.monotonic() - started:.0f} s")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump(
            {
                "machine": machine_facts(load_before, os.getloadavg()),
                "seconds_per_video": args.seconds,
                "rounds": args.rounds,
                "cap_fps": 30,
                "policy": "zeros (numpy, rllab protocol)",
                "goals": goals,
                "rows": rows
            },
            out,
            indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
