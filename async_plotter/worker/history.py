"""The run's history, in the rollout process: every policy it applies, rolled out once more
without drawing, kept as a state recording (``render/history.py``).

Simulating a second of motion costs 5-20x less CPU than drawing and encoding it
(``docs/design.md``), and a state recording holds everything needed to see it again (3D
replay, ``async-plotter render`` to mp4). So while videos stay as they were (a few, short, of
the policy the render process has time for), a thread here records, for every update it takes,
one whole episode (up to the update's ``max_path_length``), acting deterministically (the
policy's mean, or its most likely action), from the run's one start state (the reset seed is
the Plotter's ``seed``, else ``DEFAULT_START_SEED``; the env's wrapper state as it travelled
with the update). Two recordings of the same parameters are the same, step for step, and
iterations compare like for like.

Why a thread with its own copy of the policy and env: the episodes of a video wait on the
render process (the pipe between them holds a few chunks), for seconds per video; a history
recorded between them would cover only the updates the videos show. The thread takes its
updates from an ``UpdateFanOut`` (``worker/parameters.py``), newest wins: an update that comes
while a recording runs replaces the one waiting, and the running one finishes. It writes the
file itself (it has the model and the states; nothing more goes through the pipe), whole under
a locked temporary name and then renamed (``render/recording.py``), then thins the folder to its
bound. Its CPU is the rollout process's, held to the budget like the rest of it (the governor
sets the priority of every thread). It starts once the first video's rollout is sent, so that
the worker's start-up (at the trainer's priority, uncharged, until that video exists) does not
carry its first policy runtime and env; what is left of the start-up then is the video's
drawing, without the cap where only files are written: a second or two. Envs that draw their
own frames (CartPole) have no state to keep: their history is the return and length of each
episode, reported without a file.

A failure (the policy or the env raising) ends the thread; the rollout process's main loop
raises it as ``HistoryFailed`` at its next step, and the worker fails as after any error. The
recordings written before stay. A thread that hangs (a step, a write or the folder's thinning
that never ends: ``worker/stall.py``, after the Plotter's ``hang_timeout``) cannot be ended
alone: the main loop raises ``HistoryHung``, and the supervisor starts the worker again without
a history, which the videos need less than they need the CPU such a thread burns.
"""
import errno
import logging
import math
import os
import threading
import time
import traceback
from typing import Any, Optional

import numpy as np

from async_plotter.channel.base import ParamUpdate
from async_plotter.newest import Newest
from async_plotter.render.history import DEFAULT_START_SEED, thin
from async_plotter.render.partial_files import remove_abandoned
from async_plotter.render.recording import RecordingBuilder, model_to_mjb, write_recording
from async_plotter.render.stream import SceneInfo
from async_plotter.render.videos import history_name
from async_plotter.worker.config import WorkerConfig
from async_plotter.worker.stall import StallWatch
from async_plotter.worker.status import StatusKind, StatusSender

logger = logging.getLogger(__name__)


class HistoryFailed(Exception):
    """The history thread's policy or env raised; its error is the cause."""


class HistoryHung(HistoryFailed):
    """The history thread made no progress for ``hang_timeout`` (``worker/stall.py``)."""


class HistoryRecorder:
    """Records the newest update in ``updates`` (``UpdateFanOut.history``) until it closes.

    Args:
        config: the worker's configuration (``history_dir`` set).
        updates: where updates come from, newest wins.
        scene: the scene the main loop announced (kind, camera plan, size, rate, stride).
        status: the rollout process's reports (thread-safe).
    """

    def __init__(self, config: WorkerConfig, updates: Newest[ParamUpdate], scene: SceneInfo,
                 status: StatusSender) -> None:
        self._config = config
        self._updates = updates
        self._scene = scene
        self._status = status
        self._start_seed = DEFAULT_START_SEED if config.seed is None else int(config.seed)
        self._stride = max(int(scene.stride), 1)
        self._model_mjb = b""
        self._states: Optional[_States] = None
        #: what ended the thread with an error (``check`` raises it in the main loop)
        self.failure: Optional[BaseException] = None
        self._watch = StallWatch(config.hang_timeout)
        self._thread = threading.Thread(target=self._run, name="async_plotter-history", daemon=True)

    @property
    def started(self) -> bool:
        """Whether ``start`` was called."""
        return self._thread.ident is not None

    def start(self) -> "HistoryRecorder":
        self._thread.start()
        return self

    def check(self) -> None:
        """Raise ``HistoryFailed`` if the thread ended with an error, ``HistoryHung`` if it
        has made no progress for ``hang_timeout`` (a cheap read otherwise)."""
        failure = self.failure
        if failure is not None:
            raise HistoryFailed(f"the history recording failed: {type(failure).__name__}: "
                                f"{failure}") from failure
        stalled = self._watch.stalled(self._thread)
        if stalled is not None:
            raise HistoryHung(f"the history thread hung: {stalled}")

    def stop(self, timeout: float) -> None:
        """No more updates; wait up to ``timeout`` s for a recording in progress to finish."""
        self._updates.close()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # ---------------------------------------------------------------------------- the thread

    def _run(self) -> None:
        from async_plotter.env.recipe import build_env
        from async_plotter.env.state import WorkerEnvState
        from async_plotter.env.stepper import EnvStepper
        from async_plotter.policy.recipe import PolicyRuntime

        config = self._config
        runtime = env = None
        try:
            # Its own copies: built here, so that a graph-mode policy's graph and session are
            # this thread's. Always deterministic, whatever the videos show.
            runtime = PolicyRuntime(config.policy, deterministic=True)
            env = build_env(config.env, render_mode=None, quiet=True)
            env_state = WorkerEnvState(env, config.parameters.env_state, config.env.label)
            stepper = EnvStepper(env, env_state)
            # Set-up, not a step for the stall watch to time: a TensorFlow policy traces (and
            # XLA compiles) at its first call, 30 ms for a small module, more for a large model
            # under a short hang_timeout. The recordings reset the env again.
            runtime.warm_up(stepper.reset(self._start_seed))
            if self._scene.kind == "mujoco":
                self._states = _States(env)
                self._model_mjb = model_to_mjb(env.unwrapped.model)
                remove_abandoned(config.history_dir)  # a killed writer's
            while True:
                self._watch.idle()
                update = self._updates.take()
                if update is None:
                    return  # closed: the process is stopping
                policy, wrapper_state = config.parameters.split(update.params)
                runtime.set_params(policy)
                env_state.apply(wrapper_state)
                self._record(update, stepper, runtime)
        except BaseException as error:  # noqa: BLE001 - the main loop raises it
            logger.debug("history thread failed: %s", traceback.format_exc())
            self.failure = error
        finally:
            for thing in (env, runtime):
                try:
                    if thing is not None:
                        thing.close()
                except Exception:  # noqa: BLE001 - the error that ended it is the one to report
                    logger.debug("closing the history's %s failed", type(thing).__name__)

    def _record(self, update: ParamUpdate, stepper: Any, runtime: Any) -> None:
        """One whole, deterministic episode of ``update`` from the start state; written as a
        recording where the env is MuJoCo, reported in any case."""
        states, watch = self._states, self._watch
        cpu_started = time.thread_time()  # this thread's CPU: what a recorded second costs
        watch.mark(f"the recording of {_named(update)}")
        observation = stepper.reset(self._start_seed)
        reset = getattr(runtime.policy, "reset", None)
        if callable(reset):
            reset()
        builder = RecordingBuilder(self._model_mjb, {}) if states is not None else None
        if builder is not None:
            builder.add(states.read(), None, 0.0, 0)
        total, unsent, steps, ended = 0.0, 0.0, 0, False
        for steps in range(1, max(update.max_path_length, 1) + 1):
            watch.mark()
            step = stepper.step(runtime.act(observation))
            observation = step.observation
            total += step.reward
            unsent += step.reward
            ended = step.ended
            last = ended or steps == update.max_path_length
            if builder is not None and (last or steps % self._stride == 0):
                builder.add(states.read(), step.action, unsent, 0)
                unsent = 0.0
            if ended:
                break
        stepper.take_nonfinite()  # the main loop reports these, once per run
        episode_return = total if math.isfinite(total) else None
        watch.mark()
        path, size = None, None
        if builder is not None:
            builder.meta.update(self._meta(update, episode_return, steps, ended))
            path = os.path.join(self._config.history_dir,
                                history_name(update.number, update.iteration))
            size = self._write(path, builder)
            if size is None:
                path = None
        self._status.send(StatusKind.HISTORY,
                          update=update.number,
                          iteration=update.iteration,
                          episode_return=episode_return,
                          length=steps,
                          completed=ended,
                          path=path,
                          bytes=size,
                          steps=len(builder) if builder is not None else 0,
                          cpu_seconds=round(time.thread_time() - cpu_started, 4))

    def _write(self, path: str, builder: RecordingBuilder) -> Optional[int]:
        folder = os.path.dirname(path)
        try:
            # Made at the first recording. A video folder removed while training is the video
            # sink's to make again (and to say so); until then the returns go on without files.
            os.mkdir(folder)
        except FileExistsError:
            pass
        except OSError as error:
            logger.debug("no history recording %s: %s", path, error)
            return None
        try:
            write_recording(path, builder.build())
            size = os.path.getsize(path)
        except OSError as error:
            # A full device is the video sink's to report (one warning for the folder).
            log = logger.debug if error.errno == errno.ENOSPC else logger.warning
            log("could not write the history recording %s: %s", path, error)
            return None
        self._watch.mark()
        removed = thin(folder, self._config.history_kept)
        if removed:
            logger.debug("history thinned: removed %s", ", ".join(removed))
        return size

    def _meta(self, update: ParamUpdate, episode_return: Optional[float], length: int,
              ended: bool) -> dict:
        """What the recording says besides its steps: as a video's recording (how it would be
        framed and played: ``render/recording.py``), and what makes it history."""
        scene, config = self._scene, self._config
        quality = config.quality
        return dict(
            update=update.number,
            iteration=update.iteration,
            fps=float(scene.fps or config.fps),
            stride=self._stride,
            env_rate=scene.env_rate,
            label=scene.label,
            camera=scene.camera,
            camera_id=int(scene.camera_id),
            width=int(scene.width),
            height=int(scene.height),
            size_chosen=config.frame_size is not None,
            quality=quality,
            # the render process chooses "auto"'s preset from its GL renderer; a
            # recording drawn later gets the renderer of that day
            preset=quality if quality in ("cheap", "full") else None,
            pause_seconds=0.0,
            history=True,
            deterministic=True,
            start_seed=self._start_seed,
            max_path_length=update.max_path_length,
            length=length,
            completed=bool(ended),
            **{"return": episode_return})


def _named(update: ParamUpdate) -> str:
    """``iteration 3`` (or ``update 4`` where the trainer gave no iteration)."""
    if update.iteration is not None:
        return f"iteration {update.iteration}"
    return f"update {update.number}"


class _States:
    """Reads a MuJoCo env's full physics state (``mjSTATE_FULLPHYSICS``), as the shown steps
    do (``worker/shown_steps.py``)."""

    def __init__(self, env: Any) -> None:
        import mujoco

        self._mujoco = mujoco
        self._spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        unwrapped = env.unwrapped
        self._model, self._data = unwrapped.model, unwrapped.data
        self._size = mujoco.mj_stateSize(self._model, self._spec)

    def read(self) -> np.ndarray:
        state = np.empty(self._size)
        self._mujoco.mj_getState(self._model, self._data, state, self._spec)
        return state
