"""The trainer-side supervisor: starts the worker's two processes, reads their reports, restarts
them after a crash or a hang, and stops them within a deadline.

It runs in one daemon thread that sleeps in ``multiprocessing.connection.wait`` on the children's
status pipes and process sentinels, so it costs the trainer nothing while all is well.
"""
import dataclasses
import fcntl
import logging
import multiprocessing.spawn
import os
import signal
import socket
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import psutil

from async_plotter.channel.base import ChannelAddress
from async_plotter.console import tell
from async_plotter.cpu import process_cpu_seconds, tree_cpu_seconds
from async_plotter.stacks import ask, innermost
from async_plotter.processes import (one_blas_thread, spawn_context, start_process, stop_process,
                                     worker_environment)
from async_plotter.supervision import priorities
from async_plotter.worker import render_process, rollout_process
from async_plotter.supervision.budget import CpuGovernor, Phase
from async_plotter.render.history import HistoryPoint
from async_plotter.render.history_returns import ReturnsFile, read_returns
from async_plotter.render.stream import StreamKind
from async_plotter.display import osmesa_fallback_allowed, x_display_available
from async_plotter.worker.config import WorkerConfig
from async_plotter.supervision.ledger import VideoLedger
from async_plotter.supervision.metrics_relay import MetricsRelay
from async_plotter.sinks.specs import HttpSpec, WindowSpec
from async_plotter.supervision.stats import WorkerStats
from async_plotter.worker.status import StatusKind, UnknownReport, report_kind

logger = logging.getLogger("async_plotter")

# Linux: shrink the rollout->render pipe so that it cannot hold seconds of stale steps
_F_SETPIPE_SZ = 1031
_STREAM_PIPE_BYTES = 16384
# The exit code of a child whose program could not be found or run (``env``'s, the shell's)
_NOT_RUN = 127

#: start-up, unbudgeted, lasts until the first video exists, or this long after the processes
#: are ready (a window or a live page writes no video)
_FIRST_VIDEO_GRACE = 20.0
#: the share of a ``hang_timeout`` of its own CPU a started process may use, silent, once found
#: overdue, before it counts as spinning (``_spinning``)
SPIN_SHARE = 0.5
#: seconds ``stop()`` waits for a render process that records nothing (a window, a live page) to
#: exit by itself before it is terminated
_LIVE_STOP_GRACE = 2.0
#: seconds a worker that a SIGTERM from elsewhere stopped waits before it counts as failed: one
#: sent to the whole process group stops this process's side too, within a moment
_OUTSIDE_STOP_GRACE = 2.0


class _StartFailed(Exception):
    """The processes of a launch could not be started (none is left running)."""


def _pipes(count: int) -> List[Connection]:
    """``count`` one-way pipes, each as its reading and its writing end; ``_StartFailed`` if
    they cannot all be made (out of file descriptors), with none left open."""
    made: List[Connection] = []
    try:
        for _ in range(count):
            made.extend(spawn_context().Pipe(duplex=False))
    except OSError as error:
        for end in made:
            end.close()
        raise _StartFailed(f"the plot worker could not be started: {error}") from error
    return made


class _Pair:
    """One launch of the two processes and the pipes the supervisor keeps."""

    def __init__(self, rollout: Any, render: Any, rollout_status: Connection,
                 render_status: Connection, lifeline: Connection) -> None:
        self.rollout = rollout
        self.render = render
        self.status = {rollout_status: "rollout", render_status: "render"}
        self.lifeline = lifeline
        self.started = time.monotonic()
        self.last_progress = {"rollout": self.started, "render": self.started}
        self.errors: Dict[str, str] = {}
        #: why the render process's GL backend (the config's ``mujoco_gl``) made no context
        self.offscreen_gl_failed: Optional[str] = None
        #: why the rollout process's history thread counts as hung (``worker/stall.py``)
        self.history_hung: Optional[str] = None
        self.ready: Set[str] = set()  # roles that reported ready
        self.booted: Optional[float] = None  # when both had
        # CPU-seconds both processes (with their children: the encoder) had used when last
        # looked at, which is only when one has not reported for a while
        self.cpu_seen: Optional[float] = None
        #: a silent process's CPU-seconds when found overdue, and its last report's time
        self.silent: Dict[str, Tuple[float, float]] = {}
        #: where each process writes its stacks when asked (``stacks.py``)
        self.stack_files: Dict[str, int] = {}

    def processes(self) -> Dict[str, Any]:
        return {"rollout": self.rollout, "render": self.render}


class WorkerSupervisor:
    """Keeps the plot worker alive within limits; never raises into the trainer."""

    #: what each kind of report does (filled in below the class)
    _handlers: Dict[StatusKind, Callable[["WorkerSupervisor", dict, _Pair], None]] = {}

    def __init__(self,
                 config: WorkerConfig,
                 channel_address: Callable[[], ChannelAddress],
                 stats: WorkerStats,
                 max_restarts: int = 3,
                 hang_timeout: float = 60.0,
                 listener: Optional[Callable[[str, dict], None]] = None,
                 verbose: int = 1,
                 source: Optional[Callable[..., None]] = None) -> None:
        self._config = config
        #: what feeds the render process: the rollout process, or for a viewer of a trainer's
        #: live states ``worker/states_source.main`` (the same arguments and reports)
        self._source = source or rollout_process.main
        self._verbose = verbose
        self._channel_address = channel_address
        self._stats = stats
        self._max_restarts = max_restarts
        self._hang_timeout = hang_timeout
        self._listener = listener
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        #: set while a worker stopped by a SIGTERM from elsewhere waits to see this side stop
        self._outside_stop = threading.Event()
        self._pair: Optional[_Pair] = None
        self._metrics = MetricsRelay()
        self._thread = threading.Thread(target=self._supervise,
                                        name="async_plotter-supervisor",
                                        daemon=True)
        self._governor: Optional[CpuGovernor] = None
        if config.budget is not None and config.priority is None:
            self._governor = CpuGovernor(config.budget)
            stats.update(budget=config.budget, budget_mechanism=self._governor.mechanism)
        self._videos = VideoLedger(stats)
        #: every history recording's return, kept when its file is thinned away
        # Appended to: the Plotter's claim on its folder set an earlier run's rows aside, so
        # any left are those of the run this one resumes.
        self._returns = ReturnsFile(config.history_dir,
                                    keep_rows=True) if config.history_dir else None
        if config.history_dir:
            # Those rows' returns: the live page's curve goes on from them too.
            for entry in read_returns(config.history_dir):
                self._post_return(entry)
        #: the live page's socket, bound once for the supervisor's life: every render process
        #: it starts serves on it, so a restarted one keeps the page's address
        self._http_listener = _bind_live_page(config)

    def start(self) -> None:
        """Launch in the background; returns at once."""
        if self._governor is not None:
            self._governor.start()
        self._thread.start()

    def post_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> bool:
        """Queue training metrics for the render process; never blocks. False if too large."""
        return self._metrics.post(iteration, metrics)

    def post_history(self, point: HistoryPoint) -> None:
        """Queue a history recording's point for the render process's curves (a viewer's, of a
        trainer elsewhere); never blocks."""
        self._metrics.post_history(point)

    def restart_curve(self) -> None:
        """The render process's curves start again: the points posted next are another trainer
        run's (a viewer following a restarted trainer); never blocks."""
        self._metrics.restart_curve()

    # ------------------------------------------------------------------ lifecycle of one launch

    def _launch(self) -> Optional[_Pair]:
        (frames_in, frames_out, lifeline_in, lifeline_out, render_status_in, render_status_out,
         rollout_status_in, rollout_status_out) = _pipes(4)
        try:
            fcntl.fcntl(frames_out.fileno(), _F_SETPIPE_SZ, _STREAM_PIPE_BYTES)
        except OSError:
            pass
        ends = (frames_in, frames_out, lifeline_in, render_status_out, rollout_status_out)
        started: List[Any] = []
        with self._lock:
            if self._stopping.is_set():
                return None
            try:
                # Both die with this thread (PR_SET_PDEATHSIG), which outlives them: it returns
                # only after they are gone. The rollout process's TensorFlow sees no GPU unless
                # the user opted in; the render process keeps the GPU for EGL.
                started.append(
                    start_process(render_process.main, (self._config, frames_in, lifeline_in,
                                                        render_status_out, self._http_listener),
                                  name="async_plotter-render",
                                  ignore_sigint=True,
                                  die_with_parent=True,
                                  env=one_blas_thread()))
                started.append(
                    start_process(self._source,
                                  (self._config.for_rollout(), self._channel_address(), frames_out,
                                   rollout_status_out),
                                  name="async_plotter-rollout",
                                  ignore_sigint=True,
                                  die_with_parent=True,
                                  env=worker_environment(self._config.policy_device)))
            except Exception as error:  # noqa: BLE001 - no process, no file: any reason
                for process in started:
                    stop_process(process, 1.0)
                for end in (*ends, lifeline_out, render_status_in, rollout_status_in):
                    end.close()
                raise _StartFailed(f"the plot worker could not be started: "
                                   f"{type(error).__name__}: {error}") from error
            render, rollout = started
            # Our copies must go, or end-of-file would never reach the other side when one dies.
            for end in ends:
                end.close()
            os.set_blocking(lifeline_out.fileno(), False)
            self._metrics.resend_all()
            pids = {"rollout": rollout.pid, "render": render.pid}
            self._stats.update(worker_pids=pids, alive=True)
            self._pair = _Pair(rollout, render, rollout_status_in, render_status_in, lifeline_out)
            if self._governor is not None:
                # Booting at the trainer's priority: a worker starved while importing TensorFlow
                # never showed anything.
                self._governor.forget_all()
                self._governor.track(rollout.pid)
                self._governor.track(render.pid)
            if self._videos.final_update is not None:
                self._send_final(self._pair)
            return self._pair

    def _supervise(self) -> None:
        try:
            self._launch_until_done()
        finally:
            self._close_listener()

    def _close_listener(self) -> None:
        """Once no render process will be started, the page's socket goes (one still running
        serves on its own copy until it exits): a page left open is then refused, and retries,
        rather than waiting in the backlog, and the address is free for whoever binds it next
        (the Redis viewer, for the trainer's next run)."""
        with self._lock:
            listener, self._http_listener = self._http_listener, None
        if listener is not None:
            listener.close()

    def _launch_until_done(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                pair = self._launch()
            except _StartFailed as failed:  # out of processes or files: it may pass
                culprit = str(failed)
                self._stats.last_error = culprit
            else:
                if pair is None:
                    return
                culprit = self._watch(pair)
                self._stats.alive = False
                if culprit is None:  # stopping
                    return
                self._kill(pair)
                if self._display_gone(culprit):
                    if not self._config.sinks:
                        self._stats.disabled = True
                        return
                    continue  # without the window: not a failure of the worker
                if self._draw_with_osmesa(pair):
                    continue  # another GL backend: not a failure of the worker
                if self._without_history(pair):
                    continue  # the history's thread, not the worker, failed
            if failures >= self._max_restarts:
                self._stats.disabled = True
                logger.error(
                    "plotting disabled: the plot worker failed %d times (last: %s). Training "
                    "continues without plotting; stats['last_error'] says more.", failures + 1,
                    _one_line(culprit))
                logger.debug("plot worker failure in full: %s", culprit)
                return
            failures += 1
            self._stats.restarts = failures
            delay = min(0.5 * 2**(failures - 1), 8.0)
            # One line per failure; the whole traceback is in stats["last_error"] and at DEBUG.
            logger.warning("plot worker failed: %s; restarting it in %.1f s (restart %d of %d)",
                           _one_line(culprit), delay, failures, self._max_restarts)
            logger.debug("plot worker failure in full: %s", culprit)
            if self._stopping.wait(delay):
                return

    def _display_gone(self, culprit: str) -> bool:
        """After a failure: if the window's X server went away (killed, or the session ended),
        a restart would fail the same way. Carry on without the window (videos, the live page)
        or, if it was the only output, stop plotting; one warning either way."""
        windows = [spec for spec in self._config.sinks if isinstance(spec, WindowSpec)]
        if not windows or x_display_available():
            return False
        others = [spec for spec in self._config.sinks if not isinstance(spec, WindowSpec)]
        logger.warning(
            "the plot window's display (DISPLAY=%s) went away (%s); %s. Training goes on.",
            os.environ.get("DISPLAY") or "unset", _one_line(culprit),
            "the other outputs go on without it" if others else "plotting stops")
        self._stats.last_error = f"the display went away: {culprit}"
        with self._lock:
            self._config = self._config.with_sinks(others)
        return True

    def _draw_with_osmesa(self, pair: _Pair) -> bool:
        """After a failure: if the render process got no EGL context (no EGL driver, a broken
        vendor file) where EGL was only our default, start the next one with OSMesa, which
        draws the same frames on the CPU (Mesa's llvmpipe either way); one warning."""
        reason = pair.offscreen_gl_failed
        if reason is None or self._config.mujoco_gl != "egl" or not osmesa_fallback_allowed():
            return False
        logger.warning(
            "the plot worker got no EGL context (%s); drawing with OSMesa instead "
            "(MUJOCO_GL=osmesa skips the try)", reason)
        self._stats.last_error = f"no EGL context, drawn with OSMesa instead: {reason}"
        with self._lock:
            self._config = dataclasses.replace(self._config, mujoco_gl="osmesa")
        return True

    def _without_history(self, pair: _Pair) -> bool:
        """After a failure: if the rollout process ended because its history thread hung (a
        thread cannot be ended alone, and it may hang again the same way), start the next
        worker without a history: its videos and pages go on, the recordings made stay, and
        the close line says where the history stopped; one warning."""
        reason = pair.history_hung
        if reason is None or self._config.history_dir is None:
            return False
        logger.warning(
            "the plot worker's history stopped: %s. The worker starts again without it (its "
            "other outputs go on), and the recordings made so far stay in %s.", reason,
            self._config.history_dir)
        self._stats.history_stopped = reason
        with self._lock:
            self._config = dataclasses.replace(self._config, history_dir=None)
        return True

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
        while True:
            if self._stopping.is_set():
                self._read_until_exit(pair, connections, sentinels)
                return None
            self._metrics.forward(pair.lifeline)
            self._copy_budget_stats()
            if pair.booted is not None and time.monotonic() - pair.booted > _FIRST_VIDEO_GRACE:
                self._first_video_done(timed_out=True)
            ready = wait(connections + list(sentinels), timeout=0.5)
            for item in ready:
                if item in pair.status:
                    if not self._read_status(pair, item):
                        connections.remove(item)
            dead = [role for sentinel, role in sentinels.items() if sentinel in ready]
            if dead and not self._stopping.is_set():
                self._drain(pair, connections)
                if self._stopped_from_outside(pair, dead):
                    return None  # this side stops too: nothing failed, nothing to restart
                return self._describe_death(pair, dead)
            now = time.monotonic()
            overdue = [
                role for role, last in pair.last_progress.items() if now - last > self._hang_timeout
            ]
            hung = self._hung(pair, overdue, now) if overdue else None
            if hung is not None:
                return hung

    def _hung(self, pair: _Pair, overdue: List[str], now: float) -> Optional[str]:
        """Why processes that have not reported for ``hang_timeout`` count as hung, or None.
        Hung if stopped, if one spins (``_spinning``), or if the worker's CPU time (both
        processes and the encoder) stood still too and the budget is not what holds it: a
        starved worker is slow, and a restart would only start it again. A hung one is caught
        one to two ``hang_timeout`` after its last report."""
        processes = pair.processes()
        stuck = (f"its {overdue[0]} process made no progress for {self._hang_timeout:.0f} s and "
                 "the worker used no CPU (hung)")
        if self._stopped_by_someone([processes[role] for role in overdue if role in processes]):
            return stuck  # a stopped process cannot say where it is
        spinning = self._spinning(pair, overdue, now)
        if spinning is not None:
            return self._where(pair, *spinning)
        used = sum(tree_cpu_seconds(process.pid) or 0.0 for process in processes.values())
        before, pair.cpu_seen = pair.cpu_seen, used
        held = self._governor is not None and self._governor.holding
        if before is None or used > before or held:
            for role in overdue:
                pair.last_progress[role] = now
            return None
        return self._where(pair, overdue[0], stuck)

    def _where(self, pair: _Pair, role: str, reason: str) -> str:
        """``reason``, with where the ``role`` process is stuck (its main thread's innermost
        frames, asked of it: ``stacks.py``); every thread's stack goes to
        ``stats["last_error"]``."""
        process, descriptor = pair.processes().get(role), pair.stack_files.get(role)
        stacks = ask(process.pid, descriptor) if process and descriptor is not None else None
        where = innermost(stacks) if stacks else ""
        if not where:
            return reason
        self._stats.last_error = f"{reason}, at {where}. Its threads:\n{stacks}"
        return f"{reason}, at {where}"

    def _spinning(self, pair: _Pair, overdue: List[str], now: float) -> Optional[Tuple[str, str]]:
        """A process that has reported ready, then goes silent and keeps using CPU: a loop that
        never ends (in the policy, the env, a callback), which the CPU rule above takes for a
        slow worker. A started process reports at least once a second, and its steps and frames
        take milliseconds: silent, it may use up to ``SPIN_SHARE`` of a ``hang_timeout`` of CPU
        more once found overdue. Under a budget, that CPU comes at the budget's pace."""
        processes = pair.processes()
        for role in overdue:
            if role not in pair.ready or role not in processes:
                continue
            cpu = process_cpu_seconds(processes[role].pid)
            if cpu is None:
                continue
            since_cpu, since = pair.silent.setdefault(role, (cpu, pair.last_progress[role]))
            if cpu - since_cpu >= self._hang_timeout * SPIN_SHARE:
                return role, (f"its {role} process made no progress for {now - since:.0f} s "
                              f"and kept using CPU ({cpu - since_cpu:.1f} CPU-s since it was "
                              "found silent: spinning, a loop that never ends in the policy, "
                              "the env or a callback)")
        return None

    def _stopped_by_someone(self, overdue: List[Any]) -> bool:
        """Whether an overdue process is stopped (SIGSTOP, a debugger, a frozen container) by
        anyone but the budget (the other process's CPU time would hide it for ~40 s)."""
        if self._governor is not None and self._governor.mechanism == "stop":
            return False  # the budget stops the worker itself
        return any(_stopped(process.pid) for process in overdue)

    def _read_until_exit(self, pair: _Pair, connections: List[Any], sentinels: Dict[Any,
                                                                                    str]) -> None:
        """While stopping: keep reading reports until both processes are gone, so that the video
        the render process finishes on its way out is counted. ``stop()`` bounds how long."""
        alive = dict(sentinels)
        deadline = time.monotonic() + 30.0  # stop() kills both long before this
        while (alive or connections) and time.monotonic() < deadline:
            ready = wait(connections + list(alive), timeout=0.2)
            for item in ready:
                if item in alive:
                    del alive[item]
                elif not self._read_status(pair, item):
                    connections.remove(item)
            if not alive and not ready:
                break
        self._copy_budget_stats()

    def _copy_budget_stats(self) -> None:
        governor = self._governor
        if governor is not None:
            self._stats.update(worker_cpu_seconds=round(governor.cpu_seconds, 3),
                               boot_cpu_seconds=round(governor.boot_cpu_seconds, 3),
                               budget_charged_seconds=round(governor.charged_seconds, 3))

    def _read_status(self, pair: _Pair, connection: Connection) -> bool:
        role = pair.status[connection]
        try:
            kind, payload = connection.recv()
        except (EOFError, OSError):
            return False
        pair.last_progress[role] = time.monotonic()
        pair.silent.pop(role, None)
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
            culprit = f"its {role} process was killed by {name}"
        elif code == _NOT_RUN:
            culprit = (
                f"its {role} process exited with code {code}: the Python it runs, "
                f"{os.fsdecode(multiprocessing.spawn.get_executable())}, could not be started")
        else:
            culprit = f"its {role} process exited with code {code}"
        self._stats.last_error = culprit  # no traceback came: this is all there is to tell
        return culprit

    def _stopped_from_outside(self, pair: _Pair, dead: List[str]) -> bool:
        """Whether the ``dead`` processes ended as a stop ends them (their SIGTERM handler's
        exit code 0, or killed by SIGTERM) without this side stopping them, and this side then
        stopped within ``_OUTSIDE_STOP_GRACE`` s: a SIGTERM to the whole process group
        (``timeout``, ``kill -- -PGID``, a job scheduler's stop) reaches the worker and this
        process alike. False otherwise: a stop of the worker alone is a failure, restarted."""
        processes = pair.processes()
        for role in dead:
            processes[role].join(0.5)
        if any(processes[role].exitcode not in (0, -signal.SIGTERM) for role in dead):
            return False
        self._outside_stop.set()  # close() waits for no final video meanwhile
        try:
            return self._stopping.wait(_OUTSIDE_STOP_GRACE)
        finally:
            self._outside_stop.clear()

    def _apply(self, kind: Any, payload: dict, pair: _Pair) -> None:
        """Act on one report. An unknown kind is a bug (both ends are this package): it is
        recorded as the process's error, which ``stats["last_error"]`` shows."""
        try:
            kind = report_kind(kind)
        except UnknownReport as error:
            logger.error("%s (a bug: please report it)", error)
            pair.errors.setdefault(payload.get("role", "?"), str(error))
            self._stats.update(last_error=str(error),
                               unknown_reports=self._stats.unknown_reports + 1)
            return
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(self, payload, pair)
        if self._listener is not None:
            self._listener(kind.value, payload)

    def _on_applied(self, payload: dict, pair: _Pair) -> None:
        stats = self._stats
        stats.update(updates_applied=stats.updates_applied + (1 if payload["update"] > 0 else 0),
                     last_applied_update=payload["update"],
                     last_applied_iteration=payload["iteration"])
        if stats.first_applied_update is None:
            stats.first_applied_update = payload["update"]

    def _on_episode(self, payload: dict, pair: _Pair) -> None:
        self._stats.episodes += 1
        if payload.get("nonfinite_actions"):
            self._on_nonfinite_actions(payload)

    def _on_nonfinite_actions(self, payload: dict) -> None:
        """Steps of an episode whose actions were not finite: one warning per run (the first
        update that had them), a count in ``stats["nonfinite_actions"]``."""
        seen = self._stats.nonfinite_actions
        steps = payload["nonfinite_actions"]
        if seen is not None:
            self._stats.nonfinite_actions = {**seen, "steps": seen["steps"] + steps}
            return
        update, iteration = payload["update"], payload.get("iteration")
        self._stats.nonfinite_actions = {"update": update, "iteration": iteration, "steps": steps}
        which = (f"iteration {iteration}" if iteration is not None else
                 "the initial policy" if update == 0 else f"update {update}")
        logger.warning(
            "the policy's actions are not finite (NaN or inf) at %s: its parameters hold NaN or "
            "inf, or its outputs overflow. The plot worker steps the env with 0 in their place "
            "(a Discrete space's first action), so its videos show no action of the policy; "
            "stats['nonfinite_actions'] counts such steps", which)

    def _on_frames(self, payload: dict, pair: _Pair) -> None:
        self._stats.frames += payload["count"]
        self._stats.frames_drawn += payload["drawn"]

    def _on_encoder(self, payload: dict, pair: _Pair) -> None:
        self._settle_priority(payload["pid"])

    def _on_ready(self, payload: dict, pair: _Pair) -> None:
        pair.ready.add(payload["role"])
        if payload["role"] == "rollout":
            self._stats.policy_call = payload.get("policy_call")
        if payload["role"] == "render":
            self._stats.update(gl_renderer=payload["gl_renderer"], visual_preset=payload["preset"])
            logger.info("plot worker rendering with %s (visual preset: %s)", payload["gl_renderer"],
                        payload["preset"])
        elif "video_fps" in payload:
            self._stats.update(env_rate=payload["env_rate"],
                               frame_stride=payload["frame_stride"],
                               video_fps=payload["video_fps"])
            logger.info(
                "%s runs at %g steps/s: videos play in real time at %g frames/s, a frame "
                "every %d step(s)", payload.get("env", "the env"), payload["env_rate"],
                payload["video_fps"], payload["frame_stride"])
        if pair.ready >= {"rollout", "render"}:
            self._end_boot(pair)

    def _on_http(self, payload: dict, pair: _Pair) -> None:
        if payload["url"] == self._stats.http_url:
            return  # a restarted render process, serving the same page: said once
        self._stats.http_url = payload["url"]
        tell(logger, self._verbose, "live view at %s", payload["url"])

    def _on_storage(self, payload: dict, pair: _Pair) -> None:
        """The video folder's device is full, or has space again, or the folder was made again:
        the user's to know (one line each), not a failure of the worker."""
        state, directory = payload["state"], payload["directory"]
        if state == "full":
            self._stats.video_dir_full = True
            logger.warning(
                "no space left on the device for %s: videos stop until there is (they resume "
                "by themselves); training and the other outputs go on", directory)
        elif state == "writable":
            self._stats.video_dir_full = False
            logger.info("%s has space again (%s): videos resume", directory,
                        _megabytes(payload.get("free")))
        elif state == "recreated":
            logger.info("%s was removed while training; made it again", directory)

    def _on_error(self, payload: dict, pair: _Pair) -> None:
        pair.errors[payload["role"]] = payload["traceback"]
        pair.offscreen_gl_failed = payload.get("offscreen_gl") or pair.offscreen_gl_failed
        pair.history_hung = payload.get("history_hung") or pair.history_hung
        self._stats.last_error = payload["traceback"]

    def _on_stacks(self, payload: dict, pair: _Pair) -> None:
        pair.stack_files[payload["role"]] = int(payload["fd"])

    def _on_video(self, payload: dict, pair: _Pair) -> None:
        self._first_video_done()
        self._videos.record(payload)

    def _on_states(self, payload: dict, pair: _Pair) -> None:
        self._videos.record_states(payload)

    def _on_history(self, payload: dict, pair: _Pair) -> None:
        entry = self._videos.record_history(payload)
        if self._returns is not None:
            self._returns.append(entry)
        self._post_return(entry)

    def _post_return(self, entry: Dict[str, Any]) -> None:
        """A history recording's return (a ``returns.csv`` entry) to the curves of the live page
        and TensorBoard; one without a return (not finite) has no point."""
        if entry["return"] is not None:
            length = entry["length"] or 0  # a row read back may have none
            self._metrics.post_history(
                HistoryPoint(entry["update"], entry["iteration"], entry["return"], length))

    def _on_tensorboard(self, payload: dict, pair: _Pair) -> None:
        self._first_video_done()
        self._videos.record_image(payload)

    def _end_boot(self, pair: _Pair) -> None:
        """Both processes are up. With a fixed priority, it applies from now on; a budget
        applies once the first video exists (``_first_video_done``), or at once where nothing
        here shows (a trainer that only publishes its history)."""
        self._stats.boot_seconds = round(time.monotonic() - pair.started, 3)
        pair.booted = time.monotonic()
        if self._governor is None:
            for process in (pair.rollout, pair.render):
                self._settle_priority(process.pid)
        elif not self._config.shows:
            self._first_video_done()

    def _first_video_done(self, timed_out: bool = False) -> None:
        """Start-up is over: the first video exists (or it took too long). The budget holds from
        now on (docs/design.md, "A CPU budget, not a priority")."""
        governor = self._governor
        if governor is None or governor.phase is not Phase.BOOT or self._stopping.is_set():
            return  # stopping: the governor has let go of the processes
        if timed_out:
            logger.debug(
                "no video %.0f s after the worker started; holding it to its budget "
                "from now on", _FIRST_VIDEO_GRACE)
        governor.set_phase(Phase.GOVERNED if self._videos.final_update is None else Phase.UNLIMITED)

    def _settle_priority(self, pid: int) -> None:
        if self._governor is not None:
            self._governor.track(pid)
        elif self._videos.final_update is None:
            priorities.apply_static(pid, self._config.priority or "idle")

    # ---------------------------------------------------------------------------- final video

    @property
    def newest_video_update(self) -> int:
        """The newest update a finished video shows (-1: none yet)."""
        return self._videos.newest_update

    @property
    def newest_whole_video_update(self) -> int:
        """The newest update a finished video that is no clip of its episode shows (-1: none)."""
        return self._videos.newest_whole_update

    def wait_until_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the worker's processes to finish starting; False if
        they did not (or plotting stopped meanwhile)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                pair = self._pair
            if pair is not None and pair.booted is not None:
                return True
            if (self._stats.disabled or not self._thread.is_alive() or time.monotonic() > deadline):
                return False
            time.sleep(0.2)

    @property
    def newest_history_update(self) -> int:
        """The newest update the history has recorded (-1: none yet, or no history)."""
        return self._videos.newest_history_update

    @property
    def keeps_history(self) -> bool:
        """Whether the rollout process records every policy it takes (``history_dir``)."""
        return self._config.history_dir is not None

    def final_video_exists(self, update: int) -> bool:
        """Training is over at update ``update``: whether a video of it (or a newer one) exists
        already; ``stats["final_video"]`` then names it."""
        return self._videos.ask_for_final(update)

    def wait_for_final_video(self, update: int, timeout: float, video: bool = True) -> bool:
        """Training is over: have the worker record update ``update`` (or a newer one) at full
        speed, and wait up to ``timeout`` s for the video (``video=False``: it exists) and, with
        a history, its history recording. True once they exist."""
        history, makes_videos = self.keeps_history, self._config.records
        # Asked for, the final video shows the whole episode: a clip of it, finished since
        # close() looked, is made again whole (``EpisodeInfo.retake``).
        clips = not video
        video_there = self._videos.ask_for_final(update, clips) or not makes_videos
        if video_there and (not history or self.newest_history_update >= update):
            return True
        if self._governor is not None:
            self._governor.set_phase(Phase.UNLIMITED)  # training is over
        with self._lock:
            pair = self._pair
        if pair is not None:
            if video and makes_videos:
                self._send_final(pair)
            if self._governor is None:
                _lift([pair.rollout, pair.render])

        def give_up() -> bool:
            # No video can be written while the device is full: waiting would only hold close().
            return (self._stats.disabled or self._stats.video_dir_full
                    or self._outside_stop.is_set() or not self._thread.is_alive())

        return self._videos.wait_for(update,
                                     timeout,
                                     give_up,
                                     history,
                                     video=makes_videos,
                                     clips=clips)

    def _send_final(self, pair: _Pair) -> None:
        # With the final update's number: an older policy's episode that begins after this is
        # not drawn (the final video is next, and close() waits for it).
        try:
            pair.lifeline.send((StreamKind.FINAL, self._videos.final_update))
        except (BlockingIOError, OSError, ValueError):
            pass  # a full pipe or a dead process: the rollout process sees the flag anyway

    def _kill(self, pair: _Pair) -> None:
        """Stop a pair that failed; its render process drops the episode it has open."""
        with self._lock:
            try:
                pair.lifeline.send((StreamKind.FAILED, None))  # non-blocking, a few bytes
            except (OSError, ValueError):
                pass  # the render process is gone already, or the pipe is full
            pair.lifeline.close()
            for process in (pair.render, pair.rollout):
                stop_process(process, 1.0)

    # ------------------------------------------------------------------------------- stopping

    def abort(self) -> None:
        """Stop without waiting (after a Ctrl-C): SIGTERM now, a thread reaps and kills."""
        pair = self._let_go()
        if pair is not None:
            _terminate_in_background([pair.render, pair.rollout])
        self._stats.alive = False

    def _let_go(self) -> Optional[_Pair]:
        """Stopping: let go of the pair (if any, returned); its render process finishes its
        video and exits."""
        self._stopping.set()
        if self._governor is not None:
            self._governor.stop()
        with self._lock:
            pair, self._pair = self._pair, None
        self._close_listener()
        if pair is not None:
            _lift([pair.render, pair.rollout])
            pair.lifeline.close()
        return pair

    def stop(self, timeout: float) -> None:
        """Stop both processes within ``timeout`` seconds: the render process first gets the
        chance to finish the video it is writing, then each is terminated, then killed."""
        deadline = time.monotonic() + max(timeout, 0.1)
        pair = self._let_go()
        try:
            if pair is not None:
                # Before it reported ready it has no video to finish, only imports and GL set-up
                # to get through (seconds, at idle priority): not worth waiting for. Nor has a
                # live view (window, live page): it only has to let go of them.
                grace = 0.8 * (deadline - time.monotonic()) if "render" in pair.ready else 0.0
                if not self._config.records:
                    grace = min(grace, _LIVE_STOP_GRACE)
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
            self._stats.alive = False


# BEAT needs nothing beyond the progress time every report refreshes.
WorkerSupervisor._handlers = {
    StatusKind.APPLIED: WorkerSupervisor._on_applied,
    StatusKind.EPISODE: WorkerSupervisor._on_episode,
    StatusKind.FRAMES: WorkerSupervisor._on_frames,
    StatusKind.VIDEO: WorkerSupervisor._on_video,
    StatusKind.TENSORBOARD: WorkerSupervisor._on_tensorboard,
    StatusKind.STATES: WorkerSupervisor._on_states,
    StatusKind.HISTORY: WorkerSupervisor._on_history,
    StatusKind.ENCODER: WorkerSupervisor._on_encoder,
    StatusKind.READY: WorkerSupervisor._on_ready,
    StatusKind.HTTP: WorkerSupervisor._on_http,
    StatusKind.STORAGE: WorkerSupervisor._on_storage,
    StatusKind.ERROR: WorkerSupervisor._on_error,
    StatusKind.STACKS: WorkerSupervisor._on_stacks,
}


def _bind_live_page(config: WorkerConfig) -> Optional[socket.socket]:
    """The live page's listening socket (``http=``), or None without a page. An address that
    cannot be bound here is left to the render process, whose error names it as before."""
    spec = next((spec for spec in config.sinks if isinstance(spec, HttpSpec)), None)
    if spec is None:
        return None
    from async_plotter.web.listener import bind_listener

    try:
        return bind_listener(spec.address)
    except OSError as error:
        logger.debug("%s; the render process will try itself", error)
        return None


def _one_line(culprit: str) -> str:
    """``its rollout process raised an exception:\n<traceback>`` -> its last line only."""
    head, _, trace = culprit.partition(":\n")
    if not trace:
        return culprit
    last = [line for line in trace.strip().splitlines() if line.strip()]
    return f"{head}: {last[-1].strip()}" if last else head


def _stopped(pid: int) -> bool:
    """Whether a process is stopped (``SIGSTOP``, a debugger), not running or asleep."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def _megabytes(count: Optional[int]) -> str:
    return "free space unknown" if count is None else f"{count / 1e6:.1f} MB free"


def _lift(processes: List[Any]) -> None:
    """``processes`` and their children (the encoder) back to the trainer's priority, where this
    user may raise it: for the final video, and to stop (idle, they may get no CPU to exit)."""
    for process in processes:
        pid = getattr(process, "pid", None)
        if pid is None:
            continue
        try:
            family = [pid] + [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            continue
        for member in family:
            priorities.set_normal_if_allowed(member)


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
