"""The rollout process: rebuilds the policy (its own TensorFlow runtime) and the env, applies the
newest parameters, runs episodes, and streams each step to the render process.

It never touches GL: TensorFlow and Mesa's software renderer crash when they share a process, so
MuJoCo scenes leave here as physics states and are drawn by the render process. It decides how
videos play (``worker/playback.py``): only every ``stride``-th step is sent, and the scene says
the frame rate. Its TensorFlow sees no GPU unless ``Plotter(policy_device="gpu")`` (the
supervisor starts it with ``CUDA_VISIBLE_DEVICES=""``). With a history (``history_dir``), a
thread here also records every policy it takes as one whole, deterministic episode
(``worker/history.py``). For a trainer that publishes, the stream also goes to Redis while a
viewer elsewhere watches, and the episodes are live meanwhile (``_RemoteView``). However it
ends, it closes its env and policy runtime.
"""
import dataclasses
import logging
import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any, Callable, List, Optional, Tuple

from async_plotter.channel.base import ChannelAddress, ParamReader, ParamUpdate, ParentGone
from async_plotter.processes import (become_background_child, exit_now, resend_lost_stops,
                                     keep_side_effects_out_of_user_folders)
from async_plotter.worker.config import WorkerConfig
from async_plotter.worker.history import HistoryHung, HistoryRecorder
from async_plotter.worker.parameters import ParameterClient, UpdateFanOut
from async_plotter.worker.playback import Playback, plan_playback
from async_plotter.worker.shown_steps import ShownSteps
from async_plotter.worker.status import StatusKind, StatusSender
from async_plotter.worker.video_chain import VideoChain, wait_until_read
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo, SceneInfo, StreamKind
from async_plotter.env.stepper import EnvStepper

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

#: seconds of simulated time a worker's first video shows at most under the default video length
#: (``video_length="auto"``; ``min_video_seconds`` if longer). The run's first video shows the
#: untrained policy; it (and the first after a restart) is drawn while the worker starts, at the
#: trainer's priority and uncharged, where its 8 s of frames were a third of start-up's CPU (the
#: history keeps that policy's whole episode)
FIRST_VIDEO_SECONDS = 3.0


class _Stopped(SystemExit):
    """SIGTERM: the supervisor is stopping this process (how a run of it normally ends)."""


# Set once the env and runtime are being closed: a SIGTERM then must not cut the closing short
# (the supervisor's SIGKILL, a second later, still bounds it).
_closing = False


def _raise_stopped(signum: int, frame: Any) -> None:
    if not _closing:
        raise _Stopped(0)


def main(config: WorkerConfig, address: ChannelAddress, frames_out: Connection,
         status_connection: Connection) -> None:
    """Entry point of the rollout process (started by the supervisor with ``spawn``)."""
    become_background_child()
    # Without a handler SIGTERM ends the process at once; as SystemExit, ``finally`` still runs.
    signal.signal(signal.SIGTERM, _raise_stopped)
    resend_lost_stops(_Stopped)
    os.environ.update(_THREAD_LIMITS)
    keep_side_effects_out_of_user_folders()
    status = StatusSender(status_connection, "rollout")
    status.offer_stacks()
    try:
        reader = address.open_reader()
        _run(config, reader, frames_out, status)
    except ParentGone:
        pass
    except BrokenPipeError:
        pass  # the render process is gone; the supervisor decides what happens next
    except _Stopped:
        # The supervisor's SIGTERM: a stop, not an error. The env and runtime are closed (in
        # ``_run``); the interpreter's teardown is skipped, as the sampler workers do
        # (``exit_now``: with TensorFlow loaded it takes longer than the 1 s the supervisor
        # waits before it kills).
        exit_now(0)
    except HistoryHung as hung:
        # The supervisor starts the worker again without the history (its thread cannot be
        # ended alone); said in the trainer, once.
        status.error("rollout", history_hung=str(hung))
        sys.exit(1)
    except BaseException:  # noqa: BLE001 - report everything else
        status.error("rollout")
        sys.exit(1)


def _run(config: WorkerConfig, reader: ParamReader, frames_out: Connection,
         status: StatusSender) -> None:
    from async_plotter.env.recipe import build_env
    from async_plotter.env.state import WorkerEnvState
    from async_plotter.policy.recipe import PolicyRuntime

    global _closing
    runtime = env = None
    # With a history, one thread reads the channel for both the episodes here and the history.
    fan_out = UpdateFanOut(reader) if config.history_dir else None
    history: List[HistoryRecorder] = []
    try:
        runtime = PolicyRuntime(config.policy, config.deterministic)
        env = build_env(config.env, render_mode="rgb_array", quiet=True)
        env_state = WorkerEnvState(env, config.parameters.env_state, config.env.label)
        if config.initial_env_state is not None:  # before the videos' rate is planned
            env_state.apply(config.initial_env_state)
        stepper = EnvStepper(env, env_state)
        params = ParameterClient(fan_out.main if fan_out else reader, config.parameters, runtime,
                                 env_state, status)
        _play(config, stepper, runtime, params, frames_out, status, fan_out, history)
    finally:
        # Whatever ended it (a stop, an error, SIGTERM as SystemExit), as Gymnasium's vector
        # workers do: the env's files, viewers and pygame, the policy's graph and session. A
        # history recording in progress gets a moment to be written whole.
        _closing = True
        for recorder in history:
            recorder.stop(_HISTORY_STOP_SECONDS)
        _close_quietly("env", env)
        _close_quietly("policy runtime", runtime)


#: how long a stopping rollout process waits for a history recording in progress (the
#: supervisor kills it a second after its SIGTERM)
_HISTORY_STOP_SECONDS = 0.5


def _close_quietly(what: str, thing: Any) -> None:
    """``thing.close()``; a failure is logged, never raised over what ended the process."""
    close = getattr(thing, "close", None)
    if not callable(close):
        return
    try:
        close()
    except Exception:  # noqa: BLE001 - the error that ended the process is the one to report
        logger.warning("closing the rollout process's %s failed", what, exc_info=True)


def _play(config: WorkerConfig,
          stepper: EnvStepper,
          runtime: Any,
          params: ParameterClient,
          frames_out: Connection,
          status: StatusSender,
          fan_out: Optional[UpdateFanOut] = None,
          history: Optional[List[HistoryRecorder]] = None) -> None:
    """Announce the scene, then run episodes of the newest parameters until stopped; with
    ``fan_out``, start the history thread (into ``history``) once the first video's rollout is
    over."""
    env = stepper.env
    playback = plan_playback(env, config.fps)
    scene = dataclasses.replace(describe_scene(env, config),
                                fps=playback.fps,
                                stride=playback.stride,
                                env_rate=playback.rate)
    frames_out.send((StreamKind.SCENE, scene))
    observation, _ = env.reset(seed=config.seed)
    status.send(StatusKind.READY,
                scene=scene.kind,
                env=config.env.label,
                policy_call=runtime.warm_up(observation),
                env_rate=playback.rate,
                frame_stride=playback.stride,
                video_fps=playback.fps)
    recorder = None
    if fan_out is not None and history is not None:
        # Started after the first video's rollout: until the first video exists, the worker runs
        # at the trainer's priority, uncharged, and the history (a second policy runtime, a
        # whole episode per update) rides along only while that video is drawn (seconds).
        recorder = HistoryRecorder(config, fan_out.history, scene, status)
        history.append(recorder)
    remote = _RemoteView.open(config, scene, params, recorder)
    if not config.shows and remote is None:
        _record_only(params, recorder)
        return
    if remote is not None:
        frames_out = remote.stream(frames_out)
        config = dataclasses.replace(config, live=remote.live_now())
    shown_steps = ShownSteps(env, scene, frames_out, config.live, scene.fps or config.fps)
    # A video of an episode that ends at once (a young Hopper falls in 5-10 steps) would last a
    # fraction of a second; further episodes of the same parameters join it up to this length.
    chain = VideoChain(config.live, config.keeps_rollouts, playback.steps(config.min_video_seconds),
                       shown_steps, frames_out)
    rollout = _Rollout(config, stepper, runtime, params, shown_steps, chain, frames_out, status,
                       max(int(scene.stride), 1), recorder)
    episode_index = 0
    part, shown = 0, 0  # episodes and steps shown of ``params.current`` so far
    clipped = False  # the last video of ``params.current`` is a clip of its episode
    while True:
        if recorder is not None:
            recorder.check()
        if remote is not None and not part:
            rollout = _with_live(rollout, remote.before_episode())
            config = rollout.config
        chained = params.current is not None and part > 0
        fresh = not chained and (params.current is None or not config.live
                                 or params.newer_available())
        if fresh and not config.live and params.current is not None:
            _wait_for_the_drawing(rollout)  # ended at once by the final video's request
        # After the wait: the final video may have been asked for meanwhile.
        retake = not chained and clipped and _retake_due(params)
        fresh = fresh and not retake
        if fresh:
            if not params.update(timeout=1.0):
                continue
        if fresh or retake:
            part, shown = 0, 0
        current = params.current
        chain.before_episode(chained, params)
        info = EpisodeInfo(current.number, current.iteration, episode_index, part, retake)
        episode_index += 1
        # This process's first episode is clipped shorter; episodes chained to it stay whole.
        full = current.max_path_length
        clip = _clip_steps(current, config, playback, first=info.episode == 0)
        steps_left = max(full - shown, 1) if part else full
        clip_left = max(clip - shown, 1) if part else clip
        in_video = fresh or chained or retake  # not a live view's replay of ``current``
        wanted = chain.steps_wanted(in_video, shown)  # by the video of ``current``
        end = _run_episode(rollout, info, (steps_left, clip_left), wanted)
        shown += end.steps
        part = part + 1 if end.continued else 0
        if in_video:
            clipped = end.clipped
        if recorder is not None and not part and not recorder.started:
            recorder.start()
        status.send(StatusKind.EPISODE,
                    update=info.update,
                    steps=end.steps,
                    reward=end.total_reward,
                    completed=end.completed,
                    part=info.part,
                    iteration=info.iteration,
                    nonfinite_actions=stepper.take_nonfinite())


def _retake_due(params: ParameterClient) -> bool:
    """Whether the current update's video, a clip of its episode, is to be made again whole:
    ``close()`` asked for the final video while that clip was drawn (it asks only where it
    found no finished video of the final policy), and the current update is the final one.
    Its steps were all sent before the request came (a rollout runs ahead of the drawing),
    so the clip could not go on to the episode's end (``_run_episode``)."""
    return params.final_requested() and not params.newer_available()


def _wait_for_the_drawing(rollout: "_Rollout") -> None:
    """Before a new video: until the render process has read the previous one's steps (it draws
    their last chunk meanwhile), or the final video is asked for. The pipe holds a whole
    budgeted video, whose drawing takes many iterations at short ones; taken without this wait,
    the next video's policy was the newest when the previous video began to be drawn, not when
    it can be drawn itself."""

    def beat() -> None:
        rollout.status.beat()
        if rollout.history is not None:
            rollout.history.check()

    wait_until_read(rollout.frames_out,
                    stop=rollout.params.final_requested,
                    beat=beat,
                    interval=0.1)


def _record_only(params: ParameterClient,
                 recorder: Optional[HistoryRecorder],
                 until: Callable[[], bool] = lambda: False) -> None:
    """Nothing here shows an episode (a trainer that only publishes, its history going to
    Redis), until ``until()``: no episode is run for nobody; the history thread records every
    policy, and this loop keeps taking the newest update, so that each is applied and reported
    as the trainer's check expects."""
    if recorder is not None and not recorder.started:
        recorder.start()  # no first video to wait for
    while not until():
        if recorder is not None:
            recorder.check()
        params.update(timeout=0.5)


class _RemoteView:
    """Viewers elsewhere, for a trainer that publishes (``WorkerConfig.live_target``): what this
    process sends its render process goes to Redis too while one watches
    (``channel/redis/live.py``), and the worker is live meanwhile (episodes of the newest
    policy, one after another in real time), whatever it is for its own outputs. A trainer with
    no outputs here runs no episode at all while nobody watches."""

    def __init__(self, publisher: Any, shows: bool, live: bool, params: ParameterClient,
                 recorder: Optional[HistoryRecorder]) -> None:
        self.publisher = publisher
        self._gated = not shows
        self._live = live
        self._params = params
        self._recorder = recorder

    @classmethod
    def open(cls, config: WorkerConfig, scene: SceneInfo, params: ParameterClient,
             recorder: Optional[HistoryRecorder]) -> Optional["_RemoteView"]:
        """The remote view of ``config``, None without one (or for an env that draws itself:
        no states to send)."""
        if config.live_target is None or scene.kind != "mujoco":
            return None
        from async_plotter.channel.redis.live import LivePublisher

        publisher = LivePublisher(config.live_target)
        publisher.send((StreamKind.SCENE, scene))
        return cls(publisher, config.shows, config.live, params, recorder)

    def stream(self, frames_out: Connection) -> Any:
        """Where the shown steps go: Redis alone, or both."""
        return self.publisher if self._gated else _Tee(frames_out, self.publisher)

    def live_now(self) -> bool:
        """Whether episodes are live now: for the outputs here, or for a viewer elsewhere."""
        return self._live or self._gated or self.publisher.watched

    def before_episode(self) -> bool:
        """Before an update's first episode: with no outputs here, wait for a viewer (applying
        each update meanwhile); whether this episode is live."""
        if self._gated:
            _record_only(self._params, self._recorder, until=lambda: self.publisher.watched)
        return self.live_now()


class _Tee:
    """The render process's pipe, and the remote view's publisher beside it (which drops what
    nobody watches)."""

    def __init__(self, pipe: Connection, publisher: Any) -> None:
        self._pipe = pipe
        self._publisher = publisher

    def send(self, message: Any) -> None:
        self._pipe.send(message)
        self._publisher.send(message)

    def fileno(self) -> int:
        return self._pipe.fileno()  # how much of the stream is unread (``video_chain``)


@dataclasses.dataclass(frozen=True)
class _Rollout:
    """What every episode of the rollout process works with: the env and the policy, the newest
    parameters, and where the shown steps and the reports go."""

    config: WorkerConfig
    stepper: EnvStepper
    runtime: Any
    params: ParameterClient
    shown: ShownSteps
    #: which episodes make a video, and the catch-up of a short one beside a live view
    chain: VideoChain
    frames_out: Connection
    status: StatusSender
    #: every ``stride``-th step is shown
    stride: int
    #: the history thread, whose failure ends the process too (None: no history)
    history: Optional[HistoryRecorder] = None


def _with_live(rollout: _Rollout, live: bool) -> _Rollout:
    """``rollout``, live or not from its next episode on (a viewer elsewhere came or left)."""
    if live == rollout.config.live:
        return rollout
    rollout.shown.set_live(live)
    rollout.chain.set_live(live)
    return dataclasses.replace(rollout, config=dataclasses.replace(rollout.config, live=live))


def _clip_steps(update: ParamUpdate,
                config: WorkerConfig,
                playback: Playback,
                first: bool = False) -> int:
    """Where a video recorded while training stops: ``video_length`` steps, else
    ``video_seconds`` of simulated time in this env's steps (most of a video's CPU is its
    frames, and the budget buys more, fresher videos when each is shorter), at most
    ``FIRST_VIDEO_SECONDS`` for this process's ``first`` video. Live views get whole rollouts, and
    so does the final policy's video (``_run_episode`` goes on past the clip once the final
    video is asked for)."""
    if config.live:
        return update.max_path_length
    if config.video_length is not None:
        return min(update.max_path_length, config.video_length)
    if config.video_seconds is not None:
        seconds = config.video_seconds
        if first:
            seconds = min(seconds, max(FIRST_VIDEO_SECONDS, config.min_video_seconds))
        return min(update.max_path_length, playback.steps(seconds))
    return update.max_path_length


def _run_episode(rollout: _Rollout, info: EpisodeInfo, limits: Tuple[int, int],
                 video_steps_wanted: int) -> EpisodeEnd:
    """One episode of at most ``limits[0]`` steps, cut at ``limits[1]`` unless the final video
    is asked for; every ``rollout.stride``-th step is shown (streamed to the render process),
    and the first and last always (a video ends on the episode's true final state). The env is
    stepped by ``env/stepper.EnvStepper``, the trainer-side check's way of stepping it. In a
    live view, newer parameters cut the episode unless the video still wants
    ``video_steps_wanted`` of it: ``rollout.chain`` catches those up first."""
    max_path_length, clip_length = limits
    config, params, shown, chain = rollout.config, rollout.params, rollout.shown, rollout.chain
    stepper, runtime = rollout.stepper, rollout.runtime
    observation = stepper.reset(None if config.seed is None else config.seed + info.episode)
    reset = getattr(runtime.policy, "reset", None)
    if callable(reset):
        reset()  # as rllab's and garage's rollout(): recurrent policies clear their state here
    rollout.frames_out.send((StreamKind.BEGIN, info))
    total_reward, steps, completed, ended_early, clipped = 0.0, 0, True, False, False
    unsent_reward = 0.0  # since the previous shown step (a recording keeps it per shown step)
    shown.add()
    for steps in range(1, max_path_length + 1):
        # A viewer should see the newest policy now, not in 30 s; so should the final video.
        if ((config.live or params.final_requested()) and params.newer_available()
                and not chain.keeps_going(steps - 1, video_steps_wanted, total_reward, params)):
            completed = False
            if config.live:
                shown.drop()  # steps of the old policy not yet due on screen
            break
        step = stepper.step(runtime.act(observation))
        observation = step.observation
        total_reward += step.reward
        unsent_reward += step.reward
        at_clip = ((steps >= clip_length and not params.final_requested())
                   or chain.enough(steps, video_steps_wanted))
        if step.ended or at_clip or steps == max_path_length or steps % rollout.stride == 0:
            shown.add(step.action, unsent_reward)
            unsent_reward = 0.0
        rollout.status.beat()
        if rollout.history is not None:
            rollout.history.check()
        if step.ended:
            ended_early = steps < max_path_length
            break
        if at_clip:
            clipped = steps < max_path_length  # the episode would have gone on
            break
    shown.flush()
    # Chain another episode of these parameters into the same video while it is still short:
    # a video lasts min_video_seconds even when newer parameters wait (a young Hopper falls in
    # 0.1 s), except once the final video is asked for (``worker/video_chain.py``).
    continued = chain.continues(completed and ended_early, steps, video_steps_wanted, params)
    end = EpisodeEnd(steps, total_reward, completed, continued=continued, clipped=clipped)
    rollout.frames_out.send((StreamKind.END, end))
    chain.episode_ended(continued)
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
