"""The trainer's handle on the plot worker: ``Plotter``. ``update_plot`` copies the flat parameters
into the channel and returns; everything slow happens in the worker's two child processes, held to
a CPU budget; ``close()`` makes sure the newest policy has a video before it stops them. The
arguments become one checked, frozen configuration (``trainer/config.py``); once started, a route
(``trainer/routes.py``: local, or publish-only to Redis) owns the channel and the worker.
"""
import atexit
import dataclasses
import enum
import logging
import math
import numbers
import os
import sys
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from async_plotter.display import private_runtime_dir
from async_plotter.env.drift import ObservationDrift
from async_plotter.env.recipe import build_env
from async_plotter.errors import InvalidArgumentError, PlotterClosedError
from async_plotter.mujoco_warnings import kept_to_log
from async_plotter.policy.adapters import PolicyAdapter, adapter_for
from async_plotter.trainer.iteration_numbers import IterationNumbers
from async_plotter.trainer.model_check import ModelWatch
from async_plotter.trainer.rate_watch import RateWatch
from async_plotter.trainer.preflight import check_before_start, worker_env_state
from async_plotter.sinks.base import FrameSink
from async_plotter.validation import (metrics as checked_metrics, non_negative_number,
                                      optional_non_negative_int, positive_int)
from async_plotter.trainer.config import (DEFAULT_VIDEO_LENGTH, PlotterConfig, checked_parameters,
                                          create_output_dirs, plotter_config, with_extra_settings)
from async_plotter.trainer.routes import PlotRoute, open_route
from async_plotter.trainer.run_folder import (TENSORBOARD_OUTPUTS, RunFolder,
                                              hosts_a_plotters_events)
from async_plotter.sinks.specs import HttpSpec
from async_plotter.supervision.stats import WorkerStats
from async_plotter.trainer.summary import summarize_videos
from async_plotter.console import tell

logger = logging.getLogger("async_plotter")

# After the final video: time for the processes to finish and exit.
_SHUTDOWN_SECONDS = 10.0


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
        video_dir: write one mp4 per rendered update here (``iter_0007.mp4`` / ``update_0003.mp4``);
            it holds one run: an earlier run's outputs there move to ``earlier_runs/``.
        tensorboard_dir: write each rendered update's rollout into a TensorBoard event file here
            (``*.async_plotter``; an earlier run's move to ``earlier_runs/``), as an animated
            image ``rollout/<env>`` at step = its iteration (else its update number; the
            initial policy's at step -1), written without TensorFlow.
        tensorboard_scalars: with ``tensorboard_dir``, also write the ``metrics`` passed to
            ``update_plot`` as scalars (turn off where the trainer writes its own).
        window: ``True`` opens a window (error without a display), ``"auto"`` only if a display
            exists and there is no ``channel``, ``False`` never.
        fps: the frame cap: frames drawn per second at most. Every output plays at the env's own
            rate, real time; above the cap only every k-th step is drawn (Hopper: every 4th at
            31.25 frames/s); ``stats["video_fps"]`` and ``stats["frame_stride"]`` say which.
            The final video is drawn without the cap, and so is the first where only files
            are written (no window, page, ``on_frame`` or user sink): start-up and the end of
            training are not held to the budget, and the cap would only make them later.
        deterministic: show the policy's mean action when it reports one.
        quality: ``"auto"`` (cheap visuals on software GL, full on a GPU), ``"cheap"`` or
            ``"full"``.
        budget: the fraction of the machine's CPU plotting may take from a busy trainer
            (``0.05``: 5%) beyond idle CPU, which it uses freely; start-up and the final video
            are not held to it. Default ``DEFAULT_BUDGET``; see the README's "Cost and knobs".
        priority: a fixed CPU priority instead of a budget: ``"idle"`` (Linux ``SCHED_IDLE``:
            only otherwise idle CPU; a trainer that keeps every core busy leaves it few frames),
            ``"low"`` (nice 10) or ``"normal"``. Applied once the worker has started.
        final_video_timeout: seconds ``close()`` may wait for a video of the newest parameters
            when none exists yet. Default: enough for one ``max_path_length`` rollout, counted
            once the worker is ready (a worker still starting gets up to ``hang_timeout`` more);
            a number you pass bounds the whole wait. ``0`` skips the final video.
        min_video_seconds: a recorded video lasts at least this long (simulated time, which is
            playback time): an episode that ends sooner is followed by more of the same
            parameters in the same file (up to ``max_path_length`` steps in all).
        video_length: how much a video recorded while training shows at most. ``"auto"``
            (default): ``DEFAULT_VIDEO_SECONDS`` (8) seconds of simulated time on every env,
            3 for the run's first video (the untrained policy, drawn at start-up); an int:
            that many steps; None: whole rollouts. The final video and live views show whole
            rollouts of up to ``max_path_length`` steps.
        policy_device: where the worker's TensorFlow runs the policy: ``"cpu"`` (default: it
            sees no GPU, whose memory TensorFlow would reserve) or ``"gpu"`` (with memory
            growth). The render process draws with the GPU (EGL) either way.
        max_restarts: worker failures tolerated before plotting is disabled (training goes on).
        hang_timeout: seconds without progress after which a worker process counts as hung
            (restarted, saying where) if its CPU time stands still or it spins; the history's
            thread too (the worker goes on without the history).
        frame_size: ``(width, height)`` of rendered frames; default the env's own.
        policy_factory: zero-argument function that builds the policy's structure in the worker,
            for policies that cannot be pickled (parameters still come from ``update_plot``).
        on_frame: ``f(frame, info)`` called in the render process for every frame drawn (every
            ``stats["frame_stride"]``-th step); ``info`` has ``update``, ``iteration``,
            ``episode`` and ``fps`` (the frames' rate in simulated time, as videos play).
        sinks: your own outputs: ``async_plotter.FrameSink`` instances, pickled here and run in
            the render process.
        on_event: ``f(kind, payload)`` called in a trainer thread for every worker report.
        seed: seeds the worker's episodes (``seed + episode``); None for random starts.
        http: serve a live page from the worker: a port (``8080``; ``0`` picks a free one) or
            ``"host:port"``. Binds to 127.0.0.1 unless told otherwise; other addresses need
            ``http_token``. The address is in ``stats["http_url"]`` (None until the page
            serves, seconds after ``start()``); ``wait_for_http_url(timeout)`` waits for it.
        http_token: the token a browser must present (``?token=...``); default
            ``$ASYNC_PLOTTER_HTTP_TOKEN``.
        view: what ``http`` opens: ``"2d"`` the MJPEG page; ``"3d"`` the scene drawn by the
            browser from body poses (needs ``pip install -e .[view3d]``; the MJPEG page is then
            at ``/2d/``).
        record_states: also write every episode a live view (``http``, window) shows as a
            state recording (``async-plotter replay``) into ``<video_dir>/live/``, the newest
            ``LIVE_RECORDINGS_KEPT`` (100) kept. Needs ``video_dir`` and a live view.
        history: with ``video_dir``, keep the whole run: the worker rolls out every policy it
            takes once more, without drawing (one whole deterministic episode of up to
            ``max_path_length`` steps from the run's one start state: reset seed ``seed``, else
            0), into ``<video_dir>/history/iter_NNNN.npz``, and reports its return and length
            in ``stats["history"]``, the live page's curve and TensorBoard
            (``history/return``). ``True`` keeps at most 200 files (the newest quarter, older
            ones thinned evenly); an int that many; ``False`` turns it off. The final policy is
            recorded at ``close()``. An env that draws itself (not MuJoCo) keeps returns only.
        resume_after: this run resumes one that wrote ``video_dir``, from its snapshot of this
            iteration: the videos, recordings, history and returns of iterations up to it stay
            (the history goes on), those of later ones move to ``earlier_runs/`` (the resumed
            run does them again). Its initial policy is shown as that iteration, and an
            ``update_plot`` numbered before it is refused (it would overwrite the run's own).
            The live page's curve goes on from the kept returns; ``add_metrics`` adds the
            run's earlier metrics (``run_experiment_lite``'s resume gives them).
            None (default): a run of its own, and an earlier run's outputs in the folder move
            to ``earlier_runs/`` whole.
        channel: ``None`` renders here; ``"redis://host:6379/0"`` (or ``rediss://``) publishes
            the parameters to Redis for ``async-plotter view`` on another machine, instead of
            rendering here, or as well where outputs here are asked for too (``video_dir``,
            ``window``, ``http``, ``on_frame``, ``tensorboard_dir``, ``sinks``).
        experiment: the experiment's name on the Redis server (required with ``channel``).
        secret: HMAC key signing what is published to Redis; default ``$ASYNC_PLOTTER_SECRET``.
        camera: how MuJoCo scenes are framed. ``None`` (default): locomotion envs follow their
            body, others are framed at least as well as their own ``render()``; ``"track"``; a
            camera name or id of the model; or a dict of free-camera settings like Gymnasium's
            ``default_camera_config`` (``trackbodyid`` follows a body). Unknown: ``CameraError``.
        sess, graph: accepted for garage's ``Plotter(env, policy, sess=..., graph=...)`` and
            ignored: the worker builds its own ``tf.Graph`` and session (parameters travel as a
            flat vector, never through the trainer's session).
        verbose: ``1`` (default) shows the lines a user must see (the live page's address,
            ``close()``'s summary) on stderr when the program configured no logging; ``0`` not.

    Before anything starts or is written, the constructor checks that env, policy and camera fit
    together, raising a named error at this call (``async_plotter.trainer.preflight``).
    """

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
                 view: str = "2d",
                 record_states: bool = False,
                 history: Union[bool, int] = True,
                 resume_after: Optional[int] = None,
                 channel: Optional[str] = None,
                 experiment: Optional[str] = None,
                 secret: Optional[Union[str, bytes]] = None,
                 camera: Any = None,
                 sess: Any = None,
                 graph: Any = None,
                 verbose: int = 1) -> None:
        # Every argument, by name, to the one function that checks them all; this signature is
        # the only place that names them and their defaults.
        config = plotter_config({name: value for name, value in locals().items() if name != "self"})
        with private_runtime_dir():  # pygame's Wayland probe: no "XDG_RUNTIME_DIR" error line
            checked = check_before_start(config, policy)
        has_states = checked.has_states
        if checked.extra_settings:
            config = with_extra_settings(config, checked.extra_settings)
        # An env that draws itself has no states for a viewer elsewhere: no worker for them.
        config = dataclasses.replace(config,
                                     private_history=config.private_history and has_states,
                                     has_states=has_states)
        create_output_dirs(config)  # only once every check has passed
        #: the folders held for this run (videos, TensorBoard), an earlier run's files set aside
        self._run_folders = _claim_folders(config)
        self._config = config
        try:
            #: the trainer's observation wrappers against the worker's copy at each update
            self._drift = _observation_drift(config)
            #: the trainer's MuJoCo model, where it stays put, at each update
            self._model_watch = (ModelWatch.of(config.trainer_env, config.worker.env.label)
                                 if checked.model_kept else None)
            #: the trainer's env's rate, against the one the videos are planned at (where its
            #: settings travel to the worker's env)
            self._rate_watch = (RateWatch.of(config.trainer_env, config.worker.env.label)
                                if config.env_state is not None else None)
        except BaseException:
            # A Plotter that was never made claims nothing: the traceback a notebook keeps
            # would otherwise hold the folder against the cell's next run.
            for folder in self._run_folders:
                folder.release()
            raise
        self._stats = WorkerStats(disabled=not config.has_output)
        if not config.has_output:
            logger.warning(
                "Plotter has nowhere to show anything: no display for a window (DISPLAY is %s) and "
                "no video_dir. Plotting is off; pass video_dir='videos' to get mp4 files, or run "
                "where a display exists.",
                os.environ.get("DISPLAY") or "unset")
        # The numbers the updates' iterations are shown as, each once with a hash of its
        # parameters (one sent again, at once or later, is not another): the closing summary
        # compares the history's with them. A 100,000-iteration run's hold ~14 MB.
        self._iteration_numbers = IterationNumbers()
        self._started_at: Optional[float] = None
        self._route: Optional[PlotRoute] = None
        #: the process whose Plotter this is: a process forked from it holds a copy of this
        #: object (its pipes, its segment) and must not publish through it or close it
        self._owner_pid = os.getpid()
        self._told_forked = False
        self._state = PlotterState.CREATED
        self.video_dir = config.video_dir
        #: where the run's history recordings go (``<video_dir>/history``); None: no history
        self.history_dir = config.worker.history_dir if config.has_output else None
        self.tensorboard_dir = config.tensorboard_dir
        self.window = config.window
        _open_plotters.add(self)  # it holds its folder until closed: close_all() finds it

    # ------------------------------------------------------------------------------ public API

    def start(self) -> "Plotter":
        """Start the worker in the background and return at once. Calling it again does nothing."""
        if self._state is PlotterState.CLOSED:
            raise PlotterClosedError("this Plotter was closed; create a new one")
        if self._state is PlotterState.RUNNING:
            return self
        self._state = PlotterState.RUNNING
        self._started_at = time.monotonic()
        if self._config.has_output:
            # No room in /dev/shm, out of files or threads: the machine's state, not the user's
            # mistake, and plotting must never take training down.
            try:
                self._route = open_route(self._config, self._stats)
            except (OSError, RuntimeError) as error:
                self._stats.update(disabled=True, alive=False, last_error=str(error))
                logger.error("plotting is off: %s. Training goes on without it.", error)
                return self
            # Held until closed, as a running thread is: one whose last name went away (a function
            # that started it and returned) is still closed at exit, its final video made.
            _running_plotters.add(self)
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
        the plotter's own ``max_path_length``. ``iteration`` names the outputs
        (``iter_NNNN.mp4``); a count that starts again (an earlier number with other
        parameters) is numbered on after the newest, with a warning, so nothing is overwritten.
        """
        if not self._in_owner("update_plot()"):
            return
        if self._state is not PlotterState.RUNNING:
            if self._state is PlotterState.CLOSED:
                raise PlotterClosedError(
                    "update_plot() called after close(); create a new Plotter to plot again")
            self.start()
        config = self._config
        adapter = config.adapter if type(policy) is config.policy_type else adapter_for(policy)
        flat = self._flat(policy, adapter, "update_plot()")
        max_path_length = self._rollout_cap(max_path_length, max_length)
        iteration = optional_non_negative_int("iteration", iteration)
        resumed_after = config.resume_after
        if iteration is not None and resumed_after is not None and iteration < resumed_after:
            # The folder's outputs of that iteration are the run's own: kept, not overwritten.
            raise InvalidArgumentError(
                f"update_plot(iteration={iteration}): this Plotter resumes its run after "
                f"iteration {resumed_after} (resume_after), whose videos and history up "
                f"to it are kept, and iteration {iteration}'s would be overwritten. Number the "
                f"updates as the run does: {resumed_after + 1} on.")
        if metrics is not None:
            metrics = checked_metrics(metrics)
        route = self._route
        update = None
        if route is not None and not self._stats.disabled:
            update = config.worker.parameters.parts(flat, config.env_state)
            if self._drift is not None:  # before it counts: a refused update is not sent
                self._drift.check(update[1] if isinstance(update, tuple) else flat[:0])
            if self._model_watch is not None:
                self._model_watch.check()
            if self._rate_watch is not None:
                self._rate_watch.check()
        self._stats.updates_sent += 1
        if iteration is not None:
            iteration = self._iteration_numbers.number(iteration, flat)
        if route is None or update is None:
            return
        route.publish(update, iteration, max_path_length)
        if metrics:
            _post_metrics(route, "update_plot()", iteration, metrics)

    def add_metrics(self, metrics: Dict[str, float], iteration: Optional[int] = None) -> None:
        """A point of the learning curve with no policy to show: the live page's curve, the 3D
        view's, TensorBoard's scalars (with ``tensorboard_scalars``) and Redis viewers'. For
        iterations the plotter shows no policy of: a resumed run's earlier ones
        (``run_experiment_lite(..., resume_from=...)`` gives it those of its ``progress.csv``),
        or metrics measured between two updates. ``iteration`` is where the point goes on the
        curve, numbered on as ``update_plot``'s are once the count started again. Never waits
        for the worker."""
        if not self._in_owner("add_metrics()"):
            return
        if self._state is PlotterState.CLOSED:
            raise PlotterClosedError(
                "add_metrics() called after close(); create a new Plotter to plot again")
        metrics = checked_metrics(metrics)
        iteration = optional_non_negative_int("iteration", iteration)
        if iteration is not None:
            iteration = self._iteration_numbers.shown(iteration)
        if self._state is not PlotterState.RUNNING:
            self.start()
        route = self._route
        if route is None or self._stats.disabled:
            return
        _post_metrics(route, "add_metrics()", iteration, metrics)

    @property
    def stats(self) -> Dict[str, Any]:
        """A snapshot of the worker's counters, as a new dict; never blocks. Every key is there
        from the start, each described in one place:
        ``async_plotter.supervision.stats.WorkerStats``."""
        return self._stats.snapshot()

    def wait_for_http_url(self, timeout: float = 30.0) -> Optional[str]:
        """The live page's address (``Plotter(http=...)``), waiting up to ``timeout`` seconds
        for the worker to serve it (it starts TensorFlow and the page first: seconds after
        ``start()``, which this calls if need be). None without ``http=``, once plotting is
        off, or if it is not serving by then. The URL is also in ``stats["http_url"]``."""
        timeout = non_negative_number("timeout", timeout)
        if not any(isinstance(spec, HttpSpec) for spec in self._config.worker.sinks):
            return None
        if self._state is PlotterState.CREATED:
            self.start()
        deadline = time.monotonic() + timeout
        while True:
            url = self._stats.http_url
            if url or self._stats.disabled or self._state is PlotterState.CLOSED:
                return url or None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(0.05, remaining))

    @staticmethod
    def close_all(final_video: bool = True) -> int:
        """Close every Plotter of this process that is not closed yet, each as
        ``close(final_video=final_video)``, and return how many there were: in a notebook,
        those of a cell's earlier runs that no name refers to any more (IPython's ``Out``, a
        kept traceback or an interrupted loop still holds them, and their folders)."""
        plotters = _to_close()
        for plotter in plotters:
            plotter.close(final_video=final_video)
        return len(plotters)

    def close(self, timeout: Optional[float] = None, *, final_video: bool = True) -> None:
        """Stop the worker. First, when no video shows the newest parameters yet, the worker
        cuts the video it is drawing (kept, at least ``min_video_seconds``; the history keeps
        that policy whole), skips an older policy's episode begun meanwhile and records the
        newest at full speed (at most ``final_video_timeout`` seconds; ``final_video=False``
        skips it); then it exits. Bounded by ``timeout`` seconds in all (default: the final
        video's limit plus 10 s, and a worker still starting may first take up to
        ``hang_timeout`` to finish), after which the worker is terminated, then killed. A
        trainer that only publishes (``channel=...``) waits for its final policy's history
        recording instead of a video (within the same limits), then at most 2 s for the last of
        it to reach Redis, whatever the server does. Logs a one-line summary of the videos.
        Calling it again does nothing."""
        if self._state is PlotterState.CLOSED or not self._in_owner("close()"):
            return
        # With every limit at its default, a worker still starting gets to finish first (up
        # to hang_timeout): a run shorter than TensorFlow's import still shows its final policy.
        startup_wait = (self._config.hang_timeout if final_video and timeout is None
                        and self._config.final_video_after_start_up else 0.0)
        if not final_video:
            timeout = min(timeout, _SHUTDOWN_SECONDS) if timeout is not None else 3.0
        elif timeout is None:
            timeout = self._config.final_video_timeout + _SHUTDOWN_SECONDS
        else:
            timeout = non_negative_number("timeout", timeout)
        self._state = PlotterState.CLOSED
        route = self._route
        try:
            if route is not None:
                route.close(timeout, self._config.final_video_timeout if final_video else 0.0,
                            startup_wait)
        finally:
            self._stats.alive = False
            drift, self._drift = self._drift, None
            if drift is not None:
                drift.close()
            self._model_watch = None  # its copy of the model
            for folder in self._run_folders:
                folder.release()
            _running_plotters.discard(self)
        if route is not None and route.renders_here:
            tell(
                logger, self._config.verbose, "%s",
                summarize_videos(self._stats.snapshot(), len(self._iteration_numbers),
                                 time.monotonic() - (self._started_at or 0.0),
                                 self._config.worker.budget, self.video_dir, final_video,
                                 self._config.resume_after))

    def _in_owner(self, call: str) -> bool:
        """Whether this is the process that made this Plotter. A process forked from it (an
        ``os.fork()`` helper that exits normally runs the exit handlers, and so ``close()``)
        would otherwise stop the worker and remove the segment under the trainer's feet, or
        show its own parameters as the trainer's: there ``call`` does nothing, once said."""
        if os.getpid() == self._owner_pid:
            return True
        if not self._told_forked:
            self._told_forked = True
            logger.warning(
                "%s called in process %d, forked from the one that made this Plotter (%d): "
                "ignored; the Plotter belongs to its own process", call, os.getpid(),
                self._owner_pid)
        return False

    def __enter__(self) -> "Plotter":
        return self.start()

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        # A block that raised (Ctrl-C included) did not end its run: no final video to wait for.
        self.close(final_video=exc_type is None)

    def __repr__(self) -> str:
        return (f"Plotter(env={self._config.worker.env.label!r}, state={self._state.value}, "
                f"updates_sent={self._stats.updates_sent})")

    # ------------------------------------------------------------------------------- internals

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
            return self._config.worker.max_path_length
        return positive_int(name, max_path_length)

    def _flat(self, policy: Any, adapter: PolicyAdapter, where: str) -> np.ndarray:
        flat = adapter.flat(policy)
        initial = self._config.initial
        if flat.shape == initial.shape and flat.dtype == initial.dtype:
            return flat  # the usual case, checked in two comparisons
        return checked_parameters(flat, where, initial)


def _post_metrics(route: PlotRoute, where: str, iteration: Optional[int],
                  metrics: Dict[str, float]) -> None:
    """Send ``metrics`` on ``route``; a warning naming ``where`` if they are too large."""
    if not route.post_metrics(iteration, metrics):
        logger.warning("%s: metrics dropped, too large to send (%d keys); send a few scalars",
                       where, len(metrics))


def _claim_folders(config: PlotterConfig) -> List[RunFolder]:
    """Hold ``video_dir`` and ``tensorboard_dir`` for the run: a folder holds one run, so an
    earlier one's outputs there go aside. A ``tensorboard_dir`` that is the video folder is held
    with it, and one a run of this process holds as its Plotter's (``run_experiment_lite``'s
    log_dir) is that run's; held by another live Plotter, it is refused."""
    holder = f"a Plotter for {config.worker.env.label}"
    held = []
    try:
        if config.video_dir:
            held.append(
                RunFolder(config.video_dir,
                          config.verbose,
                          holder,
                          resume_after=config.resume_after))
        board = config.tensorboard_dir
        if board and not (config.video_dir and os.path.samefile(board, config.video_dir)) \
                and not hosts_a_plotters_events(board):
            held.append(
                RunFolder(board, config.verbose, holder, TENSORBOARD_OUTPUTS, config.resume_after))
    except BaseException:
        for folder in held:
            folder.release()
        raise
    return held


# ----------------------------------------------------------------------- shutdown at exit

#: every Plotter made here (weakly: one never started is let go with its last name)
_open_plotters: "weakref.WeakSet[Plotter]" = weakref.WeakSet()
#: the started ones not closed yet, held: their workers run until closed
_running_plotters: "Set[Plotter]" = set()


def _to_close() -> List["Plotter"]:
    """The Plotters made by this process and not closed yet, in no particular order (a forked
    child's copies of its parent's are not its to close)."""
    return [
        plotter for plotter in {*_open_plotters, *_running_plotters}
        if plotter._owner_pid == os.getpid() and plotter._state is not PlotterState.CLOSED
    ]


def _observation_drift(config: PlotterConfig) -> Optional[ObservationDrift]:
    """The check of the trainer's observation wrappers at each update (``env/drift.py``),
    where the trainer gave an env object whose wrappers could change outside what travels."""

    def build() -> Any:
        # What MuJoCo says of this copy the user's own env said (``mujoco_warnings.py``).
        with kept_to_log():
            return build_env(config.worker.env, render_mode=None, quiet=True)

    return ObservationDrift.of(build, lambda env: worker_env_state(env, config), config.trainer_env,
                               config.worker.env.label)


@atexit.register
def _close_open_plotters() -> None:
    # The final policy's video is made at interpreter exit too, unless the script is exiting
    # because of an exception nobody caught (Ctrl-C among them): then the user wants out.
    failed = getattr(sys, "last_type", None) is not None
    for plotter in _to_close():
        plotter.close(final_video=not failed)
