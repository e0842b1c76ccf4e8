"""What a test leaves behind, checked after every test (``tests/conftest.py`` runs it).

A test's leftovers fail the next test in ways that look like that test's own bug: a stream still
open to a module's live page keeps its worker rendering, a worker still running loads the
machine, a segment fills ``/dev/shm``. So after each test's teardown:

* **processes**: this process's descendants that were not there before the test (not the
  resource tracker, not a busy process of ``TEST_BURNERS``);
* **streams**: this process's TCP connections that are open (established or opening) and were
  not before the test: a reader of a live page, a WebSocket to a 3D view or a replay, a Redis
  client never closed;
* **segments**: ``/dev/shm/async_plotter_*`` made during the test by this process or by a
  process of its tree (the creator's pid is in the name);

each given ``GRACE`` s to go. Whatever is still there fails the test, named, and is then
removed (processes killed, connections shut down, segments unlinked), so that no other test
fails of it.

Fixtures wider than a function (module, session) legitimately hold processes and connections
across tests: what one makes while being set up, and what it hands to ``hold`` later, belongs to
it (with its descendants) until it is torn down, and is checked then, in the teardown of the test
that ends its scope.
"""
import dataclasses
import gc
import os
import socket
import signal
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

import psutil

from async_plotter.channel.shm import SEGMENT_PREFIX

#: seconds what a test started has to go after its teardown (a worker's own stop included)
GRACE = 10.0
#: in a busy process's command line (``conftest.start_burners``), which is never a leftover
BURNER_MARK = "async_plotter_test_cpu_burner"
_SHM_DIR = "/dev/shm"
_OPEN = (psutil.CONN_ESTABLISHED, psutil.CONN_SYN_SENT, psutil.CONN_SYN_RECV)

Process = Tuple[int, float]  # (pid, create time): a pid alone may be reused
Stream = Tuple[int, str, str]  # (fd, local address, remote address)


@dataclasses.dataclass
class Snapshot:
    """This process's descendants, open connections and the library's segments at one moment."""

    processes: Dict[Process, str]  # -> a description
    streams: Dict[Stream, str]
    segments: Set[str]

    def minus(self, other: "Snapshot") -> "Snapshot":
        """What is in this one and not in ``other``."""
        return Snapshot({
            k: v
            for k, v in self.processes.items() if k not in other.processes
        }, {
            k: v
            for k, v in self.streams.items() if k not in other.streams
        }, self.segments - other.segments)

    def __bool__(self) -> bool:
        return bool(self.processes or self.streams or self.segments)

    def describe(self) -> str:
        lines = [f"process {text}" for text in self.processes.values()]
        lines += [f"stream {text}" for text in self.streams.values()]
        lines += [f"shared-memory segment /dev/shm/{name}" for name in sorted(self.segments)]
        return "\n  ".join(lines)


def _address(address) -> str:
    return f"{address.ip}:{address.port}" if address else "-"


def _descendants() -> List[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def snapshot() -> Snapshot:
    """What this process and its descendants hold now."""
    processes = {}
    for child in _descendants():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            command = " ".join(child.cmdline())
            key = (child.pid, child.create_time())
        except psutil.Error:
            continue  # gone meanwhile
        # multiprocessing's resource tracker: one per interpreter, started by the first segment
        # or lock anyone makes, living until the interpreter exits.
        if "multiprocessing.resource_tracker" in command or BURNER_MARK in command:
            continue
        processes[key] = f"{child.pid} ({command[:160]})"
    streams = {}
    try:
        connections = psutil.Process().net_connections("tcp")
    except psutil.Error:
        connections = []
    for connection in connections:
        if connection.status in _OPEN and connection.raddr:
            local, remote = _address(connection.laddr), _address(connection.raddr)
            streams[(connection.fd, local, remote)] = (f"{local} -> {remote} "
                                                       f"({connection.status}, fd {connection.fd})")
    try:
        segments = {name for name in os.listdir(_SHM_DIR) if name.startswith(SEGMENT_PREFIX)}
    except OSError:
        segments = set()
    return Snapshot(processes, streams, segments)


def _blocked_signals() -> Set[int]:
    """The signals this thread blocks now."""
    return {int(number) for number in signal.pthread_sigmask(signal.SIG_BLOCK, [])}


def creator_pid(segment: str) -> Optional[int]:
    """The pid in a segment's name (``async_plotter_<pid>_<start time>_<random>``)."""
    head = segment[len(SEGMENT_PREFIX):].split("_", 1)[0]
    return int(head) if head.isdigit() else None


class Tracker:
    """The leftovers of each test, and what wider fixtures hold meanwhile."""

    def __init__(self) -> None:
        self._held: Dict[str, Snapshot] = {}  # fixture name -> what it holds
        self._holders: Dict[str, List[Callable[[], Iterable[int]]]] = {}
        self._baseline = Snapshot({}, {}, set())
        self._ours: Set[int] = {os.getpid()}  # pids seen in our tree during the test
        self._scope_leftovers: List[str] = []
        self._sigint: Any = signal.default_int_handler
        self._blocked: Set[int] = set()  # signals the main thread blocks

    # ------------------------------------------------------------------ test boundaries

    def start_test(self) -> None:
        """Before a test's setup."""
        self._baseline = snapshot()
        self._sigint = signal.getsignal(signal.SIGINT)
        self._blocked = _blocked_signals()
        self._ours = {os.getpid()} | {pid for pid, _ in self._baseline.processes}

    def observe(self) -> None:
        """Remember the pids of our tree now (a segment's creator may have exited by the end)."""
        self._ours |= {child.pid for child in _descendants()}

    def end_test(self) -> str:
        """After a test's teardown: what it left (waited for, then removed), described; empty if
        nothing."""
        _release_failed_frames()
        left = self._left_by_test()
        if left:
            gc.collect()  # a socket the test dropped may still wait for the collector
            left = self._wait(lambda: self._left_by_test())
        report = []
        if left:
            _name_peers(left)
            report.append("left behind by this test:\n  " + left.describe())
            _remove(left)
        report += self._scope_leftovers
        self._scope_leftovers = []
        # Children inherit an ignored SIGINT: a test leaving it so kept later tests' Ctrl-C from
        # reaching the commands they start (test_replay's replay, in the same xdist worker).
        sigint = signal.getsignal(signal.SIGINT)
        if sigint is not self._sigint:
            report.append(f"left SIGINT's handler {sigint!r} (was {self._sigint!r})")
            signal.signal(signal.SIGINT, self._sigint)
        # The signal mask is inherited too, and through exec: a child started while SIGINT is
        # blocked here never gets its Ctrl-C (a handler does not help; the signal stays pending).
        blocked = _blocked_signals()
        if blocked != self._blocked:
            names = sorted(signal.Signals(number).name for number in blocked ^ self._blocked)
            report.append(f"changed the main thread's signal mask: {', '.join(names)} "
                          f"{'blocked' if blocked > self._blocked else 'unblocked'}")
            signal.pthread_sigmask(signal.SIG_SETMASK, self._blocked)
        return "\n".join(report)

    # ---------------------------------------------------------------- wider fixtures

    def fixture_set_up(self, name: str, before: Snapshot) -> None:
        """A module- or session-scoped fixture was set up: what appeared meanwhile is its."""
        made = snapshot().minus(before)
        made.segments = {name for name in made.segments if creator_pid(name) in self._ours}
        self._held[name] = made
        self._baseline = _union(self._baseline, made)

    def hold(self, name: str, pids: Callable[[], Iterable[int]]) -> None:
        """The fixture ``name`` owns the processes ``pids()`` names (and their descendants),
        whenever they start."""
        self._holders.setdefault(name, []).append(pids)

    def fixture_torn_down(self, name: str) -> None:
        """A wider fixture's teardown ran: what it held must go now."""
        held = self._held.pop(name, Snapshot({}, {}, set()))
        for holder in self._holders.pop(name, []):
            held.processes.update(_processes(_pids_of(holder)))
        if not held:
            return
        left = self._wait(lambda: _still_there(held))
        if left:
            _name_peers(left)
            self._scope_leftovers.append(f"left behind by fixture {name!r} at the end of its "
                                         f"scope:\n  " + left.describe())
            _remove(left)

    # ------------------------------------------------------------------------ checks

    def _left_by_test(self) -> Snapshot:
        self.observe()
        left = snapshot().minus(self._baseline)
        held_pids = self._held_pids()
        left.processes = {
            key: text
            for key, text in left.processes.items() if not _has_ancestor_in(key[0], held_pids)
        }
        left.segments = {name for name in left.segments if creator_pid(name) in self._ours}
        return left

    def _held_pids(self) -> Set[int]:
        pids = {pid for held in self._held.values() for pid, _ in held.processes}
        for holders in self._holders.values():
            for holder in holders:
                pids |= _pids_of(holder)
        return pids

    @staticmethod
    def _wait(left: Callable[[], Snapshot]) -> Snapshot:
        found = left()
        deadline = time.monotonic() + GRACE
        while found and time.monotonic() < deadline:
            time.sleep(0.2)
            found = left()
        return found


def _pids_of(holder: Callable[[], Iterable[int]]) -> Set[int]:
    try:
        return {pid for pid in holder() if isinstance(pid, int)}
    except Exception:  # noqa: BLE001 - a holder whose object is gone holds nothing
        return set()


def _processes(pids: Iterable[int]) -> Dict[Process, str]:
    """The live ones of ``pids``, keyed and described as in a snapshot."""
    found = {}
    for pid in pids:
        try:
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE:
                found[(pid, process.create_time())] = f"{pid} ({' '.join(process.cmdline())[:160]})"
        except psutil.Error:
            pass
    return found


def _union(first: Snapshot, second: Snapshot) -> Snapshot:
    return Snapshot({
        **first.processes,
        **second.processes
    }, {
        **first.streams,
        **second.streams
    }, first.segments | second.segments)


def _still_there(held: Snapshot) -> Snapshot:
    now = snapshot()
    return Snapshot({
        k: v
        for k, v in held.processes.items() if k in now.processes
    }, {
        k: v
        for k, v in held.streams.items() if k in now.streams
    }, held.segments & now.segments)


def _name_peers(left: Snapshot) -> None:
    """Say which process listens at the far end of each stream, where it is one of ours."""
    listening = {}
    try:
        for connection in psutil.net_connections("tcp"):
            if connection.status == psutil.CONN_LISTEN and connection.pid:
                listening[connection.laddr.port] = connection.pid
    except psutil.Error:
        return
    for key, text in left.streams.items():
        pid = listening.get(int(key[2].rsplit(":", 1)[1]))
        if pid is not None:
            try:
                command = " ".join(psutil.Process(pid).cmdline())[:160]
            except psutil.Error:
                continue
            left.streams[key] = f"{text}, to a server of process {pid} ({command})"


def _has_ancestor_in(pid: int, pids: Set[int]) -> bool:
    if not pids:
        return False
    try:
        process = psutil.Process(pid)
        return pid in pids or any(parent.pid in pids for parent in process.parents())
    except psutil.Error:
        return False


def _release_failed_frames() -> None:
    """Drop the local variables of a failed test's frames. pytest keeps the traceback
    (``sys.last_traceback``, for post-mortem debugging) until the next test runs, and with it
    every generator and socket the test held: a stream it read would stay open, watched, into
    the next test. Its report is written by now."""
    traceback_ = getattr(sys, "last_traceback", None)
    while traceback_ is not None:
        frame = traceback_.tb_frame
        # pytest read f_locals (for __tracebackhide__): that dict holds the values too.
        values = frame.f_locals
        try:
            frame.clear()
        except RuntimeError:
            pass  # still running: not one of the test's frames
        else:
            values.clear()
        traceback_ = traceback_.tb_next


def _remove(left: Snapshot) -> None:
    """Kill, shut down and unlink what a test left."""
    processes = []
    for pid, created in left.processes:
        try:
            process = psutil.Process(pid)
            if process.create_time() == created:
                processes += process.children(recursive=True) + [process]
        except psutil.Error:
            pass
    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(processes, timeout=5)
    for fd, _, _ in left.streams:
        # Shut the connection down through a duplicate of its descriptor: whoever holds the
        # socket sees it end, and its own descriptor stays valid until it closes it.
        try:
            duplicate = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            duplicate.close()
    for name in left.segments:
        try:
            os.unlink(os.path.join(_SHM_DIR, name))
        except OSError:
            pass
