"""The trainer-side supervisor: starts the worker's two processes, reads their reports, restarts
them after a crash or a hang, and stops them within a deadline.

It runs in one daemon thread that sleeps in ``multiprocessing.connection.wait`` on the children's
status pipes and process sentinels, so it costs the trainer nothing while all is well.
"""
import collections
import fcntl
import logging
import os
import pickle
import signal
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Dict, List, Optional, Set

from async_plotter.processes import spawn_context, start_process, stop_process
from async_plotter.worker import render_process, rollout_process
from async_plotter.worker.config import WorkerConfig

logger = logging.getLogger("async_plotter")

_F_SETPIPE_SZ = 1031  # Linux: shrink the rollout->render pipe so it cannot hold seconds of stale steps
_STREAM_PIPE_BYTES = 16384
# One write of at most PIPE_BUF bytes to a pipe is atomic: all of it or, when full, none.
_MAX_METRICS_MESSAGE = 4000


def new_worker_stats() -> Dict[str, Any]:
    """The counters a supervisor keeps up to date (``Plotter.stats`` and the viewer's)."""
    return {
        "updates_sent": 0,
        "updates_applied": 0,
        "episodes": 0,
        "frames": 0,
        "videos": 0,
        "restarts": 0,
        "alive": False,
        "disabled": False,
        "last_applied_update": None,
        "last_applied_iteration": None,
        "last_video": None,
        "last_error": None,
        "gl_renderer": None,
        "visual_preset": None,
        "worker_pids": None,
    }


class _Pair:
    """One launch of the two processes and the pipes the supervisor keeps."""

    def __init__(self, rollout: Any, render: Any, rollout_status: Connection,
                 render_status: Connection, lifeline: Connection) -> None:
        self.rollout = rollout
        self.render = render
        self.status = {rollout_status: "rollout", render_status: "render"}
        self.lifeline = lifeline
        self.last_progress = {"rollout": time.monotonic(), "render": time.monotonic()}
        self.errors: Dict[str, str] = {}
        self.ready: Set[str] = set()  # roles that reported ready

    def processes(self) -> Dict[str, Any]:
        return {"rollout": self.rollout, "render": self.render}


class WorkerSupervisor:
    """Keeps the plot worker alive within limits; never raises into the trainer."""

    def __init__(self,
                 config: WorkerConfig,
                 channel_args: Callable[[], tuple],
                 stats: Dict[str, Any],
                 max_restarts: int = 3,
                 hang_timeout: float = 60.0,
                 listener: Optional[Callable[[str, dict], None]] = None) -> None:
        self._config = config
        self._channel_args = channel_args
        self._stats = stats
        self._max_restarts = max_restarts
        self._hang_timeout = hang_timeout
        self._listener = listener
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._pair: Optional[_Pair] = None
        # Training metrics for the render process: all of them (a restarted worker gets the whole
        # curve again) and those not yet sent. Appending to a deque is safe across threads.
        self._metrics_history: List[tuple] = []
        self._metrics_pending: "collections.deque[tuple]" = collections.deque()
        self._thread = threading.Thread(target=self._supervise,
                                        name="async_plotter-supervisor",
                                        daemon=True)

    def start(self) -> None:
        """Launch in the background; returns at once."""
        self._thread.start()

    def post_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> bool:
        """Queue training metrics for the render process; never blocks. False if too large."""
        message = (iteration, dict(metrics))
        if len(pickle.dumps(message)) > _MAX_METRICS_MESSAGE:
            return False
        self._metrics_pending.append(message)
        return True

    def _send_metrics(self, pair: _Pair) -> None:
        """Forward pending metrics without ever blocking (a full pipe waits for the next turn)."""
        while self._metrics_pending:
            message = self._metrics_pending[0]
            try:
                pair.lifeline.send(message)
            except BlockingIOError:
                return
            except (OSError, ValueError):
                return  # the render process is gone; the history is resent after a restart
            self._metrics_pending.popleft()
            self._metrics_history.append(message)

    # ------------------------------------------------------------------ lifecycle of one launch

    def _launch(self) -> Optional[_Pair]:
        ctx = spawn_context()
        frames_in, frames_out = ctx.Pipe(duplex=False)
        try:
            fcntl.fcntl(frames_out.fileno(), _F_SETPIPE_SZ, _STREAM_PIPE_BYTES)
        except OSError:
            pass
        lifeline_in, lifeline_out = ctx.Pipe(duplex=False)
        render_status_in, render_status_out = ctx.Pipe(duplex=False)
        rollout_status_in, rollout_status_out = ctx.Pipe(duplex=False)
        with self._lock:
            if self._stopping.is_set():
                return None
            render = start_process(render_process.main,
                                   (self._config, frames_in, lifeline_in, render_status_out),
                                   name="async_plotter-render",
                                   ignore_sigint=True)
            rollout = start_process(
                rollout_process.main,
                (self._config, self._channel_args(), frames_out, rollout_status_out),
                name="async_plotter-rollout",
                ignore_sigint=True)
            # Our copies must go, or end-of-file would never reach the other side when one dies.
            for end in (frames_in, frames_out, lifeline_in, render_status_out, rollout_status_out):
                end.close()
            os.set_blocking(lifeline_out.fileno(), False)
            self._metrics_pending.extendleft(reversed(self._metrics_history))
            self._metrics_history = []
            self._stats["worker_pids"] = {"rollout": rollout.pid, "render": render.pid}
            self._stats["alive"] = True
            self._pair = _Pair(rollout, render, rollout_status_in, render_status_in, lifeline_out)
            return self._pair

    def _supervise(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            pair = self._launch()
            if pair is None:
                return
            culprit = self._watch(pair)
            self._stats["alive"] = False
            if culprit is None:  # stopping
                return
            self._kill(pair)
            if failures >= self._max_restarts:
                self._stats["disabled"] = True
                logger.error(
                    "plotting disabled: the plot worker failed %d times (last: %s). Training "
                    "continues without plotting.", failures + 1, culprit)
                return
            failures += 1
            self._stats["restarts"] = failures
            delay = min(0.5 * 2**(failures - 1), 8.0)
            logger.warning("plot worker failed: %s; restarting it in %.1f s (restart %d of %d)",
                           culprit, delay, failures, self._max_restarts)
            if self._stopping.wait(delay):
                return

    def _watch(self, pair: _Pair) -> Optional[str]:
        """Read reports until a process dies or hangs (returns why) or we are stopping (None)."""
        try:
            return self._watch_until_failure(pair)
        finally:
            for connection in pair.status:
                connection.close()

    def _watch_until_failure(self, pair: _Pair) -> Optional[str]:
        sentinels = {p.sentinel: role for role, p in pair.processes().items()}
        connections: List[Any] = list(pair.status)
        while not self._stopping.is_set():
            self._send_metrics(pair)
            ready = wait(connections + list(sentinels), timeout=0.5)
            for item in ready:
                if item in pair.status:
                    if not self._read_status(pair, item):
                        connections.remove(item)
            dead = [role for sentinel, role in sentinels.items() if sentinel in ready]
            if dead and not self._stopping.is_set():
                self._drain(pair, connections)
                return self._describe_death(pair, dead)
            now = time.monotonic()
            for role, last in pair.last_progress.items():
                if now - last > self._hang_timeout:
                    return (f"its {role} process made no progress for {self._hang_timeout:.0f} s "
                            "(hung)")
        return None

    def _read_status(self, pair: _Pair, connection: Connection) -> bool:
        role = pair.status[connection]
        try:
            kind, payload = connection.recv()
        except (EOFError, OSError):
            return False
        pair.last_progress[role] = time.monotonic()
        self._apply(kind, payload, pair)
        return True

    def _drain(self, pair: _Pair, connections: List[Any]) -> None:
        # A dying child's last words (its traceback) may still be in the pipe.
        deadline = time.monotonic() + 0.5
        for connection in list(connections):
            while time.monotonic() < deadline:
                try:
                    if not connection.poll(0.05):
                        break
                except (EOFError, OSError):
                    break
                if not self._read_status(pair, connection):
                    break

    def _describe_death(self, pair: _Pair, dead: List[str]) -> str:
        # When one process dies the other usually follows; blame the one that reported an error.
        for role in ("rollout", "render"):
            if role in pair.errors:
                return f"its {role} process raised an exception:\n{pair.errors[role]}"
        role = dead[0]
        process = pair.processes()[role]
        process.join(0.5)
        code = process.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"its {role} process was killed by {name}"
        return f"its {role} process exited with code {code}"

    def _apply(self, kind: str, payload: dict, pair: _Pair) -> None:
        stats = self._stats
        if kind == "applied":
            if payload["update"] > 0:
                stats["updates_applied"] += 1
            stats["last_applied_update"] = payload["update"]
            stats["last_applied_iteration"] = payload["iteration"]
        elif kind == "episode":
            stats["episodes"] += 1
        elif kind == "frames":
            stats["frames"] += payload["count"]
        elif kind == "video":
            stats["videos"] += 1
            stats["last_video"] = payload["path"]
        elif kind == "ready":
            pair.ready.add(payload["role"])
            if payload["role"] == "render":
                stats["gl_renderer"] = payload["gl_renderer"]
                stats["visual_preset"] = payload["preset"]
                logger.info("plot worker rendering with %s (visual preset: %s)",
                            payload["gl_renderer"], payload["preset"])
        elif kind == "http":
            stats["http_url"] = payload["url"]
            logger.info("live view at %s", payload["url"])
        elif kind == "error":
            pair.errors[payload["role"]] = payload["traceback"]
            stats["last_error"] = payload["traceback"]
        if self._listener is not None:
            self._listener(kind, payload)

    def _kill(self, pair: _Pair, timeout: float = 1.0) -> None:
        with self._lock:
            pair.lifeline.close()
            for process in (pair.render, pair.rollout):
                stop_process(process, timeout)

    # ------------------------------------------------------------------------------- stopping

    def stop(self, timeout: float) -> None:
        """Stop both processes within ``timeout`` seconds: the render process first gets the
        chance to finish the video it is writing, then each is terminated, then killed."""
        deadline = time.monotonic() + max(timeout, 0.1)
        self._stopping.set()
        with self._lock:
            pair = self._pair
            self._pair = None
        try:
            if pair is not None:
                pair.lifeline.close()  # the render process finishes its video and exits
                # Before it reported ready it has no video to finish, only imports and GL set-up
                # to get through (seconds, at idle priority): not worth waiting for.
                grace = 0.8 * (deadline - time.monotonic()) if "render" in pair.ready else 0.0
                stop_process(pair.render, grace)
                stop_process(pair.rollout, 0.0)
            self._thread.join(max(deadline - time.monotonic(), 0.1))
        except BaseException:
            # Interrupted while waiting (Ctrl-C): wait no longer, but do not leave the processes
            # to the interpreter's exit either (a notebook's kernel lives on). SIGTERM still lets
            # the render process finish its video; a thread kills whatever ignores it.
            if pair is not None:
                _terminate_in_background([pair.render, pair.rollout])
            raise
        finally:
            self._stats["alive"] = False


def _terminate_in_background(processes: List[Any]) -> None:
    """SIGTERM ``processes`` now; a daemon thread reaps them, killing any still there after 1 s."""
    for process in processes:
        try:
            process.terminate()
        except (OSError, ValueError):
            pass  # already gone, or already closed

    def reap() -> None:
        for process in processes:
            stop_process(process, 1.0)

    threading.Thread(target=reap, name="async_plotter-reaper", daemon=True).start()
