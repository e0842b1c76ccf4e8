"""``Plotter(...)``'s arguments, checked, as one frozen configuration: ``plotter_config``.

Nothing here starts a process or writes a file: it checks each argument (the error names it),
builds the env's and policy's recipes, reads the policy's initial parameters, and assembles the
``WorkerConfig`` the worker runs and the outputs it feeds. The ``Plotter`` then runs the
trainer-side checks (``async_plotter.trainer.preflight``), creates the output directories
(``create_output_dirs``) and, once started, hands the configuration to its route
(``trainer/routes.py``).
"""
import dataclasses
import os
import types
from typing import Any, Callable, Collection, List, Mapping, Optional, Tuple, Union

import cloudpickle
import numpy as np

from async_plotter.channel.shm import supported_dtype
from async_plotter.display import offscreen_gl_backend, x_display_available
from async_plotter.env.recipe import describe_env
from async_plotter.env.settings_travel import Extra
from async_plotter.env.state import EnvStateLayout, TrainerEnvState
from async_plotter.errors import (InvalidArgumentError, NoDisplayError, ParameterMismatchError,
                                  PolicyProtocolError, VideoDirError)
from async_plotter.policy.adapters import PolicyAdapter, adapter_for
from async_plotter.policy.recipe import describe_policy
from async_plotter.processes import POLICY_DEVICES
from async_plotter.render.camera import check_camera_argument
from async_plotter.render.history import DEFAULT_KEPT, history_folder
from async_plotter.sinks.base import FrameSink
from async_plotter.validation import (boolean, callable_or_none, cpu_fraction, folder_problem,
                                      frame_size as checked_frame_size, is_int, non_negative_int,
                                      optional_non_negative_int, non_negative_number, one_of,
                                      positive_int, positive_number, user_path)
from async_plotter.supervision.budget import DEFAULT_BUDGET
from async_plotter.worker.config import WorkerConfig
from async_plotter.worker.parameters import ParameterLayout
from async_plotter.supervision.priorities import PRIORITIES
from async_plotter.sinks.specs import (CallbackSpec, HttpSpec, LiveStatesSpec, SinkSpec, StatesSpec,
                                       TensorBoardSpec, UserSinkSpec, VideoSpec, WindowSpec)

_QUALITIES = ("auto", "cheap", "full")
#: what the live page (``http=``) opens: the MJPEG page, or the 3D view
VIEWS = ("2d", "3d")

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


@dataclasses.dataclass(frozen=True)
class PublishTarget:
    """``Plotter(channel=..., experiment=..., secret=...)``: publish to Redis, render elsewhere."""

    url: str
    experiment: str
    secret: Optional[Union[str, bytes]]


@dataclasses.dataclass(frozen=True, eq=False)
class PlotterConfig:
    """Everything a ``Plotter`` was asked for, checked."""

    #: what the worker runs: recipes, rollout settings, CPU settings and the outputs (sinks)
    worker: WorkerConfig
    #: the policy's parameters at construction (update 0); every update must match them
    initial: np.ndarray
    #: reads the flat parameters of policies of ``policy_type``
    adapter: PolicyAdapter
    policy_type: type
    final_video_timeout: float
    #: the default limit: it counts from when the worker is ready (start-up waited for apart,
    #: up to ``hang_timeout``); a given one bounds the whole wait
    final_video_after_start_up: bool
    max_restarts: int
    hang_timeout: float
    on_event: Optional[Callable[[str, dict], Any]]
    #: absolute paths (the worker runs in another directory); created by ``create_output_dirs``
    video_dir: Optional[str]
    tensorboard_dir: Optional[str]
    window: bool
    #: None: render here (``worker.sinks``); else publish only
    publish: Optional[PublishTarget]
    #: show the lines a user must see on stderr when no logging is configured (``console``)
    verbose: int = 1
    #: the env object the user passed (None for an id, spec, class or factory): the check
    #: compares the worker's copy with it
    trainer_env: Any = None
    #: its wrappers' state, read at start() and every update_plot and sent behind the
    #: parameters (``worker.parameters.encode``; None: it has none)
    env_state: Optional[TrainerEnvState] = None
    #: a publishing trainer with no ``video_dir`` still records its history, in a private
    #: folder (made at start, removed at close), for viewers elsewhere to draw
    private_history: bool = False
    #: the env is a MuJoCo one, with states to record and to send (set after the checks): a
    #: publishing trainer with a worker here then plays the live episode for viewers elsewhere
    has_states: bool = False
    #: a resumed run continues the one in ``video_dir`` after this iteration: its outputs up
    #: to it stay (``trainer/run_folder.py``); None: a run of its own
    resume_after: Optional[int] = None

    @property
    def has_output(self) -> bool:
        """Whether anything is shown at all (with a Redis channel a viewer elsewhere renders)."""
        return bool(self.worker.sinks or self.publish)


def plotter_config(arguments: Mapping[str, Any]) -> PlotterConfig:
    """``Plotter(...)``'s arguments checked, each error naming its argument; starts nothing and
    writes nothing.

    ``arguments`` holds every parameter of ``Plotter.__init__`` by name, defaults filled in:
    that signature is the one place naming them and their defaults (``Plotter`` passes its
    ``locals()``; ``inspect.signature(Plotter.__init__).bind(...)`` builds them elsewhere)."""
    given = types.SimpleNamespace(**arguments)
    max_path_length = positive_int("max_path_length", given.max_path_length)
    fps = positive_number("fps", given.fps)
    one_of("quality", given.quality, _QUALITIES)
    budget = _checked_budget(given.budget, given.priority)
    final_video_timeout = _final_video_timeout(given.final_video_timeout, max_path_length)
    min_video_seconds = non_negative_number("min_video_seconds", given.min_video_seconds)
    video_length, video_seconds = _video_span(given.video_length)
    one_of("policy_device", given.policy_device, POLICY_DEVICES)
    max_restarts = non_negative_int("max_restarts", given.max_restarts)
    hang_timeout = positive_number("hang_timeout", given.hang_timeout)
    verbose = non_negative_int("verbose", given.verbose)
    boolean("deterministic", given.deterministic)
    frame_size = checked_frame_size(given.frame_size)
    if given.seed is not None and not is_int(given.seed):
        raise InvalidArgumentError(f"seed must be an int or None, got {given.seed!r}")
    callable_or_none("on_frame", given.on_frame)
    callable_or_none("on_event", given.on_event)
    user_sinks = _user_sink_specs(given.sinks)
    window = _resolve_window(given.window, publishing=given.channel is not None)
    video_dir = _video_dir_path(given.video_dir)
    tensorboard_dir = _video_dir_path(given.tensorboard_dir, "tensorboard_dir")
    boolean("tensorboard_scalars", given.tensorboard_scalars)
    camera = check_camera_argument(given.camera)
    # given.sess and given.graph: garage passes them; the worker has its own graph and session.
    http_config = _http_config(given.http, given.http_token)
    view = checked_view(given.view, http_config is not None)
    record_states = _checked_record_states(given.record_states, video_dir, window
                                           or http_config is not None)
    history_kept = _checked_history(given.history)
    publish = _publish_target(given.channel, given.experiment, given.secret)

    env_recipe = describe_env(given.env)
    trainer_env, env_state = _trainer_env(given.env, env_recipe.label)
    adapter = adapter_for(given.policy)
    policy_recipe = describe_policy(given.policy, adapter, given.policy_factory)
    initial = _initial_parameters(given.policy, adapter)
    specs = _output_specs(video_dir, window, http_config, given.on_frame, view,
                          record_states) + user_sinks
    if tensorboard_dir:
        specs.append(TensorBoardSpec(tensorboard_dir, scalars=given.tensorboard_scalars))
    worker = WorkerConfig(
        env=env_recipe,
        policy=policy_recipe,
        max_path_length=max_path_length,
        fps=fps,
        deterministic=given.deterministic,
        quality=given.quality,
        priority=given.priority,
        frame_size=frame_size,
        mujoco_gl=offscreen_gl_backend(),
        seed=given.seed,
        camera=camera,
        budget=budget,
        min_video_seconds=min_video_seconds,
        video_length=video_length,
        video_seconds=video_seconds,
        policy_device=given.policy_device,
        parameters=ParameterLayout(initial.size, initial.dtype,
                                   env_state.layout if env_state else EnvStateLayout()),
        initial_env_state=env_state.read(initial.dtype) if env_state else None,
        history_dir=history_folder(video_dir) if video_dir and history_kept else None,
        history_kept=history_kept or DEFAULT_KEPT,
        hang_timeout=hang_timeout,
    ).with_sinks(specs)
    return PlotterConfig(worker=worker,
                         initial=initial,
                         adapter=adapter,
                         policy_type=type(given.policy),
                         final_video_timeout=final_video_timeout,
                         final_video_after_start_up=given.final_video_timeout is None,
                         max_restarts=max_restarts,
                         hang_timeout=hang_timeout,
                         on_event=given.on_event,
                         video_dir=video_dir,
                         tensorboard_dir=tensorboard_dir,
                         window=bool(window),
                         publish=publish,
                         trainer_env=trainer_env,
                         env_state=env_state,
                         verbose=verbose,
                         private_history=bool(publish and history_kept and not video_dir),
                         resume_after=optional_non_negative_int("resume_after", given.resume_after))


def with_extra_settings(config: PlotterConfig, extra: Collection[Extra]) -> PlotterConfig:
    """``config`` whose env state also carries ``extra``: settings of the user's layers that no
    constructor parameter names, found by ``Plotter()``'s checks."""
    env_state = TrainerEnvState(config.trainer_env, config.worker.env.label, True, extra)
    layout = config.worker.parameters
    worker = dataclasses.replace(config.worker,
                                 parameters=dataclasses.replace(layout, env_state=env_state.layout),
                                 initial_env_state=env_state.read(layout.dtype))
    return dataclasses.replace(config, worker=worker, env_state=env_state)


def _final_video_timeout(given: Any, max_path_length: int) -> float:
    """The given limit, else enough for one rollout of ``max_path_length`` steps."""
    if given is None:
        return _FINAL_VIDEO_BASE_SECONDS + _FINAL_VIDEO_SECONDS_PER_STEP * max_path_length
    return non_negative_number("final_video_timeout", given)


def _http_config(http: Any, token: Optional[str]) -> Any:
    """The live page's address and token (``Plotter(http=...)``), checked; None without it
    (``http=None`` or ``False``; ``True`` is a free port, as ``0``)."""
    if http is None or http is False:
        return None
    if http is True:
        http = 0
    from async_plotter.web.address import parse_http_address
    from async_plotter.web.listener import bind_listener

    config = parse_http_address(http, token)
    if config.port:
        # Taken now, the worker's page would fail at start() and take the videos down with it
        # (restarted, then off); said here instead, before anything starts.
        try:
            bind_listener(config).close()
        except OSError as error:
            raise InvalidArgumentError(
                f"http={http!r}: {error.strerror} If a Plotter of this process holds it (a notebook "
                "cell's, not closed), Plotter.close_all() frees it.") from None
    return config


def _trainer_env(env: Any, label: str) -> Tuple[Any, Optional[TrainerEnvState]]:
    """The env object the user passed (None for an id, a spec, a class or a factory), and the
    state of its wrappers and its settings, which travel behind the parameters (None: it has
    neither)."""
    if isinstance(env, (str, type)) or not (hasattr(env, "step") and hasattr(env, "reset")):
        return None, None
    state = TrainerEnvState(env, label, settings=True)
    return env, state if state.layout.size else None


def checked_parameters(flat: np.ndarray,
                       where: str,
                       initial: Optional[np.ndarray] = None) -> np.ndarray:
    """``flat`` if it is a parameter vector the channel carries (and, given ``initial``, of its
    size and dtype); else a ``ParameterMismatchError`` that names ``where``."""
    if flat.ndim != 1:
        raise ParameterMismatchError(
            f"{where}: the policy's parameters must be a 1-D vector, got shape {flat.shape}")
    if not supported_dtype(flat.dtype):
        raise ParameterMismatchError(
            f"{where}: parameters of dtype {flat.dtype} are not supported; use float32 or "
            "float64")
    if initial is not None and (flat.size != initial.size or flat.dtype != initial.dtype):
        raise ParameterMismatchError(
            f"{where}: got {flat.size} parameters of dtype {flat.dtype}, but this Plotter "
            f"was built for {initial.size} parameters of dtype {initial.dtype}. The policy's "
            "structure must not change; create a new Plotter for a different policy.")
    return flat


def create_output_dirs(config: PlotterConfig) -> None:
    """Create ``video_dir`` and ``tensorboard_dir`` (once every check has passed), and make sure
    they can be written to (``VideoDirError`` otherwise)."""
    _create_video_dir(config.video_dir)
    _create_video_dir(config.tensorboard_dir, "tensorboard_dir")


# --------------------------------------------------------------------------- argument checks


def _initial_parameters(policy: Any, adapter: PolicyAdapter) -> np.ndarray:
    initial = checked_parameters(adapter.flat(policy), "the policy given to Plotter()")
    if initial.size == 0:
        raise PolicyProtocolError(
            f"the policy {type(policy).__qualname__} has no parameters (its flat parameter "
            "vector is empty), so nothing sent by update_plot() would ever change what is "
            "shown. Plot the object that holds the trained variables, or make "
            "get_param_values() return them.")
    return initial.copy()


def _publish_target(channel: Any, experiment: Any, secret: Any) -> Optional[PublishTarget]:
    if channel is None:
        return None
    from async_plotter.channel.redis.writer import check_channel_arguments

    check_channel_arguments(channel, experiment, secret)
    return PublishTarget(channel, experiment, secret)


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


def checked_view(view: Any, serving: bool) -> str:
    """``view`` if it is one the live page can open here; else an error naming the fix."""
    one_of("view", view, VIEWS)
    if view == "3d":
        from async_plotter.view3d import INSTALL_HINT, missing_modules

        missing = missing_modules()
        if missing:
            raise InvalidArgumentError(
                f"view='3d' needs {' and '.join(missing)}, which are not installed: "
                f"{INSTALL_HINT}")
        if not serving:
            raise InvalidArgumentError("view='3d' is what the live page shows: pass http= too "
                                       "(e.g. http=8080)")
    return view


def _checked_history(history: Any) -> int:
    """How many history recordings are kept at most (0: no history): ``True`` the default
    bound, an int at least 2 that bound, ``False`` none."""
    if isinstance(history, bool):
        return DEFAULT_KEPT if history else 0
    if not is_int(history) or history < 2:
        raise InvalidArgumentError(
            "history must be True (keep at most 200 recordings), False (off) or the most "
            f"recordings to keep (an int of at least 2); got {history!r}")
    return int(history)


def _checked_record_states(record_states: Any, video_dir: Optional[str], live: bool) -> bool:
    """``record_states`` if it can be done here: the live episodes' recordings go beside the
    videos, and only a live view (window, ``http``) shows live episodes."""
    boolean("record_states", record_states)
    if record_states and not video_dir:
        raise InvalidArgumentError(
            "record_states=True writes every live episode as a state recording into "
            "<video_dir>/live/: pass video_dir= too (e.g. video_dir='videos')")
    if record_states and not live:
        raise InvalidArgumentError(
            "record_states=True records the episodes a live view shows, and there is none: "
            "pass http= (e.g. http=8080) or window=True. The recorded videos have their state "
            "recordings beside them anyway.")
    return record_states


def _output_specs(video_dir: Optional[str],
                  window: bool,
                  http_config: Any,
                  on_frame: Optional[Callable[..., Any]],
                  view: str = "2d",
                  record_states: bool = False) -> List[SinkSpec]:
    """The built-in outputs asked for, as sink specs for the render process."""
    specs: List[SinkSpec] = []
    if video_dir:
        specs.append(VideoSpec(video_dir))
        specs.append(StatesSpec(video_dir))  # a state recording beside each video
        if record_states:
            specs.append(LiveStatesSpec(video_dir))  # and of every live episode
    if window:
        specs.append(WindowSpec())
    if http_config is not None:
        specs.append(HttpSpec(http_config, video_dir, view))
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


def _resolve_window(window: Any, publishing: bool) -> bool:
    if window == "auto" and isinstance(window, str):
        # A trainer that publishes shows elsewhere: a window here only when asked for.
        return not publishing and x_display_available()
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
    return user_path(video_dir)  # absolute: the worker runs in another directory


def _create_video_dir(path: Optional[str], name: str = "video_dir") -> None:
    if path is None:
        return
    problem = folder_problem(path)
    if problem is not None:
        raise VideoDirError(f"{name} {path!r} cannot be written: {problem}. Choose a directory "
                            "you can write to.")
