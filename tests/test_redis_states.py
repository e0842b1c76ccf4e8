"""The run's history over Redis (``channel/redis/states.py``): a trainer that publishes and keeps
videos here sends every history recording as it is written, signed, the model once; a viewer
rebuilds the files with neither TensorFlow nor the policy's code, refuses what fails its check,
and ``async-plotter replay redis://...`` shows them. Against a real redis-server."""
import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import redis

from async_plotter import Plotter
from async_plotter.channel.redis.signing import Verifier
from async_plotter.channel.redis.returns import ReturnRow
from async_plotter.channel.redis.sealed import RunTarget, open_sealed
from async_plotter.channel.redis.states import RecordingPublisher, StateKeys
from async_plotter.channel.redis.states_fetch import RecordingFetcher
from async_plotter.render.history_returns import RETURNS_FILE, read_returns
from async_plotter.render.recording import (RecordingError, compact_bytes, read_recording,
                                            recording_from_compact)
from async_plotter.view3d.history import RunHistory
from async_plotter.learning_curve import SHOWN_RETURN
from tests.conftest import default_sigint, settles, wait_for
from tests.history_recordings import write_history
from tests.policies import LinearPolicy
from tests.redis_helpers import read_log, start_viewer
from tests.redis_server import redis_server  # noqa: F401

SECRET = b"the states travel signed 0123456"
pytestmark = pytest.mark.timeout(180)

# A viewer's fetch in a process of its own: what it imported says what a viewer machine needs.
FETCH = """
import json, sys, time
from async_plotter.channel.redis.signing import Verifier
from async_plotter.channel.redis.states_fetch import RecordingFetcher
url, experiment, folder, secret, expected = sys.argv[1:6]
fetcher = RecordingFetcher(url, experiment, Verifier(secret.encode()), folder)
deadline = time.monotonic() + 60
while fetcher.written < int(expected) and time.monotonic() < deadline:
    time.sleep(0.1)
fetcher.close()
written = fetcher.written
heavy = sorted(m for m in ("tensorflow", "keras", "torch", "tests.policies") if m in sys.modules)
print(json.dumps({"written": written, "imported": heavy}))
"""


def _train(url, experiment, videos, iterations, first=0, **options):
    """A trainer that keeps videos here and publishes: updates of iterations ``first`` to
    ``iterations - 1``, each waited for until its history recording exists, then ``close()``.
    With ``first``, it resumes the run from its snapshot of the iteration before."""
    policy = LinearPolicy(4, 1)
    if first:
        policy.fill(0.2 * (first - 1) - 0.3)
        options["resume_after"] = first - 1
    plotter = Plotter("InvertedPendulum-v5",
                      policy,
                      max_path_length=60,
                      video_dir=str(videos),
                      channel=url,
                      experiment=experiment,
                      secret=SECRET,
                      priority="normal",
                      **options).start()
    try:
        if first:  # the snapshot's policy, recorded again as its iteration
            wait_for(lambda: plotter.stats["history"], 60, message="the snapshot's history")
        for iteration in range(first, iterations):
            policy.fill(0.2 * iteration - 0.3)
            plotter.update_plot(policy, iteration=iteration)
            wait_for(lambda: any(e["iteration"] == iteration for e in plotter.stats["history"]),
                     60,
                     message=f"iteration {iteration}'s history")
    finally:
        plotter.close()


def test_a_publishing_trainer_sends_its_history_and_a_viewer_rebuilds_it_without_tensorflow(
        redis_server, tmp_path):  # noqa: F811
    videos = tmp_path / "videos"
    _train(redis_server.url, "states", videos, 4)
    local = {
        name: read_recording(str(videos / "history" / name))
        for name in os.listdir(videos / "history") if name.endswith(".npz")
    }
    assert {"iter_0000.npz", "iter_0003.npz"} <= set(local), sorted(local)

    client = redis.Redis.from_url(redis_server.url)
    keys = StateKeys("states")
    wait_for(lambda: client.zcard(keys.index) == len(local), 10, message="every recording sent")
    for key in [keys.model, keys.index
                ] + [keys.recording(m.decode()) for m in client.zrange(keys.index, 0, -1)]:
        assert 0 < client.pttl(key) <= 3600 * 1000, key  # they expire with the experiment
    model = open_sealed(client.get(keys.model), Verifier(SECRET), b"model", "states")
    # The model travels once, compressed: no recording carries it.
    assert len(model.payload) < len(next(iter(local.values())).model_mjb) / 4
    client.close()

    fetched = tmp_path / "fetched"
    result = subprocess.run([
        sys.executable, "-c", FETCH, redis_server.url, "states",
        str(fetched),
        SECRET.decode(),
        str(len(local))
    ],
                            capture_output=True,
                            text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"written": len(local), "imported": []}, report
    for name, recording in local.items():
        copy = read_recording(str(fetched / name))
        # The states travel as float32, the precision MuJoCo draws in; nothing else is lost.
        assert np.array_equal(copy.states, recording.states.astype(np.float32)), name
        assert np.abs(copy.states - recording.states).max() > 0, name  # float64 rounded
        assert np.array_equal(copy.actions, recording.actions, equal_nan=True), name
        assert np.array_equal(copy.rewards, recording.rewards), name
        assert np.array_equal(copy.episodes, recording.episodes), name
        assert copy.model_mjb == recording.model_mjb and copy.meta == recording.meta, name


def test_a_resumed_trainers_viewer_holds_the_history_its_own_folder_holds(redis_server,
                                                                          tmp_path):  # noqa: F811
    """A publishing trainer records iterations 0-3; a second one resumes it from its snapshot
    of 1 in the same folder and records 2-3. A viewer started after holds the trainer's own
    history: the same files (of the first run up to 0, the resumed one's from 1) and the same
    returns.csv rows, the first run's up to 1 included."""
    videos = tmp_path / "videos"
    _train(redis_server.url, "resumed", videos, 4)
    _train(redis_server.url, "resumed", videos, 4, first=2)
    history = videos / "history"
    local = sorted(name for name in os.listdir(history) if name.endswith(".npz"))
    # (the initial policy's too, where the worker was up before iteration 0's update)
    assert {"iter_0000.npz", "iter_0001.npz", "iter_0002.npz", "iter_0003.npz"} <= set(local)

    def rows(folder):
        with open(folder / RETURNS_FILE, encoding="utf-8") as file:
            return [(row["iteration"], row["return"], row["recording"])
                    for row in csv.DictReader(file)]

    iterations = [row[0] for row in rows(history)]
    assert iterations[-5:] == ["0", "1", "1", "2", "3"], rows(history)
    fetched = tmp_path / "fetched"
    fetcher = RecordingFetcher(redis_server.url, "resumed", Verifier(SECRET), str(fetched))
    try:
        settles(lambda: sorted(os.listdir(fetched))
                if fetched.exists() else [], local + [RETURNS_FILE], 20)
        settles(lambda: rows(fetched), rows(history), 20)
    finally:
        fetcher.close()
    for name in local:
        mine, theirs = read_recording(str(history / name)), read_recording(str(fetched / name))
        assert np.array_equal(theirs.states, mine.states.astype(np.float32)), name


def test_a_viewer_gets_every_return_of_the_run_also_of_recordings_redis_no_longer_keeps(
        redis_server, tmp_path):  # noqa: F811
    """``history=3``: the trainer's folder and Redis keep 3 recordings, but a viewer's
    ``returns.csv`` has the run's every row, as the trainer's own has them, and the 3D history's
    curve draws its line through all of them."""
    videos = tmp_path / "videos"
    _train(redis_server.url, "returns", videos, 6, history=3)
    local = read_returns(str(videos / "history"))
    # The initial policy's too, when the first update did not replace it before it began.
    assert [row["iteration"] for row in local][-6:] == [0, 1, 2, 3, 4, 5], local
    assert len([n for n in os.listdir(videos / "history") if n.endswith(".npz")]) <= 3

    fetched = tmp_path / "fetched"
    fetcher = RecordingFetcher(redis_server.url, "returns", Verifier(SECRET), str(fetched))
    try:
        wait_for(lambda: fetcher.returns_written == len(local), 20, message="every return")
    finally:
        fetcher.close()
    assert fetcher.written == 3 and fetcher.refused == 0, (fetcher.written, fetcher.refused)
    # Row for row: the same returns, lengths, names, times and CPU seconds, to the bit.
    assert read_returns(str(fetched)) == local
    history = RunHistory(str(fetched))
    history.refresh()
    assert len(history.entries) == 3 and len(history.returns_line()) == len(local)


def test_a_remote_live_pages_curve_has_the_shown_returns_as_the_trainers_own_has(
        redis_server, tmp_path):  # noqa: F811
    """``view --http``: the live page of a viewer on another machine draws the curve of what
    was shown (the dashed line) from the returns the trainer publishes, as the trainer's own
    page draws it: every recorded policy's return at its iteration; ``--tensorboard-dir`` gets
    them as ``history/return``."""
    from tests.test_tensorboard import accumulate

    viewer, log, board = _curve_viewer(redis_server.url, "curve", tmp_path)
    try:
        wait_for(lambda: "waiting for experiment" in read_log(log), 60, message="the viewer")
        # The viewer watches first: the returns reach it as they are published.
        _train(redis_server.url, "curve", tmp_path / "videos", 4, history=2)
        expected = _returns_of(tmp_path / "videos")
        url = _page_of(log)
        shown = wait_for(lambda: _shown_returns(url) == expected and expected,
                         30,
                         message=f"the shown returns {expected} on the remote page")
        assert len(shown) >= 4
    finally:
        viewer.send_signal(signal.SIGINT)
        viewer.wait(30)
    assert "Traceback" not in read_log(log)
    scalars = accumulate(board).Scalars("history/return")
    assert {event.step: event.value for event in scalars} == pytest.approx(expected)


def test_a_viewer_of_a_run_that_ended_serves_its_page_and_curve_at_once(redis_server,
                                                                        tmp_path):  # noqa: F811
    """A trainer that is not playing (it ended, or has not started its worker) sends no live
    episode, and the viewer's page and TensorBoard got nothing until one came: no address, a
    browser left waiting, no curve. They now start at once with the run's curve; the page's
    picture says it waits for the first frame."""
    from tests.test_tensorboard import accumulate

    _train(redis_server.url, "ended", tmp_path / "videos", 3)
    expected = _returns_of(tmp_path / "videos")
    viewer, log, board = _curve_viewer(redis_server.url, "ended", tmp_path)
    try:
        url = _page_of(log)
        wait_for(lambda: _shown_returns(url) == expected and expected,
                 30,
                 message=f"the shown returns {expected} on the page")
        with urllib.request.urlopen(url, timeout=10) as page:
            assert "waiting for the first frame" in page.read().decode()
        assert "live view at" in read_log(log) and "drawing its live states" in read_log(log)
    finally:
        viewer.send_signal(signal.SIGINT)
        viewer.wait(30)
    assert viewer.returncode == 0 and "Traceback" not in read_log(log), read_log(log)
    scalars = accumulate(board).Scalars("history/return")  # TensorBoard got the curve too
    assert {event.step: event.value for event in scalars} == pytest.approx(expected)


def _curve_viewer(url, experiment, tmp_path):
    """``view --http 0 --tensorboard-dir``: the process, its log's path, TensorBoard's folder."""
    log, board = str(tmp_path / "viewer.log"), tmp_path / "board"
    viewer = start_viewer(url,
                          experiment,
                          log,
                          "--http",
                          "0",
                          "--tensorboard-dir",
                          str(board),
                          ASYNC_PLOTTER_SECRET=SECRET.decode())
    return viewer, log, board


def _returns_of(videos):
    """``{iteration: return}`` of the run's history, as the trainer wrote it."""
    return {row["iteration"]: row["return"] for row in read_returns(str(videos / "history"))}


def _page_of(log):
    """The viewer's live page's address, from its log."""
    found = wait_for(lambda: re.search(r"live view at (\S+)", read_log(log)),
                     120,
                     message="the viewer's live page")
    return found.group(1)


def _shown_returns(url):
    """``{iteration: return}`` of the curve of what was shown, as a live page's event stream
    sends it first (the newest value of an iteration)."""
    events = url.rstrip("/") + "/events"
    shown = {}
    with urllib.request.urlopen(events, timeout=10) as stream:
        event = None
        for _ in range(200):
            line = stream.readline().decode().strip()
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "metrics":
                for point in json.loads(line.split(":", 1)[1])["points"]:
                    if SHOWN_RETURN in point["values"]:
                        shown[point["iteration"]] = point["values"][SHOWN_RETURN]
                return shown
    return shown


def test_returns_travel_checked_and_each_run_starts_its_own(redis_server, tmp_path,
                                                            caplog):  # noqa: F811
    """Returns without a recording (its write failed) go at close; a policy recorded again keeps
    its later row; a server that comes back empty gets the rows again; a forged or oversized
    entry is refused (the latter not downloaded) and the rest kept; a new run's viewer file
    starts anew."""
    paths = _recordings(tmp_path, 2)

    def row(update, value, recorded=True):
        return ReturnRow(update, update - 1, value, 100, 1.7e9 + update, 0.01, recorded)

    publisher = RecordingPublisher(RunTarget(redis_server.url, "rows", SECRET, (5, 1000), 60.0))
    try:
        publisher.add(paths[0], 1, 0)
        publisher.add_return(row(1, 10.0))
        wait_for(lambda: publisher.returns_sent == 1, 10, message="the first row sent")
        redis_server.kill()
        redis_server.start()  # empty: the next send finds the model gone and sends all again
        publisher.add_return(row(2, 20.0))
        publisher.add_return(row(2, 21.0))  # recorded again: the later row is its
        publisher.add(paths[1], 2, 1)
        wait_for(lambda: publisher.sent == 2, 30, message="the second recording sent")
        publisher.add_return(row(3, None, recorded=False))  # not finite, no file: at close
    finally:
        publisher.close(10)
    assert publisher.returns_sent == 4 and publisher.resent == 1, publisher.returns_sent

    client = redis.Redis.from_url(redis_server.url)
    keys = StateKeys("rows")
    assert 0 < client.pttl(keys.returns) <= 60000
    # A writer to the server adds a row sealed under another secret, and a huge entry.
    forger = RecordingPublisher(
        RunTarget(redis_server.url, "forged-rows", b"another secret entirely 0123456", (5, 1000),
                  60.0))
    forger.add(paths[0], 1, 0)
    forger.add_return(row(1, 999.0))
    forger.close(10)
    (_, forged), = client.xrange(StateKeys("forged-rows").returns)
    client.xadd(keys.returns, forged)
    client.xadd(keys.returns, {"v": b"x" * 10_000_000})

    fetched = tmp_path / "fetched"
    fetcher = RecordingFetcher(redis_server.url, "rows", Verifier(SECRET), str(fetched))
    try:
        wait_for(lambda: fetcher.refused == 2, 10, message="the forged and huge entries refused")
        rows = read_returns(str(fetched))
        assert [(r["update"], r["iteration"], r["return"], r["recording"])
                for r in rows] == [(1, 0, 10.0, "iter_0000.npz"), (2, 1, 21.0, "iter_0001.npz"),
                                   (3, 2, None, None)], rows
        refusals = [r.getMessage() for r in caplog.records if "was refused" in r.getMessage()]
        assert "signature" in refusals[0], refusals
        # A row read before and added again (as to a server back empty) is not written twice.
        written = fetcher.returns_written
        (_, again), = client.xrange(keys.returns, count=1)
        client.xadd(keys.returns, again)
        time.sleep(2.5)  # two polls
        assert fetcher.returns_written == written and fetcher.refused == 2

        second = RecordingPublisher(RunTarget(redis_server.url, "rows", SECRET, (6, 2000), 60.0))
        second.add(paths[0], 1, 0)
        second.add_return(row(1, 5.0))
        second.close(10)
        wait_for(lambda: [r["return"] for r in read_returns(str(fetched))] == [5.0],
                 10,
                 message="the new run's returns alone")
    finally:
        fetcher.close()
    assert sorted(os.listdir(fetched)) == ["iter_0000.npz", RETURNS_FILE]
    client.close()


def test_a_trainer_that_only_publishes_records_its_history_for_viewers_and_runs_no_episode(
        redis_server, tmp_path):  # noqa: F811
    """No video_dir and no window: the worker here only records every policy (nothing is shown
    here, no episode is run for nobody), each recording reaches Redis, the final policy's at
    close(), and the private folder is gone after it. ``history=False`` starts no worker."""
    policy = LinearPolicy(4, 1)
    plotter = Plotter("InvertedPendulum-v5",
                      policy,
                      max_path_length=60,
                      window=False,
                      channel=redis_server.url,
                      experiment="publish-only",
                      secret=SECRET,
                      priority="normal").start()
    try:
        for iteration in range(3):
            policy.fill(0.2 * iteration - 0.3)
            plotter.update_plot(policy, iteration=iteration)
            wait_for(lambda: any(e["iteration"] == iteration for e in plotter.stats["history"]),
                     60,
                     message=f"iteration {iteration}'s history")
        policy.fill(0.5)
        plotter.update_plot(policy, iteration=3)  # closed at once: recorded at close()
        private = os.path.dirname(plotter.stats["history"][0]["path"])
        assert os.path.isdir(private) and not private.startswith(str(tmp_path))
    finally:
        plotter.close()
    stats = plotter.stats
    assert stats["episodes"] == 0 and stats["videos"] == 0, stats  # nothing run for nobody
    assert stats["history"][-1]["iteration"] == 3, stats["history"]
    assert not os.path.exists(private)

    client = redis.Redis.from_url(redis_server.url)
    keys = StateKeys("publish-only")
    members = [m.decode() for m in client.zrange(keys.index, 0, -1)]
    client.close()
    assert len(members) == len(stats["history"]) >= 4, members
    fetcher = RecordingFetcher(redis_server.url, "publish-only", Verifier(SECRET),
                               str(tmp_path / "fetched"))
    try:
        wait_for(lambda: fetcher.written == len(members), 30, message="every recording fetched")
    finally:
        fetcher.close()
    final = read_recording(str(tmp_path / "fetched" / "iter_0003.npz"))
    assert final.meta["iteration"] == 3 and len(final.states) > 1

    quiet = Plotter("InvertedPendulum-v5",
                    policy,
                    window=False,
                    channel=redis_server.url,
                    experiment="no-history",
                    secret=SECRET,
                    history=False).start()
    quiet.update_plot(policy, iteration=0)
    quiet.close()
    assert quiet.stats["worker_pids"] in ({}, None) and quiet.stats["history"] == []


def _recordings(folder, count):
    """``count`` short history recordings of the sled, updates 1 to ``count``."""
    target = write_history(str(folder), range(count), steps=5)
    return [os.path.join(target, f"iter_{iteration:04d}.npz") for iteration in range(count)]


def read_recording_bytes(folder):
    """A recording's file bytes: the other format, which the wire does not take."""
    with open(_recordings(folder, 1)[0], "rb") as file:
        return file.read()


def test_a_forged_shape_in_a_travelling_recording_is_refused_by_name(tmp_path):
    """The compact form's arrays are checked before use: planes that do not cover every step,
    or that are not bytes, are refused naming the array, with no traceback from numpy."""
    recording = read_recording(_recordings(tmp_path, 1)[0])
    data = compact_bytes(recording)
    copy = recording_from_compact(data, "update 1's recording", recording.model_mjb)
    assert np.array_equal(copy.states, recording.states.astype(np.float32))
    assert copy.model_mjb == recording.model_mjb and copy.meta == recording.meta
    arrays = dict(np.load(io.BytesIO(data), allow_pickle=False))
    forgeries = {
        "state": arrays["state"][:, :, :-1],  # one step short
        "action": arrays["action"].astype(np.float64),  # not bytes
        "reward": arrays["reward"][:2],  # not four planes
    }
    for name, forged in forgeries.items():
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **{**arrays, name: forged})
        with pytest.raises(RecordingError, match=f"update 1's recording.*the {name} array"):
            recording_from_compact(buffer.getvalue(), "update 1's recording", b"")
    with pytest.raises(RecordingError, match="cannot read the state recording update 1's"):
        recording_from_compact(b"PK\x03\x04 not a zip", "update 1's recording", b"")
    with pytest.raises(RecordingError, match="not an async_plotter state recording"):
        recording_from_compact(read_recording_bytes(tmp_path), "update 1's recording", b"")


def test_a_viewer_refuses_what_fails_its_check_and_fetches_the_rest(redis_server, tmp_path,
                                                                    caplog):  # noqa: F811
    paths = _recordings(tmp_path, 4)
    publisher = RecordingPublisher(RunTarget(redis_server.url, "checked", SECRET, (7, 1000), 60.0),
                                   kept=3)
    for number, path in enumerate(paths, start=1):
        publisher.add(path, number, number - 1)
    publisher.close(10)
    assert (publisher.sent, publisher.failed) == (4, 0)
    client = redis.Redis.from_url(redis_server.url)
    keys = StateKeys("checked")
    # Capped: the oldest went, its key too.
    members = [m.decode() for m in client.zrange(keys.index, 0, -1)]
    assert members == [f"{7:016x}:{n}" for n in (2, 3, 4)], members
    assert not client.exists(keys.recording(f"{7:016x}:1"))
    # One altered in Redis, one replaced by a value sealed under another secret.
    client.setrange(keys.recording(members[0]), 60, b"\xff\xff")
    forged = RecordingPublisher(
        RunTarget(redis_server.url, "forged", b"another secret entirely 0123456", (7, 1000), 60.0))
    forged.add(paths[2], 3, 2)
    forged.close(10)
    client.set(keys.recording(members[1]), client.get(StateKeys("forged").recording(members[1])))

    fetched = tmp_path / "fetched"
    fetcher = RecordingFetcher(redis_server.url, "checked", Verifier(SECRET), str(fetched))
    try:
        wait_for(lambda: fetcher.written + fetcher.refused >= 3, 10, message="three handled")
    finally:
        fetcher.close()
    assert sorted(os.listdir(fetched)) == ["iter_0003.npz"]
    assert fetcher.refused == 2
    refusals = [r.getMessage() for r in caplog.records if "was refused" in r.getMessage()]
    assert refusals and ("signature" in refusals[0] or "checksum" in refusals[0]), refusals
    # Nothing unsigned gets past a viewer with a secret.
    unsigned = RecordingPublisher(RunTarget(redis_server.url, "unsigned", None, (8, 1000), 60.0))
    unsigned.add(paths[0], 1, 0)
    unsigned.close(10)
    other = tmp_path / "unsigned"
    viewer = RecordingFetcher(redis_server.url, "unsigned", Verifier(SECRET), str(other))
    try:
        wait_for(lambda: viewer.refused, 10, message="the unsigned model refused")
    finally:
        viewer.close()
    assert not other.exists()
    client.close()


def test_huge_names_in_the_recordings_index_are_never_downloaded(redis_server, tmp_path,
                                                                 caplog):  # noqa: F811
    """Someone who may write the index adds names of 16 MiB, newer than the run's: the viewer
    reads the names at most 64 bytes each, refuses the rest once, and fetches the run's own."""
    paths = _recordings(tmp_path, 2)
    publisher = RecordingPublisher(RunTarget(redis_server.url, "named", SECRET, (9, 1000), 60.0))
    for number, path in enumerate(paths, start=1):
        publisher.add(path, number, number - 1)
    publisher.close(10)
    client = redis.Redis.from_url(redis_server.url)
    keys = StateKeys("named")
    client.zadd(keys.index,
                {f"{9:016x}:{n}:".encode() + b"x" * (16 << 20): 100 + n
                 for n in range(3)})
    before = client.info("stats")["total_net_output_bytes"]
    fetcher = RecordingFetcher(redis_server.url, "named", Verifier(SECRET), str(tmp_path / "f"))
    try:
        wait_for(lambda: fetcher.written == 2, 20, message="the run's two recordings")
        time.sleep(1.5)  # more polls: what was refused is not read again
    finally:
        fetcher.close()
    sent = client.info("stats")["total_net_output_bytes"] - before
    client.close()
    assert sorted(os.listdir(tmp_path / "f")) == ["iter_0000.npz", "iter_0001.npz"]
    assert fetcher.refused == 1
    assert [
        r for r in caplog.records if "index" in r.getMessage() and "64 bytes" in r.getMessage()
    ], [r.getMessage() for r in caplog.records]
    assert sent < 2 * 1024 * 1024, f"the viewer downloaded {sent / 2**20:.1f} MiB"


def test_recordings_written_while_redis_is_away_are_sent_once_it_is_back(
        redis_server, tmp_path, caplog):  # noqa: F811
    """The server vanishes (SIGKILL: it comes back empty): the recordings written meanwhile wait
    and are sent within the retry's bound (5 s, with jitter) of its return, with the model and
    the recording it lost; a viewer then fetches them all."""
    paths = _recordings(tmp_path, 3)
    publisher = RecordingPublisher(RunTarget(redis_server.url, "outage", SECRET, (3, 1000), 60.0))
    try:
        publisher.add(paths[0], 1, 0)
        wait_for(lambda: publisher.sent == 1, 10, message="the first recording sent")
        redis_server.kill()
        publisher.add(paths[1], 2, 1)
        publisher.add(paths[2], 3, 2)
        time.sleep(3.0)
        assert (publisher.sent, publisher.failed) == (1, 0)
        assert any("did not reach Redis" in r.getMessage() for r in caplog.records)
        redis_server.start()
        back = time.monotonic()
        wait_for(lambda: publisher.sent == 3, 30, message="the waiting recordings sent")
        assert time.monotonic() - back < 6.0 + 1.0  # the longest wait, jittered, and the send
        assert publisher.resent == 1  # the one the server held before it went
    finally:
        publisher.close(5)
    fetched = tmp_path / "fetched"
    fetcher = RecordingFetcher(redis_server.url, "outage", Verifier(SECRET), str(fetched))
    try:
        wait_for(lambda: fetcher.written == 3, 10, message="every recording fetched")
    finally:
        fetcher.close()
    assert sorted(os.listdir(fetched)) == ["iter_0000.npz", "iter_0001.npz", "iter_0002.npz"]


class _Replay:
    """``async-plotter replay URL --experiment NAME --http 0 ARGUMENTS`` in a session of its
    own, its output read line by line; stopped with SIGINT (``stop``), killed if a test fails."""

    def __init__(self, url, experiment, *arguments, env):
        self.process = subprocess.Popen([
            sys.executable, "-m", "async_plotter.cli", "replay", url, "--experiment", experiment,
            "--http", "0", *arguments
        ],
                                        env=env,
                                        stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT,
                                        text=True,
                                        start_new_session=True,
                                        preexec_fn=default_sigint)
        self.lines = []

    def read_until(self, text):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            self.lines.append(line)
            if text in line or not line:
                break
        assert any(text in line for line in self.lines), "".join(self.lines)

    def stop(self):
        """Ctrl-C: it must end at once with exit code 0; every line it printed."""
        self.process.send_signal(signal.SIGINT)
        assert self.process.wait(30) == 0
        self.lines.extend(self.process.stdout.readlines())
        return self.lines

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process.stdout.close()


def test_replay_waits_for_a_trainers_history_then_shows_and_draws_it(redis_server,
                                                                     tmp_path):  # noqa: F811
    """End to end, the viewer first: ``replay redis://... --video-dir`` waits (no warning) until
    a trainer publishes, fetches its history, serves it, draws the newest to mp4, maps no
    TensorFlow, and ends at Ctrl-C."""
    into, drawn = tmp_path / "into", tmp_path / "drawn"
    environment = dict(os.environ, ASYNC_PLOTTER_SECRET=SECRET.decode())
    with _Replay(redis_server.url,
                 "shown",
                 "--into",
                 str(into),
                 "--video-dir",
                 str(drawn),
                 env=environment) as replay:
        replay.read_until("waiting for the history of experiment 'shown'")
        _train(redis_server.url, "shown", tmp_path / "trainer", 3)
        # The recordings travel, and returns.csv is made again from the returns.
        kept = sorted(os.listdir(tmp_path / "trainer" / "history"))
        assert RETURNS_FILE in kept
        replay.read_until(" at http://")
        wait_for(lambda: sorted(os.listdir(into)) == kept, 20, message=f"{kept} fetched")
        wait_for(
            lambda: read_returns(str(into)) == read_returns(str(tmp_path / "trainer" / "history")),
            20,
            message="every return fetched")
        # The newest is drawn (older ones that came meanwhile may be skipped).
        wait_for(lambda: (drawn / "iter_0002.mp4").exists(), 60, message="iter_0002.mp4 drawn")
        with open(f"/proc/{replay.process.pid}/maps") as maps:
            assert "tensorflow" not in maps.read()
        lines = replay.stop()
    assert not any("refused" in line or "Traceback" in line for line in lines), lines


def test_replay_draws_with_osmesa_where_egl_makes_no_context(redis_server, tmp_path):  # noqa: F811
    """``replay redis://... --video-dir`` draws later, in a thread: where EGL (only our
    default) makes no context, it runs itself again with OSMesa before serving, as ``render``
    does, and then draws what it fetches (a recording that does not say how it was drawn: the
    worker's size and real time); before, every recording failed with a warning."""
    drawn = tmp_path / "drawn"
    environment = dict(os.environ,
                       ASYNC_PLOTTER_SECRET=SECRET.decode(),
                       __EGL_VENDOR_LIBRARY_FILENAMES=str(tmp_path / "no_egl_vendor.json"))
    environment.pop("MUJOCO_GL", None)
    with _Replay(redis_server.url, "fallback", "--video-dir", str(drawn),
                 env=environment) as replay:
        replay.read_until("waiting for the history of experiment 'fallback'")
        assert any("drawing with OSMesa instead" in line for line in replay.lines), replay.lines
        publisher = RecordingPublisher(
            RunTarget(redis_server.url, "fallback", SECRET, (11, 1000), 60.0))
        publisher.add(_recordings(tmp_path / "run", 1)[0], 1, 0)
        publisher.close(10)
        wait_for(lambda: (drawn / "iter_0000.mp4").exists(), 60, message="iter_0000.mp4 drawn")
        # Stopped at once, most often while viser starts: a Ctrl-C there ends it cleanly too.
        lines = replay.stop()
    assert not any("could not draw" in line or "Traceback" in line for line in lines), lines


def test_replay_names_what_a_redis_source_needs(tmp_path, capsys, monkeypatch):
    """Mistakes end at once with exit code 2 and a line naming the fix."""
    from async_plotter.cli import main

    monkeypatch.delenv("ASYNC_PLOTTER_SECRET", raising=False)
    folder = write_history(str(tmp_path), range(1), steps=5)
    cases = [
        (["replay", "redis://127.0.0.1:1/0"], "needs --experiment NAME"),
        (["replay", "redis://127.0.0.1:1/0", "-e", "x"], "nothing published can be checked"),
        (["replay", folder, "--video-dir", str(tmp_path / "v")], "use async-plotter render"),
    ]
    for argv, expected in cases:
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2, argv
        assert expected in capsys.readouterr().err, argv


def test_a_viewer_follows_a_trainer_restart_and_a_restarted_viewer_fetches_what_is_kept(
        redis_server, tmp_path):  # noqa: F811
    """A trainer started again is a new run: a viewer's folder then holds the new run's
    recordings alone (a history shows one run). A viewer started again fetches all it missed."""
    paths = _recordings(tmp_path, 3)
    first = RecordingPublisher(RunTarget(redis_server.url, "restarts", SECRET, (1, 1000), 60.0))
    first.add(paths[0], 1, 0)
    first.add(paths[1], 2, 1)
    first.close(10)
    fetched = tmp_path / "fetched"
    fetcher = RecordingFetcher(redis_server.url, "restarts", Verifier(SECRET), str(fetched))
    try:
        wait_for(lambda: fetcher.written == 2, 10, message="the first run's recordings")
        second = RecordingPublisher(RunTarget(redis_server.url, "restarts", SECRET, (2, 2000),
                                              60.0))
        second.add(paths[2], 1, 2)
        second.close(10)
        wait_for(lambda: sorted(os.listdir(fetched)) == ["iter_0002.npz"],
                 10,
                 message="the new run's recording alone")
    finally:
        fetcher.close()
    again = RecordingFetcher(redis_server.url, "restarts", Verifier(SECRET), str(tmp_path / "2"))
    try:
        wait_for(lambda: again.written == 1, 10, message="a restarted viewer's fetch")
    finally:
        again.close()
    assert os.listdir(tmp_path / "2") == ["iter_0002.npz"]


def _publish_run(url, experiment, run, folder, iterations, steps, resumes_after=None):
    """One run's history recordings, ``steps`` long (which run wrote a file is seen in it), and
    their returns (``steps * 100 + iteration``). Update 0 is the initial policy: iteration -1 in a
    fresh run (no iteration), the snapshot's in a resumed one (its first update shows it)."""
    target = RunTarget(url, experiment, SECRET, run, 60.0, resumes_after=resumes_after)
    publisher = RecordingPublisher(target)
    history = write_history(str(folder), range(max(iterations) + 1), steps=steps)
    paths = [os.path.join(history, f"iter_{i:04d}.npz") for i in range(max(iterations) + 1)]
    for update, iteration in enumerate(iterations):
        publisher.add(paths[max(iteration, 0)], update, None if iteration < 0 else iteration)
        publisher.add_return(
            ReturnRow(update, None if iteration < 0 else iteration, float(steps * 100 + iteration),
                      steps, 1.7e9, 0.01, True))
    publisher.close(10)
    assert (publisher.sent, publisher.failed) == (len(iterations), 0)


def _history_of(folder):
    """``{file: steps}`` of the recordings in ``folder``, and ``[(iteration, return)]`` of its
    ``returns.csv``'s rows as written (a policy recorded twice has two)."""
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    files = {}
    for name in names:
        try:
            if name.endswith(".npz"):
                files[name] = len(read_recording(os.path.join(folder, name)).states)
        except RecordingError:
            pass  # removed since the listing (a new run's files replace the run before's)
    try:
        with open(os.path.join(folder, RETURNS_FILE), encoding="utf-8") as file:
            rows = [(int(r["iteration"]), float(r["return"])) for r in csv.DictReader(file)]
    except FileNotFoundError:
        rows = []
    return files, rows


def test_a_resumed_runs_viewers_keep_the_history_of_the_runs_it_resumes(redis_server,
                                                                        tmp_path):  # noqa: F811
    """A chain of resumes over Redis, as the trainer's folder keeps it: run A records its
    initial policy and iterations 0-10; B resumes A's snapshot of 5 (recording 5 again, then
    6-9); C resumes B's of 8 (8-12). A viewer that followed all three and one started after C
    hold the same history: A's initial policy and 0-4, B's 5-7, C's 8-12, each file of the run
    that recorded it last; the returns likewise, a snapshot's policy recorded twice with two
    rows. The runs' later recordings are gone from Redis. A new run then starts afresh."""
    url, name = redis_server.url, "chain"
    followed = tmp_path / "followed"
    fetcher = RecordingFetcher(url, name, Verifier(SECRET), str(followed))
    try:
        _publish_run(url, name, (1, 1000), tmp_path / "a", [-1] + list(range(11)), steps=5)
        wait_for(lambda: fetcher.written == 12, 20, message="run A's recordings")
        _publish_run(url, name, (2, 2000), tmp_path / "b", list(range(5, 10)), 6, resumes_after=5)
        after_b = {"update_0000.npz": 5}
        after_b.update({f"iter_{i:04d}.npz": 5 if i < 5 else 6 for i in range(10)})
        settles(lambda: _history_of(str(followed)),
                (after_b, [(-1, 499.0)] + [(i, 500.0 + i)
                                           for i in range(6)] + [(i, 600.0 + i)
                                                                 for i in range(5, 10)]), 20)
        _publish_run(url, name, (3, 3000), tmp_path / "c", list(range(8, 13)), 7, resumes_after=8)
        expected_files = {"update_0000.npz": 5}
        expected_files.update({f"iter_{i:04d}.npz": 5 for i in range(5)})
        expected_files.update({f"iter_{i:04d}.npz": 6 for i in range(5, 8)})
        expected_files.update({f"iter_{i:04d}.npz": 7 for i in range(8, 13)})
        expected_rows = ([(-1, 499.0)] + [(i, 500.0 + i) for i in range(6)] +
                         [(i, 600.0 + i) for i in range(5, 9)] + [(i, 700.0 + i)
                                                                  for i in range(8, 13)])
        settles(lambda: _history_of(str(followed)), (expected_files, expected_rows), 20)
        late = tmp_path / "late"
        again = RecordingFetcher(url, name, Verifier(SECRET), str(late))
        try:
            settles(lambda: _history_of(str(late)), (expected_files, expected_rows), 20)
        finally:
            again.close()
        client = redis.Redis.from_url(url)
        keys = StateKeys(name)
        # Redis holds the chain's alone: what A did after 5 and B after 8 is gone, keys and all.
        assert client.zcard(keys.index) == 1 + 6 + 4 + 5
        assert not client.exists(keys.recording(f"{1:016x}:{7}"))  # A's iteration 6
        assert client.xlen(keys.returns) == 1 + 6 + 4 + 5
        client.close()
        _publish_run(url, name, (4, 4000), tmp_path / "d", [-1, 0], steps=5)
        settles(lambda: _history_of(str(followed)), ({
            "update_0000.npz": 5,
            "iter_0000.npz": 5
        }, [(-1, 499.0), (0, 500.0)]), 20)
    finally:
        fetcher.close()


def test_serve_follows_a_published_history_while_it_is_asked_for(redis_server,
                                                                 tmp_path):  # noqa: F811
    """serve's fetchers of published histories: bounded in number (the one asked for least
    recently goes), stopped with their files a while after nobody asks, followed again when
    asked again; nothing left at close."""
    from async_plotter.serve.published import PublishedHistories

    paths = _recordings(tmp_path, 2)
    for run, name in enumerate(("a", "b", "c"), start=1):
        publisher = RecordingPublisher(RunTarget(redis_server.url, name, SECRET, (run, 1000), 60.0))
        for number, path in enumerate(paths, start=1):
            publisher.add(path, number, number - 1)
        publisher.close(10)
    histories = PublishedHistories(redis_server.url,
                                   Verifier(SECRET),
                                   watched=lambda folder: False,
                                   limit=2,
                                   linger=2.0)
    try:
        a = histories.folder("a", 10)
        wait_for(lambda: sorted(os.listdir(a)) == ["iter_0000.npz", "iter_0001.npz"], 10)
        b = histories.folder("b", 10)
        c = histories.folder("c", 10)  # over the limit: a, asked for least recently, goes
        wait_for(lambda: not os.path.exists(a), 10, message="the first history let go")
        assert os.path.isdir(b) and os.path.isdir(c)
        wait_for(lambda: not os.path.exists(b) and not os.path.exists(c),
                 10,
                 message="the histories nobody asked for again let go")
        again = histories.folder("a", 10)
        assert again != a
        wait_for(lambda: len(os.listdir(again)) == 2, 10, message="a followed again")
        assert histories.folder("nobody-publishes", 0.5) is None
    finally:
        histories.close()
    assert not os.path.exists(os.path.dirname(again))
