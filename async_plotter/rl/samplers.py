"""Collecting a batch of paths with the current policy, in this process or in worker processes.

Reproducibility is by path, not by worker: path ``k`` of iteration ``itr`` resets its environment
with a seed and draws its action noise from a generator that both derive from
``(seed, itr, k)`` alone. A batch is paths ``0, 1, 2, ...`` taken in order until they hold
``batch_size`` steps. So the same seed gives the same batch whether one process or eight collect
it, and however the operating system schedules them; workers only decide *who* computes path ``k``.

To keep each path independent of the others, the policy sees one observation at a time. Batching
observations of several environments would amortise TensorFlow's per-call cost (~0.25 ms), but a
row of a TF matmul is not bitwise the same for every batch size (measured: matrix-vector kernels
for one-dimensional outputs), so a path's numbers would depend on who else was in the batch.

A policy that offers a numpy copy of itself (``numpy_copy()``: the RL host's MLP policies) is
sampled through it, in this process and in the workers: a step costs ~20x less, and a worker
process never imports TensorFlow. Both samplers use it, so they still give the same batch.
"""
import contextlib
import logging
import multiprocessing.connection
import os
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import cloudpickle
import gymnasium as gym
import numpy as np

from async_plotter import processes
from async_plotter.mujoco_warnings import route_to_log
from async_plotter.env.state import EnvStateLayout, TrainerEnvState
from async_plotter.env.stepper import as_reward
from async_plotter.policy.adapters import acting_copy
from async_plotter.rl.batch import SampleBatch
from async_plotter.rl.construction_warnings import built_keeping_warnings, say_in_this_process
from async_plotter.rl.envs import EnvMaker, added_wrappers, flatten_observation
from async_plotter.validation import one_of, positive_int

logger = logging.getLogger(__name__)


def path_seeds(seed: int, itr: int, index: int) -> Tuple[int, np.random.Generator]:
    """The environment reset seed and the action-noise generator of path ``index`` of ``itr``."""
    env_seq, action_seq = np.random.SeedSequence(entropy=seed, spawn_key=(itr, index)).spawn(2)
    return int(env_seq.generate_state(1)[0]), np.random.default_rng(action_seq)


def rollout(env: gym.Env,
            policy: Any,
            max_path_length: int,
            env_seed: Optional[int] = None,
            rng: Optional[np.random.Generator] = None,
            should_stop: Optional[Callable[[], bool]] = None) -> Optional[Dict[str, Any]]:
    """Run one path of at most ``max_path_length`` steps; returns it as a dict of arrays.

    Returns None when ``should_stop()`` becomes true before the path ends.
    """
    policy.reset()
    obs, _ = env.reset(seed=env_seed)
    space = env.observation_space
    box_actions = isinstance(env.action_space, gym.spaces.Box)
    observations, actions, rewards, infos = [], [], [], []
    terminated = False
    for _ in range(max_path_length):
        if should_stop is not None and should_stop():
            return None
        flat_obs = flatten_observation(space, obs)
        action, info = policy.get_actions(flat_obs[None], rng)
        if box_actions:
            # The path keeps the sampled action (its likelihood is what the update needs); the env
            # gets it clipped to the bounds.
            env_action = np.clip(action[0], env.action_space.low, env.action_space.high)
        else:
            env_action = int(action[0])
        obs, reward, terminated, truncated, _ = env.step(env_action)
        observations.append(flat_obs)
        actions.append(action[0])
        rewards.append(as_reward(reward))
        infos.append(info)
        if terminated or truncated:
            break
    return {
        "observations": np.stack(observations),
        "actions": np.stack(actions),
        "rewards": np.asarray(rewards, dtype=np.float64),
        "agent_infos": {
            key: np.concatenate([i[key] for i in infos])
            for key in infos[0]
        },
        "terminated": bool(terminated),
        # The state the path stopped in: its value stands in for the rest of a cut path.
        "last_observation": flatten_observation(space, obs),
    }


def _check_sizes(batch_size: int, max_path_length: int) -> None:
    if batch_size <= 0 or max_path_length <= 0:
        raise ValueError(f"batch_size and max_path_length must be positive, got {batch_size} and "
                         f"{max_path_length}")


class Sampler:
    """Interface: ``start`` once, ``obtain_samples`` per iteration, ``shutdown`` at the end."""

    n_parallel = 1

    def start(self, env: Any, policy: Any, seed: Optional[int] = None) -> None:
        raise NotImplementedError

    def check_env(self, env: Any) -> None:
        """Raise ``ValueError`` if this sampler cannot sample ``env`` as given; called before
        anything starts (the plotter included)."""

    def env_state(self) -> Optional[np.ndarray]:
        """What the wrappers of the env this sampler steps have learned (running observation
        statistics: ``async_plotter.env.state``'s flat vector), as of its last batch; None where
        they hold none, or before a batch."""
        return None

    def env_states(self) -> List[np.ndarray]:
        """What the wrappers of each env this sampler steps have learned, one vector per
        process (``env_state()``'s is the first), as of its last batch: a snapshot keeps them
        all, and a resumed run's samplers each go on from one. Empty before a batch."""
        state = self.env_state()
        return [] if state is None else [state]

    def env_state_layout(self) -> Optional[EnvStateLayout]:
        """Which wrappers ``env_state()``'s vector is of, and their fields; None where none
        learns anything. Known once started."""
        return None

    def restore_env_states(self, states: Sequence[np.ndarray]) -> None:
        """Give the envs this sampler steps what the wrappers of a run had learned (its
        ``env_states()``, of this layout), before the first batch: a resumed run goes on from
        it, the i-th process from the i-th (round again where the run had fewer)."""

    def obtain_samples(self, itr: int, param_values: Optional[np.ndarray], batch_size: int,
                       max_path_length: int) -> SampleBatch:
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> "Sampler":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _state_reader(env: Any) -> Optional[TrainerEnvState]:
    """A reader of what ``env``'s wrappers learn, or None where none of them learns anything or
    it cannot be read (a hook of the user's that returns no arrays: the plotter's own check names
    that, and training must not fail for it)."""
    try:
        state = TrainerEnvState(env, type(env).__name__)
    except Exception as error:  # noqa: BLE001 - the user's get_wrapper_state()
        logger.debug("not reading the env's wrapper state: %s", error)
        return None
    return state if state.layout.layers else None


def _learned(state: Optional[TrainerEnvState]) -> Optional[np.ndarray]:
    """``state.read()``, or None where there is none or it cannot be read now."""
    if state is None:
        return None
    try:
        return state.read()
    except Exception as error:  # noqa: BLE001 - a hook whose fields changed: never fail training
        logger.debug("not reading the env's wrapper state: %s", error)
        return None


def _resolve_sampler_seed(seed: Optional[int]) -> int:
    # Drawn from numpy's global generator so that seeding numpy makes an unseeded run repeatable.
    return int(np.random.randint(2**31 - 1)) if seed is None else int(seed)


class SerialSampler(Sampler):
    """Samples in the calling process, with the policy object itself."""

    def __init__(self) -> None:
        self._env: Optional[gym.Env] = None
        self._owns_env = False
        self._state: Optional[TrainerEnvState] = None
        self._env_state: Optional[np.ndarray] = None
        self._policy: Any = None
        self.seed: Optional[int] = None

    def start(self, env: Any, policy: Any, seed: Optional[int] = None) -> None:
        """Build the environment (a live one is used as is) and remember the policy."""
        self.shutdown()
        self._env = env if isinstance(env, gym.Env) else EnvMaker.from_env(env)()
        self._owns_env = not isinstance(env, gym.Env)
        self._state = _state_reader(self._env)
        self._env_state = None
        self._policy = policy
        self.seed = _resolve_sampler_seed(seed)

    def obtain_samples(self, itr: int, param_values: Optional[np.ndarray], batch_size: int,
                       max_path_length: int) -> SampleBatch:
        """Whole paths ``0, 1, ...`` until they hold at least ``batch_size`` steps."""
        if self._env is None:
            raise RuntimeError("SerialSampler.obtain_samples called before start()")
        _check_sizes(batch_size, max_path_length)
        if param_values is not None:
            self._policy.set_param_values(param_values)
        acting = acting_copy(self._policy)  # of these parameters, as the workers' would be
        paths: List[Dict[str, Any]] = []
        total = 0
        while total < batch_size:
            env_seed, rng = path_seeds(self.seed, itr, len(paths))
            path = rollout(self._env, acting, max_path_length, env_seed, rng)
            paths.append(path)
            total += len(path["rewards"])
        self._env_state = _learned(self._state)
        return SampleBatch.from_paths(paths)

    def env_state(self) -> Optional[np.ndarray]:
        return self._env_state

    def env_state_layout(self) -> Optional[EnvStateLayout]:
        return self._state.layout if self._state is not None else None

    def restore_env_states(self, states: Sequence[np.ndarray]) -> None:
        if self._state is not None:
            self._state.write(states[0])
            self._env_state = np.array(states[0])

    def shutdown(self) -> None:
        if self._env is not None and self._owns_env:
            self._env.close()
        self._env = None


def _worker_main(conn: multiprocessing.connection.Connection, payload: bytes, stop: Any,
                 index: int) -> None:
    """Entry point of a sampler worker process (see :class:`ParallelSampler`).

    Commands: ``("params", (flat, seed, itr, max_path_length))`` sets what the next paths use;
    ``("run", k)`` answers ``("path", k, path)``, or ``("skipped", k)`` once the shared stop flag is
    up; ``("close", None)`` exits. Failures answer ``("error", traceback)``.
    """
    processes.become_background_child()  # ignore Ctrl-C; the parent decides
    route_to_log()  # quiet about the env's XML, once per sampler otherwise
    code = 1
    try:
        _serve(conn, payload, stop)
        code = 0
    finally:
        # Leave without the interpreter's teardown. With TensorFlow loaded it spends ~1 s of CPU
        # collecting TF's objects (measured; 3 s of wall time with two workers on two busy cores),
        # which is what made shutdown() and so Ctrl-C slow. Nothing here needs it: the worker owns
        # no files, segments or children, and its pipe and environment are already closed.
        processes.exit_now(code)


def _serve(conn: multiprocessing.connection.Connection, payload: bytes, stop: Any) -> None:
    """The worker's command loop; returns when told to close or when the parent is gone."""
    # Workers share the cores with each other and the trainer; one thread each avoids
    # oversubscription (TF would otherwise start a pool of one thread per core per process). Set
    # before anything imports TensorFlow, which a policy's numpy copy never does.
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        os.environ.setdefault(name, "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env = None
    try:
        recipe = cloudpickle.loads(payload)
        env, said = built_keeping_warnings(recipe["env_maker"])
        state = _state_reader(env)
        policy = recipe["policy"]
        conn.send(("ready", (said, state.layout if state is not None else None)))
        seed = itr = max_path_length = None
        while True:
            try:
                command, data = conn.recv()
            except (EOFError, OSError):
                return  # the parent is gone
            try:
                if command == "params":
                    params, seed, itr, max_path_length = data
                    policy.set_param_values(params)
                elif command == "run":
                    path = None
                    if not stop.value:
                        env_seed, rng = path_seeds(seed, itr, data)
                        path = rollout(env, policy, max_path_length, env_seed, rng,
                                       lambda: bool(stop.value))
                    # Each answer carries what the env's wrappers have learned so far (a few
                    # numbers, a dropped path's steps included), for the plotter's copy of the
                    # env and the snapshot (``Sampler.env_states``).
                    learned = _learned(state)
                    conn.send(("skipped", data, learned) if path is None else ("path", data, path,
                                                                               learned))
                elif command == "env_state":
                    state.write(data)
                    conn.send(("env_state", _learned(state)))
                elif command == "close":
                    return
                else:
                    raise ValueError(f"unknown command {command!r}")
            except (BrokenPipeError, ConnectionResetError):
                raise
            except Exception:
                conn.send(("error", traceback.format_exc()))
    except (BrokenPipeError, ConnectionResetError, EOFError):
        return  # parent gone while we were answering
    except BaseException:
        with contextlib.suppress(OSError):
            conn.send(("error", traceback.format_exc()))
    finally:
        if env is not None:
            with contextlib.suppress(Exception):
                env.close()


class ParallelSampler(Sampler):
    """Samples in ``n_parallel`` worker processes, each with its own environment and policy copy.

    The environment recipe and the policy travel once, at :meth:`start`, as cloudpickle bytes (the
    policy pickles as its constructor arguments); after that each iteration sends only the flat
    parameter vector. The parent hands out path indices, two ahead per worker so none waits for a
    round trip, and workers stream finished paths back; once paths ``0..K-1`` hold ``batch_size``
    steps, a shared flag makes every worker drop what it is doing, so the wall time is about
    ``batch / n_parallel`` steps plus one partial path. (The flag is a lock-free shared byte; only
    the parent writes it.)

    Workers ignore Ctrl-C (the parent shuts them down), and exit on their own when the parent dies
    (their pipe reports EOF or a broken pipe).

    Their TensorFlow sees no GPU (they start with ``CUDA_VISIBLE_DEVICES=""``; TensorFlow would
    reserve most of a GPU's memory in each of them, and a one-observation policy step is faster
    on the CPU); ``policy_device="gpu"`` lets them use the trainer's GPUs, with memory growth
    on. The trainer's own environment is never changed.
    """

    _AHEAD = 2  # path indices queued per worker

    def __init__(self,
                 n_parallel: int = 2,
                 start_timeout: float = 120.0,
                 shutdown_timeout: float = 5.0,
                 policy_device: str = "cpu") -> None:
        self.n_parallel = positive_int("n_parallel", n_parallel)
        self.policy_device = one_of("policy_device", policy_device, processes.POLICY_DEVICES)
        self.start_timeout = float(start_timeout)
        self.shutdown_timeout = float(shutdown_timeout)
        self.seed: Optional[int] = None
        self._processes: List[Any] = []
        self._conns: List[multiprocessing.connection.Connection] = []
        self._ready = 0  # workers 0 .. _ready - 1 have reported ready
        self._stop: Any = None
        self._interrupted = False
        # what each worker's wrappers have learned, as of its last answer
        self._env_states: List[Optional[np.ndarray]] = []
        self._layout: Optional[EnvStateLayout] = None  # of worker 0's env, once started

    @property
    def worker_pids(self) -> List[int]:
        return [p.pid for p in self._processes]

    def check_env(self, env: Any) -> None:
        """A live env is rebuilt in each worker from its registration, which would leave out the
        wrappers added to it after ``make()``: training would go on without them, silently."""
        wrappers = added_wrappers(env)
        if wrappers:
            raise ValueError(
                f"{type(self).__name__} rebuilds the env in each of its {self.n_parallel} "
                f"processes from its registration ({env.spec.id}), which would leave out the "
                f"wrappers added to it ({', '.join(wrappers)}), so training would go on without "
                "them. Pass a zero-argument function that builds the env with them, e.g. "
                f"env=lambda: {wrappers[-1]}(gymnasium.make({env.spec.id!r})), or n_parallel=1, "
                "which steps your env object itself")

    def start(self, env: Any, policy: Any, seed: Optional[int] = None) -> None:
        """Start the workers and wait until each has built its environment and policy."""
        self.check_env(env)
        self.shutdown()
        self.seed = _resolve_sampler_seed(seed)
        payload = cloudpickle.dumps({
            "env_maker": EnvMaker.from_env(env),
            "policy": acting_copy(policy)
        })
        ctx = processes.spawn_context()
        self._stop = ctx.RawValue("b", 0)
        self._interrupted = False
        self._env_states = [None] * self.n_parallel
        self._layout = None
        self._ready = 0
        try:
            for index in range(self.n_parallel):
                parent_end, child_end = ctx.Pipe(duplex=True)
                process = processes.start_process(
                    _worker_main, (child_end, payload, self._stop, index),
                    name=f"async_plotter-sampler-{index}",
                    ignore_sigint=True,
                    die_with_parent=True,
                    env=processes.worker_environment(self.policy_device))
                # Without our copy of the child's end, the child's exit shows up here as EOF.
                child_end.close()
                self._processes.append(process)
                self._conns.append(parent_end)
            deadline = time.monotonic() + self.start_timeout
            for index, conn in enumerate(self._conns):
                if not conn.poll(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"sampler worker {index} was not ready after "
                                       f"{self.start_timeout:.0f} s")
                kind, data = self._receive(index)
                if kind != "ready":
                    raise RuntimeError(f"sampler worker {index} sent {kind!r} instead of 'ready'")
                self._ready = index + 1
                said, layout = data
                say_in_this_process(said)
                if index == 0:
                    self._layout = layout
            logger.debug("parallel sampler: %d workers ready (pids %s)", self.n_parallel,
                         self.worker_pids)
        except BaseException:
            self.shutdown()
            raise

    def _receive(self, index: int) -> Tuple[Any, ...]:
        try:
            message = self._conns[index].recv()
        except (EOFError, OSError):
            process = self._processes[index]
            process.join(1.0)
            raise RuntimeError(f"sampler worker {index} (pid {process.pid}) died, exit code "
                               f"{process.exitcode}") from None
        if message[0] == "error":
            raise RuntimeError(f"sampler worker {index} failed:\n{message[1]}")
        return message

    def obtain_samples(self, itr: int, param_values: Optional[np.ndarray], batch_size: int,
                       max_path_length: int) -> SampleBatch:
        """Whole paths ``0, 1, ...`` until they hold at least ``batch_size`` steps."""
        if not self._processes:
            raise RuntimeError("ParallelSampler.obtain_samples called before start()")
        if param_values is None:
            raise ValueError("ParallelSampler needs the policy's parameter values")
        _check_sizes(batch_size, max_path_length)
        if self._interrupted:
            raise RuntimeError("a previous obtain_samples call was interrupted and workers may "
                               "still answer it; call start() again")
        self._interrupted = True  # until this call has collected every answer
        self._stop.value = 0  # every worker is idle here: all indices of the last call answered
        params = np.asarray(param_values, dtype=np.float32)
        for conn in self._conns:
            conn.send(("params", (params, self.seed, itr, max_path_length)))
        paths: Dict[int, Dict[str, Any]] = {}
        next_index, prefix, prefix_steps, needed = 0, 0, 0, None
        outstanding = [0] * self.n_parallel

        def assign(worker: int) -> None:
            nonlocal next_index
            self._conns[worker].send(("run", next_index))
            next_index += 1
            outstanding[worker] += 1

        for worker in range(self.n_parallel):
            for _ in range(self._AHEAD):
                assign(worker)
        while any(outstanding):
            waiting = [self._conns[i] for i in range(self.n_parallel) if outstanding[i]]
            for conn in multiprocessing.connection.wait(waiting):
                worker = self._conns.index(conn)
                message = self._receive(worker)
                outstanding[worker] -= 1
                self._env_states[worker] = message[-1]
                if message[0] == "path" and needed is None:
                    paths[message[1]] = message[2]
                    while prefix in paths:
                        prefix_steps += len(paths[prefix]["rewards"])
                        prefix += 1
                        if prefix_steps >= batch_size:
                            needed = prefix
                            self._stop.value = 1  # drop paths in flight, skip queued ones
                            break
                if needed is None:
                    assign(worker)
        self._interrupted = False
        return SampleBatch.from_paths([paths[k] for k in range(needed)])

    def env_state(self) -> Optional[np.ndarray]:
        """Worker 0's: each worker's wrappers learn from its own paths, and one is shown."""
        return self._env_states[0] if self._env_states else None

    def env_states(self) -> List[np.ndarray]:
        if any(state is None for state in self._env_states):
            return []  # before a batch
        return list(self._env_states)

    def env_state_layout(self) -> Optional[EnvStateLayout]:
        return self._layout

    def restore_env_states(self, states: Sequence[np.ndarray]) -> None:
        """Worker i's wrappers go on from ``states[i % len(states)]``: each of the run's, where
        it had as many samplers. Returns once every worker holds its state."""
        if self._layout is None or not len(states):
            return
        for index, conn in enumerate(self._conns):
            conn.send(("env_state", np.asarray(states[index % len(states)])))
        for index in range(self.n_parallel):
            kind, learned = self._receive(index)
            if kind != "env_state":
                raise RuntimeError(f"sampler worker {index} sent {kind!r} instead of 'env_state'")
            self._env_states[index] = learned

    def shutdown(self) -> None:
        """Ask the workers to exit; join with a timeout, then terminate/kill. Idempotent."""
        if not self._processes:
            return
        self._stop.value = 1  # a worker in the middle of a path drops it
        # A worker that has not reported ready is still importing TensorFlow or building its
        # environment, seconds before it would read "close", and has nothing to finish: stop it
        # now (Ctrl-C during start-up).
        for process in self._processes[self._ready:]:
            with contextlib.suppress(Exception):
                process.terminate()
        for conn in self._conns:
            with contextlib.suppress(Exception):
                conn.send(("close", None))
        deadline = time.monotonic() + self.shutdown_timeout
        while time.monotonic() < deadline and any(p.is_alive() for p in self._processes):
            # Read whatever the workers still send, so none stays blocked on a full pipe.
            for conn in self._conns:
                with contextlib.suppress(Exception):
                    while conn.poll():
                        conn.recv()
            for process in self._processes:
                process.join(0.02)
        for process in self._processes:
            processes.stop_process(process, max(0.0, deadline - time.monotonic()))
        for conn in self._conns:
            with contextlib.suppress(Exception):
                conn.close()
        self._processes, self._conns, self._ready = [], [], 0
