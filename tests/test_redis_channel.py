"""The Redis channel against a real redis-server, trainer and worker ends in one process.

Cross-process behaviour (the ``async-plotter view`` command, Ctrl-C, a dying viewer) is in
``test_redis_viewer.py``.
"""
import itertools
import logging
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest
import redis

from async_plotter import Plotter
from async_plotter.channel.redis.writer import RedisWriter
from async_plotter.channel.redis.reader import RedisReader
from async_plotter.channel.redis.watcher import ExperimentWatcher
from async_plotter.channel.redis.wire import (UPDATE_HEADER, ExperimentKeys, open_structure,
                                              open_update, seal_update, update_bytes)
from async_plotter.channel.redis.signing import Verifier
from async_plotter.env.recipe import describe_env
from async_plotter.policy.adapters import adapter_for
from async_plotter.policy.recipe import describe_policy
from async_plotter.worker.config import WorkerConfig
from async_plotter.worker.parameters import ParameterLayout
from async_plotter.sinks.specs import VideoSpec
from tests.conftest import wait_for
from tests.policies import LinearPolicy
from tests.redis_server import RedisServer, find_redis_server, free_port, redis_server  # noqa: F401

SECRET = b"correct horse battery staple 123"
pytestmark = pytest.mark.timeout(60)


def _config() -> WorkerConfig:
    policy = LinearPolicy(4, 2)
    return WorkerConfig(env=describe_env("CartPole-v1"),
                        policy=describe_policy(policy, adapter_for(policy)),
                        max_path_length=5,
                        fps=1000,
                        deterministic=False,
                        quality="auto",
                        priority="idle",
                        frame_size=None,
                        mujoco_gl="egl",
                        seed=None,
                        parameters=ParameterLayout(8, np.dtype(np.float32))).with_sinks(
                            [VideoSpec("/trainer/only")])


class _Pair:
    """A writer and a reader of one experiment, closed by the test's end."""

    def __init__(self,
                 url,
                 size=1000,
                 secret=SECRET,
                 reader_secret=SECRET,
                 ttl=None,
                 experiment="exp",
                 start_reader=True):
        self.stats = {}
        self.size = size
        self.writer = RedisWriter(url,
                                  experiment,
                                  _config(),
                                  size,
                                  np.float32,
                                  secret,
                                  self.stats,
                                  ttl=ttl)
        self.url = url
        self.experiment = experiment
        self.reader_secret = reader_secret
        self.reader = self.open_reader() if start_reader else None

    def open_reader(self):
        self.reader = RedisReader(self.url, self.experiment, self.reader_secret, False,
                                  self.expected())
        return self.reader

    def expected(self):
        return self.writer.expected

    def publish(self, value, iteration=None):
        return self.writer.publish(np.full(self.size, value, np.float32), iteration, 5)

    def close(self):
        if self.reader is not None:
            self.reader.close()
        self.writer.close()


@pytest.fixture
def pairs():
    made = []
    yield lambda *args, **kwargs: made.append(_Pair(*args, **kwargs)) or made[-1]
    for pair in made:
        pair.close()


@pytest.mark.alone  # times publish(): 61.5 ms, bound 50, beside other tests and 2 busy processes
def test_newest_wins_across_many_quick_updates(redis_server, pairs):
    pair = pairs(redis_server.url, size=100_000)
    seen = []

    def follow():
        while not seen or seen[-1].number < 300:
            update = pair.reader.wait(timeout=5.0)
            assert update is not None, "the reader stopped getting updates"
            seen.append(update)

    follower = threading.Thread(target=follow)
    follower.start()
    worst = 0.0
    for value in range(301):
        started = time.perf_counter()
        pair.publish(value, iteration=value)
        worst = max(worst, time.perf_counter() - started)
    follower.join(20)
    numbers = [update.number for update in seen]
    assert numbers[-1] == 300 and numbers == sorted(set(numbers))
    for update in seen:  # never torn: every vector is one update's
        assert np.all(update.params == update.number) and update.iteration == update.number
    assert pair.stats["publish_replaced"] > 0, "a burst should be coalesced, not queued"
    assert pair.stats["published"] < 301
    assert worst < 0.05, f"publish() took {worst * 1e3:.1f} ms"
    assert pair.reader.wait(timeout=0.2) is None  # skipped updates are not queued


def test_viewer_first_and_trainer_first_get_the_newest_at_once(redis_server, pairs):
    reader = RedisReader(redis_server.url, "early", SECRET)
    try:
        assert reader.wait(timeout=0.3) is None  # nothing published yet: it just waits
        pair = pairs(redis_server.url, experiment="early", start_reader=False)
        started = time.monotonic()
        pair.publish(1.0)
        update = reader.wait(timeout=5.0)
        assert update is not None and update.number == 0 and time.monotonic() - started < 1.0
    finally:
        reader.close()
    for value in range(5):
        pair.publish(value)
    wait_for(lambda: pair.stats["published"] >= 2 and not pair.writer._slot.dirty,
             5,
             message="the writer to send its newest update")
    late = pair.open_reader()
    started = time.monotonic()
    update = late.wait(timeout=5.0)
    assert update.number == 5 and np.all(update.params == 4)
    assert time.monotonic() - started < 1.0, "a late viewer must not wait for the next update"


_NUMBERS = itertools.count(99)


def _sealed(pair, key=SECRET, count=None):
    """A well-formed update value for ``pair``'s experiment, signed with ``key``, claiming to be
    newer than anything the pair published (else the reader refuses it as old, unread)."""
    count = pair.size if count is None else count
    value = bytearray(update_bytes(count, np.float32))
    seal_update(value,
                key,
                pair.experiment,
                run_id=pair.writer.run_id,
                run_started_ns=pair.writer.run_started_ns,
                number=next(_NUMBERS),
                iteration=None,
                max_path_length=5,
                count=count,
                dtype=np.dtype(np.float32),
                published_at=0.0,
                structure_id=pair.expected().structure_id)
    return value


def _tampered(pair):
    value = _sealed(pair)
    value[UPDATE_HEADER.size + 10] ^= 0xFF
    return value


# kind -> (how to make the bad value, what the log line must say)
BAD_VALUES = {
    "forged": (lambda pair: _sealed(pair, key=b"not the secret, but long enough!"),
               "signature does not match"),
    "tampered": (_tampered, "signature does not match"),
    "truncated": (lambda pair: _sealed(pair)[:-100], "truncated"),
    "wrong size": (lambda pair: _sealed(pair, count=pair.size - 1), "the structure says"),
    "oversized": (lambda pair: b"\0" * (len(_sealed(pair)) + 1), "oversized"),
    "unsigned": (lambda pair: _sealed(pair, key=None), "unsigned"),
    "garbage": (lambda pair: b"hello, world" * 3, "truncated"),
}


def test_bad_payloads_are_rejected_and_the_reader_goes_on(redis_server, pairs, caplog):
    pair = pairs(redis_server.url)
    pair.publish(1.0)
    assert pair.reader.wait(timeout=5.0).number == 0
    client = redis.Redis.from_url(redis_server.url)
    keys = ExperimentKeys(pair.experiment)
    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        for kind, (make, reason) in BAD_VALUES.items():
            value = bytes(make(pair))
            before = pair.reader.rejected
            client.set(keys.params, value)
            client.publish(keys.events, b"update")
            wait_for(lambda: pair.reader.rejected > before, 5, message=f"{kind} to be rejected")
            assert pair.reader.wait(timeout=0.05) is None, f"{kind} value was accepted"
            assert any(reason in r.getMessage() for r in caplog.records
                       if "rejected" in r.getMessage()), f"no log line for {kind}"
        # Not even a string: the key holds a list.
        before = pair.reader.rejected
        client.delete(keys.params)
        client.rpush(keys.params, b"x")
        client.publish(keys.events, b"update")
        wait_for(lambda: pair.reader.rejected > before, 5, message="a list to be rejected")
        client.delete(keys.params)
        client.publish(keys.events, b"garbage notification")
    assert pair.reader._thread.is_alive()
    pair.publish(7.0)
    update = pair.reader.wait(timeout=5.0)
    assert update is not None and np.all(update.params == 7.0)
    client.close()


def test_keys_expire(redis_server, pairs):
    pair = pairs(redis_server.url, ttl=30, start_reader=False)
    pair.publish(1.0)
    pair.writer.post_metrics(0, {"AverageReturn": 1.0})
    client = redis.Redis.from_url(redis_server.url)
    keys = ExperimentKeys("exp")
    wait_for(lambda: client.exists(keys.params, keys.metrics) == 2, 5, message="keys")
    for key in (keys.structure, keys.params, keys.metrics):
        assert 0 < client.pttl(key) <= 30_000, key
    short = pairs(redis_server.url, ttl=1, experiment="short", start_reader=False)
    short.publish(1.0)
    short.writer.close()
    gone = ExperimentKeys("short")
    wait_for(lambda: client.exists(gone.structure, gone.params) == 0,
             5,
             message="an abandoned experiment to expire")
    client.close()


@pytest.mark.alone  # times publish(): 50.1 ms, bound 50, beside other tests and 2 busy processes
def test_redis_killed_and_restarted_mid_run(redis_server, pairs, caplog):
    pair = pairs(redis_server.url, size=10_000)
    worst = 0.0
    value = 0
    with caplog.at_level(logging.INFO, logger="async_plotter"):

        def publish_for(seconds):
            nonlocal worst, value
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                started = time.perf_counter()
                pair.publish(value)
                worst = max(worst, time.perf_counter() - started)
                value += 1
                time.sleep(0.01)

        publish_for(0.5)
        assert pair.reader.wait(timeout=5.0) is not None
        redis_server.kill()
        publish_for(1.5)
        redis_server.start()
        publish_for(1.5)
        last = value - 1
        wait_for(lambda: pair.reader.read_newest() and pair.reader.last_number == last,
                 15,
                 message="the reader to get the newest update after the restart")
    assert worst < 0.05, f"publish() took {worst * 1e3:.1f} ms while Redis was down"
    outage_warnings = [
        r for r in caplog.records
        if r.levelno == logging.WARNING and "publishing experiment" in r.getMessage()
    ]
    assert len(outage_warnings) == 1, [r.getMessage() for r in outage_warnings]
    assert pair.stats["redis_connected"] and pair.stats["publish_errors"] >= 1


def test_a_frozen_redis_never_blocks_publish(redis_server, pairs):
    # SIGSTOP: connections are accepted by the kernel but nothing answers, the worst case for a
    # trainer that waits on the network.
    pair = pairs(redis_server.url, size=100_000)
    pair.publish(0.0)
    assert pair.reader.wait(timeout=5.0) is not None
    redis_server.process.send_signal(signal.SIGSTOP)
    try:
        durations = []
        deadline = time.monotonic() + 1.5
        value = 1
        while time.monotonic() < deadline:
            started = time.perf_counter()
            pair.publish(value)
            durations.append(time.perf_counter() - started)
            value += 1
            time.sleep(0.01)
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
    durations.sort()
    assert durations[len(durations) // 2] < 0.005 and durations[-1] < 0.5, durations[-5:]
    last = value - 1
    wait_for(lambda: pair.reader.read_newest() and pair.reader.last_number == last,
             15,
             message="the newest update after the freeze")
    started = time.monotonic()
    pair.writer.close()
    assert time.monotonic() - started < 2.5


def test_redis_down_at_start_then_up_and_close_is_bounded(pairs):
    executable = find_redis_server()
    server = RedisServer(executable, port=free_port())
    try:
        pair = pairs(server.url, start_reader=False)
        pair.publish(3.0)
        time.sleep(0.3)
        assert not pair.stats["redis_connected"]
        server.start()
        reader = pair.open_reader()
        update = reader.wait(timeout=10.0)
        assert update is not None and np.all(update.params == 3.0)
        server.kill()
        pair.publish(4.0)
        started = time.monotonic()
        pair.writer.close()
        assert time.monotonic() - started < 2.5
    finally:
        server.stop()


def test_password_in_url_works_and_stays_out_of_logs(caplog):
    server = RedisServer(find_redis_server(), password="hunter2-hunter2").start()
    try:
        pair = _Pair(server.url)
        pair.publish(2.0)
        assert pair.reader.wait(timeout=5.0) is not None
        with caplog.at_level(logging.WARNING, logger="async_plotter"):
            server.kill()
            pair.publish(3.0)
            wait_for(lambda: any("unreachable" in r.getMessage() for r in caplog.records),
                     5,
                     message="an outage warning")
        pair.close()
        assert all("hunter2" not in r.getMessage() for r in caplog.records)
    finally:
        server.stop()


def test_metrics_arrive_in_order_once_even_after_a_restart(redis_server, pairs):
    pair = pairs(redis_server.url, start_reader=False)
    got, structures = [], []
    watcher = ExperimentWatcher(redis_server.url, "exp", Verifier(SECRET, False), structures.append,
                                got.append)
    watcher.start()
    try:
        pair.publish(0.0)
        for i in range(5):
            assert pair.writer.post_metrics(i, {"AverageReturn": float(i)})
        wait_for(lambda: len(got) == 5, 5, message="5 metrics entries")
        redis_server.kill()
        redis_server.start()
        pair.publish(1.0)  # the writer notices, reconnects and restores the curve
        for i in range(5, 7):
            pair.writer.post_metrics(i, {"AverageReturn": float(i)})
        wait_for(lambda: len(got) == 7, 15, message="7 metrics entries")
        time.sleep(0.3)
        assert [entry.seq for entry in got] == list(range(7))
        assert [entry.metrics["AverageReturn"] for entry in got] == [float(i) for i in range(7)]
        assert len({s.run_id for s in structures}) == 1
        assert not pair.writer.post_metrics(0, {f"m{i}": 1.0 for i in range(1000)})  # too large
    finally:
        watcher.stop()


def test_a_plotter_with_a_channel_and_a_video_dir_shows_here_and_publishes(redis_server, tmp_path):
    """Outputs asked for here are made here (they were silently dropped with a channel); what
    Redis carries is the signed structure without them, and every update."""
    policy = LinearPolicy(4, 2)
    client = redis.Redis.from_url(redis_server.url)
    reading = client.pubsub()  # a parameter reader: the trainer sends them whole
    reading.subscribe(ExperimentKeys("from-plotter").readers)
    plotter = Plotter("CartPole-v1",
                      policy,
                      max_path_length=5,
                      channel=redis_server.url,
                      experiment="from-plotter",
                      secret=SECRET.decode(),
                      video_dir=str(tmp_path)).start()
    try:
        policy.fill(0.5)
        plotter.update_plot(policy, iteration=0, metrics={"AverageReturn": 3.0})
        keys = ExperimentKeys("from-plotter")
        wait_for(lambda: client.exists(keys.params, keys.metrics) == 2, 5, message="keys")
        structure = open_structure(client.get(keys.structure), Verifier(SECRET, False),
                                   "from-plotter")
        config = pickle.loads(structure.body)
        assert config.sinks == () and not config.live and config.history_dir is None
        assert structure.meta["env"] == "CartPole-v1" and structure.meta["size"] == 8
        # An env that draws itself keeps its history as returns only, here: serve offers no
        # "history 3D" of it.
        assert structure.meta["history_states"] is False
        verifier = Verifier(SECRET, False)

        def newest():
            return open_update(client.get(keys.params), verifier, "from-plotter",
                               structure.expected())[1]

        update = wait_for(lambda: newest().iteration == 0 and newest(), 10, message="iteration 0")
        assert update.iteration == 0 and np.all(update.params == 0.5)
    finally:
        reading.close()
        client.close()
        plotter.close()
    stats = plotter.stats
    assert stats["final_video"] == str(tmp_path / "iter_0000.mp4"), stats["last_error"]
    assert os.path.getsize(stats["final_video"]) > 0 and not stats["alive"]


def test_a_publishing_trainer_opens_a_window_only_when_asked(xvfb):
    """With a display, ``window="auto"`` opens one, but not for a trainer that publishes (a
    viewer elsewhere shows it); ``window=True`` still does. Nothing is started here."""
    policy = LinearPolicy(4, 2)
    redis_args = dict(channel="redis://127.0.0.1:1/0", experiment="windows", secret=SECRET)
    assert Plotter("CartPole-v1", policy).window is True
    assert Plotter("CartPole-v1", policy, **redis_args).window is False
    assert Plotter("CartPole-v1", policy, window=True, **redis_args).window is True


def test_the_parameters_travel_only_while_a_reader_is_subscribed(redis_server):  # noqa: F811
    """With no parameter reader, an update goes as its signed header alone (what the lists
    show); a reader that subscribes gets the newest whole within about a second, though the
    trainer publishes nothing new meanwhile; once it has gone, the header alone again."""
    from async_plotter.channel.redis.wire import withheld_bytes

    policy = LinearPolicy(4, 2)
    whole_bytes = update_bytes(8, np.float32)
    plotter = Plotter("CartPole-v1",
                      policy,
                      channel=redis_server.url,
                      experiment="on-demand",
                      secret=SECRET).start()
    client = redis.Redis.from_url(redis_server.url)
    keys = ExperimentKeys("on-demand")
    verifier = Verifier(SECRET, False)
    try:
        policy.fill(0.25)
        plotter.update_plot(policy, iteration=3)

        def newest_head():
            value = client.get(keys.params) or b""
            if len(value) < UPDATE_HEADER.size:
                return None
            return open_update(value, verifier, "on-demand", None)

        wait_for(lambda: newest_head() and newest_head()[0].iteration == 3,
                 10,
                 message="iteration 3's header")
        head, update = newest_head()
        assert head.withheld and update is None
        assert client.strlen(keys.params) == withheld_bytes() < whole_bytes
        assert plotter.stats["published_withheld"] >= 1

        reader = RedisReader(redis_server.url, "on-demand", SECRET)
        try:
            whole = reader.wait(10)  # nothing published meanwhile: the newest, sent whole
            assert whole is not None and whole.iteration == 3 and np.all(whole.params == 0.25)
            assert client.strlen(keys.params) == whole_bytes
        finally:
            reader.close()
        wait_for(lambda: client.pubsub_numsub(keys.readers)[0][1] == 0, 10, message="gone")
        time.sleep(1.5)  # past the count's interval: the next update's count finds nobody
        policy.fill(0.5)
        plotter.update_plot(policy, iteration=4)
        wait_for(lambda: newest_head()[0].iteration == 4, 10, message="iteration 4's header")
        assert newest_head()[0].withheld and client.strlen(keys.params) == withheld_bytes()
    finally:
        client.close()
        plotter.close()
