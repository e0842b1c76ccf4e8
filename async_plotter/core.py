"""The trainer's handle on the plot worker: ``Plotter``.

The trainer keeps only a shared-memory channel, a supervisor thread and the CPU budget's governor;
everything slow (TensorFlow policy rebuild, rollouts, rendering, video encoding) happens in two
child processes held to a CPU budget. ``update_plot`` copies the flat parameters into shared memory
and returns; the worker picks up the newest vector whenever it is ready for one. ``close()`` makes
sure the newest policy has a video before it stops the worker.
"""
import atexit
import enum
import logging
import math
import numbers
import os
import sys
import tempfile
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import cloudpickle
import numpy as np

from async_plotter.channel.base import ParamWriter
from async_plotter.channel.shm import SharedMemoryWriter, supported_dtype
from async_plotter.display import offscreen_gl_backend, private_runtime_dir, x_display_available
from async_plotter.env_recipe import describe_env
from async_plotter.errors import (InvalidArgumentError, NoDisplayError, ParameterMismatchError,
                                  PlotterClosedError, PolicyProtocolError, VideoDirError)
from async_plotter.policy_adapters import PolicyAdapter, adapter_for
from async_plotter.policy_recipe import describe_policy
from async_plotter.preflight import check_before_start
from async_plotter.processes import POLICY_DEVICES
from async_plotter.render.camera import check_camera_argument
from async_plotter.render.sinks.base import FrameSink
from async_plotter.validation import (boolean, callable_or_none, cpu_fraction, frame_size as
                                      checked_frame_size, is_int, metrics as checked_metrics,
                                      non_negative_int, non_negative_number, one_of, positive_int,
                                      positive_number)
from async_plotter.worker.budget import DEFAULT_BUDGET
from async_plotter.worker.config import WorkerConfig
from async_plotter.worker.sinks import (CallbackSpec, HttpSpec, SinkSpec, TensorBoardSpec,
                                        UserSinkSpec, VideoSpec, WindowSpec)
from async_plotter.worker.priorities import PRIORITIES
from async_plotter.worker.summary import summarize_videos
from async_plotter.worker.supervisor import WorkerSupervisor, new_worker_stats

logger = logging.getLogger("async_plotter")

_QUALITIES = ("auto", "cheap", "full")

# The final video's default time limit: start-up left to finish plus a rollout of
# max_path_length steps at ~30 ms each (measured ~12 ms a step at full speed with the cheap
# preset on 2 cores; the rest is margin for a machine still busy with other work).
_FINAL_VIDEO_BASE_SECONDS = 5.0
_FINAL_VIDEO_SECONDS_PER_STEP = 0.03
#: seconds of simulated time a video recorded while training shows at most, the same span on
#: every env (``Plotter(video_length="auto")``; the rollout process turns it into steps from
#: the env's rate: 1000 Hopper steps, 200 Swimmer steps, 160 HalfCheetah steps). 8 s is a whole
#: default episode of Hopper and Walker2d (1000 steps at 125 steps/s) and several strides of
#: any gait; at a cap of 30 frames/s it is 160-250 frames, about the 200 that the earlier
#: default of 200 steps drew. A video's CPU is nearly all its frames, and on a machine kept busy
#: by training each CPU-second the worker takes costs ~0.6 s of training time (measured), so
#: shorter videos let the same budget buy more of them.
DEFAULT_VIDEO_SECONDS = 8.0
#: ``Plotter(video_length=...)``'s default: ``DEFAULT_VIDEO_SECONDS`` of simulated time
DEFAULT_VIDEO_LENGTH = "auto"
# After the final video: time for the processes to finish and exit.
_SHUTDOWN_SECONDS = 10.0
# close() of a publish-only trainer (channel=...): at most this long for the last update to reach
# Redis, whatever the server does (as RedisWriter.close's own default).
_PUBLISH_CLOSE_SECONDS = 2.0


class PlotterState(enum.Enum):
    """A Plotter is created, then running (after ``start()`` or the first ``update_plot``), then
    closed for good."""

    CREATED = "created"
    RUNNING = "running"
    CLOSED = "closed"


class Plotter:
    """Shows the newest policy acting in its env, from a separate worker, without slowing training.

    Args:
        env: a Gymnasium id (``"Swimmer-v5"``), an ``EnvSpec``, a zero-argument factory, or an env
            instance (rebuilt in the worker; the trainer's object is never shared).
        policy: an rllab-protocol policy, a built ``keras.Model`` or a ``tf.Module``.
        max_path_length: rollout length limit (per update it can be overridden in ``update_plot``).
        video_dir: write one mp4 per rendered update here (``iter_0007.mp4`` / ``update_0003.mp4``).
        tensorboard_dir: write each rendered update's rollout into a TensorBoard event file here,
            as an animated image ``rollout/<env>`` at step = its iteration (else its update
            number; the initial policy's at step -1); at most 100 frames of at most 160 px. Written in the render process
            without TensorFlow; ``tensorboard --logdir`` on this folder (or a parent) shows it.
        tensorboard_scalars: with ``tensorboard_dir``, also write the ``metrics`` passed to
            ``update_plot`` as scalars (turn off where the trainer writes its own).
        window: ``True`` opens a window (error without a display), ``"auto"`` only if a display
            exists, ``False`` never.
        fps: the frame cap: frames drawn per second at most. Videos (and live views, GIFs in
            TensorBoard, ``on_frame``) play at the env's own rate, real time:
            ``metadata["render_fps"]``, else ``1 / env.unwrapped.dt``, else ``fps``. Where that
            rate is above the cap only every k-th step is drawn, the smallest k that brings it
            within 5% of the cap: Hopper and Walker2d (125 steps/s) every 4th step at 31.25
            frames/s, CartPole and Reacher (50) every 2nd at 25, Swimmer (25) every step.
            ``stats["video_fps"]`` and ``stats["frame_stride"]`` say what the worker chose.
        deterministic: show the policy's mean action when it reports one.
        quality: ``"auto"`` (cheap visuals on software GL, full on a GPU), ``"cheap"`` or ``"full"``.
        budget: the fraction of the machine's CPU plotting may take from a busy trainer
            (``0.05``: 5%), beyond CPU that would otherwise be idle, which it uses freely; both
            worker processes and the video encoder count, over windows of a few seconds. Start-up
            and the final video are not held to it. Default ``DEFAULT_BUDGET``. See the
            README's "Cost and knobs".
        priority: a fixed CPU priority instead of a budget: ``"idle"`` (Linux ``SCHED_IDLE``:
            only otherwise idle CPU; a trainer that keeps every core busy leaves it few frames),
            ``"low"`` (nice 10) or ``"normal"``. Applied once the worker has started.
        final_video_timeout: seconds ``close()`` may wait for a video of the newest parameters
            when none exists yet (recorded at full speed: training is over). Default: enough
            for one rollout of ``max_path_length`` steps with the cheap visual preset on a
            2-core machine. ``0`` skips the final video.
        min_video_seconds: a recorded video lasts at least this long (seconds of simulated
            time, which is playback time): an episode that ends sooner is followed by more
            episodes of the same parameters in the same file (up to ``max_path_length`` steps
            in all), also while newer parameters wait. Only once ``close()`` asks for the newest
            parameters' video may an older one end with its episode.
        video_length: how much a video recorded while training shows at most (its rollout
            stops there). ``"auto"`` (default): ``DEFAULT_VIDEO_SECONDS`` (8) seconds of
            simulated time, the same span on every env, in steps of its own rate (1000 Hopper
            steps, 200 Swimmer steps); an int: that many steps; None: whole rollouts. Nearly
            all of a video's CPU is its frames, so shorter videos let the budget buy more,
            fresher ones. The final policy's video at ``close()`` and live views (window,
            ``http``) show whole rollouts of up to ``max_path_length`` steps.
        policy_device: where the worker's TensorFlow runs the policy: ``"cpu"`` (default; the
            rollout process starts with ``CUDA_VISIBLE_DEVICES=""``: TensorFlow reserves most
            of a GPU's memory in every process that initialises CUDA, and a one-observation
            step is faster on the CPU anyway) or ``"gpu"`` (the trainer's GPUs, with
            TensorFlow's memory growth on). The trainer's own environment is never changed,
            and the render process draws with the GPU (EGL) either way.
        max_restarts: worker failures tolerated before plotting is disabled (training goes on).
        hang_timeout: seconds without progress after which a worker process counts as hung.
        frame_size: ``(width, height)`` of rendered frames; default the env's own.
        policy_factory: zero-argument function that builds the policy's structure in the worker,
            for policies that cannot be pickled (parameters still come from ``update_plot``).
        on_frame: ``f(frame, info)`` called in the render process for every frame drawn (every
            ``stats["frame_stride"]``-th step); ``info`` has ``update``, ``iteration``,
            ``episode`` and ``fps`` (the frames' rate in simulated time, as videos play).
        sinks: your own outputs: ``FrameSink`` subclass instances (see
            ``async_plotter.FrameSink``), pickled here and run in the render process, which
            calls ``attach``, ``begin_episode``, ``add_frame``, ``end_episode``,
            ``on_metrics`` and ``close`` on them.
        on_event: ``f(kind, payload)`` called in a trainer thread for every worker report.
        seed: seeds the worker's episodes (``seed + episode``); None for random starts.
        http: serve a live page from the worker: a port (``8080``; ``0`` picks a free one) or
            ``"host:port"``. Binds to 127.0.0.1 unless told otherwise; other addresses need
            ``http_token``. The address is in ``stats["http_url"]`` (None until the page
            serves, seconds after ``start()``); ``wait_for_http_url(timeout)`` waits for it.
        http_token: the token a browser must present (``?token=...``); default
            ``$ASYNC_PLOTTER_HTTP_TOKEN``.
        channel: ``None`` renders here; ``"redis://host:6379/0"`` (or ``rediss://``) publishes
            the parameters to Redis for ``async-plotter view`` on another machine instead.
        experiment: the experiment's name on the Redis server (required with ``channel``).
        secret: HMAC key signing what is published to Redis; default ``$ASYNC_PLOTTER_SECRET``.
        camera: how MuJoCo scenes are framed. ``None`` (default): locomotion envs follow their
            body (as ``"track"``), others are framed at least as well as their own
            ``render()``; ``"track"``: keep the root body in frame (the XML's ``track`` camera,
            else a camera tracking the body); a camera name or id of the model; or a dict of
            free-camera settings (``lookat``, ``distance``, ``azimuth``, ``elevation``,
            ``trackbodyid``: a body to follow), like Gymnasium's ``default_camera_config``.
            An unknown name is a ``CameraError`` here, listing the model's cameras.
        sess, graph: accepted for garage's ``Plotter(env, policy, sess=..., graph=...)`` and
            ignored: the worker builds its own ``tf.Graph`` and session (parameters travel as a
            flat vector, never through the trainer's session).

    Before anything starts or is written, the constructor builds the env once without rendering,
    lets the policy act once on its first observation and checks the action against the action
    space (``PolicyShapeError``), and checks that a self-drawing env returns RGB frames
    (``EnvRenderError``); see ``async_plotter.preflight``.
    """

    _shape: Optional[Tuple[int, ...]] = None
    _dtype: Optional[np.dtype] = None

    def __init__(self,
                 env: Any,
                 policy: Any,
                 max_path_length: int = 500,
                 video_dir: Optional[Union[str, os.PathLike]] = None,
                 window: Union[bool, str] = "auto",
                 fps: float = 30,
                 *,
                 deterministic: bool = False,
                 quality: str = "auto",
                 budget: Optional[float] = None,
                 priority: Optional[str] = None,
                 final_video_timeout: Optional[float] = None,
                 min_video_seconds: float = 3.0,
                 video_length: Union[int, str, None] = DEFAULT_VIDEO_LENGTH,
                 policy_device: str = "cpu",
                 max_restarts: int = 3,
                 hang_timeout: float = 60.0,
                 frame_size: Optional[Tuple[int, int]] = None,
                 policy_factory: Optional[Callable[[], Any]] = None,
                 on_frame: Optional[Callable[[np.ndarray, dict], Any]] = None,
                 sinks: Sequence[FrameSink] = (),
                 tensorboard_dir: Optional[Union[str, os.PathLike]] = None,
                 tensorboard_scalars: bool = True,
                 on_event: Optional[Callable[[str, dict], Any]] = None,
                 seed: Optional[int] = None,
                 http: Optional[Union[int, str]] = None,
                 http_token: Optional[str] = None,
                 channel: Optional[str] = None,
                 experiment: Optional[str] = None,
                 secret: Optional[Union[str, bytes]] = None,
                 camera: Any = None,
                 sess: Any = None,
                 graph: Any = None) -> None:
        self._max_path_length = positive_int("max_path_length", max_path_length)
        fps = positive_number("fps", fps)
        one_of("quality", quality, _QUALITIES)
        budget = _checked_budget(budget, priority)
        if final_video_timeout is None:
            final_video_timeout = (_FINAL_VIDEO_BASE_SECONDS +
                                   _FINAL_VIDEO_SECONDS_PER_STEP * self._max_path_length)
        else:
            final_video_timeout = non_negative_number("final_video_timeout", final_video_timeout)
        min_video_seconds = non_negative_number("min_video_seconds", min_video_seconds)
        video_length, video_seconds = _video_span(video_length)
        one_of("policy_device", policy_device, POLICY_DEVICES)
        max_restarts = non_negative_int("max_restarts", max_restarts)
        hang_timeout = positive_number("hang_timeout", hang_timeout)
        boolean("deterministic", deterministic)
        frame_size = checked_frame_size(frame_size)
        if seed is not None and not is_int(seed):
            raise InvalidArgumentError(f"seed must be an int or None, got {seed!r}")
        callable_or_none("on_frame", on_frame)
        callable_or_none("on_event", on_event)
        user_sinks = _user_sink_specs(sinks)
        window = _resolve_window(window)
        video_dir = _video_dir_path(video_dir)  # created only once every check has passed
        tensorboard_dir = _video_dir_path(tensorboard_dir, "tensorboard_dir")
        boolean("tensorboard_scalars", tensorboard_scalars)
        camera = check_camera_argument(camera)
        del sess, graph  # garage passes them; the worker has its own graph and session
        http_config = None
        if http is not None:
            from async_plotter.web.address import parse_http_address

            http_config = parse_http_address(http, http_token)
        self._channel_url = channel
        self._experiment = experiment
        self._secret = secret
        if channel is not None:
            from async_plotter.channel.redis.writer import check_channel_arguments

            check_channel_arguments(channel, experiment, secret)

        env_recipe = describe_env(env)
        policy_recipe = self._read_policy(policy, policy_factory)
        with private_runtime_dir():  # pygame's Wayland probe: no "XDG_RUNTIME_DIR" error line
            check_before_start(env_recipe,
                               policy_recipe,
                               policy,
                               self._adapter,
                               camera,
                               policy_on_cpu=policy_device == "cpu")
        _create_video_dir(video_dir)
        _create_video_dir(tensorboard_dir, "tensorboard_dir")

        specs = _output_specs(video_dir, window, http_config, on_frame) + user_sinks
        if tensorboard_dir:
            specs.append(TensorBoardSpec(tensorboard_dir, scalars=tensorboard_scalars))
        self._stats: Dict[str, Any] = new_worker_stats()
        # With a Redis channel the viewer elsewhere renders; this process only publishes.
        self._has_output = bool(specs or channel)
        if not self._has_output:
            self._stats["disabled"] = True
            logger.warning(
                "Plotter has nowhere to show anything: no display for a window (DISPLAY is %s) and "
                "no video_dir. Plotting is off; pass video_dir='videos' to get mp4 files, or run "
                "where a display exists.",
                os.environ.get("DISPLAY") or "unset")
        self._config = WorkerConfig(
            env=env_recipe,
            policy=policy_recipe,
            max_path_length=self._max_path_length,
            fps=fps,
            deterministic=deterministic,
            quality=quality,
            priority=priority,
            frame_size=frame_size,
            mujoco_gl=offscreen_gl_backend(),
            seed=seed,
            camera=camera,
            budget=budget,
            min_video_seconds=min_video_seconds,
            video_length=video_length,
            video_seconds=video_seconds,
            policy_device=policy_device,
        ).with_sinks(specs)
        self._final_video_timeout = final_video_timeout
        self._iterations: list = []  # iterations passed to update_plot, in order
        self._started_at: Optional[float] = None
        self._max_restarts = max_restarts
        self._hang_timeout = hang_timeout
        self._on_event = on_event
        self._writer: Optional[ParamWriter] = None
        self._supervisor: Optional[WorkerSupervisor] = None
        self._state = PlotterState.CREATED
        self.video_dir = video_dir
        self.tensorboard_dir = tensorboard_dir
        self.window = bool(window)

    # ------------------------------------------------------------------------------ public API

    def start(self) -> "Plotter":
        """Start the worker in the background and return at once. Calling it again does nothing."""
        if self._state is PlotterState.CLOSED:
            raise PlotterClosedError("this Plotter was closed; create a new one")
        if self._state is PlotterState.RUNNING:
            return self
        self._state = PlotterState.RUNNING
        self._started_at = time.monotonic()
        if not self._has_output:
            return self
        if self._channel_url is not None:
            from async_plotter.channel.redis.writer import RedisWriter

            self._writer = RedisWriter(self._channel_url, self._experiment, self._config,
                                       self._size, self._dtype, self._secret, self._stats)
            self._writer.publish(self._initial, None, self._max_path_length, number=0)
            _close_at_exit(self)
            return self
        writer = SharedMemoryWriter(self._size, self._dtype)
        writer.publish(self._initial, None, self._max_path_length, number=0)
        self._supervisor = WorkerSupervisor(self._config,
                                            writer.address,
                                            self._stats,
                                            max_restarts=self._max_restarts,
                                            hang_timeout=self._hang_timeout,
                                            listener=self._on_event)
        writer.deliver_metrics = self._supervisor.post_metrics
        self._writer = writer
        self._supervisor.start()
        _close_at_exit(self)
        return self

    def update_plot(self,
                    policy: Any,
                    max_path_length: Optional[int] = None,
                    iteration: Optional[int] = None,
                    metrics: Optional[Dict[str, float]] = None,
                    *,
                    max_length: Optional[float] = None) -> None:
        """Hand the policy's newest parameters to the worker. Never waits for the worker.

        Costs one copy of the parameter vector. Updates that arrive while the worker is busy are
        skipped, never queued: the worker always shows the newest one it can get. ``metrics``
        (e.g. ``{"AverageReturn": 12.5}``) feed the live page's learning curve.
        ``max_path_length`` (or rllab's name, ``max_length``) caps this update's rollouts;
        ``None`` or ``math.inf`` (rllab's ``update_plot(policy, np.inf)``) means no cap beyond
        the plotter's own ``max_path_length``.
        """
        if self._state is not PlotterState.RUNNING:
            if self._state is PlotterState.CLOSED:
                raise PlotterClosedError(
                    "update_plot() called after close(); create a new Plotter to plot again")
            self.start()
        adapter = self._adapter if type(policy) is self._policy_type else adapter_for(policy)
        flat = self._flat(policy, adapter, "update_plot()")
        max_path_length = self._rollout_cap(max_path_length, max_length)
        if iteration is not None and (not is_int(iteration) or iteration < 0):
            raise InvalidArgumentError(
                f"iteration must be a non-negative int or None, got {iteration!r}")
        if metrics is not None:
            metrics = checked_metrics(metrics)
        self._stats["updates_sent"] += 1
        if iteration is not None:
            self._iterations.append(iteration)
        if self._writer is None or self._stats["disabled"]:
            return
        self._writer.publish(flat, iteration, max_path_length)
        if metrics:
            if not self._writer.post_metrics(iteration, metrics):
                logger.warning(
                    "update_plot(): metrics dropped, too large to send (%d keys); "
                    "send a few scalars", len(metrics))

    @property
    def stats(self) -> Dict[str, Any]:
        """A snapshot of the worker's counters; never blocks.

        Keys: ``updates_sent``, ``updates_applied`` (updates the worker rendered; newest-wins
        skips the others), ``episodes``, ``frames``, ``videos``, ``restarts``, ``alive``,
        ``disabled``, ``last_applied_update``, ``last_applied_iteration``, ``last_video``,
        ``final_video`` (the video of the newest parameters made at ``close()``), ``video_log``
        (path, update, iteration, episodes, frames of each video), ``last_error``,
        ``gl_renderer``, ``visual_preset``, ``policy_call`` (how the worker calls the policy
        each step: ``"xla"`` or ``"graph"``, one traced TensorFlow function, ``"eager"`` where
        it cannot be traced, ``"get_action"`` for rllab-protocol policies), ``env_rate`` (the env's steps per second of
        simulated time), ``frame_stride`` (every how many steps a frame is drawn),
        ``video_fps`` (the videos' frame rate), ``worker_pids``, ``boot_seconds`` (start to both
        processes ready), ``worker_cpu_seconds`` / ``boot_cpu_seconds`` /
        ``budget_charged_seconds`` (the worker's CPU: in all, while starting, and counted
        against the budget), ``budget``, ``budget_mechanism`` (``"sched"``: ``SCHED_IDLE`` when
        over budget; ``"stop"``: stopped when over budget, where priorities cannot be raised),
        ``http_url`` (the live page's address; None until it serves).
        """
        return dict(self._stats)

    def wait_for_http_url(self, timeout: float = 30.0) -> Optional[str]:
        """The live page's address (``Plotter(http=...)``), waiting up to ``timeout`` seconds
        for the worker to serve it (it starts TensorFlow and the page first: seconds after
        ``start()``, which this calls if need be). None without ``http=``, once plotting is
        off, or if it is not serving by then. The URL is also in ``stats["http_url"]``."""
        timeout = non_negative_number("timeout", timeout)
        if not any(isinstance(spec, HttpSpec) for spec in self._config.sinks):
            return None
        if self._state is PlotterState.CREATED:
            self.start()
        deadline = time.monotonic() + timeout
        while True:
            url = self._stats.get("http_url")
            if url or self._stats["disabled"] or self._state is PlotterState.CLOSED:
                return url or None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(0.05, remaining))

    def close(self, timeout: Optional[float] = None, *, final_video: bool = True) -> None:
        """Stop the worker. First, when no video shows the newest parameters yet, the worker
        records one at full speed (at most ``final_video_timeout`` seconds; ``final_video=False``
        skips it); then it finishes the video it is writing and exits. Bounded by ``timeout``
        seconds in all (default: the final video's limit plus 10 s), after which the worker is
        terminated, then killed. A publish-only trainer (``channel=...``) has no video to wait
        for: it waits at most 2 s for its last update to reach Redis, whatever the server does.
        Logs a one-line summary of the videos. Calling it again does nothing."""
        if self._state is PlotterState.CLOSED:
            return
        if not final_video:
            timeout = min(timeout, _SHUTDOWN_SECONDS) if timeout is not None else 3.0
        elif timeout is None:
            timeout = self._final_video_timeout + _SHUTDOWN_SECONDS
        else:
            timeout = non_negative_number("timeout", timeout)
        self._state = PlotterState.CLOSED
        deadline = time.monotonic() + timeout
        try:
            if self._supervisor is not None:
                try:
                    if final_video:
                        self._record_final_video(min(self._final_video_timeout, 0.8 * timeout))
                except BaseException:
                    self._supervisor.abort()  # Ctrl-C while waiting: wait no longer
                    raise
                self._supervisor.stop(max(deadline - time.monotonic(), 0.1))
        finally:
            # Also after a Ctrl-C during the wait above: the segment must not outlive close()
            # (otherwise only the resource tracker, at the interpreter's exit, removes it).
            if self._writer is not None:
                # What the writer still has to deliver (Redis: the last update) gets the rest;
                # a publish-only trainer has no video to wait for, and a Redis server that
                # never answers must not hold it longer than the writer's own bound.
                remaining = max(deadline - time.monotonic(), 0.1)
                if self._supervisor is None:
                    remaining = min(remaining, _PUBLISH_CLOSE_SECONDS)
                self._writer.close(remaining)
            self._stats["alive"] = False
        if self._supervisor is not None:
            logger.info(
                "%s",
                summarize_videos(self._stats, self._iterations,
                                 time.monotonic() - (self._started_at or 0.0), self._config.budget,
                                 self.video_dir))

    def _record_final_video(self, timeout: float) -> None:
        writer, supervisor = self._writer, self._supervisor
        if (writer is None or supervisor is None or not self._config.records or timeout <= 0
                or self._stats["disabled"] or supervisor.newest_video_update >= writer.published):
            return
        writer.request_final()
        started = time.monotonic()
        if supervisor.wait_for_final_video(writer.published, timeout):
            logger.debug("final video after %.1f s", time.monotonic() - started)
        elif not self._stats["disabled"]:
            logger.warning(
                "close(): the video of the final policy was not finished within %.0f s; what "
                "was recorded of it is kept. Raise final_video_timeout= (or close(timeout=)) "
                "to wait longer.", timeout)

    def __enter__(self) -> "Plotter":
        return self.start()

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        # A block that raised (Ctrl-C included) did not end its run: no final video to wait for.
        self.close(final_video=exc_type is None)

    def __repr__(self) -> str:
        return (f"Plotter(env={self._config.env.label!r}, state={self._state.value}, "
                f"updates_sent={self._stats['updates_sent']})")

    # ------------------------------------------------------------------------------- internals

    def _read_policy(self, policy: Any, factory: Optional[Callable[[], Any]]) -> Any:
        """Classify the policy, pack its structure and keep its initial parameters."""
        self._adapter = adapter_for(policy)
        recipe = describe_policy(policy, self._adapter, factory)
        initial = self._flat(policy, self._adapter, "the policy given to Plotter()")
        if initial.size == 0:
            raise PolicyProtocolError(
                f"the policy {type(policy).__qualname__} has no parameters (its flat parameter "
                "vector is empty), so nothing sent by update_plot() would ever change what is "
                "shown. Plot the object that holds the trained variables, or make "
                "get_param_values() return them.")
        self._size = initial.size
        self._shape = initial.shape
        self._dtype = initial.dtype
        self._initial = initial.copy()
        self._policy_type = type(policy)
        return recipe

    def _rollout_cap(self, max_path_length: Any, max_length: Any) -> int:
        if max_length is not None:
            if max_path_length is not None:
                raise InvalidArgumentError(
                    "update_plot(): pass max_path_length= or max_length= (rllab's name), not both")
            max_path_length, name = max_length, "max_length"
        else:
            name = "max_path_length"
        if max_path_length is None or (isinstance(max_path_length, numbers.Real)
                                       and not isinstance(max_path_length, bool)
                                       and math.isinf(max_path_length) and max_path_length > 0):
            return self._max_path_length
        return positive_int(name, max_path_length)

    def _flat(self, policy: Any, adapter: PolicyAdapter, where: str) -> np.ndarray:
        flat = adapter.flat(policy)
        if flat.shape == self._shape and flat.dtype == self._dtype:
            return flat  # the usual case, checked in two comparisons
        if flat.ndim != 1:
            raise ParameterMismatchError(
                f"{where}: the policy's parameters must be a 1-D vector, got shape {flat.shape}")
        if not supported_dtype(flat.dtype):
            raise ParameterMismatchError(
                f"{where}: parameters of dtype {flat.dtype} are not supported; use float32 or "
                "float64")
        size = getattr(self, "_size", None)
        if size is not None and (flat.size != size or flat.dtype != self._dtype):
            raise ParameterMismatchError(
                f"{where}: got {flat.size} parameters of dtype {flat.dtype}, but this Plotter "
                f"was built for {size} parameters of dtype {self._dtype}. The policy's structure "
                "must not change; create a new Plotter for a different policy.")
        return flat


# --------------------------------------------------------------------------- argument checks


def _video_span(video_length: Any) -> Tuple[Optional[int], Optional[float]]:
    """``(steps, seconds)`` a video recorded while training shows at most (None, None: whole)."""
    if isinstance(video_length, str) and video_length == "auto":
        return None, DEFAULT_VIDEO_SECONDS
    if video_length is not None and (not is_int(video_length) or video_length <= 0):
        raise InvalidArgumentError(
            "video_length must be a positive number of steps, 'auto' (DEFAULT_VIDEO_SECONDS "
            f"of simulated time) or None for whole rollouts; got {video_length!r}")
    return video_length, None


def _checked_budget(budget: Any, priority: Any) -> Optional[float]:
    """The budget in force: None with a fixed priority, else the given one or the default."""
    if priority is None:
        return DEFAULT_BUDGET if budget is None else cpu_fraction("budget", budget)
    one_of("priority", priority, PRIORITIES)
    if budget is not None:
        raise InvalidArgumentError(
            f"pass either budget= or priority=, not both (got budget={budget!r}, "
            f"priority={priority!r}): a budget sets the worker's priority itself")
    return None


def _output_specs(video_dir: Optional[str], window: bool, http_config: Any,
                  on_frame: Optional[Callable[..., Any]]) -> List[SinkSpec]:
    """The built-in outputs asked for, as sink specs for the render process."""
    specs: List[SinkSpec] = []
    if video_dir:
        specs.append(VideoSpec(video_dir))
    if window:
        specs.append(WindowSpec())
    if http_config is not None:
        specs.append(HttpSpec(http_config, video_dir))
    if on_frame is not None:
        specs.append(CallbackSpec(cloudpickle.dumps(on_frame)))
    return specs


def _user_sink_specs(sinks: Any) -> List[UserSinkSpec]:
    """Each of the user's ``FrameSink`` objects, pickled now so that a problem is named here."""
    if isinstance(sinks, FrameSink) or not isinstance(sinks, (list, tuple)):
        raise InvalidArgumentError(
            f"sinks must be a list of FrameSink objects, got {type(sinks).__name__}")
    specs = []
    for index, sink in enumerate(sinks):
        name = f"sinks[{index}] ({type(sink).__qualname__})"
        if not isinstance(sink, FrameSink):
            raise InvalidArgumentError(
                f"{name} is not an async_plotter.FrameSink: subclass FrameSink and override "
                "what you need (add_frame, end_episode, ...)")
        try:
            payload = cloudpickle.dumps(sink)
        except Exception as error:  # pickling raises TypeError, PicklingError, ...
            raise InvalidArgumentError(
                f"{name} cannot be sent to the render process: pickling it failed: {error}. "
                "Open files, sockets and windows in attach(), not in __init__.") from error
        specs.append(UserSinkSpec(payload, name))
    return specs


def _resolve_window(window: Any) -> bool:
    if window == "auto" and isinstance(window, str):
        return x_display_available()
    if not isinstance(window, bool):
        raise InvalidArgumentError(f"window must be True, False or 'auto', got {window!r}")
    if window and not x_display_available():
        raise NoDisplayError(
            "window=True, but no display is reachable (DISPLAY is "
            f"{os.environ.get('DISPLAY') or 'unset'}). Use video_dir='videos' for mp4 files, or "
            "window='auto' to open a window only where a display exists.")
    return window


def _video_dir_path(video_dir: Any, name: str = "video_dir") -> Optional[str]:
    if video_dir is None:
        return None
    if not isinstance(video_dir, (str, os.PathLike)):
        raise InvalidArgumentError(f"{name} must be a path or None, got {type(video_dir).__name__}")
    return os.path.abspath(os.fspath(video_dir))  # the worker runs in another directory


def _create_video_dir(path: Optional[str], name: str = "video_dir") -> None:
    if path is None:
        return
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise VideoDirError(f"{name} {path!r} cannot be written: {error.strerror or error}. "
                            "Choose a directory you can write to.") from error


# ----------------------------------------------------------------------- shutdown at exit

_open_plotters: "weakref.WeakSet[Plotter]" = weakref.WeakSet()


def _close_at_exit(plotter: Plotter) -> None:
    _open_plotters.add(plotter)


@atexit.register
def _close_open_plotters() -> None:
    # The final policy's video is made at interpreter exit too, unless the script is exiting
    # because of an exception nobody caught (Ctrl-C among them): then the user wants out.
    failed = getattr(sys, "last_type", None) is not None
    for plotter in list(_open_plotters):
        plotter.close(final_video=not failed)
