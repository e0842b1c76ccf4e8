"""The CPU budget: a governor thread in the trainer holds the worker (both processes and the
video encoder) to ``budget`` of the machine's CPU beyond its idle CPU (docs/design.md, "A CPU
budget, not a priority"); it lives in the trainer because it must run when the worker starves.

Every ``tick`` it charges a token bucket (``budget x cores`` CPU-seconds per second, a second's
worth at most) with the CPU the worker used. While tokens are left the worker runs at the nice
level that just covers its share (``nice_for_share``); when none are, it is held: at
``SCHED_IDLE`` where this user may raise priorities again (mechanism ``"sched"``), else stopped
with ``SIGSTOP`` (``"stop"``: charged only beyond the tick's idle time). Start-up and the final
video are not governed (``Phase``), only measured for ``stats``.
"""
import contextlib
import enum
import logging
import os
import signal
import threading
from typing import Dict, Optional, Set

import psutil

from async_plotter.cpu import machine_idle_seconds, process_cpu_seconds, usable_cores
from async_plotter.supervision import priorities
from async_plotter.supervision.token_bucket import TokenBucket

#: the default CPU budget: the fraction of the machine's CPU that plotting may take from a busy
#: trainer, beyond the CPU nobody else wants (chosen by benchmarks/plot_overhead.py)
DEFAULT_BUDGET = 0.03

logger = logging.getLogger("async_plotter")

# The Linux scheduler's weight of each nice level, 0 to 19 (kernel/sched/core.c).
_NICE_WEIGHTS = (1024, 820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87, 70, 56, 45, 36, 29, 23,
                 18, 15)
#: a private switch for tests of the unprivileged path, which root cannot otherwise reach
MECHANISM_ENV = "ASYNC_PLOTTER_BUDGET_MECHANISM"


class Phase(enum.Enum):
    """What the governor does with the worker right now."""

    BOOT = "boot"  # starting up: the trainer's priority, not charged
    GOVERNED = "governed"  # the budget holds
    UNLIMITED = "unlimited"  # training is over (the final video): run freely, not charged


class CpuGovernor:
    """Holds a set of processes to ``budget`` of the machine's CPU beyond its idle CPU."""

    def __init__(self, budget: float, tick: float = 0.2, burst_seconds: float = 1.0) -> None:
        rate = float(budget) * usable_cores()  # CPU-seconds per second
        self._bucket = TokenBucket(rate, rate * burst_seconds)
        self._tick = tick
        self._own_nice = os.getpriority(os.PRIO_PROCESS, 0)
        self.mechanism = _choose_mechanism(self._own_nice)
        #: the nice level the worker runs at while it has tokens (see ``nice_for_share``)
        self.running_nice = min(self._own_nice + nice_for_share(rate), 19)
        self._lock = threading.Lock()
        self._pids: Set[int] = set()
        self._last_cpu: Dict[int, float] = {}
        self._phase = Phase.BOOT
        self._running = True  # the worker currently may run at full priority (not held)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        #: CPU-seconds the worker used, in total, while booting, and charged against the budget
        self.cpu_seconds = 0.0
        self.boot_cpu_seconds = 0.0
        self.charged_seconds = 0.0

    # ------------------------------------------------------------------------ the supervisor's

    def start(self) -> None:
        """Start the governor's thread (it sleeps between ticks)."""
        self._thread = threading.Thread(target=self._loop, name="async_plotter-budget", daemon=True)
        self._thread.start()

    def track(self, pid: int) -> None:
        """Govern this process too (a worker process, or the encoder a worker started)."""
        with self._lock:
            if pid in self._pids:
                return
            self._pids.add(pid)
            cpu = process_cpu_seconds(pid)
            if cpu is not None:
                self._last_cpu[pid] = cpu
            if self._phase is Phase.GOVERNED:
                self._enter_governed(pid)
                self._apply(pid, self._running)

    def forget_all(self) -> None:
        """The processes are gone (a restart): the next ones boot anew."""
        with self._lock:
            self._pids.clear()
            self._last_cpu.clear()
            self._phase = Phase.BOOT
            self._running = True

    def set_phase(self, phase: Phase) -> None:
        """Booting, governed, or unlimited (training is over). The CPU used since the last
        tick is counted to the phase that ends; it went to the next, and the start-up's CPU
        read low by up to a tick of both processes drawing (0.03 CPU-s in the median on an
        idle machine, ``benchmarks/worker_boot.py``)."""
        with self._lock:
            if phase is self._phase:
                return
            self._count(self._used_since_last_reading(), idle=0.0)
            self._phase = phase
            for pid in list(self._pids):
                if phase is Phase.GOVERNED:
                    self._enter_governed(pid)
                self._apply(pid, running=phase is not Phase.GOVERNED or self._running)

    @property
    def phase(self) -> Phase:
        """The current phase."""
        return self._phase

    @property
    def holding(self) -> bool:
        """Whether the worker is held now (stopped, or at ``SCHED_IDLE``) for being over budget:
        then its CPU time may stand still without it being hung."""
        return self._phase is Phase.GOVERNED and not self._running

    def stop(self) -> None:
        """End the thread; resume anything stopped so that it can exit."""
        self._stop.set()
        with self._lock:
            for pid in list(self._pids):
                self._apply(pid, running=True)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(1.0)

    # ---------------------------------------------------------------------------------- ticks

    def _loop(self) -> None:
        try:
            last_idle = machine_idle_seconds()
        except (OSError, psutil.Error) as error:
            logger.warning(
                "the CPU budget cannot be measured here (%s); the plot worker runs "
                "at idle priority instead", error)
            with self._lock:
                for pid in list(self._pids):
                    priorities.set_idle(pid)
            return
        while not self._stop.wait(self._tick):
            idle = machine_idle_seconds()
            self._on_tick(idle - last_idle)
            last_idle = idle

    def _on_tick(self, idle: float) -> None:
        with self._lock:
            if not self._count(self._used_since_last_reading(), idle):
                return
            bucket = self._bucket
            # Resume only with a tick's worth in the bucket, so that it does not flap each tick.
            should_run = bucket.tokens > (bucket.rate * self._tick if not self._running else 0.0)
            if should_run != self._running:
                self._running = should_run
                for pid in list(self._pids):
                    self._apply(pid, should_run)

    def _used_since_last_reading(self) -> float:
        """The CPU-seconds the processes used since they were last read (the lock held)."""
        used = 0.0
        for pid in list(self._pids):
            cpu = process_cpu_seconds(pid)
            if cpu is None:  # gone (an encoder that finished its video)
                self._pids.discard(pid)
                self._last_cpu.pop(pid, None)
                continue
            used += max(cpu - self._last_cpu.get(pid, cpu), 0.0)
            self._last_cpu[pid] = cpu
        return used

    def _count(self, used: float, idle: float) -> bool:
        """Count ``used`` to the current phase (the lock held); whether it was charged against
        the budget (governed)."""
        self.cpu_seconds += used
        if self._phase is Phase.BOOT:
            self.boot_cpu_seconds += used
            return False
        if self._phase is Phase.UNLIMITED:
            return False
        charge = self._charge(used, idle)
        self.charged_seconds += charge
        self._bucket.refill()
        self._bucket.charge(charge)
        return True

    def _charge(self, used: float, idle: float) -> float:
        """What the worker's CPU in the last tick counts against the budget: under SCHED_IDLE
        nothing, running all of it (idle-looking time is a busy trainer's gaps: docs/design.md);
        with the stop mechanism what it used beyond the tick's idle time, or it could never use
        an idle machine."""
        if self.mechanism == "sched":
            return used if self._running else 0.0
        return max(used - max(idle, 0.0), 0.0)

    # ------------------------------------------------------------------------------ mechanics

    def _enter_governed(self, pid: int) -> None:
        if self.mechanism == "stop":
            priorities.set_nice(pid, self.running_nice)

    def _apply(self, pid: int, running: bool) -> None:
        if self.mechanism == "sched":
            if self._phase is not Phase.GOVERNED:
                priorities.set_normal(pid, self._own_nice)  # booting, or the final video
            elif running:
                priorities.set_normal(pid, self.running_nice)
            else:
                priorities.set_idle(pid)
            return
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT if running else signal.SIGSTOP)


def nice_for_share(cores_wanted: float) -> int:
    """The highest nice level at which a thread competing with one busy thread of the trainer's
    priority on its core still gets ``cores_wanted`` of that core: the same CPU spread thinly,
    which the trainer's threads preempt at once (bursts at its own priority stalled a sampler)."""
    wanted = min(max(cores_wanted, 0.0), 0.5)
    weight = 1024 * wanted / (1 - wanted) if wanted < 0.5 else 1024
    for nice in range(len(_NICE_WEIGHTS) - 1, -1, -1):
        if _NICE_WEIGHTS[nice] >= weight:
            return nice
    return 0


def _choose_mechanism(own_nice: int) -> str:
    forced = os.environ.get(MECHANISM_ENV)
    if forced in ("sched", "stop"):
        return forced
    return "sched" if priorities.can_raise_priority(own_nice) else "stop"
