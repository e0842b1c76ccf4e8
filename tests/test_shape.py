"""The extension points a user or a new feature builds on: sinks of one's own, the sink registry,
the channel interfaces, typed worker messages, and the one rule for live mode."""
import inspect
import json
import sys
import threading

import numpy as np
import pytest

from async_plotter import EpisodeEnd, EpisodeInfo, FrameSink, InvalidArgumentError, Plotter
from async_plotter.channel.base import ParamReader, ParamWriter, metrics_fit
from async_plotter.channel.redis.reader import RedisReader
from async_plotter.channel.redis.writer import RedisWriter
from async_plotter.channel.shm import SharedMemoryReader, SharedMemoryWriter
from async_plotter.render.stream import StreamKind, UnknownMessage
from async_plotter.worker import render_process
from async_plotter.worker.sinks import (HttpSpec, SinkContext, SinkSpec, TensorBoardSpec, VideoSpec,
                                        WindowSpec, build_sinks, register_sink)
from async_plotter.worker.status import StatusKind, StatusSender, UnknownReport, report_kind
from async_plotter.worker.supervisor import WorkerSupervisor, new_worker_stats
from tests.conftest import wait_for
from tests.policies import LinearPolicy


class EpisodeLog(FrameSink):
    """A user's sink: one JSON line per episode, written in the render process."""

    def __init__(self, path):
        self.path = path
        self.log = None  # opened in attach(), in the render process

    def attach(self, scene):
        self.log = open(self.path, "a", encoding="utf-8")
        self.frames = []

    def begin_episode(self, episode):
        self.frames = []

    def add_frame(self, frame, episode):
        self.frames.append(frame)

    def end_episode(self, episode, end):
        first = self.frames[0]
        self.log.write(
            json.dumps({
                "kind": "episode",
                "iteration": episode.iteration,
                "update": episode.update,
                "frames": len(self.frames),
                "shape": list(first.shape),
                "std": float(first.std()),
                "steps": end.steps,
                "tensorflow": "tensorflow" in sys.modules,
            }) + "\n")
        self.log.flush()

    def on_metrics(self, iteration, metrics):
        self.log.write(json.dumps({"kind": "metrics", "iteration": iteration, **metrics}) + "\n")
        self.log.flush()

    def close(self):
        self.log.write(json.dumps({"kind": "closed"}) + "\n")
        self.log.close()


def _lines(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_user_sink_gets_every_episode_frame_and_metric(tmp_path, no_leftovers):
    log = tmp_path / "episodes.jsonl"
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=30,
                 window=False,
                 fps=300,
                 sinks=[EpisodeLog(str(log))]) as plotter:
        policy.fill(0.3)
        plotter.update_plot(policy, iteration=3, metrics={"AverageReturn": 4.5})
        wait_for(lambda: any(e == {
            **e, "kind": "episode",
            "iteration": 3
        } for e in _lines(log)),
                 90,
                 message="an episode of iteration 3 in the user's sink")
    entries = _lines(log)
    episode = next(e for e in entries if e["kind"] == "episode" and e["iteration"] == 3)
    assert episode["frames"] == 31 and episode["steps"] == 30  # the reset pose and 30 steps
    assert episode["shape"][2] == 3 and episode["std"] > 10  # real pixels of the scene
    assert not episode["tensorflow"], "the render process must never import TensorFlow"
    assert {"kind": "metrics", "iteration": 3, "AverageReturn": 4.5} in entries
    assert entries[-1] == {"kind": "closed"}
    # No video_dir, no window: the user's sink alone is a reason to run the worker.
    assert plotter.stats["updates_applied"] >= 1


def test_a_sink_that_is_not_a_frame_sink_or_does_not_pickle_is_named(tmp_path):
    with pytest.raises(InvalidArgumentError,
                       match=r"sinks\[0\] \(object\) is not an "
                       r"async_plotter.FrameSink"):
        Plotter("CartPole-v1", LinearPolicy(4, 2), sinks=[object()])
    holds_a_lock = EpisodeLog(str(tmp_path / "x"))
    holds_a_lock.lock = threading.Lock()
    with pytest.raises(InvalidArgumentError,
                       match=r"sinks\[1\] \(EpisodeLog\) cannot be sent "
                       r"to the render process.*attach\(\)"):
        Plotter("CartPole-v1", LinearPolicy(4, 2), sinks=[EpisodeLog("y"), holds_a_lock])
    with pytest.raises(InvalidArgumentError, match="sinks must be a list of FrameSink"):
        Plotter("CartPole-v1", LinearPolicy(4, 2), sinks=EpisodeLog("z"))


def test_the_registry_builds_registered_specs_and_refuses_others():

    class Unregistered(SinkSpec):
        pass

    class Marker(SinkSpec):
        pass

    made = []
    register_sink(Marker, lambda spec, context: made.append(context.title) or FrameSink())
    context = SinkContext("frames", 30.0, "Env-v0", 3.0, status=None)
    sinks = build_sinks([Marker()], context)
    assert len(sinks) == 1 and isinstance(sinks[0], FrameSink) and made == ["Env-v0"]
    with pytest.raises(TypeError, match="no sink is registered for Unregistered"):
        build_sinks([Unregistered()], context)


def _config():
    from tests.test_redis_channel import _config as config_with_a_video_dir

    return config_with_a_video_dir().with_sinks(())


def test_live_mode_follows_from_the_sinks_alone():
    config = _config()
    recording = config.with_sinks([VideoSpec("/videos")])
    assert not recording.live and recording.records and recording.sinks == (VideoSpec("/videos"), )
    watched = config.with_sinks([VideoSpec("/videos"), WindowSpec()])
    assert watched.live and watched.records
    page = config.with_sinks([HttpSpec(address=None)])
    assert page.live and not page.records  # a page alone may drop stale steps
    assert config.with_sinks([TensorBoardSpec("/tb")]).records  # its images keep every step
    rollout = watched.for_rollout()
    assert rollout.sinks == () and rollout.live  # the rollout process keeps the mode only
    assert not watched.with_sinks(()).live  # what a trainer publishes to Redis


@pytest.mark.parametrize("writer, reader", [(SharedMemoryWriter, SharedMemoryReader),
                                            (RedisWriter, RedisReader)])
def test_both_channels_implement_the_channel_interfaces(writer, reader):
    for protocol, implementation in ((ParamWriter, writer), (ParamReader, reader)):
        wanted = {
            name
            for name, _ in inspect.getmembers(protocol)
            if not name.startswith("_") and name not in dir(object)
        }
        assert wanted and wanted <= set(dir(implementation)), (implementation, wanted)


def test_the_local_channel_carries_parameters_and_metrics_through_its_address():
    delivered = []
    writer = SharedMemoryWriter(3,
                                np.float32,
                                deliver_metrics=lambda i, m: delivered.append((i, m)))
    reader = writer.address().open_reader()
    try:
        writer.publish(np.array([1, 2, 3], np.float32), 4, 10)
        update = reader.wait(5.0)
        assert update.number == 0 and update.iteration == 4 and list(update.params) == [1, 2, 3]
        assert writer.post_metrics(4, {"AverageReturn": 1.5})
        assert delivered == [(4, {"AverageReturn": 1.5})]
        too_many = {f"m{i}": 1.0 for i in range(1000)}
        assert not metrics_fit(4, too_many) and not writer.post_metrics(4, too_many)
        assert len(delivered) == 1
    finally:
        reader.close()
        writer.close(1.0)


def test_worker_reports_are_typed_and_unknown_ones_are_errors():
    import multiprocessing

    receive, send = multiprocessing.Pipe(duplex=False)
    sender = StatusSender(send, "render")
    with pytest.raises(TypeError, match="StatusKind"):
        sender.send("frames", count=1)
    sender.send(StatusKind.FRAMES, count=2)
    kind, payload = receive.recv()
    assert report_kind(kind) is StatusKind.FRAMES and payload["count"] == 2
    with pytest.raises(UnknownReport, match="'framez'"):
        report_kind("framez")

    heard = []
    stats = new_worker_stats()
    supervisor = WorkerSupervisor(_config(),
                                  lambda: None,
                                  stats,
                                  listener=lambda *a: heard.append(a))

    class Pair:
        errors = {}

    supervisor._apply("framez", {"role": "render"}, Pair())
    assert "unknown report 'framez'" in stats["last_error"] and heard == []
    assert Pair.errors == {"render": "unknown report 'framez' from the plot worker"}
    supervisor._apply("frames", {"role": "render", "count": 5}, Pair())
    assert stats["frames"] == 5 and heard == [("frames", {"role": "render", "count": 5})]


def test_the_render_process_refuses_messages_it_does_not_know():
    assert render_process._checked((StreamKind.BEGIN, EpisodeInfo(0, None, 0)))
    for message in (("begin", None), (StreamKind.END, ), "end", (3, EpisodeEnd(1, 0.0, True))):
        with pytest.raises(UnknownMessage):
            render_process._checked(message)
