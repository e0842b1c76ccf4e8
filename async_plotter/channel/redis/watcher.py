"""The viewer's side of Redis outside the worker: following an experiment's structure and metrics
(``ExperimentWatcher``) and listing the experiments a server holds (``list_experiments``).

Nothing here unpickles: a structure is verified and handed over as bytes; loading it is the
caller's decision (see ``async_plotter.cli``).
"""
import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set

from async_plotter.channel.redis.acl import DOCS
from async_plotter.channel.redis.link import bounded_xrange, run_subscription, stream_ends_before
from async_plotter.channel.redis.urls import redact
from async_plotter.channel.redis.refusals import AccessDenied
from async_plotter.channel.redis.probed import Later, ProbedKey, Skip
from async_plotter.channel.redis.returns import ReturnRow, ReturnsReader, returns_key
from async_plotter.channel.redis.wire import (MAX_METRICS_BYTES, STRUCTURE_HEADER, TAG_BYTES,
                                              UPDATE_HEADER, ExperimentKeys, MetricsEntry, NO_RUN,
                                              RunKey, Structure, StructureHead,
                                              experiment_from_structure_key, open_metrics,
                                              open_structure, parse_meta, parse_structure_head,
                                              parse_update_head)
from async_plotter.channel.redis.signing import PayloadRejected, Verifier

logger = logging.getLogger("async_plotter")

#: a structure value larger than this is refused before it is downloaded
MAX_STRUCTURE_BYTES = 256 * 1024 * 1024
#: seconds between two downloads of a structure body: a storm of fake structures (each one a
#: new header) costs the viewer at most one download per interval
STRUCTURE_FETCH_INTERVAL = 1.0
#: metrics entries per read; with entries capped on the server, one read is at most ~1 MiB
METRICS_BATCH = 100
#: reads per fetch; what is left is read on the next notification or idle tick
METRICS_READS_PER_FETCH = 20
# One entry's fields: the JSON payload, the signed flag, the tag, and their three names.
_METRICS_ENTRY_BYTES = MAX_METRICS_BYTES + TAG_BYTES + 16
# Runs whose metrics sequence is remembered (each new run is one entry).
_RUNS_REMEMBERED = 256
_IDLE_INTERVAL = 0.5
#: experiments ``list`` describes at most (each costs a few round trips)
MAX_LISTED = 1000


class ExperimentWatcher:
    """Follows one experiment in a daemon thread: calls ``on_structure(structure)`` for each new
    verified structure (a new trainer session) and ``on_metrics(entry)`` for each new verified
    metrics entry, in order. Survives server restarts; bad values cost one log line.

    Never goes back: a structure of a run older than the newest accepted (``RunKey``, signed) is
    refused. Never downloads without a bound: a structure is fetched only when its header (read
    with its length) is new and claims a later run, at most once per
    ``STRUCTURE_FETCH_INTERVAL``; metrics are read ``METRICS_BATCH`` at a time, each entry capped
    on the server, from where the last read ended (also after a reconnect).

    A server that refuses this viewer's settings (a command outside its ACL role, its password,
    the TLS certificate: ``refusals.refusal``) ends the watch with ``on_refused(message)`` when
    given; else the watcher warns and retries. A role without ``EVAL_RO`` only costs the curve.

    With ``on_returns``, each history recording's return the trainer publishes
    (``returns.py``) is handed on as ``on_returns(run_id, row)``, in order, also after a
    reconnect: the curve of what was shown.
    """

    def __init__(self,
                 url: str,
                 experiment: str,
                 verifier: Verifier,
                 on_structure: Callable[[Structure], None],
                 on_metrics: Callable[[MetricsEntry], None],
                 on_refused: Optional[Callable[[str], None]] = None,
                 on_returns: Optional[Callable[[int, ReturnRow], None]] = None) -> None:
        self._url = url
        self._experiment = experiment
        self._keys = ExperimentKeys(experiment)
        self._verifier = verifier
        self._on_structure = on_structure
        self._on_metrics = on_metrics
        self._on_refused = on_refused
        self._on_returns = on_returns
        self._returns = ReturnsReader(url, experiment, verifier,
                                      lambda reason: self._reject(returns_key(experiment), reason))
        self._metrics_refused = False
        self._newest_run: RunKey = NO_RUN  # of the newest structure delivered
        self._structure: ProbedKey[StructureHead, Structure] = ProbedKey(
            self._keys.structure, "structure", STRUCTURE_HEADER.size, parse_structure_head,
            MAX_STRUCTURE_BYTES, "a viewer accepts", verifier,
            lambda reason: self._reject(self._keys.structure, reason))
        self._next_download = 0.0  # monotonic time before which no structure body is fetched
        self._structure_due = False  # a fetch was deferred by the interval above
        self._metrics_after = "-"
        self._metrics_due = False  # more entries are waiting than one fetch reads
        self._metrics_seen: Dict[int, int] = {}  # run id -> highest seq delivered
        self._last_rejection: Dict[str, str] = {}
        self._client: Optional[Any] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen,
                                        name="async_plotter-redis-watcher",
                                        daemon=True)

    @property
    def structure_downloads(self) -> int:
        """Structure values downloaded (for tests and benchmarks)."""
        return self._structure.downloads

    @property
    def structure_bytes(self) -> int:
        """Their bytes."""
        return self._structure.downloaded_bytes

    def start(self) -> None:
        """Start following in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop within about half a second."""
        self._stop.set()
        self._thread.join(2.0)

    def _listen(self) -> None:
        run_subscription(self._url,
                         self._keys.events,
                         f"viewer of experiment {self._experiment!r}",
                         self._stop,
                         self._on_connect,
                         self._on_events,
                         on_idle=self._on_idle,
                         idle_interval=_IDLE_INTERVAL,
                         on_refused=self._on_refused)

    def _on_connect(self, client: Any) -> None:
        self._client = client
        self._restart_metrics_if_replaced(client)
        self._fetch_structure(client)
        self._fetch_metrics(client)
        if self._on_returns is not None:
            self._returns.restart_if_replaced(client)
            self._fetch_returns(client)

    def _on_events(self, client: Any, kinds: Set[str]) -> None:
        if "structure" in kinds:
            self._fetch_structure(client)
        if "metrics" in kinds:
            self._fetch_metrics(client)
        if "returns" in kinds and self._on_returns is not None:
            self._fetch_returns(client)

    def _fetch_returns(self, client: Any) -> None:
        if self._metrics_refused:
            return  # no curve at all, said once
        for (run_id, _), row in self._returns.read(client):
            self._on_returns(run_id, row)

    def _on_idle(self) -> None:
        # Deferred work; a connection error here is left for the next notification to meet.
        client = self._client
        if client is None or self._stop.is_set():
            return
        try:
            if self._structure_due and time.monotonic() >= self._next_download:
                self._fetch_structure(client)
            if self._metrics_due:
                self._fetch_metrics(client)
        except Exception as error:  # noqa: BLE001 - the listening loop reconnects on its own
            logger.debug("deferred read of experiment %r failed: %s", self._experiment, error)

    def _fetch_structure(self, client: Any) -> None:
        self._structure_due = False
        structure = self._structure.fetch(client, self._vet_structure, self._open_structure)
        if structure is None:
            return
        self._last_rejection.pop(self._structure.key, None)
        if structure.run > self._newest_run:
            self._newest_run = structure.run
            self._on_structure(structure)

    def _vet_structure(self, head: StructureHead) -> None:
        """Refuse an older run from the unverified header, skip the one delivered, and download
        at most once per ``STRUCTURE_FETCH_INTERVAL``."""
        self._check_fresh(head.run)
        if head.run == self._newest_run:
            raise Skip()  # the structure already delivered, written again
        now = time.monotonic()
        if now < self._next_download:
            self._structure_due = True  # fetched by _on_idle once the interval has passed
            raise Later()
        self._next_download = now + STRUCTURE_FETCH_INTERVAL

    def _open_structure(self, value: bytes) -> Structure:
        structure = open_structure(value, self._verifier, self._experiment)
        self._check_fresh(structure.run)  # again, from the verified header
        return structure

    def _check_fresh(self, run: RunKey) -> None:
        if run < self._newest_run:
            raise PayloadRejected(
                "the structure belongs to an earlier trainer run than the one this viewer "
                "follows (a replayed old value, refused; or the trainer machine's clock is "
                "behind the previous run's, then restart the viewer)")

    def _restart_metrics_if_replaced(self, client: Any) -> None:
        """Continue after the last entry read, unless the stream now ends before it (another
        server, or one whose clock went back): then read it from the start."""
        import redis

        if self._metrics_after == "-" or self._metrics_refused:
            return
        try:
            replaced = stream_ends_before(client, self._keys.metrics, self._metrics_after)
        except redis.exceptions.ResponseError:
            return  # not a stream: _fetch_metrics says so
        except AccessDenied as error:
            self._refuse_metrics(error)
            return
        if replaced:
            self._metrics_after = "-"

    def _fetch_metrics(self, client: Any) -> None:
        import redis

        key = self._keys.metrics
        self._metrics_due = False
        if self._metrics_refused:
            return
        for _ in range(METRICS_READS_PER_FETCH):
            if self._stop.is_set():
                return
            start = "-" if self._metrics_after == "-" else f"({self._metrics_after}"
            try:
                entries = bounded_xrange(client, key, start, METRICS_BATCH, _METRICS_ENTRY_BYTES)
            except redis.exceptions.ResponseError as error:
                self._reject(key, f"the key holds something else than a metrics stream ({error})")
                return
            except AccessDenied as error:
                self._refuse_metrics(error)
                return
            for entry_id, fields in entries:
                self._metrics_after = entry_id.decode("ascii", "replace")
                if b"oversized" in fields:
                    self._reject(key, "a metrics entry is oversized (not downloaded)")
                    continue
                try:
                    entry = open_metrics(fields, self._verifier, self._experiment)
                except PayloadRejected as error:
                    self._reject(key, str(error))
                    continue
                if entry.seq <= self._metrics_seen.get(entry.run_id, -1):
                    continue  # restored after a server restart: already delivered
                if (entry.run_id not in self._metrics_seen
                        and len(self._metrics_seen) >= _RUNS_REMEMBERED):
                    self._metrics_seen.pop(next(iter(self._metrics_seen)))
                self._metrics_seen[entry.run_id] = entry.seq
                self._on_metrics(entry)
            if len(entries) < METRICS_BATCH:
                return
        self._metrics_due = True  # more to read: on the next idle tick

    def _refuse_metrics(self, error: AccessDenied) -> None:
        """The server's ACL keeps this viewer from reading metrics: no curve, said once."""
        self._metrics_refused = True
        logger.warning(
            "viewer of experiment %r: no learning curve, Redis at %s refused %s (%s); the "
            "viewer role's ACL line in %s allows it", self._experiment, redact(self._url),
            error.what, error.reply, DOCS)

    def _reject(self, key: str, reason: str) -> None:
        # Said once per distinct reason and key, not after every reconnect or entry.
        if self._last_rejection.get(key) != reason:
            self._last_rejection[key] = reason
            logger.warning("rejected the value of %s on %s: %s", key, redact(self._url), reason)


@dataclasses.dataclass
class ExperimentSummary:
    """One row of ``async-plotter list``; read without verifying or unpickling anything."""

    experiment: str
    env: str = "?"
    policy: str = "?"
    size: Optional[int] = None
    dtype: str = "?"
    host: str = "?"
    signed: Optional[bool] = None
    last_update: Optional[int] = None
    last_iteration: Optional[int] = None
    age: Optional[float] = None  # seconds since the newest update was published
    expires_in: Optional[float] = None  # seconds
    problem: Optional[str] = None


def list_experiments(client: Any) -> List[ExperimentSummary]:
    """The experiments present on the server, by name. Foreign keys that look like ours become
    rows with a ``problem`` rather than errors."""
    import redis

    names = set()
    for key in client.scan_iter(match="async_plotter:*:structure", count=1000):
        name = experiment_from_structure_key(key)
        if name is not None:
            names.add(name)
            if len(names) >= MAX_LISTED:
                logger.warning("more than %d experiments on the server; listing the first found",
                               MAX_LISTED)
                break
    rows = []
    for name in sorted(names):
        row = ExperimentSummary(name)
        try:
            _describe(client, ExperimentKeys(name), row)
        except PayloadRejected as error:
            row.problem = str(error)
        except redis.exceptions.ResponseError as error:
            row.problem = f"a key holds something else than async_plotter data ({error})"
        except AccessDenied as error:
            row.problem = f"this user may not read it: {error}"
        except (ValueError, TypeError, OverflowError, RecursionError) as error:
            # Whatever odd values someone wrote there: one unreadable row, not a traceback.
            row.problem = f"unreadable description ({type(error).__name__})"
        rows.append(row)
    return rows


def _describe(client: Any, keys: ExperimentKeys, row: ExperimentSummary) -> None:
    head = parse_structure_head(client.getrange(keys.structure, 0, STRUCTURE_HEADER.size - 1))
    meta = parse_meta(
        client.getrange(keys.structure, STRUCTURE_HEADER.size, STRUCTURE_HEADER.size +
                        head.meta_len - 1)) if head.meta_len else {}
    row.signed = head.signed
    row.env = str(meta.get("env", "?"))
    row.policy = str(meta.get("policy", "?"))
    row.size = meta.get("size") if isinstance(meta.get("size"), int) else None
    row.dtype = str(meta.get("dtype", "?"))
    row.host = str(meta.get("host", "?"))
    ttl_ms = client.pttl(keys.structure)
    row.expires_in = ttl_ms / 1000.0 if ttl_ms is not None and ttl_ms >= 0 else None
    update_prefix = client.getrange(keys.params, 0, UPDATE_HEADER.size + 31)
    if update_prefix:
        try:
            update = parse_update_head(update_prefix)
        except PayloadRejected as error:
            row.problem = f"params: {error}"
            return
        row.last_update = update.number
        row.last_iteration = update.iteration
        row.age = max(time.time() - update.published_at, 0.0)
