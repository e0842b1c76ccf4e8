"""A viewer's copy of a run's published history (``states.py``): ``RecordingFetcher`` keeps a
folder holding the recordings as whole files, and their returns in its ``returns.csv``, with
neither TensorFlow nor the policy's code, and nothing unpickled. Every value is verified and its
size bounded before it is downloaded (docs/security.md).
"""
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Union

from async_plotter.channel.redis.history_chain import earlier_runs_keep, in_history
from async_plotter.channel.redis.link import (OutageLog, bounded_zrange, close_quietly, connect,
                                              connection_errors, probe, read_exact)
from async_plotter.channel.redis.refusals import AccessDenied
from async_plotter.channel.redis.returns import ReturnsReader
from async_plotter.channel.redis.sealed import (HEADER_BYTES, MAX_MODEL_BYTES, Sealed,
                                                inflate_model, open_sealed)
from async_plotter.channel.redis.signing import PayloadRejected, Verifier
from async_plotter.channel.redis.states import DEFAULT_KEPT, StateKeys
from async_plotter.channel.redis.wire import run_hex
from async_plotter.render.history_returns import ReturnsFile
from async_plotter.render.recording import RecordingError, recording_from_compact, write_recording
from async_plotter.render.videos import history_name

logger = logging.getLogger("async_plotter")

#: the longest name a viewer reads from the recordings' index (ours: ``run:update``, < 40)
MAX_MEMBER_BYTES = 64
#: the bytes of one recording a viewer reads (a 500-step HalfCheetah episode: 34 KB)
MAX_RECORDING_BYTES = 32 * 1024 * 1024
_POLL_SECONDS = 1.0


def _bounded_get(client: Any, key: str, limit: int, what: str) -> Optional[bytes]:
    """The value at ``key`` (None: none), refused before its download past ``limit`` bytes, and
    if it changed size meanwhile (``link.probe`` and ``read_exact``, as for the parameters)."""
    length, _ = probe(client, key, HEADER_BYTES)
    if length > limit:
        raise PayloadRejected(f"the {what} is {length} bytes, over the {limit} a viewer reads")
    return read_exact(client, key, length, what) if length else None


class RecordingFetcher:
    """Keeps ``folder`` holding the experiment's published recordings, each as a whole file
    (``iter_0059.npz``, with the model put back), in a thread of its own; the newest run's
    only (a new run's first recording removes the files of the one before), with those of the
    runs a resumed run goes on from up to its resume (``history_chain.py``);
    ``on_written(path)`` after each. Every recording's return goes to the folder's ``returns.csv``
    (``render/history_returns.py``), those Redis no longer keeps the recording of too. What
    fails its check is logged once and skipped; the fetcher goes on."""

    def __init__(self,
                 url: str,
                 experiment: str,
                 verifier: Verifier,
                 folder: str,
                 on_written: Optional[Callable[[str], None]] = None) -> None:
        self._url = url
        self._on_written = on_written
        self._experiment = experiment
        self._keys = StateKeys(experiment)
        self._verifier = verifier
        self._folder = folder
        self._model: Optional[Sealed] = None
        self._mjb = b""
        #: the members handled, each with the file it was written to (None: not written)
        self._done: Dict[str, Optional[str]] = {}
        #: the files written of the current run (and of those it resumes), each with the start
        #: of the run it is of, its update and its iteration
        self._paths: Dict[str, Tuple[int, int, Optional[int]]] = {}
        self._rejected: Set[str] = set()
        #: members of a run newer than the model read (fetched once a new model is read)
        self._later: Set[str] = set()
        self._oversized = 0  # names in the index too long to be ours, at the last poll
        self._index_unbounded = False  # the role may not run the script that bounds them
        self._stop = threading.Event()
        self._returns = ReturnsReader(url, experiment, verifier,
                                      lambda reason: self._refuse("return", reason))
        #: the current run's returns.csv
        self._returns_file: Optional[ReturnsFile] = None
        #: what the server refused, in words naming the fix: the fetcher has stopped
        self.refusal: Optional[str] = None
        #: files written, returns written, and values refused
        self.written = 0
        self.returns_written = 0
        self.refused = 0
        #: set once the first file is written
        self.first_written = threading.Event()
        self._thread = threading.Thread(target=self._run_thread,
                                        name="async_plotter-redis-fetch",
                                        daemon=True)
        self._thread.start()

    def wait_for_first(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the first file; whether it is written. Returns at once
        (False) once the server refused this viewer's settings (``refusal``: the fetch has
        stopped and said why), which no wait would change."""
        deadline = time.monotonic() + timeout
        while not self.first_written.wait(min(max(deadline - time.monotonic(), 0.0), 0.25)):
            if self.refusal is not None or time.monotonic() >= deadline:
                return False
        return True

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run_thread(self) -> None:
        import redis

        client = connect(self._url)
        outage = OutageLog(f"fetching the history of experiment {self._experiment!r}", self._url,
                           "the viewer role")
        try:
            while not self._stop.is_set():
                try:
                    self.fetch_once(client)
                except (*connection_errors(), AccessDenied) as error:
                    problem = outage.refusal(error)
                    if problem is not None:
                        # Settings someone must change (the role, the password, the
                        # certificate): a viewer stops on them, as ``view`` does.
                        self.refusal = problem
                        logger.error("fetching the history of experiment %r: %s; it stops",
                                     self._experiment, problem)
                        return
                    outage.failed(error, "trying again every second")
                except redis.exceptions.ResponseError as error:
                    self._refuse("index", error)  # a key holding something else
                else:
                    outage.recovered()
                self._stop.wait(_POLL_SECONDS)
        finally:
            close_quietly(client)

    def fetch_once(self, client: Any) -> int:
        """Write the recordings not fetched yet; how many were written."""
        try:
            value = _bounded_get(client, self._keys.model, MAX_MODEL_BYTES, "model")
            if value is None:
                return 0  # nothing published yet (or expired): wait
            model = open_sealed(value, self._verifier, b"model", self._experiment)
        except PayloadRejected as error:
            self._refuse("model", error)
            return 0
        if self._model is None or model.run_id != self._model.run_id:
            try:
                self._mjb = inflate_model(model.payload)
            except PayloadRejected as error:
                self._refuse("model", error)
                return 0
            self._model = model
            self._begin_run(model.iteration)
        prefix = run_hex(model.run_id) + ":"
        after = model.iteration
        written = 0
        # The newest DEFAULT_KEPT only, each a short name: a forged index may be of any length,
        # and its members of any size.
        members = self._index_names(client)
        oversized = members.count(None)
        if oversized > self._oversized:
            self._refuse("recordings' index",
                         f"{oversized} of its names are over {MAX_MEMBER_BYTES} bytes")
        self._oversized = oversized
        for raw in members:
            if raw is None:
                continue
            member = raw.decode("ascii", "replace")
            if member in self._done or member in self._rejected or member in self._later:
                continue
            if not member.startswith(prefix) and after is None:
                continue  # the run before's, going with its keys' expiry
            try:
                value = _bounded_get(client, self._keys.recording(member), MAX_RECORDING_BYTES,
                                     "recording")
                if value is None:
                    continue  # gone since the index was read (the cap, or expiry)
                path = self._write(member, value)
            except _OfANewerRun:
                self._later.add(member)  # a run whose model is not read yet: fetched once it is
                continue
            except (PayloadRejected, RecordingError) as error:
                self._rejected.add(member)
                self._refuse(f"recording {member}", error)
                continue
            self._done[member] = path
            written += path is not None
        self.written += written
        if written:
            self.first_written.set()
        self._fetch_returns(client, model)
        return written

    def _index_names(self, client: Any) -> List[Optional[bytes]]:
        """The newest ``DEFAULT_KEPT`` names in the recordings' index, those too long to be ours
        as None. Read through a script that leaves the long ones on the server; a role that may
        not run scripts reads them whole (one warning says so)."""
        if not self._index_unbounded:
            try:
                return bounded_zrange(client, self._keys.index, -DEFAULT_KEPT, -1, MAX_MEMBER_BYTES)
            except AccessDenied as error:
                self._index_unbounded = True
                logger.warning(
                    "experiment %r: %s, so the recordings' index is read without a bound on its "
                    "names' size (the viewer role has +eval_ro)", self._experiment, error)
        return list(client.zrange(self._keys.index, -DEFAULT_KEPT, -1))

    def _fetch_returns(self, client: Any, model: Sealed) -> None:
        """Append the returns published since the last poll to the folder's ``returns.csv``:
        the run's, and those of the runs it resumes that it keeps."""
        for (row_run, started), row in self._returns.read(client):
            if not in_history(model, row_run, started, row.update, row.iteration):
                continue  # the run before's not yet removed, or a newer one's (read again then)
            if self._returns_file is None:
                os.makedirs(self._folder, exist_ok=True)
                self._returns_file = ReturnsFile(self._folder)
            self._returns_file.append(row.as_entry(self._folder))
            self.returns_written += 1

    def _write(self, member: str, value: bytes) -> Optional[str]:
        """Write the recording ``value`` (at ``member``) holds; its path, or None where it is
        not the run's: one of an earlier run that the run does not keep, or whose policy a
        later run recorded again. ``_OfANewerRun`` for a run after the model's."""
        sealed = open_sealed(value, self._verifier, b"recording", self._experiment)
        if not member.startswith(run_hex(sealed.run_id) + ":"):
            raise PayloadRejected("the recording is of another run than its name says")
        model = self._model
        if sealed.run_id != model.run_id and sealed.run_started_ns > model.run_started_ns:
            raise _OfANewerRun()
        if not in_history(model, sealed.run_id, sealed.run_started_ns, sealed.number,
                          sealed.iteration):
            return None
        path = os.path.join(self._folder, history_name(sealed.number, sealed.iteration))
        held = self._paths.get(path)
        if held is not None and held[0] > sealed.run_started_ns:
            return None  # a later run recorded that policy again: its recording is the one
        recording = recording_from_compact(sealed.payload, f"update {sealed.number}'s recording",
                                           self._mjb)
        os.makedirs(self._folder, exist_ok=True)
        write_recording(path, recording)
        self._paths[path] = (sealed.run_started_ns, sealed.number, sealed.iteration)
        if self._on_written is not None:
            self._on_written(path)
        return path

    def _begin_run(self, after: Optional[int]) -> None:
        """A new run's model: remove the files of the runs before (a folder holds one run, as a
        history shows one), but those a run resumed after iteration ``after`` keeps, and write
        ``returns.csv`` again from the stream's first row (the stream holds the resumed runs'
        rows that count, ``history_chain.trim``: also where this viewer missed a run between)."""
        kept = {
            path: (started, update, iteration)
            for path, (started, update, iteration) in self._paths.items()
            if earlier_runs_keep(update, iteration, after)
        }
        for path in set(self._paths) - set(kept):
            _remove_quietly(path)
        self._paths, self._later = kept, set()
        self._done = {member: path for member, path in self._done.items() if path in kept}
        if self._returns_file is not None:
            _remove_quietly(self._returns_file.path)
        self._returns_file = None
        self._returns.restart(forget_read=True)

    def _refuse(self, what: str, error: Union[Exception, str]) -> None:
        self.refused += 1
        log = logger.warning if self.refused == 1 else logger.debug
        log("experiment %r: the %s was refused: %s", self._experiment, what, error)


class _OfANewerRun(Exception):
    """A recording of a run newer than the model read: it is fetched once that run's model is
    read."""


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
