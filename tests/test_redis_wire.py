"""The Redis channel's byte format, signatures and argument checks (no server needed)."""
import logging

import numpy as np
import pytest

from async_plotter.channel.redis.writer import check_channel_arguments
from async_plotter.channel.redis.urls import redact
from async_plotter.channel.redis.wire import (UPDATE_HEADER, Expected, StructureMismatch,
                                              metrics_payload, open_metrics, open_structure,
                                              open_update, RunKey, seal_metrics, seal_structure,
                                              seal_update, structure_id_of, update_bytes)
from async_plotter.channel.redis.signing import PayloadRejected, Verifier, read_secret_file
from async_plotter.errors import InvalidArgumentError

KEY = b"k" * 32
STRUCTURE_ID = structure_id_of(b"body")


def _update(key=KEY,
            values=(1.0, 2.0, 3.0),
            dtype=np.float32,
            number=4,
            iteration=3,
            experiment="exp"):
    params = np.asarray(values, dtype)
    buffer = bytearray(update_bytes(params.size, dtype))
    np.frombuffer(buffer,
                  np.dtype(dtype).newbyteorder("<"), params.size, UPDATE_HEADER.size)[:] = params
    seal_update(buffer,
                key,
                experiment,
                run_id=77,
                number=number,
                iteration=iteration,
                max_path_length=9,
                count=params.size,
                dtype=np.dtype(dtype),
                published_at=1.5,
                structure_id=STRUCTURE_ID)
    return bytes(buffer)


def _open(value, key=KEY, trust=False, experiment="exp", expected=None):
    return open_update(value, Verifier(key, trust), experiment, expected)


def test_update_round_trip_returns_a_private_writable_copy():
    head, update = _open(_update(), expected=Expected(STRUCTURE_ID, 3, "float32"))
    assert (update.number, update.iteration, update.max_path_length) == (4, 3, 9)
    assert head.run_id == 77 and head.published_at == 1.5 and head.signed
    np.testing.assert_array_equal(update.params, [1, 2, 3])
    assert update.params.dtype == np.float32 and update.params.flags.writeable
    _, update64 = _open(_update(dtype=np.float64, iteration=None))
    assert update64.params.dtype == np.float64 and update64.iteration is None


@pytest.mark.parametrize("damage, reason", [
    (lambda v: v[:-40], "truncated"),
    (lambda v: v + b"\0" * 4, "longer than its header says"),
    (lambda v: v[:UPDATE_HEADER.size - 1], "truncated"),
    (lambda v: b"XXXX" + v[4:], "wrong magic"),
    (lambda v: v[:UPDATE_HEADER.size] + b"\x01" + v[UPDATE_HEADER.size + 1:], "signature"),
    (lambda v: v[:-1] + bytes([v[-1] ^ 1]), "signature"),
    (lambda v: b"", "truncated"),
    (lambda v: b"\xff" * 500, "wrong magic"),
])
def test_damaged_updates_are_rejected_with_a_reason(damage, reason):
    with pytest.raises(PayloadRejected, match=reason):
        _open(damage(_update()))


def test_wrong_secret_and_other_experiment_are_forgeries():
    with pytest.raises(PayloadRejected, match="another secret"):
        _open(_update(), key=b"w" * 32)
    with pytest.raises(PayloadRejected, match="another secret"):
        _open(_update(experiment="exp"), experiment="other")


def test_unsigned_rules():
    unsigned = _update(key=None)
    with pytest.raises(PayloadRejected, match="unsigned"):
        _open(unsigned)  # a viewer with a secret wants a signature
    _open(unsigned, key=None, trust=True)
    # A key present means signatures are required: trusting unsigned payloads as well is a
    # contradiction, refused when the rules are made, not silently honoured.
    with pytest.raises(ValueError, match="conflicts"):
        _open(unsigned, key=KEY, trust=True)
    # No key and no explicit trust: nothing is accepted, signed or not.
    with pytest.raises(PayloadRejected, match="no secret"):
        _open(unsigned, key=None, trust=False)
    with pytest.raises(PayloadRejected, match="checksum"):
        _open(unsigned[:-1] + bytes([unsigned[-1] ^ 1]), key=None, trust=True)
    with pytest.raises(PayloadRejected, match="no secret"):
        _open(_update(), key=None, trust=False)


def test_size_and_structure_are_held_against_the_loaded_structure():
    with pytest.raises(PayloadRejected, match="the structure says 4 float32"):
        _open(_update(), expected=Expected(STRUCTURE_ID, 4, "float32"))
    with pytest.raises(StructureMismatch):
        _open(_update(), expected=Expected(structure_id_of(b"other"), 3, "float32"))


def test_structure_round_trip_and_tampering():
    meta = {"size": 3, "dtype": "float32", "env": "CartPole-v1"}
    value, structure_id = seal_structure(KEY, "exp", 5, 1_000, meta, b"pickled config")
    structure = open_structure(value, Verifier(KEY, False), "exp")
    assert structure.body == b"pickled config" and structure.structure_id == structure_id
    assert structure.expected() == Expected(structure_id, 3, "float32", RunKey(1_000, 5))
    tampered = value.replace(b"pickled", b"PICKLED")
    with pytest.raises(PayloadRejected, match="signature"):
        open_structure(tampered, Verifier(KEY, False), "exp")
    with pytest.raises(PayloadRejected, match="signature"):
        open_structure(value, Verifier(b"w" * 32, False), "exp")
    with pytest.raises(PayloadRejected, match="truncated"):
        open_structure(value[:-3], Verifier(KEY, False), "exp")
    absurd, _ = seal_structure(KEY, "exp", 5, 1_000, {"size": 10**12, "dtype": "float32"}, b"x")
    with pytest.raises(PayloadRejected, match="impossible"):
        open_structure(absurd, Verifier(KEY, False), "exp")


def test_metrics_round_trip_and_tampering():
    fields = seal_metrics(KEY, "exp", metrics_payload(9, 2, 11, {"AverageReturn": 1.5}, 0.0))
    entry = open_metrics(fields, Verifier(KEY, False), "exp")
    assert (entry.run_id, entry.seq, entry.iteration, entry.metrics) == (9, 2, 11, {
        "AverageReturn": 1.5
    })
    forged = {**fields, b"p": fields[b"p"].replace(b"1.5", b"9.5")}
    with pytest.raises(PayloadRejected, match="signature"):
        open_metrics(forged, Verifier(KEY, False), "exp")
    with pytest.raises(PayloadRejected, match="lacks"):
        open_metrics({b"junk": b"1"}, Verifier(KEY, False), "exp")


@pytest.mark.parametrize("channel, experiment, secret, message", [
    ("http://host:6379/0", "e", None, "scheme 'http'"),
    ("host:6379", "e", None, "scheme"),
    (6379, "e", None, "must be a URL string"),
    ("redis://host:abc/0", "e", None, "not a valid URL"),
    ("redis:///0", "e", None, "names no host"),
    ("redis://host:6379/x", "e", None, "database"),
    ("redis://host:6379/0?bogus=1", "e", None, "not a valid Redis URL"),
    ("redis://host:6379/0", None, None, "experiment is required"),
    ("redis://host:6379/0", 7, None, "experiment must be a str"),
    ("redis://host:6379/0", "a b", None, "not a valid name"),
    ("redis://host:6379/0", "a:b", None, "not a valid name"),
    ("redis://host:6379/0", "e", 5, "secret must be a str, bytes or None"),
    ("redis://host:6379/0", "e", "", "must not be empty"),
])
def test_channel_argument_errors(channel, experiment, secret, message):
    with pytest.raises(InvalidArgumentError, match=message):
        check_channel_arguments(channel, experiment, secret)


def test_missing_secret_warns_once_and_secret_from_environment(monkeypatch, caplog):
    monkeypatch.delenv("ASYNC_PLOTTER_SECRET", raising=False)
    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        check_channel_arguments("rediss://:pw@host:6380/2", "swimmer-7", None)
    assert [r.message for r in caplog.records if "--trust-unsigned" in r.message]
    caplog.clear()
    monkeypatch.setenv("ASYNC_PLOTTER_SECRET", "s" * 32)
    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        check_channel_arguments("redis://host:6379/0", "swimmer-7", None)
    assert not caplog.records


def test_passwords_never_reach_log_lines():
    assert redact("redis://:hunter2@host:6379/0") == "redis://:***@host:6379/0"
    assert redact("rediss://user:hunter2@[::1]:6380/1") == "rediss://user:***@[::1]:6380/1"
    assert redact("redis://host:6379/0") == "redis://host:6379/0"


def test_secret_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text("  abc\n")
    assert read_secret_file(str(path)) == b"abc"
    path.write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        read_secret_file(str(path))
    with pytest.raises(ValueError, match="cannot read"):
        read_secret_file(str(tmp_path / "missing"))
