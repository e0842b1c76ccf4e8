"""``async-plotter view`` and ``list`` against a real redis-server, with the trainer and the
viewer in separate processes, as on two machines."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request

import psutil
import pytest
import redis

from async_plotter.cli import main
from tests.conftest import wait_for
from tests.redis_helpers import (applied_updates, read_log, start_trainer, start_viewer,
                                 viewer_command)
from tests.redis_server import redis_server  # noqa: F401

SECRET = "a shared secret of decent length"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


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


def _trainer(processes, url, experiment, log, *args, secret=SECRET):
    env = {"ASYNC_PLOTTER_SECRET": secret} if secret else {"ASYNC_PLOTTER_SECRET": ""}
    process = start_trainer(url, experiment, log, *args, **env)
    processes.append(process)
    return process


def _viewer(processes, url, experiment, log, *args, secret=SECRET):
    env = {"ASYNC_PLOTTER_SECRET": secret} if secret else {"ASYNC_PLOTTER_SECRET": ""}
    process = start_viewer(url, experiment, log, *args, **env)
    processes.append(process)
    return process


def _summary(trainer, timeout=60):
    """The trainer's JSON line, printed once it has published everything."""
    line = trainer.stdout.readline()
    assert line, f"the trainer exited early with code {trainer.poll()}"
    return json.loads(line)


def _wait_applied(log, predicate, timeout, what):
    """The update numbers the viewer applied, once there are some and ``predicate`` holds."""

    def check():
        numbers = applied_updates(read_log(log))
        return numbers if numbers and predicate(numbers) else None

    return wait_for(check, timeout, message=f"{what}; viewer log:\n{read_log(log)[-3000:]}")


def _stop(viewer, timeout=15):
    """Ctrl-C the viewer: it must exit with 0 and take its worker processes with it."""
    workers = [
        child for child in psutil.Process(viewer.pid).children(recursive=True)
        if "spawn_main" in " ".join(child.cmdline())
    ]
    viewer.send_signal(signal.SIGINT)
    code = viewer.wait(timeout)
    wait_for(lambda: not _alive(workers), 5, message="the viewer's workers to exit with it")
    return code


def test_viewer_first_survives_redis_restart_and_trainer_restart(processes, redis_server, tmp_path):
    viewer_log, trainer_log = str(tmp_path / "viewer.log"), str(tmp_path / "trainer.log")
    videos = tmp_path / "videos"
    viewer = _viewer(processes, redis_server.url, "swimmer-7", viewer_log, "--video-dir",
                     str(videos))
    wait_for(lambda: "waiting for experiment" in read_log(viewer_log), 20, message="viewer start")

    # 10 s of updates, 20 per second; Redis dies and comes back in the middle.
    trainer = _trainer(processes, redis_server.url, "swimmer-7", trainer_log, "--count", "200",
                       "--interval", "0.05", "--hold")
    before = max(_wait_applied(viewer_log, lambda n: max(n) >= 3, 30, "first updates"))
    redis_server.kill()
    time.sleep(1.0)
    redis_server.start()
    # Updates published after the restart reach the viewer (>= 20 were published meanwhile).
    _wait_applied(viewer_log, lambda n: max(n) > before + 20, 30, "updates after the restart")
    summary = _summary(trainer)
    # Stalls of a loaded machine aside, no call waited for Redis (see test_redis_channel.py for
    # a frozen server).
    assert summary["median_update_plot_s"] < 0.005 and summary["worst_update_plot_s"] < 1.0
    _wait_applied(viewer_log, lambda n: max(n) == 200, 20, "the trainer's last update")
    numbers = applied_updates(read_log(viewer_log))
    assert numbers == sorted(numbers), "the viewer went back to an older update"
    wait_for(lambda: (videos / "iter_0199.mp4").exists(), 20, message="the last update's video")
    trainer.stdin.close()
    assert trainer.wait(15) == 0
    log = read_log(trainer_log)
    assert log.count("is unreachable") == 1, log  # one warning for the whole outage
    assert "Traceback" not in log

    # The trainer restarts with the same policy: the running worker follows the new run.
    _restart_trainer(processes, redis_server.url, trainer_log, viewer_log, [],
                     "restarted with the same policy structure")
    # ... and with a bigger policy: the viewer reloads the structure and restarts its worker.
    _restart_trainer(processes, redis_server.url, trainer_log, viewer_log, ["--extra", "3"],
                     "11 float32 parameters")
    assert read_log(viewer_log).count("float32 parameters") == 2
    assert len(_workers(viewer)) == 2  # rollout and render, the old pair gone
    assert _stop(viewer) == 0  # Ctrl-C


def _restart_trainer(processes, url, trainer_log, viewer_log, args, marker):
    # Only what the viewer logs from here on is about the new run. Its worker may apply the new
    # run's first updates before the viewer logs the restart: the worker reads the parameters
    # straight from Redis, the viewer notices the new run at its next poll.
    start = len(read_log(viewer_log))
    trainer = _trainer(processes, url, "swimmer-7", trainer_log, "--count", "5", "--hold", *args)
    _summary(trainer)
    wait_for(lambda: marker in read_log(viewer_log)[start:],
             30,
             message=f"{marker!r}; log:\n{read_log(viewer_log)[-2000:]}")
    wait_for(lambda: "applied update 5 " in read_log(viewer_log)[start:],
             30,
             message=f"the new run's newest update; log:\n{read_log(viewer_log)[-2000:]}")
    trainer.stdin.close()
    assert trainer.wait(15) == 0


def _workers(viewer):
    """The viewer's worker processes (rollout and render)."""
    return wait_for(
        lambda: [
            child for child in psutil.Process(viewer.pid).children()
            if "spawn_main" in " ".join(child.cmdline())  # not the resource tracker
        ] or None,
        10,
        message="the viewer's worker processes")


def _alive(processes):
    alive = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_trainer_first_newest_at_once_live_page_and_a_killed_viewer_leaves_nothing(
        processes, redis_server, tmp_path):
    viewer_log, trainer_log = str(tmp_path / "viewer.log"), str(tmp_path / "trainer.log")
    trainer = _trainer(processes, redis_server.url, "late", trainer_log, "--count", "30", "--hold")
    _summary(trainer)
    time.sleep(0.3)  # the sender thread's last write
    viewer = _viewer(processes, redis_server.url, "late", viewer_log, "--http", "0", "--priority",
                     "normal")
    numbers = _wait_applied(viewer_log, lambda n: True, 30, "an applied update")
    assert numbers[0] == 30, "a late viewer must start with the newest update, not replay"
    # The trainer's metrics reach the live page's learning curve.
    url = wait_for(lambda: re.search(r"live view at (\S+)", read_log(viewer_log)),
                   20,
                   message="the live page's address").group(1)
    points = _curve_points(url)
    assert [point["AverageReturn"] for point in points] == [float(i) for i in range(30)]
    assert [point["iteration"] for point in points] == list(range(30))
    workers = _workers(viewer)
    # SIGKILL: no chance to clean up. Its workers notice their parent is gone and exit.
    viewer.kill()
    viewer.wait(5)
    wait_for(lambda: not _alive(workers), 5, message="orphaned workers to exit")
    trainer.stdin.close()
    assert trainer.wait(15) == 0


def _curve_points(url, timeout=10.0):
    """The learning-curve points the live page's event stream sends first."""
    parts = urllib.parse.urlsplit(url)
    events = urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/events"))
    points = []
    with urllib.request.urlopen(events, timeout=timeout) as stream:
        deadline = time.monotonic() + timeout
        event = None
        while time.monotonic() < deadline and len(points) < 30:
            line = stream.readline().decode().strip()
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "metrics":
                points.extend(json.loads(line.split(":", 1)[1])["points"])
    return [_flatten(point) for point in points]


def _flatten(point):
    """A curve point ({"iteration": i, "values": {...}}) as {name: value, "iteration": i}."""
    return dict(point["values"], iteration=point["iteration"])


def test_wrong_secret_is_rejected_and_list_shows_experiments(processes, redis_server, tmp_path,
                                                             capsys):
    viewer_log, trainer_log = str(tmp_path / "viewer.log"), str(tmp_path / "trainer.log")
    trainer = _trainer(processes, redis_server.url, "guarded", trainer_log, "--count", "3",
                       "--hold")
    _summary(trainer)
    viewer = _viewer(processes,
                     redis_server.url,
                     "guarded",
                     viewer_log,
                     "--video-dir",
                     str(tmp_path / "videos"),
                     secret="not the secret the trainer used")
    wait_for(lambda: "signature does not match" in read_log(viewer_log),
             20,
             message=f"a rejection; log:\n{read_log(viewer_log)}")
    time.sleep(1.0)
    assert viewer.poll() is None, "a forged structure must not stop the viewer"
    assert not applied_updates(read_log(viewer_log))
    assert _stop(viewer) == 0

    client = redis.Redis.from_url(redis_server.url)
    client.set("async_plotter:junk:structure", b"garbage")
    client.set("async_plotter:not a name:structure", b"garbage")
    client.close()
    assert main(["list", redis_server.url]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert set(lines) == {"guarded", "junk"}
    assert "CartPole-v1" in lines["guarded"] and " yes " in lines["guarded"]
    assert "8 float32" in lines["guarded"] and "unreadable" in lines["junk"]
    trainer.stdin.close()
    assert trainer.wait(15) == 0


def test_keras_policy_end_to_end_unsigned_with_trust(processes, redis_server, tmp_path):
    viewer_log, trainer_log = str(tmp_path / "viewer.log"), str(tmp_path / "trainer.log")
    videos = tmp_path / "videos"
    trainer_args = ["--keras", "--env", "Swimmer-v5", "--count", "3", "--hold"]
    trainer = _trainer(processes,
                       redis_server.url,
                       "keras-swimmer",
                       trainer_log,
                       *trainer_args,
                       secret=None)
    _summary(trainer)
    assert "--trust-unsigned" in read_log(trainer_log)  # the trainer warned: no secret
    viewer_args = [
        "--video-dir",
        str(videos), "--tensorboard-dir",
        str(tmp_path / "tb"), "--trust-unsigned", "--priority", "normal", "--rollouts"
    ]
    viewer = _viewer(processes,
                     redis_server.url,
                     "keras-swimmer",
                     viewer_log,
                     *viewer_args,
                     secret=None)
    wait_for(lambda: (videos / "iter_0002.mp4").exists(),
             60,
             message=f"the Keras policy's video; log:\n{read_log(viewer_log)[-3000:]}")
    assert (videos / "iter_0002.mp4").stat().st_size > 1000
    assert "Traceback" not in read_log(viewer_log)
    assert _stop(viewer) == 0
    # The viewer wrote the remote run into TensorBoard too (read back in this process).
    from tests.test_tensorboard import accumulate

    assert 2 in [image.step for image in accumulate(tmp_path / "tb").Images("rollout/Swimmer-v5")]
    trainer.stdin.close()
    assert trainer.wait(15) == 0


@pytest.mark.parametrize("args, message", [
    (["view", "http://h:1/0", "-e", "x", "--video-dir", "{tmp}"], "scheme 'http'"),
    (["view", "redis://h:1/0", "--video-dir", "{tmp}"], "--experiment"),
    (["view", "redis://h:1/0", "-e", "a/b", "--video-dir", "{tmp}"], "not a valid name"),
    (["view", "redis://h:1/0", "-e", "x"], "nothing to show"),
    (["view", "redis://h:1/0", "-e", "x", "--video-dir", "{tmp}", "--states", "--rollouts"
      ], "not allowed with"),
    (["view", "redis://h:1/0", "-e", "x", "--window"], "needs a display"),
    (["view", "redis://h:1/0", "-e", "x", "--video-dir", "{tmp}", "--fps", "0"], "--fps"),
    (["view", "redis://h:1/0", "-e", "x", "--video-dir", "{tmp}", "--max-restarts", "-1"
      ], "--max-restarts"),
    (["view", "redis://h:1/0", "-e", "x", "--http", "0.0.0.0:8080"], "token"),
    (["view", "redis://h:1/0", "-e", "x", "--video-dir", "{tmp}", "--secret-file", "/nonexistent"
      ], "cannot read the secret file"),
    (["view", "redis://h:1/0", "-e", "x", "--video-dir", "{tmp}", "--http-token", "t"
      ], "--http-token needs --http"),
    (["list", "ftp://h/0"], "scheme 'ftp'"),
])
def test_bad_arguments_exit_2_with_a_message(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ASYNC_PLOTTER_SECRET", SECRET)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("ASYNC_PLOTTER_HTTP_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main([arg.replace("{tmp}", str(tmp_path)) for arg in args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_no_secret_needs_trust_unsigned(tmp_path, monkeypatch):
    monkeypatch.delenv("ASYNC_PLOTTER_SECRET", raising=False)
    result = subprocess.run(
        viewer_command() +
        ["view", "redis://127.0.0.1:1/0", "-e", "x", "--video-dir",
         str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            k: v
            for k, v in os.environ.items() if k != "ASYNC_PLOTTER_SECRET"
        })
    assert result.returncode == 2
    assert "no secret" in result.stderr and "--trust-unsigned" in result.stderr
