"""What the Redis channel stores, byte by byte, and the checks a viewer makes before trusting it.

Keys of experiment ``E`` (one Redis string or stream each, all with the same expiry)::

    async_plotter:E:structure   header | meta (JSON) | body (pickled WorkerConfig) | tag
    async_plotter:E:params      header | parameters (raw little-endian floats)   | tag
    async_plotter:E:metrics     stream of {p: JSON, s: b"1"/b"0", t: tag}, capped
    async_plotter:E:events      pub/sub channel: b"structure RUN", b"update RUN N",
                                b"metrics RUN N", b"returns RUN" (``returns.py``)

``tag`` is 32 bytes: HMAC-SHA256 under the shared secret when the header's ``signed`` flag is set,
else a plain SHA-256 checksum (see ``signing``). It covers everything before it. Notifications
carry no data and are never trusted: they only tell a viewer to read the keys again.

Only the newest update of an experiment exists: each publish overwrites ``params``. ``RUN`` is a
random 64-bit id per trainer session. Every header carries, under the signature, the run's start
(``RunKey``) and, for updates, the update number: a viewer never accepts one older than the newest
it accepted. Every header states the whole value's length, checked against ``STRLEN`` before
anything is downloaded (``probed``).
"""
import dataclasses
import json
import math
import re
import struct
from typing import Any, Dict, Optional, Tuple

import numpy as np

from async_plotter.channel.base import ParamUpdate
from async_plotter.channel.redis.signing import TAG_BYTES, PayloadRejected, Verifier, compute_tag

WIRE_VERSION = 2
KEY_PREFIX = "async_plotter"
EXPERIMENT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

FLAG_SIGNED = 1
#: an update whose parameters nobody reads: its header and tag alone (``withheld_bytes``); the
#: trainer sends the whole update once a reader subscribes to ``ExperimentKeys.readers``
FLAG_WITHHELD = 2

# Redis refuses strings over 512 MiB (its default proto-max-bulk-len).
MAX_VALUE_BYTES = 512 * 1024 * 1024
MAX_META_BYTES = 64 * 1024
MAX_METRICS_BYTES = 8 * 1024
#: deepest nesting of JSON a viewer parses (the description and metrics are flat objects)
MAX_JSON_DEPTH = 16

_DTYPES = {1: np.dtype("<f4"), 2: np.dtype("<f8")}
_DTYPE_CODES = {dtype.newbyteorder("="): code for code, dtype in _DTYPES.items()}

# magic, version, flags, header length, dtype code, reserved, run id, run start (ns), update
# number, iteration (-1: none), max_path_length, parameter count (the shape is (count,)), publish
# time (Unix seconds), structure id (first 16 bytes of the structure body's SHA-256), padding to 88
# bytes (parameters stay 8-byte aligned)
UPDATE_HEADER = struct.Struct("<4sHHHBBQQQqQQd16s4x")
UPDATE_MAGIC = b"APUP"
# magic, version, flags, header length, reserved, meta length, body length, run id, run start
# (Unix nanoseconds), structure id
STRUCTURE_HEADER = struct.Struct("<4sHHHHIQQQ16s")
STRUCTURE_MAGIC = b"APST"


def valid_experiment(name: Any) -> bool:
    """Whether ``name`` can name an experiment: letters, digits, ``.``, ``_`` and ``-``, at most
    128 characters. No ``:``, spaces or glob characters, so every key name parses back."""
    return isinstance(name, str) and EXPERIMENT_PATTERN.fullmatch(name) is not None


@dataclasses.dataclass(frozen=True)
class ExperimentKeys:
    """The Redis names of one experiment."""

    experiment: str

    @property
    def structure(self) -> str:
        return f"{KEY_PREFIX}:{self.experiment}:structure"

    @property
    def params(self) -> str:
        return f"{KEY_PREFIX}:{self.experiment}:params"

    @property
    def metrics(self) -> str:
        return f"{KEY_PREFIX}:{self.experiment}:metrics"

    @property
    def events(self) -> str:
        return f"{KEY_PREFIX}:{self.experiment}:events"

    @property
    def readers(self) -> str:
        """The channel a parameter reader subscribes to: the trainer counts its subscribers and
        sends the parameters only while there are some."""
        return f"{KEY_PREFIX}:{self.experiment}:readers"


def experiment_from_structure_key(key: bytes) -> Optional[str]:
    """The experiment a ``...:structure`` key belongs to, or None for a key that is not ours."""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return None
    prefix, suffix = f"{KEY_PREFIX}:", ":structure"
    if not (text.startswith(prefix) and text.endswith(suffix)):
        return None
    name = text[len(prefix):-len(suffix)]
    return name if valid_experiment(name) else None


def dtype_code(dtype: np.dtype) -> Optional[int]:
    """The wire code of a parameter dtype, or None if it cannot travel."""
    return _DTYPE_CODES.get(np.dtype(dtype).newbyteorder("="))


def run_hex(run_id: int) -> str:
    """How a run id is written in JSON and notifications."""
    return f"{run_id:016x}"


def event_kind(data: Any) -> str:
    """The first word of a notification (``structure``, ``update``, ``metrics``), or ``""``."""
    if isinstance(data, (bytes, bytearray)):
        return bytes(data[:16]).split(b" ", 1)[0].decode("ascii", "replace")
    return ""


@dataclasses.dataclass(frozen=True, order=True)
class RunKey:
    """Orders trainer sessions: a later start wins; the random id only breaks exact ties.

    Both fields are inside the signature of every structure and update, so an attacker without the
    secret can replay an old run's values but cannot make them look newer.
    """

    started_ns: int
    run_id: int


#: lower than every real run
NO_RUN = RunKey(0, 0)


class _OfRun:
    """A header or value that names the trainer session that made it."""

    run_id: int
    run_started_ns: int

    @property
    def run(self) -> RunKey:
        """The trainer session that made it (verified only where the value was)."""
        return RunKey(self.run_started_ns, self.run_id)


# ---------------------------------------------------------------------------------- updates


def update_bytes(count: int, dtype: np.dtype) -> int:
    """Total size of an update value for ``count`` parameters of ``dtype``."""
    return UPDATE_HEADER.size + count * np.dtype(dtype).itemsize + TAG_BYTES


def withheld_bytes() -> int:
    """Total size of an update value whose parameters are withheld (``FLAG_WITHHELD``)."""
    return UPDATE_HEADER.size + TAG_BYTES


def seal_update(buffer: bytearray,
                key: Optional[bytes],
                experiment: str,
                *,
                run_id: int,
                number: int,
                iteration: Optional[int],
                max_path_length: int,
                count: int,
                dtype: np.dtype,
                published_at: float,
                structure_id: bytes,
                run_started_ns: int = 0,
                withheld: bool = False) -> None:
    """Write the header and the tag around parameters already copied into ``buffer``.

    ``buffer`` is ``update_bytes(count, dtype)`` long, parameters at offset
    ``UPDATE_HEADER.size``. Signing happens in place so the parameters are never copied again.
    ``withheld``: ``buffer`` is ``withheld_bytes()`` long, and holds the header and tag alone.
    """
    flags = (FLAG_SIGNED if key is not None else 0) | (FLAG_WITHHELD if withheld else 0)
    UPDATE_HEADER.pack_into(buffer, 0, UPDATE_MAGIC, WIRE_VERSION, flags, UPDATE_HEADER.size,
                            dtype_code(dtype), 0, run_id, run_started_ns, number,
                            -1 if iteration is None else iteration, max_path_length, count,
                            published_at, structure_id)
    view = memoryview(buffer)
    view[-TAG_BYTES:] = compute_tag(key, b"update", experiment, view[:-TAG_BYTES])


@dataclasses.dataclass(frozen=True)
class UpdateHead(_OfRun):
    """The header of an update, as read (not yet verified)."""

    signed: bool
    run_id: int
    number: int
    iteration: Optional[int]
    max_path_length: int
    count: int
    dtype: np.dtype
    published_at: float
    structure_id: bytes
    run_started_ns: int = 0
    #: the parameters are withheld (``FLAG_WITHHELD``): nobody read them when it was sent
    withheld: bool = False

    @property
    def total(self) -> int:
        """The whole value's length, as the header states it."""
        return withheld_bytes() if self.withheld else update_bytes(self.count, self.dtype)


def parse_update_head(value: bytes) -> UpdateHead:
    """Parse the fixed header (the value's first ``UPDATE_HEADER.size`` bytes are enough);
    ``PayloadRejected`` if it is not one of ours."""
    if len(value) < UPDATE_HEADER.size:
        raise PayloadRejected(f"the update is truncated: {len(value)} bytes, shorter than a "
                              "header")
    (magic, version, flags, header_len, code, _, run_id, run_started_ns, number, iteration,
     max_path_length, count, published_at, structure_id) = UPDATE_HEADER.unpack_from(value, 0)
    _check_format("update", magic == UPDATE_MAGIC, version, header_len == UPDATE_HEADER.size)
    if code not in _DTYPES:
        raise PayloadRejected(f"the update has an unknown dtype code {code}")
    if iteration < -1 or max_path_length < 1 or not math.isfinite(published_at):
        raise PayloadRejected("the update's header holds impossible values")
    return UpdateHead(bool(flags & FLAG_SIGNED), run_id, number,
                      None if iteration == -1 else iteration, max_path_length, count, _DTYPES[code],
                      published_at, structure_id, run_started_ns, bool(flags & FLAG_WITHHELD))


@dataclasses.dataclass(frozen=True)
class Expected:
    """What a viewer knows from the structure it loaded, to hold each update against."""

    structure_id: bytes
    size: int
    dtype: str  # "float32" | "float64"
    #: the run of the structure loaded: updates of older runs are refused
    run: RunKey = NO_RUN


class StructureMismatch(Exception):
    """A well-formed update made for another structure (the trainer restarted with another
    policy); the viewer reloads the structure rather than treating this as an attack."""

    def __init__(self, structure_id: bytes) -> None:
        super().__init__(structure_id.hex())
        self.structure_id = structure_id


def open_update(value: bytes, verifier: Verifier, experiment: str,
                expected: Optional[Expected]) -> Tuple[UpdateHead, Optional[ParamUpdate]]:
    """Verify an update value and return its header and a private copy of its parameters (None
    where they are withheld).

    Raises ``PayloadRejected`` (with the reason) or ``StructureMismatch``.
    """
    head = parse_update_head(value)
    stated = "its header alone" if head.withheld else f"{head.count} parameters"
    check_length("update", len(value), head.total, f"{stated} ({head.total} bytes)")
    view = memoryview(value)
    verifier.check(head.signed, view[-TAG_BYTES:], b"update", experiment, view[:-TAG_BYTES])
    if expected is not None:
        if head.structure_id != expected.structure_id:
            raise StructureMismatch(head.structure_id)
        if head.count != expected.size or head.dtype != np.dtype(expected.dtype):
            raise PayloadRejected(
                f"the update has {head.count} {head.dtype.name} parameters, but the structure "
                f"says {expected.size} {expected.dtype}")
    if head.withheld:
        return head, None
    params = np.frombuffer(value, head.dtype, head.count, UPDATE_HEADER.size)
    # A private, native-order, writable copy: the policy may keep or modify it.
    params = params.astype(head.dtype.newbyteorder("="), copy=True)
    return head, ParamUpdate(head.number, params, head.iteration, head.max_path_length)


# -------------------------------------------------------------------------------- structure


@dataclasses.dataclass(frozen=True)
class Structure(_OfRun):
    """A verified structure: what the trainer said about it and the pickled ``WorkerConfig``."""

    meta: Dict[str, Any]
    body: bytes
    run_id: int
    structure_id: bytes
    signed: bool
    run_started_ns: int = 0

    def expected(self) -> Expected:
        """What every update for this structure must match."""
        return Expected(self.structure_id, int(self.meta["size"]), str(self.meta["dtype"]),
                        self.run)


def structure_id_of(body: bytes) -> bytes:
    """A structure's id: the first 16 bytes of the SHA-256 of its pickled config."""
    return compute_tag(None, b"structure-id", "", body)[:16]


def seal_structure(key: Optional[bytes], experiment: str, run_id: int, run_started_ns: int,
                   meta: Dict[str, Any], body: bytes) -> Tuple[bytes, bytes]:
    """The structure value and its id. ``run_started_ns``: the run's start (Unix nanoseconds),
    which orders runs for viewers (see ``RunKey``)."""
    meta_bytes = json.dumps(meta, sort_keys=True).encode("utf-8")
    structure_id = structure_id_of(body)
    header = STRUCTURE_HEADER.pack(STRUCTURE_MAGIC, WIRE_VERSION,
                                   FLAG_SIGNED if key is not None else 0, STRUCTURE_HEADER.size, 0,
                                   len(meta_bytes), len(body), run_id, run_started_ns, structure_id)
    tag = compute_tag(key, b"structure", experiment, header, meta_bytes, body)
    return b"".join((header, meta_bytes, body, tag)), structure_id


@dataclasses.dataclass(frozen=True)
class StructureHead(_OfRun):
    """A structure's header and meta, readable without the body (for ``list``)."""

    signed: bool
    meta_len: int
    body_len: int
    run_id: int
    run_started_ns: int
    structure_id: bytes

    @property
    def total(self) -> int:
        """The whole value's length, as the header states it."""
        return STRUCTURE_HEADER.size + self.meta_len + self.body_len + TAG_BYTES


def parse_structure_head(prefix: bytes) -> StructureHead:
    """Parse the fixed header at the start of a structure value."""
    if len(prefix) < STRUCTURE_HEADER.size:
        raise PayloadRejected(f"the structure is truncated: {len(prefix)} bytes, shorter than a "
                              "header")
    (magic, version, flags, header_len, _, meta_len, body_len, run_id, run_started_ns,
     structure_id) = STRUCTURE_HEADER.unpack_from(prefix, 0)
    _check_format("structure", magic == STRUCTURE_MAGIC, version,
                  header_len == STRUCTURE_HEADER.size)
    if meta_len > MAX_META_BYTES:
        raise PayloadRejected(f"the structure's description is oversized ({meta_len} bytes)")
    return StructureHead(bool(flags & FLAG_SIGNED), meta_len, body_len, run_id, run_started_ns,
                         structure_id)


def _check_format(what: str, magic_ok: bool, version: int, header_ok: bool) -> None:
    if not magic_ok:
        raise PayloadRejected(f"the value is not an async_plotter {what} (wrong magic bytes)")
    if version != WIRE_VERSION or not header_ok:
        raise PayloadRejected(f"the {what} uses wire format version {version}; this viewer "
                              f"reads version {WIRE_VERSION} (upgrade async_plotter on both ends)")


def check_length(what: str, length: int, total: int, stated: str) -> None:
    """``PayloadRejected`` unless a value is as long as its header states."""
    if length != total:
        problem = "truncated" if length < total else "longer than its header says"
        raise PayloadRejected(f"the {what} is {problem}: {length} bytes, its header says {stated}")


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(raw: bytes) -> int:
    """How deeply ``raw`` nests arrays and objects (strings skipped), without parsing it.

    Python's ``json`` recurses once per level, so 60,000 ``[`` raise ``RecursionError``; checking
    first keeps an unverified description from crashing its reader.
    """
    depth = deepest = 0
    for bracket in _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS):
        depth += 1 if bracket in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def loads_bounded(raw: bytes, limit: int, what: str) -> Any:
    """``json.loads`` of at most ``limit`` bytes and ``MAX_JSON_DEPTH`` levels, else
    ``PayloadRejected`` naming ``what``."""
    if len(raw) > limit:
        raise PayloadRejected(f"{what} is oversized ({len(raw)} bytes)")
    if json_depth(raw) > MAX_JSON_DEPTH:
        raise PayloadRejected(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise PayloadRejected(f"{what} is not JSON: {error}") from None


#: the structure's description field that names the iteration a run resumes after (a run
#: resumed from its snapshot: ``serve`` shows it and the runs before it as one curve)
RESUMES_AFTER = "resumes_after"


def resumed_after(meta: Optional[Dict[str, Any]]) -> Optional[int]:
    """The iteration a run's structure says it resumes after; None for a run that resumes
    nothing (or a value that is not an iteration)."""
    after = (meta or {}).get(RESUMES_AFTER)
    if isinstance(after, int) and not isinstance(after, bool) and after >= 0:
        return after
    return None


def parse_meta(raw: bytes) -> Dict[str, Any]:
    """The JSON description after a structure header (safe to read unverified: it is not code)."""
    meta = loads_bounded(raw, MAX_META_BYTES, "the structure's description")
    if not isinstance(meta, dict):
        raise PayloadRejected("the structure's description is not a JSON object")
    return meta


def open_structure(value: bytes, verifier: Verifier, experiment: str) -> Structure:
    """Verify a structure value. Its body is still a pickle: load it only after this passes."""
    head = parse_structure_head(value)
    check_length("structure", len(value), head.total, str(head.total))
    view = memoryview(value)
    meta_end = STRUCTURE_HEADER.size + head.meta_len
    body_end = meta_end + head.body_len
    verifier.check(head.signed, view[body_end:], b"structure", experiment,
                   view[:STRUCTURE_HEADER.size], view[STRUCTURE_HEADER.size:meta_end],
                   view[meta_end:body_end])
    body = bytes(view[meta_end:body_end])
    if structure_id_of(body) != head.structure_id:
        raise PayloadRejected("the structure's id does not match its contents")
    meta = parse_meta(bytes(view[STRUCTURE_HEADER.size:meta_end]))
    size, dtype = meta.get("size"), meta.get("dtype")
    if (not isinstance(size, int) or isinstance(size, bool) or size < 0
            or dtype not in ("float32", "float64")
            or update_bytes(size, np.dtype(dtype)) > MAX_VALUE_BYTES):
        raise PayloadRejected(f"the structure describes impossible parameters: size={size!r}, "
                              f"dtype={dtype!r}")
    return Structure(meta, body, head.run_id, head.structure_id, head.signed, head.run_started_ns)


# ---------------------------------------------------------------------------------- metrics


@dataclasses.dataclass(frozen=True)
class MetricsEntry:
    """One verified ``update_plot(..., metrics=...)`` call."""

    run_id: int
    seq: int
    iteration: Optional[int]
    metrics: Dict[str, float]


def metrics_payload(run_id: int, seq: int, iteration: Optional[int], metrics: Dict[str, float],
                    now: float) -> bytes:
    """The JSON of one metrics entry (the writer checks its size against ``MAX_METRICS_BYTES``)."""
    return json.dumps({
        "run": run_hex(run_id),
        "seq": seq,
        "iteration": iteration,
        "metrics": metrics,
        "time": now
    }).encode("utf-8")


def seal_metrics(key: Optional[bytes], experiment: str, payload: bytes) -> Dict[bytes, bytes]:
    """The stream entry's fields."""
    return {
        b"p": payload,
        b"s": b"1" if key is not None else b"0",
        b"t": compute_tag(key, b"metrics", experiment, payload)
    }


def open_metrics(fields: Dict[bytes, bytes], verifier: Verifier, experiment: str) -> MetricsEntry:
    """Verify and parse one stream entry; ``PayloadRejected`` if anything is off."""
    payload, signed, tag = fields.get(b"p"), fields.get(b"s"), fields.get(b"t")
    if (not isinstance(payload, bytes) or signed not in (b"0", b"1") or not isinstance(tag, bytes)
            or len(tag) != TAG_BYTES):
        raise PayloadRejected("the metrics entry lacks its fields")
    if len(payload) > MAX_METRICS_BYTES:
        raise PayloadRejected(f"the metrics entry is oversized ({len(payload)} bytes)")
    verifier.check(signed == b"1", tag, b"metrics", experiment, payload)
    data = loads_bounded(payload, MAX_METRICS_BYTES, "the metrics entry")
    try:
        run_id = int(data["run"], 16)
        seq = data["seq"]
        iteration = data["iteration"]
        metrics = data["metrics"]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise PayloadRejected(f"the metrics entry is malformed: {error!r}") from None
    if (not isinstance(seq, int) or not (iteration is None or isinstance(iteration, int))
            or not isinstance(metrics, dict) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                for k, v in metrics.items())):
        raise PayloadRejected("the metrics entry holds values of the wrong types")
    return MetricsEntry(run_id, seq, iteration, {k: float(v) for k, v in metrics.items()})
