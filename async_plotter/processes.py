"""Starting child processes safely beside TensorFlow and the user's script (docs/design.md):
always ``spawn`` (``fork`` after TensorFlow ran hangs the child in ``session.run``), without the
parent's ``__main__`` (a training script without an ``if __name__ == "__main__":`` guard would
run again), so everything a child needs arrives by value (user objects as ``cloudpickle`` bytes);
and the processes that run a policy start with GPUs hidden (``worker_environment``), set in the
child's environment only.
"""
import contextlib
import ctypes
import logging
import multiprocessing
import multiprocessing.context
import os
import shutil
import signal
import sys
import threading
import weakref
from multiprocessing import resource_tracker, spawn, util
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Type

from async_plotter.display import use_private_runtime_dir
from async_plotter.mujoco_warnings import route_to_log

_SPAWN = multiprocessing.get_context("spawn")
_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")
_thread_state = threading.local()
# After a stop was lost (``resend_lost_stops``): long enough for the code that swallowed it to
# return, short beside the supervisor's wait before it kills.
_RESEND_DELAY = 0.01


def spawn_context() -> multiprocessing.context.SpawnContext:
    """The multiprocessing context every child of this library uses (never ``fork``)."""
    return _SPAWN


def _preparation_data_without_main(name: str) -> dict:
    """``spawn.get_preparation_data``, minus the main module when this thread asked for that.

    The choice is per thread: a process the user starts at the same moment from another thread
    still gets their main module, exactly as without this library.
    """
    data = _original_preparation_data(name)
    if getattr(_thread_state, "hide_main", False):
        for key in _MAIN_KEYS:
            data.pop(key, None)
    return data


_original_preparation_data = getattr(spawn.get_preparation_data, "__wrapped_original__",
                                     spawn.get_preparation_data)
_preparation_data_without_main.__wrapped_original__ = _original_preparation_data
spawn.get_preparation_data = _preparation_data_without_main

#: where a policy's TensorFlow may run in a worker process (``worker_environment``)
POLICY_DEVICES = ("cpu", "gpu")


def worker_environment(policy_device: str) -> Dict[str, str]:
    """What a process that runs a policy for the plotter or a sampler adds to its environment.

    ``"cpu"`` (the default): ``CUDA_VISIBLE_DEVICES=""``, so its TensorFlow sees no GPU. TF
    reserves most of a GPU's memory in every process that initialises CUDA, so a worker that
    starts before the trainer builds its model (or four samplers) could take the memory training
    needs; a one-observation policy step is faster on the CPU anyway. ``"gpu"``: the trainer's
    GPUs, with TensorFlow's memory growth on (``TF_FORCE_GPU_ALLOW_GROWTH``) unless already set.
    The render process gets none of this (it draws with the GPU's EGL where there is one), only
    ``one_blas_thread()``, which is part of this too.
    """
    device: Dict[str, str] = {}
    if policy_device != "gpu":
        device = {"CUDA_VISIBLE_DEVICES": ""}
    elif "TF_FORCE_GPU_ALLOW_GROWTH" not in os.environ:
        device = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    return {**device, **one_blas_thread()}


def one_blas_thread() -> Dict[str, str]:
    """What the plot worker's processes and the RL host's samplers add to their environment:
    numpy's BLAS (OpenBLAS, in its wheels) on one thread. Otherwise each starts a thread per
    core at numpy's import, and they spin after calls before they sleep. A worker's arrays are
    one observation or one frame, too small for BLAS to split, and each sampler is meant to have
    one core (measured, docs/benchmarks.md: the plot worker's start-up 0.1-0.15 CPU-s less).
    A value the user set wins."""
    if "OPENBLAS_NUM_THREADS" in os.environ:
        return {}
    return {"OPENBLAS_NUM_THREADS": "1"}


_ENV_PROGRAM = shutil.which("env") or ""


def quiet_environment() -> Dict[str, str]:
    """What every child of this library adds to its environment: TensorFlow's C++ logs from
    ERROR up, so that its INFO and WARNING lines (the CPU-instruction notice, ...) stay off the
    trainer's terminal. A value the user set wins. (TensorFlow 2.21 prints its oneDNN notice
    whatever this says.)"""
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return {}
    return {"TF_CPP_MIN_LOG_LEVEL": "2"}


def _spawnv_passfds_with_env(path: str, args: Sequence[str], passfds: Sequence[int]) -> int:
    """``util.spawnv_passfds``; for a spawned child of this thread that asked for variables, the
    interpreter is started through ``env NAME=VALUE ...``, which execs it with them (same pid),
    so they hold from its first instruction and the parent's environment is never touched."""
    extra = getattr(_thread_state, "child_env", None)
    name = os.fsdecode(path)  # bytes or str, as multiprocessing passes it
    if (extra and _ENV_PROGRAM and "--multiprocessing-fork" in args and "=" not in name
            and not name.startswith("-")):
        program = os.fsencode(_ENV_PROGRAM)  # the executable must be bytes here
        assignments = [os.fsencode(f"{key}={value}") for key, value in extra.items()]
        try:
            return _original_spawnv_passfds(program, [program, *assignments, path, *args[1:]],
                                            passfds)
        except OSError:
            pass  # env could not be run: the child's preamble sets them, before its target runs
    return _original_spawnv_passfds(path, args, passfds)


_original_spawnv_passfds = getattr(util.spawnv_passfds, "__wrapped_original__", util.spawnv_passfds)
_spawnv_passfds_with_env.__wrapped_original__ = _original_spawnv_passfds
util.spawnv_passfds = _spawnv_passfds_with_env


def start_process(target: Callable[..., Any],
                  args: Sequence[Any] = (),
                  name: Optional[str] = None,
                  daemon: bool = True,
                  ignore_sigint: bool = False,
                  die_with_parent: bool = False,
                  env: Optional[Mapping[str, str]] = None) -> multiprocessing.context.SpawnProcess:
    """Start ``target(*args)`` in a spawned child that does not re-run the user's main script.

    The child is told nothing about ``__main__``, exactly as if the parent were a REPL or a
    notebook, which ``spawn`` already handles. ``target`` must be importable by name from a
    library module (not from ``__main__``).

    ``ignore_sigint``: the child ignores SIGINT from its first instruction on, not only once
    ``target`` runs. A terminal's Ctrl-C reaches the whole process group, and a worker still
    importing its modules (seconds, with TensorFlow) would die of it with a traceback of its own,
    although the parent decides when workers stop. SIGINT stays blocked through fork and exec
    until the child ignores it, the way multiprocessing starts its resource tracker.

    ``die_with_parent``: on Linux the kernel kills the child (SIGKILL) the moment the thread that
    started it ends, so a worker still busy importing TensorFlow does not outlive a SIGKILLed
    trainer by seconds. The kernel ties the signal to the starting *thread*, not the process:
    start such children only from a thread that outlives them (the supervisor's does).

    ``env``: variables the child starts with, on top of the parent's environment (see
    ``worker_environment``) and ``quiet_environment()``; the parent's own ``os.environ`` is left
    as it is.
    """
    env = {str(name): str(value) for name, value in {**quiet_environment(), **(env or {})}.items()}
    target, args = _child_preamble, (target, ignore_sigint and _HAVE_SIGMASK,
                                     os.getpid() if die_with_parent else None, env, *args)
    process = _SPAWN.Process(target=target, args=tuple(args), name=name, daemon=daemon)
    _thread_state.hide_main = True
    _thread_state.child_env = env
    blocked = False
    mask_sigint = ignore_sigint and _HAVE_SIGMASK
    try:
        if mask_sigint:
            # Starting the resource tracker (spawn does so on first use) unblocks SIGINT in this
            # thread when it is done; have that happen before the mask is set, not in between.
            resource_tracker.ensure_running()
            # Only this thread, for the few milliseconds of fork and exec: a Ctrl-C meanwhile stays
            # pending for the parent and is delivered when the mask is restored below.
            blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        with _sigint_deferred(), _children_allowed(die_with_parent):
            process.start()
    finally:
        _thread_state.hide_main = False
        _thread_state.child_env = None
        if mask_sigint and not blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _started.add(process)
    return process


#: the children started here: a process forked from this one must leave them alone
_started: "weakref.WeakSet[multiprocessing.process.BaseProcess]" = weakref.WeakSet()


def _forget_children_in_forked_child() -> None:
    """In a process forked from this one (a plain ``os.fork()``: multiprocessing's own children
    start afresh), drop our children from multiprocessing's list of the current process's
    children. That list is copied by the fork, and at the forked process's exit multiprocessing
    terminates the daemonic ones on it (the trainer's plot worker) and tries to join the others
    ("can only join a child process")."""
    children = getattr(multiprocessing.process, "_children", None)
    if isinstance(children, set):
        children.difference_update(_started)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_children_in_forked_child)

_HAVE_SIGMASK = hasattr(signal, "pthread_sigmask")


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold back a Ctrl-C until the child is fully started.

    ``process.start()`` writes the child's preparation data into a pipe; a KeyboardInterrupt in
    the middle leaves the child with half of it, and it dies printing ``EOFError: Ran out of
    input``. Blocking SIGINT in this thread is not enough when other threads exist (the kernel
    then delivers it to one of them, and Python still raises it here), so the main thread's
    handler only records it meanwhile and the interrupt is raised right after.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending and callable(previous):
            previous(signal.SIGINT, pending[0])


@contextlib.contextmanager
def _children_allowed(die_with_parent: bool) -> Iterator[None]:
    """Let a daemonic process start a child that dies with it.

    A trainer inside a ``multiprocessing.Pool`` worker (a hyperparameter sweep) is daemonic, and
    multiprocessing refuses it children ("daemonic processes are not allowed to have children"):
    the pool terminates its workers without waiting, which would leave their children orphaned.
    A ``die_with_parent`` child is killed by the kernel when its parent goes, however it goes,
    so the refusal guards against nothing there; it is lifted for the moment of the start
    (multiprocessing keeps the flag in the current process's ``_config``: where it does not,
    the refusal stands).
    """
    config = getattr(multiprocessing.current_process(), "_config", None)
    if not (die_with_parent and isinstance(config, dict) and config.get("daemon")):
        yield
        return
    config["daemon"] = False
    try:
        yield
    finally:
        config["daemon"] = True


_PR_SET_PDEATHSIG = 1


def _child_preamble(target: Callable[..., Any], ignore_sigint: bool, parent_pid: Optional[int],
                    env: Dict[str, str], *args: Any) -> Any:
    """In the child, before ``target``: ignore SIGINT (a Ctrl-C that came while booting is
    discarded), ask to be killed with the parent, and make sure of ``env`` (already there when
    the child was started through ``env``; set here where it could not be), and keep library
    chatter that is not the user's to act on quiet (``_quiet_python_logs``)."""
    os.environ.update(env)
    _quiet_python_logs()
    if ignore_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if parent_pid is not None:
        _die_with_parent(parent_pid)
    return target(*args)


def exit_now(code: int) -> None:
    """End a worker process whose files are written and closed, skipping the interpreter's
    teardown, which ``close()`` would wait for: ~0.1 s with MuJoCo's GL context and Mesa loaded,
    ~0.75 s with TensorFlow (measured, 2 cores). Logs and standard streams are flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - leaving anyway
            pass
    os._exit(code)


def _die_with_parent(parent_pid: int) -> None:
    """``PR_SET_PDEATHSIG``: SIGKILL when the parent goes; a no-op where Linux's prctl is absent
    (the workers' pipe checks still notice a dead parent, after their imports)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    # The parent may have died before the call above; then nobody would ever send the signal.
    if os.getppid() != parent_pid:
        os._exit(1)


def stop_process(process: multiprocessing.process.BaseProcess, timeout: float) -> Optional[int]:
    """Join ``process`` for up to ``timeout`` s, then SIGTERM, then SIGKILL. Never hangs.

    Returns the exit code (negative for a signal), or None if even SIGKILL did not reap it.
    """
    if process.pid is None:
        return None
    process.join(max(timeout, 0.0))
    if process.exitcode is None:
        with contextlib.suppress(OSError):
            process.terminate()
        process.join(1.0)
    if process.exitcode is None:
        with contextlib.suppress(OSError):
            process.kill()
        process.join(1.0)
    return process.exitcode


def _quiet_python_logs() -> None:
    """absl's Python logging (TensorFlow's) from ERROR up only; the child's own lines are
    unaffected."""
    logging.getLogger("absl").setLevel(logging.ERROR)


def become_background_child() -> None:
    """Called first thing in a child: ignore Ctrl-C (the parent decides).

    The child keeps the trainer's priority while it boots (imports, policy rebuild, GL context: a
    few CPU-seconds, once); a child started at idle priority on a machine kept busy by training
    never finished booting. The supervisor lowers it afterwards (``priorities`` module).
    """
    # The terminal sends SIGINT to the whole process group; the parent owns the shutdown.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def resend_lost_stops(stop: Type[BaseException]) -> None:
    """Keep a stop raised by this process's SIGTERM handler (an exception of type ``stop``) from
    being lost. Raised where Python only reports an exception and goes on (a weakref callback,
    ``__del__``, a garbage-collector callback: "Exception ignored in ..."), it printed a
    traceback on the trainer's terminal and the process went on until the supervisor's SIGKILL.
    Such a stop is not printed; SIGTERM is sent again, from a thread, a moment later, so that the
    handler raises it where the process can take it."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, stop):
            previous(unraisable)
            return
        try:
            threading.Timer(_RESEND_DELAY, os.kill, (os.getpid(), signal.SIGTERM)).start()
        except RuntimeError:  # no new threads at the interpreter's exit: it is ending anyway
            pass

    sys.unraisablehook = hook


def keep_side_effects_out_of_user_folders() -> None:
    """Route MuJoCo's warnings to logging at DEBUG (it would print them on the trainer's
    terminal and write MUJOCO_LOG.TXT into the working directory: ``mujoco_warnings``) and point
    Keras's home (``~/.keras``) and pygame's runtime folder at temporary ones."""
    import tempfile

    os.environ.setdefault("KERAS_HOME", os.path.join(tempfile.gettempdir(), "async_plotter_keras"))
    use_private_runtime_dir()
    route_to_log()
