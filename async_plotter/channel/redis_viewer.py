"""The viewer's side of Redis outside the worker: following an experiment's structure and metrics
(``ExperimentWatcher``) and listing the experiments a server holds (``list_experiments``).

Nothing here unpickles: a structure is verified and handed over as bytes; loading it is the
caller's decision (see ``async_plotter.cli``).
"""
import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from async_plotter.channel.redis_link import read_capped, redact, run_subscription
from async_plotter.channel.redis_wire import (STRUCTURE_HEADER, UPDATE_HEADER, ExperimentKeys,
                                              MetricsEntry, Structure,
                                              experiment_from_structure_key, open_metrics,
                                              open_structure, parse_meta, parse_structure_head,
                                              parse_update_head)
from async_plotter.channel.signing import PayloadRejected, Verifier

logger = logging.getLogger("async_plotter")

#: a structure value larger than this is refused before it is downloaded
MAX_STRUCTURE_BYTES = 256 * 1024 * 1024
_METRICS_BATCH = 1000


class ExperimentWatcher:
    """Follows one experiment in a daemon thread: calls ``on_structure(structure)`` for each new
    verified structure (a new trainer session) and ``on_metrics(entry)`` for each new verified
    metrics entry, in order. Survives server restarts; bad values cost one log line."""

    def __init__(self, url: str, experiment: str, verifier: Verifier,
                 on_structure: Callable[[Structure], None], on_metrics: Callable[[MetricsEntry],
                                                                                 None]) -> None:
        self._url = url
        self._experiment = experiment
        self._keys = ExperimentKeys(experiment)
        self._verifier = verifier
        self._on_structure = on_structure
        self._on_metrics = on_metrics
        self._delivered: Optional[Tuple[int, bytes]] = None  # (run id, structure id)
        self._metrics_after = "-"
        self._metrics_seen: Dict[int, int] = {}  # run id -> highest seq delivered
        self._last_rejection: Dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen,
                                        name="async_plotter-redis-watcher",
                                        daemon=True)

    def start(self) -> None:
        """Start following in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop within about half a second."""
        self._stop.set()
        self._thread.join(2.0)

    def _listen(self) -> None:
        run_subscription(self._url, self._keys.events, f"viewer of experiment {self._experiment!r}",
                         self._stop, self._on_connect, self._on_events)

    def _on_connect(self, client: Any) -> None:
        # A restarted server may hold a different stream: read it all; entries seen are skipped.
        self._metrics_after = "-"
        self._fetch_structure(client)
        self._fetch_metrics(client)

    def _on_events(self, client: Any, kinds: Set[str]) -> None:
        if "structure" in kinds:
            self._fetch_structure(client)
        if "metrics" in kinds:
            self._fetch_metrics(client)

    def _fetch_structure(self, client: Any) -> None:
        import redis

        key = self._keys.structure
        try:
            value = read_capped(client, key, MAX_STRUCTURE_BYTES, "structure")
            if value is None:
                return
            structure = open_structure(value, self._verifier, self._experiment)
        except redis.exceptions.ResponseError as error:
            self._reject(key, f"the key holds something else than a structure ({error})")
            return
        except PayloadRejected as error:
            self._reject(key, str(error))
            return
        self._last_rejection.pop(key, None)
        identity = (structure.run_id, structure.structure_id)
        if identity != self._delivered:
            self._delivered = identity
            self._on_structure(structure)

    def _fetch_metrics(self, client: Any) -> None:
        import redis

        key = self._keys.metrics
        while not self._stop.is_set():
            start = "-" if self._metrics_after == "-" else f"({self._metrics_after}"
            try:
                entries = client.xrange(key, min=start, max="+", count=_METRICS_BATCH)
            except redis.exceptions.ResponseError as error:
                self._reject(key, f"the key holds something else than a metrics stream ({error})")
                return
            for entry_id, fields in entries:
                self._metrics_after = entry_id.decode("ascii", "replace")
                try:
                    entry = open_metrics(fields, self._verifier, self._experiment)
                except PayloadRejected as error:
                    self._reject(key, str(error))
                    continue
                if entry.seq <= self._metrics_seen.get(entry.run_id, -1):
                    continue  # restored after a server restart: already delivered
                self._metrics_seen[entry.run_id] = entry.seq
                self._on_metrics(entry)
            if len(entries) < _METRICS_BATCH:
                return

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
    rows = []
    for name in sorted(names):
        row = ExperimentSummary(name)
        try:
            _describe(client, ExperimentKeys(name), row)
        except PayloadRejected as error:
            row.problem = str(error)
        except redis.exceptions.ResponseError as error:
            row.problem = f"a key holds something else than async_plotter data ({error})"
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
