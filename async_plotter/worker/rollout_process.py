"""The rollout process: rebuilds the policy (its own TensorFlow runtime) and the env, applies the
newest parameters, runs episodes, and streams each step to the render process.

It never touches GL: TensorFlow and Mesa's software renderer crash when they share a process, so
MuJoCo scenes leave here as physics states and are drawn by the render process.
"""
import logging
import math
import os
import pickle
import sys
import time
from multiprocessing.connection import Connection
from typing import Any, Optional

import numpy as np

from async_plotter.channel.base import ChannelAddress, ParamReader, ParamUpdate, ParentGone
from async_plotter.processes import (become_background_child, keep_side_effects_out_of_user_folders)
from async_plotter.worker.config import WorkerConfig
from async_plotter.worker.status import StatusKind, StatusSender
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo, SceneInfo, StreamKind

logger = logging.getLogger(__name__)

# TensorFlow reads these when its runtime starts; one thread each keeps the worker from competing
# with the trainer for cores.
_THREAD_LIMITS = {
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TF_ENABLE_ONEDNN_OPTS": "0",
}


def main(config: WorkerConfig, address: ChannelAddress, frames_out: Connection,
         status_connection: Connection) -> None:
    """Entry point of the rollout process (started by the supervisor with ``spawn``)."""
    become_background_child()
    os.environ.update(_THREAD_LIMITS)
    keep_side_effects_out_of_user_folders()
    status = StatusSender(status_connection, "rollout")
    try:
        reader = address.open_reader()
        _run(config, reader, frames_out, status)
    except ParentGone:
        pass
    except BrokenPipeError:
        pass  # the render process is gone; the supervisor decides what happens next
    except BaseException:  # noqa: BLE001 - report everything, SystemExit from SIGTERM included
        status.error("rollout")
        sys.exit(1)


def _run(config: WorkerConfig, reader: ParamReader, frames_out: Connection,
         status: StatusSender) -> None:
    from async_plotter.env_recipe import build_env
    from async_plotter.policy_recipe import PolicyRuntime

    runtime = PolicyRuntime(config.policy, config.deterministic)
    env = build_env(config.env, render_mode="rgb_array")
    scene = describe_scene(env, config)
    frames_out.send((StreamKind.SCENE, scene))
    status.send(StatusKind.READY, scene=scene.kind, env=config.env.label)
    # A video of an episode that ends at once (a young Hopper falls in 5-10 steps) would last a
    # fraction of a second; further episodes of the same parameters join it up to this length.
    min_video_steps = math.ceil(config.min_video_seconds * config.fps)
    episode_index = 0
    current: Optional[ParamUpdate] = None
    part, shown = 0, 0  # episodes and steps shown of ``current`` so far
    while True:
        chained = current is not None and part > 0
        if not chained and (current is None or not config.live or reader.newer_available()):
            update = reader.wait(timeout=1.0)
            status.beat()
            if update is None:
                continue
            runtime.set_params(update.params)
            current, part, shown = update, 0, 0
            status.send(StatusKind.APPLIED, update=update.number, iteration=update.iteration)
        info = EpisodeInfo(current.number, current.iteration, episode_index, part)
        episode_index += 1
        full, clip = current.max_path_length, _clip_steps(current, config)
        steps_left = max(full - shown, 1) if part else full
        clip_left = max(clip - shown, 1) if part else clip
        end = _run_episode(env, runtime, scene, info, (steps_left, clip_left), reader, config,
                           frames_out, status, min_video_steps - shown)
        shown += end.steps
        part = part + 1 if end.continued else 0
        status.send(StatusKind.EPISODE,
                    update=info.update,
                    steps=end.steps,
                    reward=end.total_reward,
                    completed=end.completed,
                    part=info.part)


def _clip_steps(update: ParamUpdate, config: WorkerConfig) -> int:
    """Where a video recorded while training stops: ``video_length`` steps (most of a video's
    CPU is its frames, and the budget buys more, fresher videos when each is shorter). Live
    views get whole rollouts, and so does the final policy's video (``_run_episode`` goes on
    past the clip once the final video is asked for)."""
    if config.live or config.video_length is None:
        return update.max_path_length
    return min(update.max_path_length, config.video_length)


def _run_episode(env: Any, runtime: Any, scene: SceneInfo, info: EpisodeInfo, limits: tuple,
                 reader: Any, config: WorkerConfig, frames_out: Connection, status: StatusSender,
                 video_steps_wanted: int) -> EpisodeEnd:
    """One episode of at most ``limits[0]`` steps, cut at ``limits[1]`` unless the final video
    is asked for; each step is streamed to the render process."""
    max_path_length, clip_length = limits
    seed = None if config.seed is None else config.seed + info.episode
    observation, _ = env.reset(seed=seed)
    reset = getattr(runtime.policy, "reset", None)
    if callable(reset):
        reset()  # as rllab's and garage's rollout(): recurrent policies clear their state here
    frames_out.send((StreamKind.BEGIN, info))
    total_reward, steps, completed, ended_early = 0.0, 0, True, False
    _send_step(env, scene, frames_out)
    interval, next_due = 1.0 / config.fps, time.monotonic()
    for steps in range(1, max_path_length + 1):
        # A viewer should see the newest policy now, not in 30 s; so should the final video.
        if (config.live or reader.final_requested()) and reader.newer_available():
            completed = False
            break
        if config.live:
            # Real time for live viewers: steps sent faster than the render process draws them
            # would queue in the pipe (~70 Swimmer states fit) and delay the newest policy by
            # seconds. Videos need no pace: the pipe's back-pressure is enough for them.
            next_due = max(next_due + interval, time.monotonic())
            delay = next_due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        action = _to_env_action(runtime.act(observation), env.action_space)
        observation, reward, terminated, truncated, _ = env.step(action)
        total_reward += float(reward)
        _send_step(env, scene, frames_out)
        status.beat()
        if terminated or truncated:
            ended_early = steps < max_path_length
            break
        if steps >= clip_length and not reader.final_requested():
            break
    # Chain another episode of these parameters into the same video while it is still short
    # (recorded videos only; live views replay anyway).
    continued = (not config.live and completed and ended_early and steps < video_steps_wanted
                 and not reader.newer_available())
    end = EpisodeEnd(steps, total_reward, completed, continued=continued)
    frames_out.send((StreamKind.END, end))
    return end


def describe_scene(env: Any, config: WorkerConfig) -> SceneInfo:
    """MuJoCo envs are drawn from their physics state elsewhere; others draw their own frames."""
    unwrapped = getattr(env, "unwrapped", env)
    model = getattr(unwrapped, "model", None)
    if type(model).__name__ == "MjModel" and hasattr(unwrapped, "data"):
        renderer = getattr(unwrapped, "mujoco_renderer", None)
        width, height = (getattr(unwrapped, "width", 480) or 480, getattr(unwrapped, "height", 480)
                         or 480)
        if config.frame_size:
            width, height = config.frame_size
        from async_plotter.render.camera import plan_camera

        env_camera_id = getattr(renderer, "camera_id", None)
        plan = plan_camera(model, config.camera, getattr(renderer, "default_cam_config", None),
                           -1 if env_camera_id is None else int(env_camera_id))
        return SceneInfo(kind="mujoco",
                         model=pickle.dumps(model),
                         camera=plan,
                         camera_id=int(plan["id"]) if plan["kind"] == "fixed" else -1,
                         width=int(width),
                         height=int(height),
                         label=config.env.label)
    return SceneInfo(kind="frames", label=config.env.label)


def _send_step(env: Any, scene: SceneInfo, frames_out: Connection) -> None:
    if scene.kind == "mujoco":
        import mujoco

        unwrapped = env.unwrapped
        spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        state = np.empty(mujoco.mj_stateSize(unwrapped.model, spec))
        mujoco.mj_getState(unwrapped.model, unwrapped.data, state, spec)
        frames_out.send((StreamKind.STATE, state))
        return
    frame = env.render()
    if frame is None:
        raise RuntimeError(f"env {scene.label} returned no frame from render(); build it with "
                           "render_mode='rgb_array' (a factory may accept render_mode)")
    frames_out.send((StreamKind.FRAME, np.ascontiguousarray(frame, dtype=np.uint8)))


def _to_env_action(action: np.ndarray, space: Any) -> Any:
    """Adapt a policy's output to the action space: logits to an index, clip to a box."""
    import gymnasium

    if isinstance(space, gymnasium.spaces.Discrete):
        action = np.asarray(action)
        return int(np.argmax(action)) if action.size > 1 else int(action.reshape(-1)[0])
    if isinstance(space, gymnasium.spaces.Box):
        return np.clip(
            np.asarray(action, dtype=space.dtype).reshape(space.shape), space.low, space.high)
    return action
