"""Redis' own security against a real redis-server: the ACL roles of docs/security.md are all a
trainer and a viewer need, a refused command or certificate is said clearly (the trainer trains
on, the viewer stops), and ``rediss://`` works both ways."""
import csv
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import redis

from async_plotter.channel.redis.acl import trainer_acl, viewer_acl
from async_plotter.channel.redis.link import bounded_xrange
from async_plotter.channel.redis.returns import ReturnRow
from async_plotter.channel.redis.signing import Verifier
from async_plotter.channel.redis.sealed import RunTarget
from async_plotter.channel.redis.states import RecordingPublisher
from async_plotter.channel.redis.states_fetch import RecordingFetcher
from async_plotter.cli import URL_ENV, main
from async_plotter.render.recording import read_recording
from async_plotter.serve.catalog import Catalog
from tests.conftest import wait_for
from tests.history_recordings import write_history
from tests.redis_helpers import applied_updates, read_log, start_trainer, start_viewer
from tests.redis_server import MISSING_MESSAGE, RedisServer, find_redis_server
from tests.redis_tls import TlsRedisServer, make_certificates

SECRET = "a shared secret of decent length"
ADMIN_PASSWORD = "admin-password-for-the-acl-tests"
TRAINER, TRAINER_PASSWORD = "trainer-swimmer-a", "trainer-password-0123456789abcdef"
VIEWER, VIEWER_PASSWORD = "viewer", "viewer-password-0123456789abcdef"
EXPERIMENT, OTHER = "swimmer-a", "swimmer-b"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.timeout(150)


def _executable():
    executable = find_redis_server()
    if executable is None:
        pytest.fail(MISSING_MESSAGE)
    return executable


@pytest.fixture
def acl_server():
    """A redis-server whose default user needs a password, with the trainer role of
    ``swimmer-a`` and the viewer role set up by the exact lines docs/security.md gives."""
    server = RedisServer(_executable(), password=ADMIN_PASSWORD).start()
    admin = redis.Redis.from_url(server.url)
    try:
        for line in (trainer_acl(EXPERIMENT, TRAINER,
                                 TRAINER_PASSWORD), viewer_acl(VIEWER, VIEWER_PASSWORD)):
            assert admin.execute_command(*line.split()) in (b"OK", "OK")
        admin.execute_command("ACL", "LOG", "RESET")
        yield server, admin
    finally:
        admin.close()
        server.stop()


@pytest.fixture
def tls_server(tmp_path):
    """A redis-server that speaks only TLS and requires client certificates (Redis's default)."""
    directory = tmp_path / "certificates"
    directory.mkdir()
    server = TlsRedisServer(_executable(), make_certificates(str(directory))).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def processes():
    """Started trainers and viewers; whatever a failed test left running is stopped."""
    started = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            if process.stdin:
                process.stdin.close()
    for process in started:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _url(server, user, password):
    return f"redis://{user}:{password}@127.0.0.1:{server.port}/0"


def _trainer(processes, url, experiment, log, *args):
    process = start_trainer(url, experiment, log, *args, ASYNC_PLOTTER_SECRET=SECRET)
    processes.append(process)
    return process


def _viewer(processes, url, experiment, log, *args):
    process = start_viewer(url, experiment, log, *args, ASYNC_PLOTTER_SECRET=SECRET)
    processes.append(process)
    return process


def _summary(trainer):
    line = trainer.stdout.readline()
    assert line, f"the trainer exited early with code {trainer.poll()}"
    return json.loads(line)


def _acl_log(admin):
    """What the server refused to anyone since the test began (redis-py swallows some refusals;
    the server's ACL log does not)."""
    return admin.execute_command("ACL", "LOG")


def _watch_a_run(processes, trainer_url, viewer_url, tmp_path):
    """A trainer publishes 5 updates; a viewer started first renders them into videos."""
    viewer_log, trainer_log = str(tmp_path / "viewer.log"), str(tmp_path / "trainer.log")
    videos = tmp_path / "videos"
    viewer = _viewer(processes, viewer_url, EXPERIMENT, viewer_log, "--video-dir", str(videos))
    wait_for(lambda: "waiting for experiment" in read_log(viewer_log), 30, message="viewer start")
    trainer = _trainer(processes, trainer_url, EXPERIMENT, trainer_log, "--count", "5",
                       "--interval", "0.2", "--hold")
    _summary(trainer)
    wait_for(lambda: 5 in applied_updates(read_log(viewer_log)),
             60,
             message=f"the last update applied; viewer log:\n{read_log(viewer_log)[-3000:]}")
    wait_for(lambda: (videos / "iter_0004.mp4").exists(), 30, message="the last update's video")
    return viewer, trainer, read_log(viewer_log), trainer_log


def _finish(viewer, trainer, trainer_log):
    """Ctrl-C the viewer, end the trainer: both exit 0; the trainer's log, returned."""
    viewer.send_signal(signal.SIGINT)
    assert viewer.wait(20) == 0
    trainer.stdin.close()
    assert trainer.wait(20) == 0
    return read_log(trainer_log)


@pytest.mark.slow
def test_the_roles_are_all_a_trainer_and_a_viewer_need(acl_server, processes, tmp_path, monkeypatch,
                                                       capsys):
    server, admin = acl_server
    viewer_url = _url(server, VIEWER, VIEWER_PASSWORD)
    viewer, trainer, viewer_log, trainer_log = _watch_a_run(processes,
                                                            _url(server, TRAINER, TRAINER_PASSWORD),
                                                            viewer_url, tmp_path)
    # list (the URL from the environment, out of the process list), as the viewer.
    monkeypatch.setenv(URL_ENV, viewer_url)
    assert main(["list"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == 1 and rows[0].split()[0] == EXPERIMENT and " yes " in rows[0]
    # serve's overview, as the viewer: the experiment verified, its newest update and its curve.
    catalog = Catalog(viewer_url, Verifier(SECRET.encode()))
    catalog.acquire()

    def verified_row():
        return [
            row for row in catalog.rows()
            if row["name"] == EXPERIMENT and row["update_verified"] and row["update"] == 5 and len((
                row["curve"] or {}).get("points", ())) == 5
        ]

    try:
        wait_for(verified_row, 30, message="serve's row: verified, update 5, 5 curve points")
        assert catalog.problem is None
    finally:
        catalog.close()
    trainer_log = _finish(viewer, trainer, trainer_log)
    # Nothing either side sent was refused, not even what redis-py would have ignored: the
    # viewer's metrics script included (a plain EVAL needs write access to its keys).
    assert _acl_log(admin) == []
    for log in (viewer_log, trainer_log):
        assert "refused" not in log and "rejected" not in log and "Traceback" not in log, log
    # The run is under the experiment's prefix, and only there.
    assert sorted(admin.scan_iter()) == [
        f"async_plotter:{EXPERIMENT}:{name}".encode() for name in ("metrics", "params", "structure")
    ]


def test_the_history_over_redis_runs_under_the_roles(acl_server, tmp_path):
    """A trainer's history recordings (published, capped) and a viewer's fetch of them need
    nothing beyond the roles, nor does a resumed run's, which removes what the run before did
    after its snapshot: the server refuses nothing."""
    server, admin = acl_server
    trainer_url, viewer_url = (_url(server, TRAINER,
                                    TRAINER_PASSWORD), _url(server, VIEWER, VIEWER_PASSWORD))
    _history_round_trip(trainer_url, viewer_url, tmp_path)
    returns = _resume_after_1(trainer_url, viewer_url, tmp_path)
    # The first run's rows up to 1 and the resumed run's, who recorded the snapshot's again.
    assert returns == [(0, 1.0), (1, 2.0), (1, 12.0), (2, 13.0)], returns
    # Redis keeps the first run's recording of iteration 1 (update 2), not of 2.
    assert _indexed(admin) == [(5, 2), (6, 0), (6, 1)]
    assert _acl_log(admin) == []


def _resume_after_1(trainer_url, viewer_url, tmp_path, caplog=None):
    """A run resuming ``_history_round_trip``'s after iteration 1 publishes iterations 1 and 2
    again (returns 12 and 13); a viewer's ``returns.csv`` after it, as ``(iteration, return)``."""
    target = write_history(str(tmp_path / "resumed"), range(3), steps=6)
    publisher = RecordingPublisher(
        RunTarget(trainer_url, EXPERIMENT, SECRET.encode(), (6, 2000), 60.0, resumes_after=1))
    for number, iteration in enumerate((1, 2)):
        publisher.add(os.path.join(target, f"iter_{iteration:04d}.npz"), number, iteration)
        publisher.add_return(ReturnRow(number, iteration, 11.0 + iteration, 6, 0.0, 0.01, True))
    publisher.close(10)
    assert (publisher.sent, publisher.failed, publisher.returns_sent) == (2, 0, 2)
    fetched = tmp_path / "fetched-resumed"
    fetcher = RecordingFetcher(viewer_url, EXPERIMENT, Verifier(SECRET.encode()), str(fetched))
    try:
        wait_for(lambda: fetcher.written >= 2, 10, message="the resumed run's recordings")
        time.sleep(1.5)  # a poll more: what else it would write
    finally:
        fetcher.close()
    assert fetcher.refused == 0
    # Each policy's recording is the resumed run's (6 steps), that of iteration 1 too.
    assert {
        name: len(read_recording(str(fetched / name)).states)
        for name in os.listdir(fetched) if name.endswith(".npz")
    } == {
        "iter_0001.npz": 6,
        "iter_0002.npz": 6
    }
    with open(fetched / "returns.csv", encoding="utf-8") as file:
        return [(int(r["iteration"]), float(r["return"])) for r in csv.DictReader(file)]


def _indexed(admin):
    """The recordings' index of the experiment, as ``(run, update)``."""
    members = admin.zrange(f"async_plotter:{EXPERIMENT}:recordings", 0, -1)
    return [
        tuple(int(part, 16 if i == 0 else 10) for i, part in enumerate(m.split(b":")))
        for m in members
    ]


def test_a_trainer_role_from_before_resumed_runs_kept_their_history_says_so(
        acl_server, tmp_path, caplog):
    """A trainer role without the commands that trim a resumed run's history (made before
    they were needed): one warning naming them, and the history starts at the resume, the
    curve's returns of the runs before kept, as before."""
    server, admin = acl_server
    line = trainer_acl(EXPERIMENT, "old-trainer",
                       TRAINER_PASSWORD).replace(" +zrangebyscore +zrem +xrange +xdel", "")
    assert admin.execute_command(*line.split()) in (b"OK", "OK")
    viewer_url = _url(server, VIEWER, VIEWER_PASSWORD)
    _history_round_trip(_url(server, "old-trainer", TRAINER_PASSWORD), viewer_url, tmp_path)
    returns = _resume_after_1(_url(server, "old-trainer", TRAINER_PASSWORD), viewer_url, tmp_path)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    said = [w for w in warnings if "starts at iteration 1" in w]
    assert len(said) == 1 and "ZRANGEBYSCORE" in said[0] and "security.md" in said[0], warnings
    # The first run's returns stay (a viewer reads those up to 1), its recordings do not.
    assert returns == [(0, 1.0), (1, 2.0), (1, 12.0), (2, 13.0)], returns
    assert _indexed(admin) == [(6, 0), (6, 1)]


def test_a_viewer_role_that_may_run_no_script_still_fetches_the_history(
        acl_server, tmp_path, caplog):
    """Without ``+eval_ro`` the recordings' index is read whole (its names unbounded) and the
    returns not at all: each said once, the recordings fetched all the same."""
    server, admin = acl_server
    line = viewer_acl("no-scripts", VIEWER_PASSWORD).replace(" +eval_ro", "")
    assert admin.execute_command(*line.split()) in (b"OK", "OK")
    target = write_history(str(tmp_path), range(2), steps=5)
    publisher = RecordingPublisher(
        RunTarget(_url(server, TRAINER, TRAINER_PASSWORD), EXPERIMENT, SECRET.encode(), (6, 1000),
                  60.0))
    for number in (1, 2):
        publisher.add(os.path.join(target, f"iter_{number - 1:04d}.npz"), number, number - 1)
        publisher.add_return(ReturnRow(number, number - 1, float(number), 5, 0.0, 0.01, True))
    publisher.close(10)
    fetched = tmp_path / "fetched"
    fetcher = RecordingFetcher(_url(server, "no-scripts", VIEWER_PASSWORD), EXPERIMENT,
                               Verifier(SECRET.encode()), str(fetched))
    try:
        wait_for(lambda: fetcher.written == 2, 10, message="both recordings fetched")
    finally:
        fetcher.close()
    assert fetcher.refusal is None and fetcher.returns_written == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "index is read without a bound" in w]) == 1, warnings
    assert len([w for w in warnings if "returns it publishes cannot be read" in w]) == 1, warnings


@pytest.mark.slow
def test_the_states_travel_over_tls_both_ways(tls_server, tmp_path):
    """``rediss://`` for the states as for the parameters: the history published and fetched,
    the live episode counted, published and received, through the server's TLS port."""
    _history_round_trip(tls_server.url, tls_server.url, tmp_path)
    _live_round_trip(tls_server.url, tls_server.url)


def _history_round_trip(trainer_url, viewer_url, tmp_path):
    """Three recordings published (two kept) with their returns, and fetched: the viewer's
    folder holds those two, and the three returns."""
    target = write_history(str(tmp_path), range(3), steps=5)
    paths = [os.path.join(target, f"iter_{iteration:04d}.npz") for iteration in range(3)]
    publisher = RecordingPublisher(RunTarget(trainer_url, EXPERIMENT, SECRET.encode(), (5, 1000),
                                             60.0),
                                   kept=2)
    for number, path in enumerate(paths, start=1):
        publisher.add(path, number, number - 1)
        publisher.add_return(ReturnRow(number, number - 1, float(number), 5, 0.0, 0.01, True))
    publisher.close(10)
    assert (publisher.sent, publisher.failed, publisher.returns_sent) == (3, 0, 3)
    fetched = tmp_path / "fetched"
    fetcher = RecordingFetcher(viewer_url, EXPERIMENT, Verifier(SECRET.encode()), str(fetched))
    try:
        wait_for(lambda: fetcher.written == 2 and fetcher.returns_written == 3,
                 10,
                 message="both kept recordings and every return fetched")
    finally:
        fetcher.close()
    assert sorted(os.listdir(fetched)) == ["iter_0001.npz", "iter_0002.npz", "returns.csv"]
    assert fetcher.refused == 0


def test_the_live_episode_over_redis_runs_under_the_roles(acl_server):
    """A trainer's live episode (the watching mark counted, the model put, each message
    published) and a viewer's subscription and model read need nothing beyond the roles."""
    server, admin = acl_server
    _live_round_trip(_url(server, TRAINER, TRAINER_PASSWORD), _url(server, VIEWER, VIEWER_PASSWORD))
    assert _acl_log(admin) == []


def _live_round_trip(trainer_url, viewer_url):
    """A viewer subscribes; the trainer's live publisher counts it and sends an episode, which
    the viewer opens whole, and the model it reads."""
    import pickle

    import mujoco
    import numpy as np

    from async_plotter.channel.redis.link import connect, probe, read_exact
    from async_plotter.channel.redis.live import LivePublisher, live_channel, open_live
    from async_plotter.channel.redis.states import StateKeys
    from async_plotter.render.stream import (EpisodeEnd, EpisodeInfo, SceneInfo, StateChunk,
                                             StreamKind)

    model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><body><freejoint/><geom "
                                           "size='.1'/></body></worldbody></mujoco>")
    viewer = connect(viewer_url)
    pubsub = viewer.pubsub()
    pubsub.subscribe(live_channel(EXPERIMENT))
    publisher = LivePublisher(RunTarget(trainer_url, EXPERIMENT, SECRET.encode(), (9, 1000), 60.0))
    try:
        publisher.send((StreamKind.SCENE, SceneInfo("mujoco", pickle.dumps(model))))
        wait_for(lambda: publisher.watched, 10, message="the viewer's subscription counted")
        states = np.zeros((2, mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS)))
        for message in ((StreamKind.BEGIN, EpisodeInfo(1, 0, 0)),
                        (StreamKind.STATES,
                         StateChunk(states, np.zeros((2, 0), np.float32), np.zeros(2),
                                    True)), (StreamKind.END, EpisodeEnd(2, 0.0, True))):
            publisher.send(message)
        kinds = []
        deadline = time.monotonic() + 10
        while len(kinds) < 4 and time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.5)
            if message and message["type"] == "message":
                kinds.append(open_live(message["data"], Verifier(SECRET.encode()), EXPERIMENT)[1])
        assert kinds == [StreamKind.SCENE, StreamKind.BEGIN, StreamKind.STATES, StreamKind.END]
        key = StateKeys(EXPERIMENT).model
        length, _ = probe(viewer, key, 0)
        assert read_exact(viewer, key, length, "model")
        # Counted after each PUBLISH returns, in the publisher's thread: a loaded machine can
        # deliver the last message before the count moves.
        wait_for(lambda: publisher.published == 4, 10, message="the four messages counted")
    finally:
        publisher.close()
        pubsub.close()
        viewer.close()


def test_the_trainer_role_reaches_only_its_experiment_and_the_viewer_role_only_reads(acl_server):
    server, admin = acl_server
    trainer = redis.Redis.from_url(_url(server, TRAINER, TRAINER_PASSWORD))
    viewer = redis.Redis.from_url(_url(server, VIEWER, VIEWER_PASSWORD))
    own, other = f"async_plotter:{EXPERIMENT}", f"async_plotter:{OTHER}"
    admin.set(f"{other}:params", b"another experiment's update")
    admin.set("someone-else:key", b"another application's value")
    try:
        # The trainer role: its experiment's keys and channel.
        assert trainer.set(f"{own}:params", b"x", px=60000)
        assert trainer.getrange(f"{own}:params", 0, 0) == b"x"
        assert trainer.xadd(f"{own}:metrics", {"p": b"{}"}, maxlen=10, approximate=True)
        assert trainer.pexpire(f"{own}:metrics", 60000) and trainer.exists(f"{own}:metrics")
        trainer.publish(f"{own}:events", "update 0 0")
        refused = [
            lambda: trainer.set(f"{other}:params", b"forged"),
            lambda: trainer.getrange(f"{other}:params", 0, 10),
            lambda: trainer.delete(f"{other}:params"),
            lambda: trainer.pexpire(f"{other}:params", 1),
            lambda: trainer.xadd(f"{other}:metrics", {"p": b"{}"}),
            lambda: trainer.publish(f"{other}:events", "update 0 0"),
            lambda: trainer.set("someone-else:key", b"x"),
            lambda: trainer.get(f"{own}:params"),  # GET is no trainer's command
            lambda: trainer.keys("*"),
            lambda: trainer.scan(0),
            lambda: trainer.config_get("*"),
            lambda: trainer.client_setname("x"),
            lambda: trainer.eval("return 1", 0),
            lambda: trainer.flushall(),
        ]
        for attempt in refused:
            with pytest.raises(redis.exceptions.NoPermissionError):
                attempt()
        # The viewer role: reads every experiment, subscribes, lists; writes nothing.
        assert viewer.strlen(f"{own}:params") == 1 and viewer.getrange(f"{own}:params", 0, 0)
        assert viewer.pttl(f"{own}:params") > 0
        assert f"{own}:params".encode() in set(viewer.scan_iter(match="async_plotter:*"))
        assert len(bounded_xrange(viewer, f"{own}:metrics", "-", 10, 8192)) == 1
        pubsub = viewer.pubsub()
        pubsub.subscribe(f"{own}:events")
        assert wait_for(lambda: pubsub.get_message(timeout=0.5), 5)["type"] == "subscribe"
        pubsub.close()
        refused = [
            lambda: viewer.set(f"{own}:params", b"forged"),
            lambda: viewer.setrange(f"{own}:params", 0, b"y"),
            lambda: viewer.delete(f"{own}:params"),
            lambda: viewer.pexpire(f"{own}:params", 1),
            lambda: viewer.xadd(f"{own}:metrics", {"p": b"{}"}),
            lambda: viewer.publish(f"{own}:events", "structure 0"),
            lambda: viewer.getrange("someone-else:key", 0, 10),
            lambda: viewer.eval("return redis.call('DEL', KEYS[1])", 1, f"{own}:params"),
            lambda: viewer.config_get("*"),
            lambda: viewer.flushall(),
        ]
        for attempt in refused:
            with pytest.raises(redis.exceptions.NoPermissionError):
                attempt()
        # Its scripts run with its own rights.
        with pytest.raises(redis.exceptions.ResponseError, match="can.t run this command"):
            viewer.eval_ro("return redis.call('DEL', KEYS[1])", 1, f"{own}:params")
        assert admin.get(f"{own}:params") == b"x" and admin.get(f"{other}:params").startswith(
            b"another")
    finally:
        trainer.close()
        viewer.close()


@pytest.mark.slow
def test_a_refused_trainer_warns_and_trains_on_and_a_refused_viewer_stops(
        acl_server, processes, tmp_path, capsys):
    server, _ = acl_server
    trainer_url = _url(server, TRAINER, TRAINER_PASSWORD)
    # The trainer of swimmer-a publishes swimmer-b: its role forbids those keys.
    trainer_log = str(tmp_path / "trainer.log")
    trainer = _trainer(processes, trainer_url, OTHER, trainer_log, "--count", "40", "--interval",
                       "0.05")
    summary = _summary(trainer)
    assert trainer.wait(20) == 0
    assert summary["median_update_plot_s"] < 0.005 and summary["worst_update_plot_s"] < 1.0
    assert summary["stats"]["published"] == 0 and summary["stats"]["publish_errors"] >= 1
    log = read_log(trainer_log)
    assert "Traceback" not in log and log.count("refused") == 1, log
    assert (f"to user '{TRAINER}'" in log and f"async_plotter:{OTHER}:structure" in log
            and f"the trainer role of experiment '{OTHER}'" in log and "training goes on" in log)

    # The trainer's user given to a viewer: it may not subscribe. The viewer says so and exits.
    viewer_log = str(tmp_path / "viewer.log")
    viewer = _viewer(processes, trainer_url, EXPERIMENT, viewer_log, "--video-dir",
                     str(tmp_path / "videos"))
    assert viewer.wait(60) == 1
    log = read_log(viewer_log)
    assert (f"refused SUBSCRIBE async_plotter:{EXPERIMENT}:events to user '{TRAINER}'" in log
            and "the viewer role" in log and "Traceback" not in log), log

    # A wrong password: the same, naming the user.
    viewer_log = str(tmp_path / "viewer-password.log")
    viewer = _viewer(processes, _url(server, VIEWER, "not-the-password"), EXPERIMENT, viewer_log,
                     "--video-dir", str(tmp_path / "videos"))
    assert viewer.wait(60) == 1
    log = read_log(viewer_log)
    assert "refused user 'viewer' or its password" in log and "not-the-password" not in log, log

    # replay's fetch of the history, under the trainer's user (no STRLEN), and a wrong password:
    # it says what to fix and exits, as view does.
    refusals = [
        (trainer_url, ["refused STRLEN", f"Give user '{TRAINER}' the viewer role"]),
        (_url(server, VIEWER, "not-the-password"), ["refused user 'viewer' or its password"]),
    ]
    for url, expected in refusals:
        replay = subprocess.run(
            [sys.executable, "-m", "async_plotter.cli", "replay", url, "-e", EXPERIMENT],
            env=dict(os.environ, ASYNC_PLOTTER_SECRET=SECRET),
            capture_output=True,
            text=True,
            timeout=60)
        assert replay.returncode == 1, replay.stderr[-3000:]
        for words in expected + ["it stops"]:
            assert words in replay.stderr, replay.stderr[-3000:]
        assert "Traceback" not in replay.stderr and "not-the-password" not in replay.stderr

    # serve's history 3D of it: refused at once, not after the page's whole wait.
    from async_plotter.serve.published import PublishedHistories

    histories = PublishedHistories(_url(server, VIEWER, "not-the-password"),
                                   Verifier(SECRET.encode()),
                                   watched=lambda folder: False)
    try:
        started = time.monotonic()
        assert histories.folder(EXPERIMENT, 60) is None
        assert time.monotonic() - started < 30
    finally:
        histories.close()

    # list needs SCAN, which a trainer's role does not have.
    assert main(["list", trainer_url]) == 1
    error = capsys.readouterr().err
    assert "refused SCAN" in error and "the viewer role" in error and ADMIN_PASSWORD not in error


@pytest.mark.slow
def test_tls_round_trip_for_trainer_viewer_and_list(tls_server, processes, tmp_path, capsys):
    url = tls_server.url
    viewer, trainer, viewer_log, trainer_log = _watch_a_run(processes, url, url, tmp_path)
    assert main(["list", url]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[0] == EXPERIMENT
    trainer_log = _finish(viewer, trainer, trainer_log)
    for log in (viewer_log, trainer_log):
        assert "WARNING" not in log and "Traceback" not in log, log


@pytest.mark.slow
def test_a_wrong_ca_is_refused_clearly(tls_server, processes, tmp_path, capsys):
    url = tls_server.tls_url(ca=tls_server.certificates.wrong_ca)
    trainer_log, viewer_log = str(tmp_path / "trainer.log"), str(tmp_path / "viewer.log")
    trainer = _trainer(processes, url, EXPERIMENT, trainer_log, "--count", "40", "--interval",
                       "0.05")
    viewer = _viewer(processes, url, EXPERIMENT, viewer_log, "--video-dir",
                     str(tmp_path / "videos"))
    summary = _summary(trainer)
    assert trainer.wait(20) == 0
    assert summary["median_update_plot_s"] < 0.005 and summary["worst_update_plot_s"] < 1.0
    assert summary["stats"]["published"] == 0
    assert viewer.wait(60) == 1
    for log in (read_log(trainer_log), read_log(viewer_log)):
        assert "its TLS certificate was refused (self-signed certificate in certificate chain)" in (
            log) and "ssl_ca_certs=" in log and "Traceback" not in log, log
        assert log.count("certificate was refused") == 1, log
    assert main(["list", url]) == 1
    assert "certificate was refused" in capsys.readouterr().err


@pytest.mark.parametrize("url, message", [
    ("rediss://127.0.0.1:1/0?ssl_ca_certs=/nonexistent/ca.pem", "ssl_ca_certs='/nonexistent"),
    ("redis://127.0.0.1:1/0?ssl_ca_certs=" + __file__, "TLS needs rediss://"),
    ("rediss://127.0.0.1:1/0?ssl_cert_reqs=sometimes", "Invalid SSL Certificate Requirements"),
])
def test_tls_options_are_checked_before_anything_connects(url, message, tmp_path, capsys,
                                                          monkeypatch):
    from async_plotter import InvalidArgumentError, Plotter
    from tests.policies import LinearPolicy

    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        Plotter("CartPole-v1", LinearPolicy(4, 2), channel=url, experiment="x", secret=SECRET)
    monkeypatch.setenv("ASYNC_PLOTTER_SECRET", SECRET)
    with pytest.raises(SystemExit) as exit_info:
        main(["view", url, "-e", "x", "--video-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_docs_give_the_roles_the_library_needs(capsys):
    with open(os.path.join(ROOT, "docs", "security.md"), encoding="utf-8") as handle:
        docs = handle.read()
    assert trainer_acl("swimmer-7", "trainer-swimmer-7", "PASSWORD") in docs
    assert viewer_acl("viewer", "PASSWORD") in docs
    # async-plotter acl prints the same lines, with fresh passwords (URLs on stderr).
    assert main(["acl", "-e", "swimmer-7", "-e", "cheetah.2"]) == 0
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert [line.split()[2]
            for line in lines] == ["trainer-swimmer-7", "trainer-cheetah.2", "viewer"]
    assert lines[1].split()[6:] == trainer_acl("cheetah.2", "u", "p").split()[6:]
    assert lines[2].split()[6:] == viewer_acl("u", "p").split()[6:]
    passwords = {line.split()[5] for line in lines}
    assert len(passwords) == 3 and all(len(password) > 40 for password in passwords)
    assert "Plotter(" in printed.err and "async-plotter view" in printed.err
