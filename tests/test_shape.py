"""The extension points a user or a new feature builds on: sinks of one's own, the sink registry,
the channel interfaces, typed worker messages, and the one rule for live mode."""
import inspect
import json
import os
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
from async_plotter.sinks.specs import (HttpSpec, SinkSpec, StatesSpec, TensorBoardSpec, VideoSpec,
                                       WindowSpec)
from async_plotter.worker.sink_builders import SinkContext, build_sinks, register_sink
from async_plotter.worker.status import StatusKind, StatusSender, UnknownReport, report_kind
from async_plotter.supervision.metrics_relay import MetricsRelay
from async_plotter.supervision.stats import STATS_KEYS, WorkerStats
from async_plotter.supervision.supervisor import WorkerSupervisor
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

    def add_frame(self, frame, episode):  # as the README's sink: the episode's fields
        self.frames.append((frame, episode.iteration, episode.update))

    def end_episode(self, episode, end):
        first = self.frames[0][0]
        self.log.write(
            json.dumps({
                "kind": "episode",
                "iteration": episode.iteration,
                "update": episode.update,
                "frames": len(self.frames),
                "frames_of": sorted({(i, u)
                                     for _, i, u in self.frames}),
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


class StepLog(FrameSink):
    """A user's sink that wants each shown step's record: its state, the posed ``MjData``, and
    when it is due."""

    def __init__(self, path):
        self.path = path

    def attach(self, scene):
        self.log = open(self.path, "a", encoding="utf-8")
        self.qpos = slice(1, 1 + scene.model.nq)  # mjSTATE_FULLPHYSICS: time, then qpos

    def add_step(self, frame, step):
        self.log.write(
            json.dumps({
                "iteration": step.episode.iteration,
                "posed": bool(np.array_equal(step.data.qpos, step.state.state[self.qpos])),
                "first": step.state.action is None,
                "reward": step.state.reward,
                "due": step.due,
                "pixels": frame is not None,
            }) + "\n")

    def end_episode(self, episode, end):
        self.log.write(json.dumps({"end": episode.iteration, "reward": end.total_reward}) + "\n")
        self.log.flush()


def _lines(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_user_sink_gets_every_episode_frame_and_metric(tmp_path, no_leftovers):
    """A sink written as the README's gets frames and the episode's fields in ``add_frame``; one
    that overrides ``add_step`` gets each shown step's record: the state the rollout process
    sent, the scene's ``MjData`` posed at it, and its due time (1/fps apart at least: the
    cap)."""
    log, steps_log = tmp_path / "episodes.jsonl", tmp_path / "steps.jsonl"
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=30,
                 window=False,
                 fps=300,
                 sinks=[EpisodeLog(str(log)), StepLog(str(steps_log))]) as plotter:
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
    assert episode["frames_of"] == [[3, episode["update"]]]
    assert episode["shape"][2] == 3 and episode["std"] > 10  # real pixels of the scene
    assert not episode["tensorflow"], "the render process must never import TensorFlow"
    assert {"kind": "metrics", "iteration": 3, "AverageReturn": 4.5} in entries
    assert entries[-1] == {"kind": "closed"}
    # No video_dir, no window: the user's sink alone is a reason to run the worker.
    assert plotter.stats["updates_applied"] >= 1
    lines = _lines(steps_log)
    end = next(index for index, line in enumerate(lines) if line.get("end") == 3)
    start = max((index for index, line in enumerate(lines[:end]) if "end" in line), default=-1) + 1
    steps = lines[start:end]
    assert len(steps) == 31 and all(s["iteration"] == 3 and s["posed"] for s in steps)
    assert [s["first"] for s in steps] == [True] + [False] * 30 and all(s["pixels"] for s in steps)
    assert sum(s["reward"] for s in steps) == pytest.approx(lines[end]["reward"])
    dues = [s["due"] for s in steps]
    assert all(b - a >= 1 / 25 - 1e-9 for a, b in zip(dues, dues[1:]))  # Swimmer: 25 steps/s


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


def test_the_local_channel_carries_parameters_through_its_address():
    writer = SharedMemoryWriter(3, np.float32)
    reader = writer.address().open_reader()
    try:
        writer.publish(np.array([1, 2, 3], np.float32), 4, 10)
        update = reader.wait(5.0)
        assert update.number == 0 and update.iteration == 4 and list(update.params) == [1, 2, 3]
    finally:
        reader.close()
        writer.close(1.0)


def test_local_metrics_go_to_the_supervisors_relay_within_the_one_size_rule():
    relay = MetricsRelay()
    assert relay.post(4, {"AverageReturn": 1.5})
    too_many = {f"m{i}": 1.0 for i in range(1000)}
    assert not metrics_fit(4, too_many) and not relay.post(4, too_many)

    class Lifeline:
        sent = []

        def send(self, message):
            self.sent.append(message)

    relay.forward(Lifeline())
    assert Lifeline.sent == [(StreamKind.METRICS, (4, {"AverageReturn": 1.5}))]


def test_the_configuration_is_built_apart_from_the_plotter_from_the_same_arguments(tmp_path):
    from async_plotter.trainer.config import plotter_config

    def arguments(*args, **kwargs):
        bound = inspect.signature(Plotter.__init__).bind(None, *args, **kwargs)
        bound.apply_defaults()
        return {name: value for name, value in bound.arguments.items() if name != "self"}

    videos = tmp_path / "videos"
    config = plotter_config(
        arguments("Swimmer-v5", LinearPolicy(8, 2), video_dir=videos, window=False))
    assert config.worker.sinks == (VideoSpec(str(videos)), StatesSpec(
        str(videos))) and config.publish is None
    assert config.has_output and config.initial.shape == (
        16, ) and config.worker.max_path_length == 500
    assert not videos.exists(), "building the configuration writes nothing"
    with pytest.raises(InvalidArgumentError, match="max_restarts"):
        plotter_config(arguments("Swimmer-v5", LinearPolicy(8, 2), max_restarts=-1))
    # Every argument of Plotter is read: one whose name plotter_config does not use fails.
    incomplete = arguments("Swimmer-v5", LinearPolicy(8, 2))
    del incomplete["fps"]
    with pytest.raises(AttributeError, match="fps"):
        plotter_config(incomplete)


def test_stats_is_one_record_with_every_key_from_the_start():
    stats = WorkerStats()
    snapshot = stats.snapshot()
    assert tuple(snapshot) == STATS_KEYS and "http_url" in snapshot
    assert snapshot["unknown_reports"] == 0 and snapshot["published"] is None
    stats.update(videos=1, last_video="a.mp4")
    stats["frames"] += 3  # a writer that also takes a plain dict (RedisWriter)
    assert stats.snapshot()["videos"] == 1 and stats.frames == 3
    assert snapshot["videos"] == 0, "a snapshot is a copy"
    with pytest.raises(KeyError, match="framez"):
        stats["framez"] = 1
    with pytest.raises(KeyError, match="framez"):
        stats.update(framez=1)


def test_worker_reports_are_typed_and_unknown_ones_are_errors():
    import multiprocessing

    receive, send = multiprocessing.Pipe(duplex=False)
    sender = StatusSender(send, "render")
    with pytest.raises(TypeError, match="StatusKind"):
        sender.send("frames", count=1)
    sender.send(StatusKind.FRAMES, count=2)
    kind, payload = receive.recv()
    assert kind is StatusKind.FRAMES, "the member itself on the wire, as StreamKind's are"
    assert report_kind(kind) is StatusKind.FRAMES and payload["count"] == 2
    with pytest.raises(UnknownReport, match="'framez'"):
        report_kind("framez")

    heard = []
    stats = WorkerStats()
    supervisor = WorkerSupervisor(_config(),
                                  lambda: None,
                                  stats,
                                  listener=lambda *a: heard.append(a))

    class Pair:
        errors = {}

    supervisor._apply("framez", {"role": "render"}, Pair())
    assert "unknown report 'framez'" in stats.last_error and heard == []
    assert stats.unknown_reports == 1
    assert Pair.errors == {"render": "unknown report 'framez' from the plot worker"}
    report = {"role": "render", "count": 5, "drawn": 3}
    supervisor._apply("frames", report, Pair())
    assert stats.frames == 5 and stats.frames_drawn == 3 and heard == [("frames", report)]


def test_the_render_process_refuses_messages_it_does_not_know():
    assert render_process._checked((StreamKind.BEGIN, EpisodeInfo(0, None, 0)))
    for message in (("begin", None), (StreamKind.END, ), "end", (3, EpisodeEnd(1, 0.0, True))):
        with pytest.raises(UnknownMessage):
            render_process._checked(message)


def test_the_render_process_handles_every_kind_after_the_scene_through_one_table():
    assert set(render_process._HANDLERS) == set(StreamKind) - {StreamKind.SCENE}


def test_a_recorded_sink_wants_pixels_only_for_what_it_records(tmp_path):
    """The video sink skips replays of an update it kept and recordings it dropped: the render
    process then draws nothing for it (live mode replays the policy all the time)."""
    from async_plotter.sinks.video import VideoSink

    sink = VideoSink(str(tmp_path), 30, min_frames=10)
    frame = np.zeros((32, 32, 3), np.uint8)

    def play(episode, frames, end):
        sink.begin_episode(episode)
        wanted = sink.wants_pixels()
        for _ in range(frames):
            sink.add_frame(frame, episode)
        sink.end_episode(episode, end)
        return wanted

    assert not sink.wants_pixels()
    assert play(EpisodeInfo(1, 0, 0), 3, EpisodeEnd(3, 0.0, True, continued=True))
    assert play(EpisodeInfo(1, 0, 1, part=1), 3, EpisodeEnd(3, 0.0, True))  # chained
    assert not play(EpisodeInfo(1, 0, 2), 3, EpisodeEnd(3, 0.0, True))  # a replay of update 1
    sink.begin_episode(EpisodeInfo(2, 1, 3))
    sink.end_episode(EpisodeInfo(2, 1, 3), EpisodeEnd(0, 0.0, False))  # cut short: dropped
    assert not sink.wants_pixels()
    assert play(EpisodeInfo(2, 1, 4), 3, EpisodeEnd(3, 0.0, True))  # update 2 is not kept yet
    sink.close()
    assert sorted(os.listdir(tmp_path)) == ["iter_0000.mp4", "iter_0001.mp4"]
