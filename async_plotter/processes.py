"""Starting child processes safely beside TensorFlow and the user's script.

Two facts shape this module (both measured; see DESIGN.md):

* ``fork`` after TensorFlow ran hangs the child inside ``session.run``, so children are always
  started with ``spawn``, a fresh interpreter.
* ``spawn`` normally re-imports the parent's ``__main__`` module in the child. Training scripts often
  have no ``if __name__ == "__main__":`` guard, so the child would re-run the whole training script.
  ``start_process`` leaves the main module out of what the child is told, so the child imports
  only what it is handed. Everything the child needs must therefore arrive by value: pass user
  objects as ``cloudpickle`` bytes, never as references to ``__main__``.
"""
import contextlib
import ctypes
import logging
import multiprocessing
import multiprocessing.context
import os
import signal
import sys
import threading
from multiprocessing import resource_tracker, spawn
from typing import Any, Callable, Iterator, Optional, Sequence

_SPAWN = multiprocessing.get_context("spawn")
_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")
_thread_state = threading.local()


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


def start_process(target: Callable[..., Any],
                  args: Sequence[Any] = (),
                  name: Optional[str] = None,
                  daemon: bool = True,
                  ignore_sigint: bool = False,
                  die_with_parent: bool = False) -> multiprocessing.context.SpawnProcess:
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
    """
    if ignore_sigint or die_with_parent:
        target, args = _child_preamble, (target, ignore_sigint and _HAVE_SIGMASK,
                                         os.getpid() if die_with_parent else None, *args)
    process = _SPAWN.Process(target=target, args=tuple(args), name=name, daemon=daemon)
    _thread_state.hide_main = True
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
        with _sigint_deferred():
            process.start()
    finally:
        _thread_state.hide_main = False
        if mask_sigint and not blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    return process


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


_PR_SET_PDEATHSIG = 1


def _child_preamble(target: Callable[..., Any], ignore_sigint: bool, parent_pid: Optional[int],
                    *args: Any) -> Any:
    """In the child, before ``target``: ignore SIGINT (a Ctrl-C that came while booting is
    discarded) and ask to be killed with the parent."""
    if ignore_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if parent_pid is not None:
        _die_with_parent(parent_pid)
    return target(*args)


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


@contextlib.contextmanager
def until_interrupted(stop: Callable[[], None]) -> Iterator[None]:
    """Run the block until Ctrl-C or SIGTERM (both end it as a ``KeyboardInterrupt``, which goes
    no further), then call ``stop`` with both signals ignored: a second Ctrl-C must not cut a
    bounded shutdown short and orphan worker processes. For commands that run until stopped."""
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        yield
    except KeyboardInterrupt:
        logging.getLogger("async_plotter").info("stopping")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop()


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt()


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


def become_background_child() -> None:
    """Called first thing in a child: ignore Ctrl-C (the parent decides).

    The child keeps the trainer's priority while it boots (imports, policy rebuild, GL context: a
    few CPU-seconds, once); a child started at idle priority on a machine kept busy by training
    never finished booting. The supervisor lowers it afterwards (``priorities`` module).
    """
    # The terminal sends SIGINT to the whole process group; the parent owns the shutdown.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def keep_side_effects_out_of_user_folders() -> None:
    """Route MuJoCo's warnings to logging (it would write MUJOCO_LOG.TXT into the working
    directory) and point Keras's home (``~/.keras``) at a temporary folder."""
    import tempfile

    os.environ.setdefault("KERAS_HOME", os.path.join(tempfile.gettempdir(), "async_plotter_keras"))
    try:
        import mujoco
    except ImportError:
        return
    mujoco_logger = logging.getLogger("async_plotter.mujoco")
    mujoco.set_mju_user_warning(lambda message: mujoco_logger.warning("MuJoCo: %s", message))
