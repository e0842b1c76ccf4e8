"""The experiments a Redis server holds, as the overview page shows them, kept current.

One thread scans the server every ``SCAN_INTERVAL`` seconds (``list_experiments``: headers and
descriptions, never a body) and probes each experiment's newest update; each experiment that may
be trusted gets an ``ExperimentWatcher`` for its verified structure and curve. Updates up to
``VERIFY_UPDATE_BYTES`` are verified, larger ones described by their header and flagged so; an
unsigned structure (with a secret here) or one over ``MAX_STRUCTURE_BYTES`` is refused before any
download, so one hostile experiment costs one row. The catalog runs only while somebody needs it
(``acquire``/``release``), and stops ``LINGER`` seconds after the last release.
"""
import collections
import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from async_plotter.channel.redis.link import close_quietly, connect, probe, read_exact
from async_plotter.channel.redis.urls import redact
from async_plotter.channel.redis.refusals import explain_failure, refusal
from async_plotter.channel.redis.returns import ReturnRow
from async_plotter.channel.redis.signing import PayloadRejected, Verifier
from async_plotter.channel.redis.watcher import (ExperimentSummary, ExperimentWatcher,
                                                 list_experiments)
from async_plotter.channel.redis.wire import (NO_RUN, STRUCTURE_HEADER, UPDATE_HEADER,
                                              ExperimentKeys, MetricsEntry, RunKey, Structure,
                                              open_update, parse_update_head, resumed_after)
from async_plotter.learning_curve import SHOWN_RETURN
from async_plotter.serve.run_chain import METRICS, RETURNS, ChainedCurve

logger = logging.getLogger("async_plotter")

#: seconds between two scans of the server (new experiments appear, expired ones leave)
SCAN_INTERVAL = 1.0
#: seconds the catalog keeps working after its last user left
LINGER = 30.0
#: experiments followed with a watcher (a thread and a connection each); others are listed only
MAX_FOLLOWED = 100
#: a structure larger than this is not downloaded for the overview
MAX_STRUCTURE_BYTES = 64 * 1024 * 1024
#: updates up to this size are downloaded and verified, so their numbers can be trusted
VERIFY_UPDATE_BYTES = 1024 * 1024
#: curve points sent to the page per experiment (evenly spread over the kept ones)
CURVE_POINTS = 120
#: characters of any text the server holds that a row carries
MAX_TEXT = 120
# Removals remembered for pages that catch up after a pause.
_REMOVALS_KEPT = 1000


@dataclasses.dataclass
class _Entry:
    """What the catalog knows of one experiment (changed under the catalog's lock)."""

    name: str
    summary: ExperimentSummary
    version: int = 0
    state: str = "waiting"  # waiting | ok | refused | unreadable
    problem: Optional[str] = None
    watcher: Optional[ExperimentWatcher] = None
    meta: Optional[Dict[str, Any]] = None  # of the verified structure
    run: RunKey = NO_RUN  # of the verified structure
    run_id: Optional[int] = None
    #: the verified metrics entries and history returns, each tagged with its run id: this
    #: run's, and those of the runs it resumes
    chained: ChainedCurve = dataclasses.field(default_factory=ChainedCurve)
    update: Optional[int] = None
    iteration: Optional[int] = None
    published_at: Optional[float] = None
    update_verified: bool = False
    update_run: RunKey = NO_RUN
    probed: Optional[bytes] = None  # the update header last decided


class Catalog:
    """The experiments on ``url``, for pages and the recorder.

    Args:
        url: the Redis server.
        verifier: the rules for what is accepted (the secret, or trust-unsigned).
        scan_interval: seconds between scans.
    """

    def __init__(self, url: str, verifier: Verifier, scan_interval: float = SCAN_INTERVAL) -> None:
        self._url = url
        self._verifier = verifier
        self._scan_interval = scan_interval
        self._lock = threading.Lock()
        self._entries: Dict[str, _Entry] = {}
        self._version = 0
        self._removed: Deque[Tuple[int, str]] = collections.deque(maxlen=_REMOVALS_KEPT)
        self._users = 0
        self._idle_since: Optional[float] = None
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        # Set when an experiment's row has a curve or a structure but no update yet: the update
        # is read by the next scan, which then comes at once rather than a scan interval later.
        self._scan_now = threading.Event()
        self._closed = False
        self._outage = False
        # Set once the running thread has scanned (or failed to): a script's first read waits.
        self._scanned = threading.Event()
        #: the latest scan's problem (the server unreachable), or None
        self.problem: Optional[str] = None
        #: more fields for an experiment's row (the recorded videos), by name
        self.extra: Optional[Callable[[str], Dict[str, Any]]] = None

    # ------------------------------------------------------------------------- demand

    def acquire(self) -> None:
        """Somebody needs the catalog: start following the server if it is not already."""
        with self._lock:
            if self._closed:
                return
            self._users += 1
            self._idle_since = None
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run,
                                                name="async_plotter-serve-catalog",
                                                daemon=True)
                self._thread.start()

    def release(self) -> None:
        """One user less; the catalog stops ``LINGER`` s after the last one left."""
        with self._lock:
            self._users = max(self._users - 1, 0)
            if self._users == 0:
                self._idle_since = time.monotonic()

    @property
    def running(self) -> bool:
        """Whether the catalog is following the server now."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def close(self) -> None:
        """Stop the thread and every watcher."""
        with self._lock:
            self._closed = True
        self._stop.set()
        self._scan_now.set()
        thread = self._thread
        if thread is not None:
            thread.join(5.0)
        with self._lock:
            entries = self._take_all()
        _stop_watchers(entries)

    # --------------------------------------------------------------------------- reading

    @property
    def version(self) -> int:
        """Bumped by every change of any row."""
        return self._version

    def poke(self) -> None:
        """Something beside the rows changed: a new version (the pages look at ``version``)."""
        with self._lock:
            self._version += 1

    def changes_since(self, seen: int) -> Tuple[List[Dict[str, Any]], Optional[List[str]], int]:
        """``(rows changed after version seen, names removed after it, version now)``.

        The names removed are None when some were forgotten (more than ``_REMOVALS_KEPT`` since
        ``seen``): the rows are then every row, and the caller replaces what it had."""
        with self._lock:
            lost = (len(self._removed) == self._removed.maxlen and seen < self._removed[0][0] - 1)
            if seen == 0 or lost:
                return [self._row(self._entries[name])
                        for name in sorted(self._entries)], None, self._version
            rows = [self._row(entry) for entry in self._entries.values() if entry.version > seen]
            removed = [
                name for version, name in self._removed
                if version > seen and name not in self._entries
            ]
            return rows, removed, self._version

    def rows(self) -> List[Dict[str, Any]]:
        """Every experiment's row, by name."""
        with self._lock:
            return [self._row(self._entries[name]) for name in sorted(self._entries)]

    def rows_for_a_script(self, timeout: float) -> List[Dict[str, Any]]:
        """Every experiment's row, as ``/experiments.json`` answers: the catalog is followed as
        for a page (until ``LINGER`` s after), and a call that starts it waits up to
        ``timeout`` s for its first scan. Blocks: call it off the event loop."""
        self.acquire()
        try:
            self._scanned.wait(timeout)
            return self.rows()
        finally:
            self.release()

    def names(self) -> List[str]:
        """The experiments present."""
        with self._lock:
            return sorted(self._entries)

    def newest_update(self, name: str) -> Optional[Tuple[int, int]]:
        """``(run id, update number)`` of the experiment's newest update, for the recorder; None
        if it has no verified structure or no update yet."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or entry.state != "ok" or entry.update is None:
                return None
            return entry.update_run.run_id, entry.update

    # -------------------------------------------------------------------------- the loop

    def _run(self) -> None:
        client = None
        entries: Optional[List[_Entry]] = None
        try:
            while not self._stop.is_set():
                with self._lock:
                    idle = (self._idle_since is not None
                            and time.monotonic() - self._idle_since > LINGER)
                    if idle or self._closed:
                        # Decided under the lock: a user arriving now starts a new thread,
                        # with entries of its own.
                        entries = self._take_all()
                        self._thread = None
                        self._scanned.clear()
                        break
                started = time.monotonic()
                if client is None:
                    client = connect(self._url)
                try:
                    self._scan(client)
                    self._recovered()
                except Exception as error:  # noqa: BLE001 - a bad server must not end the page
                    self._failed(error)
                    close_quietly(client)
                    client = None
                self._scanned.set()
                self._scan_now.wait(max(self._scan_interval - (time.monotonic() - started), 0.05))
                self._scan_now.clear()
        finally:
            close_quietly(client)
            if entries is None:
                with self._lock:
                    entries = self._take_all() if self._closed else []
            _stop_watchers(entries)

    def _failed(self, error: BaseException) -> None:
        if not self._outage:
            logger.warning("serve: cannot read experiments: %s; retrying",
                           explain_failure(error, self._url, "the viewer role"))
        self._outage = True
        # The page names no user, file or key: its log does.
        refused = refusal(error, self._url) is not None
        self.problem = ("the Redis server refuses this server's settings (see its log)"
                        if refused else f"the Redis server is unreachable ({type(error).__name__})")
        with self._lock:
            self._version += 1

    def _recovered(self) -> None:
        if self._outage:
            logger.info("serve: reading experiments on %s again", redact(self._url))
            self._outage = False
            self.problem = None
            with self._lock:
                self._version += 1

    def _scan(self, client: Any) -> None:
        summaries = {row.experiment: row for row in list_experiments(client)}
        gone = []
        with self._lock:
            for name in list(self._entries):
                if name not in summaries:
                    gone.append(self._entries.pop(name))
                    self._version += 1
                    self._removed.append((self._version, name))
            for name, summary in summaries.items():
                entry = self._entries.get(name)
                if entry is None:
                    entry = self._entries[name] = _Entry(name, summary)
                    self._touch(entry)
                elif _summary_changed(entry.summary, summary):
                    entry.summary = summary
                    self._touch(entry)
            followed = sum(1 for entry in self._entries.values() if entry.watcher is not None)
        for entry in gone:
            if entry.watcher is not None:
                entry.watcher.stop()
        import redis

        for name in sorted(summaries):
            entry = self._entries.get(name)
            if entry is None:
                continue
            try:
                if entry.watcher is None and self._screen(client, entry):
                    if followed < MAX_FOLLOWED:
                        self._follow(entry)
                        followed += 1
                    else:
                        self._set_problem(
                            entry, "waiting", f"not followed: this server follows "
                            f"{MAX_FOLLOWED} experiments at most")
                if entry.state == "ok":
                    self._probe_update(client, entry)
            except (redis.exceptions.ResponseError, PayloadRejected, ValueError) as error:
                # A key of the wrong type, or odd values: this row says so, the others go on.
                self._set_problem(entry, entry.state, f"unreadable key ({type(error).__name__}: "
                                  f"{error})")

    def _set_problem(self, entry: _Entry, state: str, problem: Optional[str]) -> None:
        with self._lock:
            problem = None if problem is None else _text(problem, 300)
            if (entry.state, entry.problem) != (state, problem):
                entry.state, entry.problem = state, problem
                self._touch(entry)

    def _screen(self, client: Any, entry: _Entry) -> bool:
        """Whether the experiment may be followed; otherwise its row says why not."""
        summary = entry.summary
        problem = None
        state = "refused"
        if summary.problem and summary.size is None:
            problem, state = f"unreadable: {summary.problem}", "unreadable"
        elif summary.signed is False and self._verifier.key is not None:
            problem = ("unsigned: this server has a secret, so it shows only experiments "
                       "signed with it")
        else:
            length, _ = probe(client, ExperimentKeys(entry.name).structure, STRUCTURE_HEADER.size)
            if length > MAX_STRUCTURE_BYTES:
                problem = (f"its structure is {length / 2**20:.0f} MiB, more than the "
                           f"{MAX_STRUCTURE_BYTES // 2**20} MiB this server downloads")
        if problem is None:
            if entry.state != "waiting":
                self._set_problem(entry, "waiting", None)
            return True
        self._set_problem(entry, state, problem)
        return False

    def _follow(self, entry: _Entry) -> None:
        entry.watcher = ExperimentWatcher(
            self._url,
            entry.name,
            self._verifier,
            lambda structure, entry=entry: self._on_structure(entry, structure),
            lambda metrics, entry=entry: self._on_metrics(entry, metrics),
            on_returns=lambda run_id, row, entry=entry: self._on_returns(entry, run_id, row))
        entry.watcher.start()

    def _probe_update(self, client: Any, entry: _Entry) -> None:
        """Read the newest update's header; verify the whole update if it is small."""
        key = ExperimentKeys(entry.name).params
        length, head_bytes = probe(client, key, UPDATE_HEADER.size)
        if length == 0 or head_bytes == entry.probed:
            return
        try:
            head = parse_update_head(head_bytes)
        except PayloadRejected:
            entry.probed = head_bytes
            return
        verified = False
        if length <= VERIFY_UPDATE_BYTES:
            try:
                value = read_exact(client, key, length, "update")
                if value is None:
                    return
                head, _ = open_update(value, self._verifier, entry.name, None)
                verified = True
            except PayloadRejected:
                entry.probed = head_bytes  # forged or corrupted: the row keeps what it had
                return
        elif self._verifier.key is not None and not head.signed:
            entry.probed = head_bytes
            return
        entry.probed = head_bytes
        with self._lock:
            # Never back: an earlier run's update, or an earlier update of this run, changes
            # nothing (a replayed value).
            if head.run < entry.run or head.run < entry.update_run or (
                    head.run == entry.update_run and entry.update is not None
                    and head.number <= entry.update):
                return
            entry.update, entry.iteration = head.number, head.iteration
            entry.published_at, entry.update_verified = head.published_at, verified
            entry.update_run = head.run
            self._touch(entry)

    def _on_structure(self, entry: _Entry, structure: Structure) -> None:
        with self._lock:
            entry.meta = structure.meta
            entry.run = structure.run
            if entry.run_id != structure.run_id:
                entry.run_id = structure.run_id
                # The curve is this run's, and that of the runs it resumes.
                entry.chained.follow(structure.run_id, resumed_after(structure.meta))
            entry.state, entry.problem = "ok", None
            self._touch(entry)
            if entry.update is None:
                self._scan_now.set()  # its update and iteration, as soon as its curve shows

    def _on_metrics(self, entry: _Entry, metrics: MetricsEntry) -> None:
        with self._lock:
            entry.chained.add(METRICS, metrics.run_id, metrics.iteration, metrics.metrics)
            self._touch(entry)
            if entry.update is None and entry.state == "ok":
                self._scan_now.set()

    def _on_returns(self, entry: _Entry, run_id: int, row: ReturnRow) -> None:
        """A history recording's return: the card's second line, what was shown."""
        point = row.as_point()
        if point is None:
            return
        with self._lock:
            entry.chained.add(RETURNS, run_id, point.x, {SHOWN_RETURN: point.episode_return})
            self._touch(entry)

    def touch(self, name: str) -> None:
        """The experiment's ``extra`` fields changed: send its row again."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None:
                self._touch(entry)

    def _row(self, entry: _Entry) -> Dict[str, Any]:
        row = _row(entry)
        if self.extra is not None:
            row.update(self.extra(entry.name))
        return row

    def _touch(self, entry: _Entry) -> None:
        """Called with the lock held."""
        self._version += 1
        entry.version = self._version

    def _take_all(self) -> List[_Entry]:
        """Forget every experiment (called with the lock held); their watchers are the
        caller's to stop, outside the lock."""
        entries = list(self._entries.values())
        for entry in entries:
            self._version += 1
            self._removed.append((self._version, entry.name))
        self._entries.clear()
        return entries


def _stop_watchers(entries: List[_Entry]) -> None:
    """Stop the watchers together: each takes up to half a second to notice."""
    threads = [
        threading.Thread(target=entry.watcher.stop, daemon=True) for entry in entries
        if entry.watcher is not None
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(3.0)


def _summary_changed(old: ExperimentSummary, new: ExperimentSummary) -> bool:
    # The age and the expiry move on every scan; the page computes them itself.
    keys = ("env", "policy", "size", "dtype", "host", "signed", "problem")
    return any(getattr(old, key) != getattr(new, key) for key in keys)


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _row(entry: _Entry) -> Dict[str, Any]:
    """What the page gets for one experiment (plain JSON; every text cut short)."""
    summary = entry.summary
    meta = entry.meta
    source = meta if meta is not None else {
        "env": summary.env,
        "policy": summary.policy,
        "size": summary.size,
        "host": summary.host
    }
    size = source.get("size")
    return {
        "name": entry.name,
        "env": _text(source.get("env", "?")),
        "policy": _text(source.get("policy", "?")),
        "params": size if isinstance(size, int) and not isinstance(size, bool) else None,
        "host": _text(source.get("host", "?")),
        "verified": meta is not None,
        "signed": summary.signed,
        "state": entry.state,
        "problem": entry.problem,
        "update": entry.update,
        "iteration": entry.iteration,
        "published_at": entry.published_at,
        "update_verified": entry.update_verified,
        "expires_in": summary.expires_in,
        "curve": _curve(entry),
        # its trainer publishes every policy's recording: the run's history in 3D
        "history": bool(meta is not None and meta.get("history_states") is True),
    }


def _curve(entry: _Entry) -> Dict[str, Any]:
    curve = entry.chained.curve
    metric = curve.shown
    # The curve of what was shown (the history's returns), dashed beside the metric's line.
    beside = metric not in (None, SHOWN_RETURN)
    return {
        "metric": None if metric is None else _text(metric, 60),
        "points": [] if metric is None else curve.series(metric, CURVE_POINTS),
        "shown": curve.series(SHOWN_RETURN, CURVE_POINTS) if beside else [],
        "count": curve.total,
    }
