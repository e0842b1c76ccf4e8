"""A run's history of state recordings, written here as the worker writes them (one whole
episode per policy from one fixed start, in ``<folder>/history/iter_NNNN.npz``), without a
worker: the sled (``tests.policies.make_sled``) pushed with a force that grows with the
iteration, so each iteration's sled is somewhere else at a given step. Shared by the tests and
``benchmarks/history_cost.py`` (any env id works there: a MuJoCo env of Gymnasium's)."""
import os
from typing import Callable, Optional

import numpy as np

#: shown steps of each episode (2 s of the sled at 50 steps a second)
STEPS = 100


def push(iteration: int) -> float:
    """The sled's push at ``iteration`` (the action, in [-1, 1])."""
    return min(0.1 + 0.15 * iteration, 1.0)


# A gait that carries HalfCheetah forward (found by a short random search): every actuator
# swings at one frequency, each with its phase; a later iteration swings wider.
_GAIT_HZ = 1.55
_GAIT_PHASES = np.array([1.762, 3.049, 6.162, 6.042, 4.554, 3.401])


def gait(iteration: int, seconds: float, actuators: int) -> np.ndarray:
    """Another env's action at ``iteration``, ``seconds`` into the episode."""
    phases = np.resize(_GAIT_PHASES, actuators)
    return min(0.1 + 0.08 * iteration, 1.0) * np.sin(2 * np.pi * _GAIT_HZ * seconds + phases)


def write_history(folder: str,
                  iterations,
                  env_factory: Optional[Callable[[], object]] = None,
                  steps: int = STEPS,
                  in_history: bool = True,
                  seed: int = 0) -> str:
    """Write one recording per iteration into ``folder/history/`` (``in_history``) or
    ``folder``; returns the folder written into. With ``env_factory`` (a Gymnasium MuJoCo env)
    each iteration's policy is ``gait``, else the sled's ``push``."""
    import mujoco

    from async_plotter.render.recording import RecordingBuilder, model_to_mjb, write_recording

    if env_factory is None:
        from tests.policies import make_sled

        env_factory = make_sled
    env = env_factory()
    model, data = env.unwrapped.model, env.unwrapped.data
    fps = float(env.metadata.get("render_fps") or 1.0 / model.opt.timestep)
    mjb = model_to_mjb(model)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state = np.empty(mujoco.mj_stateSize(model, spec))
    target = os.path.join(folder, "history") if in_history else folder
    os.makedirs(target, exist_ok=True)
    sled = getattr(env_factory, "__name__", "") == "make_sled"
    dt = float(getattr(env.unwrapped, "dt", model.opt.timestep))
    for iteration in iterations:
        env.reset(seed=seed)  # the run's one fixed start
        builder = RecordingBuilder(
            mjb,
            dict(update=iteration + 1,
                 iteration=iteration,
                 fps=fps,
                 stride=1,
                 label="history test",
                 camera=None,
                 camera_id=-1))
        mujoco.mj_getState(model, data, state, spec)
        builder.add(state, None, 0.0, 0)
        total = 0.0
        for step in range(steps - 1):
            action = (np.array([push(iteration)]) if sled else gait(iteration, step * dt, model.nu))
            _, reward, _, _, _ = env.step(action)
            total += float(reward)
            mujoco.mj_getState(model, data, state, spec)
            builder.add(state, action, float(reward), 0)
        builder.meta.update({"return": total, "length": steps - 1})
        write_recording(os.path.join(target, f"iter_{iteration:04d}.npz"), builder.build())
    env.close()
    return target


def sled_x(path: str, index: int) -> float:
    """The sled's x at a recorded step."""
    import mujoco

    from async_plotter.render.recording import read_recording

    recording = read_recording(path)
    model = recording.load_model()
    data = mujoco.MjData(model)
    state = recording.states[min(index, len(recording.states) - 1)]
    mujoco.mj_setState(model, data, state, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    mujoco.mj_forward(model, data)
    return float(data.xpos[1][0])
