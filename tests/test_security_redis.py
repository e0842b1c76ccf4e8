"""Hostile neighbours on the Redis server (issue 12): someone who can write to it, without the secret.

Everything runs against a real redis-server; the attacker is a plain redis-py client writing keys
and notifications. Bounds are generous: these must hold on a loaded 2-core machine.
"""
import logging
import subprocess
import time

import numpy as np
import pytest
import redis

from async_plotter.channel.redis.writer import REASSERT_INTERVAL, RedisWriter
from async_plotter.channel.redis.reader import RedisReader
from async_plotter.channel.redis.watcher import ExperimentWatcher
from async_plotter.channel.redis.wire import (STRUCTURE_HEADER, STRUCTURE_MAGIC, WIRE_VERSION,
                                              ExperimentKeys, seal_structure)
from async_plotter.channel.redis.signing import Verifier
from async_plotter.cli import main
from tests.conftest import wait_for
from tests.redis_helpers import child_env, viewer_command
from tests.redis_server import redis_server  # noqa: F401
from tests.test_redis_channel import SECRET, _config

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def closing():
    """Registers things with a ``close``/``stop`` method, closed at the test's end."""
    made = []
    yield lambda thing: made.append(thing) or thing
    for thing in reversed(made):
        (getattr(thing, "close", None) or thing.stop)()


def _writer(url, stats=None, size=1000, secret=SECRET, experiment="exp"):
    return RedisWriter(url, experiment, _config(), size, np.float32, secret,
                       {} if stats is None else stats)


def _publish(writer, value, size=1000):
    return writer.publish(np.full(size, value, np.float32), None, 5)


def _sent(writer, stats, count):
    wait_for(lambda: stats["published"] >= count and not writer._slot.dirty,
             10,
             message=f"{count} updates sent")


def _watcher(url, experiment="exp", verifier=None):
    structures, metrics = [], []
    watcher = ExperimentWatcher(url, experiment, verifier or Verifier(SECRET), structures.append,
                                metrics.append)
    watcher.start()
    return watcher, structures, metrics


def _net_out(client):
    """Bytes the server has sent to all its clients so far."""
    return client.info("stats")["total_net_output_bytes"]


def _rejections(caplog, text):
    return [r for r in caplog.records if "rejected" in r.getMessage() and text in r.getMessage()]


# ---------------------------------------------------------------------- 1. replay across runs


def test_an_earlier_runs_structure_is_refused_and_the_trainer_takes_its_key_back(
        redis_server, closing, caplog):
    client = closing(redis.Redis.from_url(redis_server.url))
    keys = ExperimentKeys("exp")
    old_stats = {}
    old = _writer(redis_server.url, old_stats)
    _publish(old, 1.0)
    _sent(old, old_stats, 1)
    old_structure = client.get(keys.structure)
    old.close()

    stats = {}
    new = closing(_writer(redis_server.url, stats))
    assert new.run_started_ns > old.run_started_ns
    _publish(new, 2.0)
    _sent(new, stats, 1)
    watcher, structures, _ = _watcher(redis_server.url)
    closing(watcher)
    wait_for(lambda: structures, 10, message="the new run's structure")
    assert structures[-1].run_id == new.run_id

    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        client.set(keys.structure, old_structure)  # a signed, genuine, but old structure
        client.publish(keys.events, b"structure")
        wait_for(lambda: _rejections(caplog, "earlier trainer run"),
                 10,
                 message="the replay to be refused")
    assert [s.run_id for s in structures] == [new.run_id], "the viewer went back to an old run"
    # The running trainer notices the foreign value and writes its own back.
    wait_for(lambda: client.get(keys.structure) != old_structure,
             4 * REASSERT_INTERVAL + 10,
             message="the trainer to re-assert its structure")
    # A viewer that starts now, or one that loaded the replay before the trainer took it back,
    # ends on the new run.
    late, late_structures, _ = _watcher(redis_server.url)
    closing(late)
    wait_for(lambda: late_structures and late_structures[-1].run_id == new.run_id,
             10,
             message="a late viewer to follow the new run")
    assert len(_rejections(caplog, "earlier trainer run")) == 1, "one log line, not a flood"


def test_an_earlier_update_or_an_earlier_runs_update_is_refused(redis_server, closing, caplog):
    client = closing(redis.Redis.from_url(redis_server.url))
    keys = ExperimentKeys("exp")
    old_stats = {}
    old = _writer(redis_server.url, old_stats)
    _publish(old, -1.0)
    _sent(old, old_stats, 1)
    old_run_update = client.get(keys.params)  # same structure id (same config), earlier run
    old.close()

    stats = {}
    writer = closing(_writer(redis_server.url, stats))
    assert writer.expected.structure_id == old.expected.structure_id
    reader = closing(RedisReader(redis_server.url, "exp", SECRET, False, writer.expected))
    update_2 = None
    for number in range(11):
        _publish(writer, float(number))
        _sent(writer, stats, number + 1)
        if number == 2:
            update_2 = client.get(keys.params)
    wait_for(lambda: (reader.read_newest() or True) and reader.last_number == 10,
             10,
             message="update 10")
    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        for value, reason in ((update_2, "older than update 10"), (old_run_update,
                                                                   "earlier trainer run")):
            client.set(keys.params, value)
            client.publish(keys.events, b"update")
            wait_for(lambda: _rejections(caplog, reason), 10, message=f"'{reason}'")
            assert reader.wait(timeout=0.3) is None, "an old update was accepted"
    assert reader.last_number == 10
    # The trainer writes its newest update back, and a new one is taken as usual.
    wait_for(lambda: client.getrange(keys.params, 0, 0) and client.get(keys.params) not in
             (update_2, old_run_update),
             4 * REASSERT_INTERVAL + 10,
             message="the trainer to re-assert its newest update")
    _publish(writer, 11.0)
    update = reader.wait(timeout=10)
    assert update is not None and update.number == 11 and np.all(update.params == 11.0)


# ---------------------------------------------------------------------- 2. trust downgrade


def test_a_key_means_signatures_always_at_every_layer(redis_server, closing, caplog):
    with pytest.raises(ValueError, match="conflicts"):
        Verifier(SECRET, True)
    with pytest.raises(ValueError, match="conflicts"):
        RedisReader(redis_server.url, "exp", SECRET, True)

    stats = {}
    unsigned = closing(_writer(redis_server.url, stats, secret=None))
    _publish(unsigned, 3.0)
    _sent(unsigned, stats, 1)
    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        # No key and no explicit trust: nothing is taken, neither update nor structure.
        reader = closing(RedisReader(redis_server.url, "exp", None, False, unsigned.expected))
        watcher, structures, _ = _watcher(redis_server.url, verifier=Verifier(None))
        closing(watcher)
        wait_for(lambda: len(_rejections(caplog, "not told to trust")) >= 2,
                 10,
                 message="both refusals")
        keyed = closing(RedisReader(redis_server.url, "exp", SECRET, False, unsigned.expected))
        wait_for(lambda: _rejections(caplog, "requires a signature"), 10, message="a refusal")
        # A viewer with a secret refuses an unsigned structure from its header alone.
        keyed_watcher, keyed_structures, _ = _watcher(redis_server.url)
        closing(keyed_watcher)
        wait_for(lambda: _rejections(caplog, "structure is unsigned"), 10, message="its refusal")
    assert reader.wait(timeout=0.3) is None and keyed.wait(timeout=0.1) is None
    assert not structures and not keyed_structures
    assert keyed_watcher.structure_downloads == 0 and keyed_watcher.structure_bytes == 0
    # Only an explicit trust_unsigned, without a key, takes it.
    trusting = closing(RedisReader(redis_server.url, "exp", None, True, unsigned.expected))
    assert trusting.wait(timeout=10) is not None

    # The command line names the conflict and exits 2 before connecting anywhere.
    result = subprocess.run(
        viewer_command() +
        ["view", "redis://127.0.0.1:1/0", "-e", "x", "--video-dir", "/tmp", "--trust-unsigned"],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(ASYNC_PLOTTER_SECRET="s" * 32))
    assert result.returncode == 2
    assert "--trust-unsigned conflicts with the secret" in result.stderr


# ---------------------------------------------------------------------- 3. unbounded downloads


def test_huge_metrics_entries_are_never_downloaded(redis_server, closing, caplog):
    client = closing(redis.Redis.from_url(redis_server.url))
    keys = ExperimentKeys("exp")
    stats = {}
    writer = closing(_writer(redis_server.url, stats))
    _publish(writer, 0.0)
    writer.post_metrics(0, {"AverageReturn": 1.0})
    wait_for(lambda: client.exists(keys.metrics), 10, message="the metrics stream")
    blob = b"x" * (16 * 1024 * 1024)
    for _ in range(3):  # 48 MiB in the stream
        client.xadd(keys.metrics, {b"p": blob, b"s": b"1", b"t": b"0" * 32})
    writer.post_metrics(1, {"AverageReturn": 2.0})
    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        before = _net_out(client)
        watcher, _, metrics = _watcher(redis_server.url)
        closing(watcher)
        wait_for(lambda: len(metrics) == 2, 10, message="the two genuine entries")
        for _ in range(3):  # reconnects re-read nothing they have read
            client.client_kill_filter(_type="pubsub")
            time.sleep(0.5)
            client.publish(keys.events, b"metrics")
        time.sleep(1.0)
        sent = _net_out(client) - before
    assert [m.metrics["AverageReturn"] for m in metrics] == [1.0, 2.0]
    assert _rejections(caplog, "oversized")
    assert sent < 2 * 1024 * 1024, f"the viewer downloaded {sent / 2**20:.1f} MiB"


def _fake_structure(size, run_started_ns):
    """A structure value of ``size`` bytes claiming to be a newer, signed run (the tag is
    garbage: it will not verify)."""
    body_len = size - STRUCTURE_HEADER.size - 2 - 32
    header = STRUCTURE_HEADER.pack(STRUCTURE_MAGIC, WIRE_VERSION, 1, STRUCTURE_HEADER.size, 0, 2,
                                   body_len, 12345, run_started_ns, b"\0" * 16)
    return header + b"{}" + b"\0" * body_len + b"\1" * 32


def test_a_notification_storm_downloads_nothing_twice(redis_server, closing, caplog):
    client = closing(redis.Redis.from_url(redis_server.url))
    keys = ExperimentKeys("exp")
    size = 1_000_000  # 4 MB per update
    stats = {}
    writer = closing(_writer(redis_server.url, stats, size=size))
    reader = closing(RedisReader(redis_server.url, "exp", SECRET, False, writer.expected))
    watcher, structures, _ = _watcher(redis_server.url)
    closing(watcher)
    _publish(writer, 1.0, size)
    assert reader.wait(timeout=10) is not None
    wait_for(lambda: structures, 10, message="the structure")
    fake = _fake_structure(32 * 1024 * 1024, writer.run_started_ns + 10**9)
    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        downloads = watcher.structure_downloads  # the genuine one
        client.set(keys.structure, fake)
        before = _net_out(client)
        for _ in range(100):  # spread out, so that the subscriber cannot coalesce them
            client.publish(keys.events, b"structure")
            client.publish(keys.events, b"update")
            time.sleep(0.01)
        wait_for(lambda: _rejections(caplog, "signature"), 10, message="the fake's rejection")
        time.sleep(0.5)
        sent = _net_out(client) - before
    assert watcher.structure_downloads - downloads <= 1, watcher.structure_downloads
    # One download of the fake, probes of ~100 bytes for the rest; not 100 x (32 + 4) MB.
    assert sent < 40 * 1024 * 1024, f"the viewer downloaded {sent / 2**20:.1f} MiB"
    assert [s.run_id for s in structures] == [writer.run_id]


# ---------------------------------------------------------------------- 4. list


def _raw_structure(meta_bytes):
    header = STRUCTURE_HEADER.pack(STRUCTURE_MAGIC, WIRE_VERSION, 1, STRUCTURE_HEADER.size, 0,
                                   len(meta_bytes), 1, 1, 1, b"\0" * 16)
    return header + meta_bytes + b"x" + b"\0" * 32


def test_list_escapes_terminal_sequences_and_survives_odd_metadata(redis_server, closing, capsys):
    client = closing(redis.Redis.from_url(redis_server.url))
    hostile = {
        "size": 8,
        "dtype": "float32",
        "env": "\x1b]0;owned\x07\x1b[2J\x1b[31mCartPole",
        "policy": "right\u202eto-left",
        "host": "a" * 5000,
    }
    value, _ = seal_structure(None, "escape", 1, 1, hostile, b"body")
    client.set("async_plotter:escape:structure", value)
    client.set("async_plotter:deep:structure", _raw_structure(b"[" * 60000))
    client.set("async_plotter:wide:structure", _raw_structure(b'{"env": "' + b"y" * 60000 + b'"}'))
    client.set("async_plotter:kinds:structure",
               _raw_structure(b'{"size": true, "dtype": [1, 2], "env": {"a": null}}'))
    assert main(["list", redis_server.url]) == 0
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b]0;owned\\x07" in out and "\\u202e" in out
    lines = {line.split()[0]: line for line in captured.out.splitlines()[1:]}
    assert set(lines) == {"escape", "deep", "wide", "kinds"}
    assert "unreadable" in lines["deep"] and "nests deeper" in lines["deep"]
    assert all(len(line) < 600 for line in captured.out.splitlines())
