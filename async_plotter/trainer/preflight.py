"""Checks, in the trainer, that the env, the policy and the camera fit together, before any process
starts or any file is written: what would fail in the worker, as a log line the user may never
read, fails here as a named error (docs/design.md, "checked before anything starts").

All of it is cheap and without GL: the env is built as the worker builds it (with the wrappers'
state as it travels), compared with the trainer's (``env/check.py``; copies played for a few
episodes against fresh ones, ``env/carried_state.py``) and reset; the policy acts once and the
env steps once through the worker's own step function (``env/stepper.py``); the worker's copy
of the policy is checked (``policy/check.py``), random generators put back after;
a self-drawing env must return an RGB array; ``camera=`` must name a camera of the model.
MuJoCo's warnings meanwhile are DEBUG records (``mujoco_warnings``). A check that cannot be made
here (a TF1 graph-mode trainer, an env whose drawing looks like GL) is skipped with one log line.
"""
import inspect
import logging
import sys
import time
from typing import Any, List, NamedTuple, Optional, Tuple

import numpy as np

from async_plotter.env.carried_state import check_no_carried_state
from async_plotter.env.settings_check import check_same_settings, settings_of, steady
from async_plotter.env.settings_travel import Extra, steady_user_data, user_data_of
from async_plotter.env.check import check_worker_env
from async_plotter.env.observations import each_part
from async_plotter.env.recipe import (EnvRecipe, build_env, builds_from_registry,
                                      factory_accepts_render_mode)
from async_plotter.env.layers import env_layers
from async_plotter.env.state import WorkerEnvState
from async_plotter.env.stepper import EnvStepper
from async_plotter.errors import (EnvBuildError, EnvRenderError, EnvStepError, PolicyProtocolError,
                                  PolicyShapeError)
from async_plotter.mujoco_warnings import kept_to_log
from async_plotter.policy.adapters import KerasAdapter, PolicyAdapter
from async_plotter.policy.check import brief_error, check_worker_copy
from async_plotter.policy.random_state import random_state_kept
from async_plotter.env.spaces import BOX, DISCRETE, space_kind
from async_plotter.sinks.specs import LiveStatesSpec
from async_plotter.render.recording import model_to_mjb
from async_plotter.trainer.model_check import check_same_model, mujoco_model
from async_plotter.trainer.config import PlotterConfig

logger = logging.getLogger("async_plotter")

# Words in an env's module that mean it draws with OpenGL: drawing it here could segfault next to
# TensorFlow or open a context the trainer must never hold.
_GL_MARKERS = ("OpenGL", "pyglet", "moderngl", "glfw", "mujoco", "dm_control", "pybullet")


class Checked(NamedTuple):
    """What ``check_before_start`` found out beside its errors."""

    #: the env is a MuJoCo one (it has states to record)
    has_states: bool
    #: its MuJoCo model was compared with the worker's and stays put (the env does not
    #: randomize it), so a later change of it can be told
    model_kept: bool
    #: the plain data of the user's layers that a fresh copy keeps as it resets and steps:
    #: settings no constructor parameter names, which travel too (``settings_travel.Extra``)
    extra_settings: Tuple[Extra, ...] = ()


def check_before_start(config: PlotterConfig, policy: Any) -> Checked:
    """Raise a named error if the env, the policy or the camera of ``config`` cannot work
    together, or if the worker's copy of the env or of ``policy`` would act differently from the
    trainer's env object (``config.trainer_env``) and ``policy``: the policy checked on the CPU
    when the worker's TensorFlow sees no GPU, the env given its wrappers' state as it travels.
    State recordings of the live episodes (``record_states``), which only a MuJoCo env has, get
    one warning otherwise; a history (``history``) of such an env is said, once, to keep
    returns only."""
    started = time.perf_counter()
    # The env's wrappers may draw random numbers (observation noise) as the checks reset and
    # step copies: training must draw the numbers it would have drawn without plotting.
    layers = env_layers(config.trainer_env) if config.trainer_env is not None else []
    with kept_to_log(), random_state_kept(policy, *layers):
        checked = _check(config, policy)
    logger.debug("Plotter checks of %s took %.0f ms", config.worker.env.label,
                 1000 * (time.perf_counter() - started))
    return checked


def _check(config: PlotterConfig, policy: Any) -> Checked:
    worker = config.worker
    env_recipe, label = worker.env, worker.env.label
    # What building warns of (an old version, a box's precision) the user saw when making
    # their env object; from an id or a factory, once.
    env = _build(env_recipe, None, quiet=config.trainer_env is not None)
    opened = [env]
    try:
        model = mujoco_model(env)
        stepper = _stepper(env, config)
        # With the trainer's settings travelled in (its model's physics among them), before
        # any reset.
        built = model_to_mjb(model) if model is not None else None
        settings = settings_of(env)
        # Only an env object's layers have plain data to follow (ids and factories start
        # fresh in the worker as here).
        users_before = user_data_of(env_layers(env)) if config.trainer_env is not None else None
        check_worker_env(env, config.trainer_env, label)
        check_no_carried_state(lambda: _stepper(_build(env_recipe, None), config),
                               config.trainer_env, label)
        observation = _reset(stepper, label)
        model_kept = check_same_model(config.trainer_env, env, built, label)
        action = _check_policy(policy, config.adapter, observation, env, label)
        _step_once(stepper, action, config.initial.dtype, label)
        check_same_settings(config.trainer_env, steady(settings, settings_of(env)),
                            lambda: _opened(_build(env_recipe, None), opened), label)
        if action is not None:
            check_worker_copy(worker.policy, policy, config.adapter, _copy(observation), label,
                              worker.policy_device == "cpu")
        if model is not None:
            from async_plotter.render.camera import check_camera_for_model

            if worker.camera is not None:
                check_camera_for_model(worker.camera, model, label)
        else:
            if worker.camera is not None:
                logger.warning("camera=%r is ignored: %s draws its own frames (not MuJoCo)",
                               worker.camera, label)
            if worker.history_dir:
                logger.info(
                    "%s draws its own frames (not MuJoCo): its history keeps each policy's "
                    "return and length (stats['history']), without recordings", label)
            if any(isinstance(spec, LiveStatesSpec) for spec in worker.sinks):
                logger.warning(
                    "record_states=True records nothing: %s draws its own frames (not MuJoCo), "
                    "so there is no physics state to record; its live view and videos are "
                    "unaffected", label)
            _check_frames(env_recipe, env, opened)
        extra = (steady_user_data(users_before, user_data_of(env_layers(env)))
                 if users_before is not None else ())
        return Checked(model is not None, model_kept, extra)
    finally:
        for each in opened:
            _close_quietly(each)


# ----------------------------------------------------------------------------------- the env


def _build(recipe: EnvRecipe, render_mode: Optional[str], quiet: bool = True) -> Any:
    """A copy of the env, as the worker builds it; with ``quiet``, the warnings Gymnasium gives
    while building it are not shown again (each copy would repeat them on your terminal)."""
    try:
        return build_env(recipe, render_mode=render_mode, quiet=quiet)
    except Exception as error:  # noqa: BLE001 - whatever the user's code raises
        raise EnvBuildError(
            f"building the env {recipe.label} failed in the trainer, so it would fail in the "
            f"plot worker too: {type(error).__name__}: {error}. Check that it builds with no "
            "arguments (a factory is called as factory(), a class as Class()).") from error


def _opened(env: Any, opened: List[Any]) -> Any:
    """``env``, noted to be closed with the others."""
    opened.append(env)
    return env


def _stepper(env: Any, config: PlotterConfig) -> EnvStepper:
    """The worker's stepper on the check's env, given the trainer's wrapper state as the worker
    gets it."""
    state = worker_env_state(env, config)
    try:
        return EnvStepper(env, state)
    except Exception as error:  # noqa: BLE001 - a space the worker cannot read
        label = config.worker.env.label
        raise EnvStepError(
            f"the plot worker cannot step {label}: its action space "
            f"{getattr(env, 'action_space', None)!r} cannot be read: {type(error).__name__}: "
            f"{error}") from error


def worker_env_state(env: Any, config: PlotterConfig) -> WorkerEnvState:
    """``env``'s end of the wrapper state that travels (``env/state.py``), given the trainer's as
    the worker gets it: in the parameters' dtype, cut from update 0."""
    layout = config.worker.parameters
    state = WorkerEnvState(env, layout.env_state, config.worker.env.label)
    state.apply(layout.split(layout.encode(config.initial, config.env_state))[1])
    return state


def _reset(env: Any, label: str) -> Any:
    """``env.reset()`` (an env, or the worker's ``EnvStepper`` of it), its first observation."""
    try:
        result = env.reset()
    except Exception as error:  # noqa: BLE001
        raise EnvBuildError(f"env.reset() of {label} failed in the trainer: "
                            f"{type(error).__name__}: {error}") from error
    return result if isinstance(env, EnvStepper) else result[0]


def _step_once(stepper: EnvStepper, output: Any, dtype: Any, label: str) -> None:
    """One step as the worker steps, with the policy's first output (or, where the policy could
    not act here, a zero action of the parameters' dtype). An env that draws from the global
    generators (rllab's) leaves them as they were."""
    if output is None:
        output = _zero_action(stepper.env.action_space, dtype)
        if output is None:
            return  # a Dict or Tuple space and no action: nothing to step with
    space = getattr(stepper.env, "action_space", None)
    with random_state_kept(None):
        try:
            action = stepper.action_for(output)
        except Exception as error:  # noqa: BLE001 - a space the worker cannot read
            raise EnvStepError(
                f"the plot worker cannot turn the policy's output {_show(output)} into an action "
                f"of {label}'s action space {space!r}: {type(error).__name__}: "
                f"{brief_error(error)}") from error
        try:
            stepper.step(output)
        except Exception as error:  # noqa: BLE001 - the env's own code
            raise EnvStepError(
                f"{label}.step() failed in the trainer on the policy's first action as the plot "
                f"worker gives it, {_show(action)} (from the policy's output {_show(output)}; "
                f"action space {space!r}): {type(error).__name__}: {brief_error(error)}. The "
                "worker would fail the same way at every step. It gives a Discrete space an "
                "int index and a Box an array of its shape, in the policy's dtype, clipped to "
                "its bounds: make the env's step() accept that.") from error


def _check_frames(recipe: EnvRecipe, env: Any, opened: List[Any]) -> None:
    """A self-drawing env must give the worker pixels: build it as the worker does, draw once."""
    if _draws_with_gl(env):
        logger.info(
            "Plotter: not checking that %s returns frames here (it seems to draw with OpenGL, "
            "which must not run in the trainer); the worker will report it if it cannot",
            recipe.label)
        return
    frame_env = env
    if builds_from_registry(recipe) or factory_accepts_render_mode(recipe):
        frame_env = _build(recipe, "rgb_array")
        opened.append(frame_env)
        _reset(frame_env, recipe.label)
    try:
        frame = frame_env.render()
    except Exception as error:  # noqa: BLE001
        raise EnvRenderError(
            f"{recipe.label}.render() failed: {type(error).__name__}: {error}. The plot worker "
            "needs an RGB array from render(); build the env with render_mode='rgb_array'."
        ) from error
    if frame is None:
        raise EnvRenderError(
            f"{recipe.label}.render() returned None, so the plot worker would get no frames: the "
            "env was built without render_mode='rgb_array'. Let your factory accept it, e.g. "
            "`def make(render_mode=None): return gymnasium.make('CartPole-v1', "
            "render_mode=render_mode)`, or pass the Gymnasium id instead of a factory.")
    shape = np.shape(frame)
    if len(shape) != 3 or shape[2] not in (3, 4) or 0 in shape:
        raise EnvRenderError(
            f"{recipe.label}.render() returned an array of shape {shape}; the plot worker needs "
            "an RGB image of shape (height, width, 3)")


def _draws_with_gl(env: Any) -> bool:
    unwrapped = getattr(env, "unwrapped", env)
    if type(unwrapped).__name__ == "GymCompat":
        unwrapped = getattr(unwrapped, "env", unwrapped)
    try:
        source = inspect.getsource(inspect.getmodule(type(unwrapped)))
    except (TypeError, OSError):
        return False  # no source (a class made in a notebook cell): nothing says it uses GL
    return any(marker in source for marker in _GL_MARKERS)


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - the check is over; a failing close() changes nothing
        logger.debug("closing the checked env failed", exc_info=True)


# -------------------------------------------------------------------------------- the policy


def _check_policy(policy: Any, adapter: PolicyAdapter, observation: Any, env: Any,
                  label: str) -> Any:
    """Check the policy's action against the env and return it; None where the policy cannot
    act here."""
    if _graph_mode() and not adapter.acts_in_graph_mode:
        logger.info(
            "Plotter: not running the %s policy in the trainer (TensorFlow runs in graph "
            "mode here); the worker checks its shapes", adapter.kind)
        return None
    observation_space = getattr(env, "observation_space", None)
    action_space = getattr(env, "action_space", None)
    with random_state_kept(policy):
        try:
            action = adapter.reference_act(policy, _copy(observation), deterministic=False)
        except (PolicyShapeError, PolicyProtocolError):
            raise  # the adapter's own diagnosis (several outputs, a bare action)
        except Exception as error:  # noqa: BLE001 - the policy's own code
            if _graph_mode():
                logger.info(
                    "Plotter: the policy could not act in the trainer (%s: %s; graph "
                    "mode); the worker checks its shapes",
                    type(error).__name__, error)
                return None
            raise PolicyShapeError(
                _input_mismatch(policy, adapter, observation, observation_space, label,
                                error)) from error
    _check_action(np.asarray(action), action_space, label)
    return action


def _input_mismatch(policy: Any, adapter: PolicyAdapter, observation: Any, space: Any, label: str,
                    error: BaseException) -> str:
    if isinstance(observation, (dict, tuple)):
        return _parts_mismatch(policy, adapter, observation, label, error)
    shape = np.shape(observation)
    expected = ""
    if isinstance(adapter, KerasAdapter):
        expected = f"; the Keras model expects input shape {getattr(policy, 'input_shape', '?')}"
        fix = f"build it with keras.Input(shape={shape})"
    else:
        fix = f"make its input size match env.observation_space.shape = {shape}"
    return (f"the policy cannot act on {label}'s observations: it was given one of shape {shape} "
            f"(observation space {space}){expected}, and raised {type(error).__name__}: "
            f"{brief_error(error)}. Use a policy built for {label}: {fix}.")


def _parts_mismatch(policy: Any, adapter: PolicyAdapter, observation: Any, label: str,
                    error: BaseException) -> str:
    """The same, for a dict or tuple observation: a Keras model is given a dict of batches by
    the observation's keys (or a list, in its order), so its inputs are named or ordered so."""
    named = isinstance(observation, dict)
    parts = list(observation.items()) if named else list(enumerate(observation))
    given = ", ".join(f"{key!r}: shape {np.shape(part)}" if named else f"shape {np.shape(part)}"
                      for key, part in parts)
    if isinstance(adapter, KerasAdapter):
        inputs = ", ".join(f"keras.Input(shape={np.shape(part)}" +
                           (f", name={key!r})" if named else ")") for key, part in parts)
        fix = (f"give the model one input a part, {'named by its key' if named else 'in order'}: "
               f"{inputs}; or, for a model of one input, flatten the observations with "
               "gymnasium.wrappers.FlattenObservation where the env is made")
    else:
        fix = f"make it take {'a dict of' if named else 'a list of'} these parts"
    return (f"the policy cannot act on {label}'s observations: it was given "
            f"{'a dict' if named else 'a list'} of batches of one ({given}), and raised "
            f"{type(error).__name__}: {brief_error(error)}. Use a policy built for {label}: "
            f"{fix}.")


def _check_action(action: np.ndarray, space: Any, label: str) -> None:
    kind = space_kind(space)
    if kind == DISCRETE:
        if action.size not in (1, int(space.n)):
            raise PolicyShapeError(
                f"the policy's action has shape {action.shape} ({action.size} values), but "
                f"{label}'s action space is {space}: it takes one index in [0, {space.n}) or "
                f"{space.n} logits. Give the policy's output {space.n} units (or 1 index).")
        if action.size == 1 and int(space.n) > 1:
            _check_index(float(action.reshape(-1)[0]), space, label)
        return
    expected = getattr(space, "shape", None)
    if kind != BOX:
        return  # Dict/Tuple/MultiBinary... spaces: the worker passes the action through unchanged
    size = int(np.prod(expected))
    if action.size != size:
        raise PolicyShapeError(
            f"the policy's action has shape {action.shape} ({action.size} values), but "
            f"{label}'s action space is {space} with shape {expected} ({size} values). Give the "
            f"policy's output layer {size} units (env.action_space.shape = {expected}).")


def _check_index(value: float, space: Any, label: str) -> None:
    """One value for a Discrete space must be an index of it, not a probability or a score (a
    sigmoid's 0.7 would always be action 0)."""
    start = int(getattr(space, "start", 0))
    if value != round(value) or not start <= value < start + int(space.n):
        raise PolicyShapeError(
            f"the policy gives one value, {value:.4g}, for {label}'s action space {space}, which "
            f"takes an index in [{start}, {start + int(space.n)}): a probability or score would "
            f"always pick one action. Give the policy's output {space.n} units (logits), or "
            "return the action's index.")


def _zero_action(space: Any, dtype: Any) -> Any:
    kind = space_kind(space)
    if kind == BOX:
        return np.zeros(tuple(space.shape), dtype)
    if kind == DISCRETE:
        return int(getattr(space, "start", 0) or 0)
    return None


def _show(action: Any) -> str:
    if isinstance(action, (int, np.integer)):
        return repr(int(action))
    array = np.asarray(action)
    values = np.array2string(array, precision=4, threshold=8)
    return f"{values} ({array.dtype}, shape {array.shape})"


def _copy(observation: Any) -> Any:
    return each_part(lambda part: np.array(part, copy=True), observation)


def _graph_mode() -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and not tf.executing_eagerly()
