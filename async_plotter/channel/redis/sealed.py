"""The sealed values of a run's states over Redis (``states.py``, ``returns.py``, ``live.py``),
and the run they are of (``RunTarget``): a header naming the run, the update and the
iteration, the payload, and a tag over both (HMAC-SHA256 under the shared secret, else a
checksum the viewer must be told to trust), as the parameters are sealed (``wire``,
``signing``). The kind (``b"model"``, ``b"recording"``, ...) enters the tag, so a value of one
kind cannot pass for another's.
"""
import dataclasses
import struct
import zlib
from typing import Optional, Tuple

from async_plotter.channel.redis.signing import TAG_BYTES, PayloadRejected, Verifier, compute_tag
from async_plotter.channel.redis.wire import check_length

#: the bytes of the MuJoCo model a viewer inflates
MAX_MODEL_BYTES = 64 * 1024 * 1024

# magic, version, flags, run id, run start (ns), update number (-1: the model), iteration
# (-1: none), payload length
_HEADER = struct.Struct("<4sHHQQqqQ")
_MAGIC = b"APRS"
# 2: recordings in their compact form
_VERSION = 2
_SIGNED = 1
#: the bytes before a sealed value's payload
HEADER_BYTES = _HEADER.size


@dataclasses.dataclass(frozen=True)
class RunTarget:
    """Where one run of a trainer publishes its states, and under which name, secret, run and
    expiry (``RedisWriter.run_target``): plain, picklable data, never part of the structure a
    viewer reads. The history's publisher here and the live episode's (``live.py``) take it."""

    url: str
    experiment: str
    secret: Optional[bytes]
    #: the trainer's run (id, start in ns), as its parameters carry
    run: Tuple[int, int]
    ttl_seconds: float
    #: the iteration this run resumes another's after (its snapshot's), or None: the runs
    #: before's curves then go on in this run's (``serve/run_chain.py``), and their history
    #: up to it in this run's (``history_chain.py``)
    resumes_after: Optional[int] = None

    @property
    def ttl_ms(self) -> int:
        return max(int(self.ttl_seconds * 1000), 1)


@dataclasses.dataclass(frozen=True)
class Sealed:
    """An opened value: whose run, which update, and what it holds."""

    run_id: int
    run_started_ns: int
    number: int
    iteration: Optional[int]
    payload: bytes


@dataclasses.dataclass(frozen=True)
class Header:
    """What a sealed value's header says, unverified (``peek_header``)."""

    run_id: int
    run_started_ns: int
    number: int
    iteration: Optional[int]
    signed: bool
    #: the payload's length in bytes
    length: int


def peek_header(value: bytes) -> Optional[Header]:
    """The header of ``value``, NOT verified (``open_sealed`` checks the rest; a trainer tidying
    its own experiment's keys reads it alone, ``history_chain.trim``); None if ``value`` has no
    header of this version."""
    if len(value) < _HEADER.size:
        return None
    magic, version, flags, run_id, started, number, iteration, length = _HEADER.unpack_from(value)
    if magic != _MAGIC or version != _VERSION:
        return None
    return Header(run_id, started, number, None if iteration < 0 else iteration,
                  bool(flags & _SIGNED), length)


def seal(key: Optional[bytes], kind: bytes, experiment: str, run: Tuple[int, int], number: int,
         iteration: Optional[int], payload: bytes) -> bytes:
    """``payload`` with its header and tag (``kind``: ``b"model"``, ``b"recording"``,
    ``b"return"`` or ``b"live"``: one kind's value cannot pass for another's)."""
    header = _HEADER.pack(_MAGIC, _VERSION, _SIGNED if key is not None else 0, run[0], run[1],
                          number, -1 if iteration is None else iteration, len(payload))
    return header + payload + compute_tag(key, kind, experiment, header, payload)


def open_sealed(value: bytes, verifier: Verifier, kind: bytes, experiment: str) -> Sealed:
    """Verify a sealed value; ``PayloadRejected`` naming what is wrong."""
    what = kind.decode()
    if len(value) < _HEADER.size + TAG_BYTES:
        raise PayloadRejected(f"the {what} is {len(value)} bytes, shorter than its header")
    head = peek_header(value)
    if head is None:
        raise PayloadRejected(f"the {what} is not in this version's format")
    check_length(what, len(value), _HEADER.size + head.length + TAG_BYTES,
                 f"{head.length} bytes of payload")
    view = memoryview(value)
    verifier.check(head.signed, view[-TAG_BYTES:], kind, experiment, view[:_HEADER.size],
                   view[_HEADER.size:-TAG_BYTES])
    return Sealed(head.run_id, head.run_started_ns, head.number, head.iteration,
                  bytes(view[_HEADER.size:-TAG_BYTES]))


def seal_model(target: RunTarget, mjb: bytes) -> bytes:
    """The run's model as published under its key: MJB through zlib (it is mostly zeros: 509 KB
    for Swimmer, 15 KB compressed), sealed as update -1; its iteration is the one the run
    resumes after (``history_chain``: a viewer keeps the earlier runs' history up to it)."""
    return seal(target.secret, b"model", target.experiment, target.run, -1, target.resumes_after,
                zlib.compress(mjb, 6))


def inflate_model(data: bytes, limit: int = MAX_MODEL_BYTES) -> bytes:
    """A published model's MJB from its ``zlib`` bytes, refused past ``limit`` bytes (a forged
    bomb stops there)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit)
    except zlib.error as error:
        raise PayloadRejected(f"the model is not zlib data ({error})") from error
    if inflater.unconsumed_tail or not inflater.eof:
        raise PayloadRejected(f"the model is over {limit} bytes, or cut short")
    return out
