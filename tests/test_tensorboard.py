"""TensorBoard output, checked with TensorBoard itself: its reader, its server, its page.

The writer is this project's own (``async_plotter/tensorboard``, no TensorFlow); everything that
reads it back here is TensorBoard's, so a framing, checksum or protobuf mistake fails these tests.
"""
import io
import json
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from PIL import Image

from async_plotter.render.stream import EpisodeEnd, EpisodeInfo
from async_plotter.render.videos import EVENTS_SUFFIX
from async_plotter.tensorboard import SummaryWriter
from async_plotter.tensorboard.writer import FILE_PREFIX
from async_plotter.tensorboard.gif import FrameReel
from async_plotter.sinks.tensorboard import TensorBoardSink
from tests.small_device import fill, make_room, small_device

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_EVENT_FILE = re.compile(re.escape(FILE_PREFIX) + r"\d{10}\.[^.]+(\.[^.]+)*\.\d+\.\d+$")


def moving_square(count, width=320, height=240):
    """``count`` frames of an orange square crossing a blue background."""
    frames = []
    for i in range(count):
        frame = np.empty((height, width, 3), np.uint8)
        frame[:] = (40, 70, 160)
        x = int((width - 40) * i / max(count - 1, 1))
        frame[100:140, x:x + 40] = (240, 140, 30)
        frames.append(frame)
    return frames


def accumulate(logdir):
    """Everything TensorBoard's own reader finds in ``logdir``."""
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(str(logdir),
                                                     size_guidance={
                                                         event_accumulator.SCALARS: 0,
                                                         event_accumulator.IMAGES: 0,
                                                     })
    accumulator.Reload()
    return accumulator


def shown_images(logdir, tag):
    """[(step, encoded GIF)] of ``tag`` as TensorBoard's Images tab shows them: through its data
    provider, which keeps the first image written at a step (a later one at the same step is
    never shown)."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer

    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    request = context.RequestContext()
    shown = []
    for tags in provider.read_blob_sequences(request,
                                             experiment_id="",
                                             plugin_name="images",
                                             downsample=1000).values():
        for datum in tags.get(tag, []):
            # An image's blobs: its width, its height, then the encoded image.
            shown.append((datum.step, provider.read_blob(request,
                                                         blob_key=datum.values[2].blob_key)))
    return shown


def decode_gif(encoded):
    """(frame count, size, first frame RGB array, per-frame durations in ms) of a GIF."""
    image = Image.open(io.BytesIO(encoded))
    assert image.format == "GIF"
    durations = []
    for index in range(image.n_frames):
        image.seek(index)
        durations.append(image.info["duration"])
    image.seek(0)
    return image.n_frames, image.size, np.asarray(image.convert("RGB")), durations


# ------------------------------------------------------------------------ the writer, alone


def test_every_record_is_framed_with_tensorboards_checksums(tmp_path):
    """TensorBoard's loader does not check the checksums; its own masked CRC-32C must match."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    with SummaryWriter(str(tmp_path)) as writer:
        writer.add_scalars(1, {"a": 1.0, "b": 2.0})
        writer.add_animated_image("rollout/square", 1, moving_square(20), fps=30)
        path = writer.path
    with open(path, "rb") as file:
        data = file.read()
    records = 0
    while data:
        header, (length_crc, ) = data[:8], struct.unpack("<I", data[8:12])
        (length, ) = struct.unpack("<Q", header)
        body, (body_crc, ) = data[12:12 + length], struct.unpack("<I",
                                                                 data[12 + length:16 + length])
        assert (masked_crc32c(header), masked_crc32c(body)) == (length_crc, body_crc)
        data = data[16 + length:]
        records += 1
    assert records == 3  # the file version, the scalars, the image


def test_the_writers_files_read_back_with_tensorboards_own_reader(tmp_path):
    frames = moving_square(150)
    with SummaryWriter(str(tmp_path)) as writer:
        for step in range(5):
            writer.add_scalars(
                step, {
                    "progress/AverageReturn": 10.0 * step,
                    "loss": np.float32(1.0 / (step + 1)),
                    "steps": np.int64(step * 1000),
                    "note": "not a number",
                    "flag": True,
                })
        size = writer.add_animated_image("rollout/square", 3, frames, fps=30)
        path = writer.path
    assert _EVENT_FILE.match(os.path.basename(path)), path
    assert os.path.getsize(path) > size > 1000

    from tensorboard.backend.event_processing import event_file_loader

    events = list(event_file_loader.EventFileLoader(path).Load())
    assert events[0].file_version == "brain.Event:2"
    assert len(events) == 1 + 5 + 1

    accumulator = accumulate(tmp_path)
    tags = accumulator.Tags()
    assert sorted(tags["scalars"]) == ["loss", "progress/AverageReturn", "steps"]
    assert tags["images"] == ["rollout/square"]
    returns = accumulator.Scalars("progress/AverageReturn")
    assert [(e.step, e.value) for e in returns] == [(s, 10.0 * s) for s in range(5)]
    assert [e.value for e in accumulator.Scalars("steps")] == [0, 1000, 2000, 3000, 4000]
    assert accumulator.Scalars("loss")[3].value == pytest.approx(0.25)

    (image, ) = accumulator.Images("rollout/square")
    assert image.step == 3 and (image.width, image.height) == (160, 120)
    count, gif_size, first, durations = decode_gif(image.encoded_image_string)
    assert gif_size == (160, 120)
    assert 50 <= count <= 100, "at most 100 frames, thinned evenly"
    assert sum(durations) == pytest.approx(150 / 30 * 1000, abs=20), "plays in real time"
    # The colours survive the palette: blue background, the orange square on the left.
    assert np.abs(first[10, 10].astype(int) - (40, 70, 160)).max() <= 8
    assert np.abs(first[60, 10].astype(int) - (240, 140, 30)).max() <= 8


def test_a_reel_stays_bounded_and_keeps_time():
    reel = FrameReel(fps=30, max_frames=100, max_side=160)
    for frame in moving_square(500, 480, 480):
        reel.add(frame)
    assert 50 <= len(reel) <= 100
    assert reel.frames[0].size == (160, 160)
    assert sum(reel.durations) == pytest.approx(500 / 30)
    # 60 fps: a GIF cannot show frames for under 20 ms, so every other frame is kept.
    fast = FrameReel(fps=60)
    for frame in moving_square(40, 64, 48):
        fast.add(frame)
    assert len(fast) == 20 and fast.frames[0].size == (64, 48)
    assert min(decode_gif(fast.encode())[3]) >= 20


# --------------------------------------------------------------- the sink, without a worker


def _episode(update, iteration=None, episode=0, part=0):
    return EpisodeInfo(update=update, iteration=iteration, episode=episode, part=part)


def _play(sink, episode, frames, end):
    sink.begin_episode(episode)
    for frame in frames:
        sink.add_frame(frame, episode)
    sink.end_episode(episode, end)


def test_the_sink_writes_what_the_video_sink_keeps(tmp_path):
    written = []
    sink = TensorBoardSink(str(tmp_path),
                           "rollout/square",
                           fps=30,
                           scalars=True,
                           min_frames=30,
                           on_written=lambda *args: written.append(args))
    frames = moving_square(40)
    # Update 1 (iteration 0): a short episode with another chained to it, one image.
    _play(sink, _episode(1, 0), frames[:20], EpisodeEnd(20, 1.0, True, continued=True))
    _play(sink, _episode(1, 0, episode=1, part=1), frames[20:], EpisodeEnd(20, 1.0, True))
    # Its replay (live mode) is skipped, and asks for no pixels.
    sink.begin_episode(_episode(1, 0, episode=2))
    assert not sink.wants_pixels()
    sink.end_episode(_episode(1, 0, episode=2), EpisodeEnd(0, 0.0, False))
    # Update 2 fails, update 3 is cut short below min_frames: both dropped.
    _play(sink, _episode(2, 1), frames[:35], EpisodeEnd(35, 1.0, False, failed=True))
    _play(sink, _episode(3, 2), frames[:10], EpisodeEnd(10, 1.0, False))
    # Update 4 has no iteration: its step is the update number.
    _play(sink, _episode(4), frames, EpisodeEnd(40, 1.0, True))
    sink.on_metrics(7, {"AverageReturn": 3.5})
    sink.on_metrics(None, {"AverageReturn": 4.5})  # numbered by arrival: the 2nd, step 1
    sink.close()

    kept = [(tag, step, info.update, frames) for tag, step, info, _, frames, _ in written]
    assert kept == [("rollout/square", 0, 1, 40), ("rollout/square", 4, 4, 40)]
    accumulator = accumulate(tmp_path)
    images = accumulator.Images("rollout/square")
    assert [image.step for image in images] == [0, 4]
    count, _, _, durations = decode_gif(images[0].encoded_image_string)
    assert count == 40
    assert durations[19] > 250, "the pause where the chained episode begins"
    assert [(e.step, e.value) for e in accumulator.Scalars("AverageReturn")] == [(7, 3.5), (1, 4.5)]


def test_a_clip_is_kept_once_and_the_final_policys_retake_again_whole(tmp_path):
    written = []
    sink = TensorBoardSink(str(tmp_path),
                           "rollout/square",
                           fps=30,
                           on_written=lambda *args: written.append(args))
    frames = moving_square(40)
    _play(sink, _episode(1, 0), frames[:10], EpisodeEnd(10, 1.0, True, clipped=True))
    _play(sink, _episode(1, 0, episode=1), frames, EpisodeEnd(40, 1.0, True))  # a replay
    retake = EpisodeInfo(update=1, iteration=0, episode=2, retake=True)
    _play(sink, retake, frames, EpisodeEnd(40, 1.0, True))
    sink.close()
    kept = [(step, count, clipped) for _, step, _, _, count, clipped in written]
    assert kept == [(0, 10, True), (0, 40, False)]


def test_the_sink_writes_no_scalars_unless_asked(tmp_path):
    sink = TensorBoardSink(str(tmp_path), "rollout/square", fps=30)
    sink.on_metrics(0, {"AverageReturn": 1.0})
    sink.close()
    assert not os.listdir(tmp_path), "no event file without anything to write"


def test_the_initial_policy_and_iteration_0_get_their_own_steps(tmp_path):
    """Both were at step 0, so TensorBoard showed one of them only."""
    sink = TensorBoardSink(str(tmp_path), "rollout/square", fps=30)
    _play(sink, _episode(0), moving_square(5), EpisodeEnd(5, 1.0, True))  # Plotter()'s policy
    _play(sink, _episode(1, 0, episode=1), moving_square(5), EpisodeEnd(5, 1.0, True))
    _play(sink, _episode(2, 1, episode=2), moving_square(5), EpisodeEnd(5, 1.0, True))
    sink.close()
    steps = [image.step for image in accumulate(tmp_path).Images("rollout/square")]
    assert steps == [-1, 0, 1], steps


def test_an_unwritable_folder_turns_the_sink_off_not_the_worker(tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    sink = TensorBoardSink(str(blocker / "logs"), "rollout/square", fps=30, scalars=True)
    _play(sink, _episode(1, 0), moving_square(5), EpisodeEnd(5, 1.0, True))
    sink.on_metrics(0, {"AverageReturn": 1.0})
    assert not sink.wants_pixels() and sink.written == 0
    sink.close()


@pytest.mark.timeout(120)
def test_the_sink_and_writer_never_import_tensorflow(tmp_path):
    """Run the sink in a fresh interpreter that could import TensorFlow (it is installed): after
    writing images and scalars, neither ``tensorflow`` nor ``tensorboard`` may be among its
    modules (tensorboardX and its protobuf runtime may)."""
    import importlib.util

    assert importlib.util.find_spec("tensorflow") is not None, "the check needs TF installed"
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        sys.path.insert(0, {ROOT!r})
        from async_plotter.render.stream import EpisodeEnd, EpisodeInfo
        from async_plotter.sinks.tensorboard import TensorBoardSink
        sink = TensorBoardSink({str(tmp_path)!r}, "rollout/x", fps=30, scalars=True)
        episode = EpisodeInfo(update=1, iteration=0, episode=0)
        sink.begin_episode(episode)
        for i in range(30):
            sink.add_frame(np.full((48, 64, 3), 8 * i, np.uint8), episode)
        sink.end_episode(episode, EpisodeEnd(30, 1.0, True))
        sink.on_metrics(0, {{"AverageReturn": 1.0}})
        sink.close()
        print(json.dumps({{"written": sink.written,
                          "tensorflow": sorted(m for m in sys.modules
                                               if m.split(".")[0] in ("tensorflow", "tensorboard"))}}))
        """)
    completed = subprocess.run([sys.executable, "-c", script],
                               capture_output=True,
                               text=True,
                               timeout=100)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report == {"written": 1, "tensorflow": []}


# ------------------------------------------------------------------------------ the RL host


def small_trpo(env="CartPole-v1", **kwargs):
    from async_plotter.rl import TRPO, CategoricalMLPPolicy, GaussianMLPPolicy

    settings = dict(batch_size=300, max_path_length=50, n_itr=3)
    settings.update(kwargs)
    policy = (CategoricalMLPPolicy(env, hidden_sizes=(8, ))
              if env == "CartPole-v1" else GaussianMLPPolicy(env, hidden_sizes=(8, )))
    return TRPO(env, policy, **settings)


def event_files(folder):
    return sorted(name for name in os.listdir(folder) if name.startswith(FILE_PREFIX))


@pytest.mark.timeout(240)
def test_run_experiment_lite_writes_every_numeric_column_as_a_scalar(tmp_path):
    from async_plotter.rl import run_experiment_lite

    result = run_experiment_lite(small_trpo(), log_dir=str(tmp_path / "run"), seed=1)
    assert len(event_files(result.log_dir)) == 1
    accumulator = accumulate(result.log_dir)
    numeric = [key for key, value in result.history[0].items() if key != "Iteration"]
    assert sorted(accumulator.Tags()["scalars"]) == sorted("progress/" + key for key in numeric)
    for key in ("AverageReturn", "TotalEnvSteps", "ItrTime"):
        events = accumulator.Scalars("progress/" + key)
        assert [e.step for e in events] == [0, 1, 2]
        assert [e.value for e in events] == pytest.approx([row[key] for row in result.history])
    assert json.loads((tmp_path / "run" / "experiment.json").read_text())["tensorboard"] is True

    off = run_experiment_lite(small_trpo(n_itr=1), log_dir=str(tmp_path / "off"), tensorboard=False)
    assert event_files(off.log_dir) == []
    with pytest.raises(TypeError, match="tensorboard must be True or False"):
        run_experiment_lite(small_trpo(n_itr=1), log_dir=str(tmp_path / "bad"), tensorboard="yes")
    assert not (tmp_path / "bad").exists(), "rejected before anything is written"


# ------------------------------------------------------------------- with the real worker


def images_by_file(logdir):
    """{event file name: [(tag, step, encoded GIF)]} of the image summaries, read file by file
    (so each image's writer process is known) by TensorBoard's loader, as written (the newer
    loader turns image values into tensors)."""
    from tensorboard.backend.event_processing import event_file_loader

    found = {}
    for name in event_files(logdir):
        loader = event_file_loader.LegacyEventFileLoader(os.path.join(logdir, name))
        found[name] = [(value.tag, event.step, value.image.encoded_image_string)
                       for event in loader.Load() for value in event.summary.value
                       if value.HasField("image")]
    return found


def writer_pid(event_file_name):
    """``events.out.tfevents.<secs>.<host>.<pid>.<n>``, a Plotter's with its suffix after."""
    return int(event_file_name.removesuffix(EVENTS_SUFFIX).split(".")[-2])


@pytest.fixture(scope="module")
def plotted_run(tmp_path_factory):
    """One small plotted TRPO run on Swimmer (a MuJoCo scene drawn with software GL), shared by
    the tests below: ``(result, probe report path)``. On a machine kept busy the worker may show
    nothing during so short a run; the final policy's rollout is waited for (at full speed)."""
    from async_plotter.rl import run_experiment_lite
    from tests.tensorboard_probe import ModulesProbe

    root = tmp_path_factory.mktemp("tensorboard_runs")
    probe = str(root / "probe.json")
    algo = small_trpo("Swimmer-v5", batch_size=400, max_path_length=100, n_itr=3)
    result = run_experiment_lite(algo,
                                 plot=True,
                                 seed=1,
                                 log_dir=str(root / "runs" / "swimmer"),
                                 sinks=[ModulesProbe(probe)],
                                 final_video_timeout=150)
    return result, probe


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_plotted_run_puts_scalars_and_rollouts_into_one_run(plotted_run):
    result, _ = plotted_run
    iterations = [row["Iteration"] for row in result.history]
    assert iterations == [0, 1, 2]
    accumulator = accumulate(result.log_dir)
    tags = accumulator.Tags()
    # The trainer writes the scalars (its rows, and every history recording's return); the
    # plotter writes none of its own (scalars=False).
    assert "history/return" in tags["scalars"]
    assert all(tag.startswith("progress/") for tag in tags["scalars"] if tag != "history/return")
    assert [e.step for e in accumulator.Scalars("progress/AverageReturn")] == iterations
    assert tags["images"] == ["rollout/Swimmer-v5"]
    images = accumulator.Images("rollout/Swimmer-v5")
    steps = [image.step for image in images]
    # 2: the final policy's rollout; -1: the initial policy's, if it was recorded
    assert 2 in steps and set(steps) <= set(iterations) | {-1}, steps
    for image in images:
        count, size, _, _ = decode_gif(image.encoded_image_string)
        assert count > 1 and max(size) <= 160
    # One event file from the trainer, one from each render process.
    by_file = images_by_file(result.log_dir)
    assert sum(1 for found in by_file.values() if not found) == 1
    assert writer_pid(next(name for name, found in by_file.items() if not found)) == os.getpid()


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_render_process_that_writes_the_images_never_imports_tensorflow(plotted_run):
    """A user sink in the same render process reports its modules; the event file holding the
    images names that process's pid. (The trainer and the rollout process do have TF.)"""
    result, probe = plotted_run
    with open(probe) as report_file:
        report = json.load(report_file)
    writers = {writer_pid(name) for name, found in images_by_file(result.log_dir).items() if found}
    assert writers == {report["pid"]}, (writers, report)
    assert report["tensorboard_writer"] is True
    assert report["tensorflow"] == []
    assert "tensorflow" in sys.modules  # the same check would see it in the trainer


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_bare_plotter_writes_rollouts_and_metrics_and_keeps_tf_out_of_the_renderer(tmp_path):
    """``Plotter(tensorboard_dir=...)``: the render process's memory map has no TensorFlow library
    while the rollout process's has (the check's positive control)."""
    import tensorflow as tf

    from async_plotter import Plotter
    from async_plotter.rl import GaussianMLPPolicy
    from tests.conftest import wait_for

    # A TensorFlow callable as nonlinearity: no numpy copy, the policy itself travels and the
    # rollout process loads TensorFlow.
    policy = GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(8, ), hidden_nonlinearity=tf.tanh)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=60,
                      window=False,
                      seed=0,
                      tensorboard_dir=str(tmp_path / "tb"))
    try:
        plotter.update_plot(policy, iteration=0, metrics={"AverageReturn": 1.5})

        def written():
            found = accumulate(tmp_path / "tb").Tags() if (tmp_path / "tb").exists() else {}
            return found.get("images") and found.get("scalars")

        wait_for(written, 180, interval=1.0, message="an image and a scalar in the event file")
        pids = plotter.stats["worker_pids"]
        maps = {}
        for role, pid in pids.items():
            with open(f"/proc/{pid}/maps") as mapped:
                maps[role] = mapped.read()
        assert "libtensorflow" in maps["rollout"], "the check must see TF where it is"
        assert "libtensorflow" not in maps["render"]
        # Training ends at iteration 5: close() waits for its rollout, with no video_dir too.
        policy.set_param_values(policy.get_param_values() + 0.1)
        plotter.update_plot(policy, iteration=5)
    finally:
        plotter.close()
    accumulator = accumulate(tmp_path / "tb")
    assert [(e.step, e.value) for e in accumulator.Scalars("AverageReturn")] == [(0, 1.5)]
    steps = [image.step for image in accumulator.Images("rollout/Swimmer-v5")]
    assert steps[0] == 0 and steps[-1] == 5, steps
    assert plotter.stats["tensorboard_images"] == len(steps) and plotter.stats["videos"] == 0
    assert {writer_pid(name) for name in event_files(tmp_path / "tb")} == {pids["render"]}


def _scalar_steps(logdir, tag):
    return [event.step for event in accumulate(logdir).Scalars(tag)]


def test_an_event_file_removed_while_written_is_followed_by_a_new_one(tmp_path):
    """``rm -rf`` of the run's folder while it trains: the writer went on into the removed file,
    and nothing written after it reached TensorBoard. Now, as TensorFlow's own writer does, it
    begins a new file; TensorBoard reads what came after."""
    logdir = tmp_path / "run"
    with SummaryWriter(str(logdir)) as writer:
        writer.add_scalars(0, {"loss": 1.0})
        shutil.rmtree(logdir)
        writer.add_scalars(1, {"loss": 0.5})
        writer.add_scalars(2, {"loss": 0.25})
    assert _scalar_steps(logdir, "loss") == [1, 2]
    assert writer.reopened == 1
    assert os.path.dirname(writer.path) == str(logdir)  # the new file's, also once closed


def test_a_write_that_does_not_fit_leaves_the_file_whole_and_a_later_one_goes_on(tmp_path):
    """A full device: an image that does not fit raises OSError and leaves the file as it was
    (no torn record), and once there is room the next summaries follow in the same file."""
    with small_device(tmp_path / "device", "200k") as device:
        with SummaryWriter(str(device)) as writer:
            writer.add_scalars(0, {"loss": 1.0})
            whole = os.path.getsize(writer.path)
            fill(device)
            with pytest.raises(OSError):
                writer.add_animated_image("rollout/square", 1, moving_square(60), fps=30)
            assert os.path.getsize(writer.path) == whole
            make_room(device)
            writer.add_scalars(2, {"loss": 0.25})
            path = writer.path
        from tensorboard.backend.event_processing import event_file_loader

        events = list(event_file_loader.EventFileLoader(path).Load())
        assert [event.step for event in events] == [0, 0, 2]  # the file version, then two
        assert _scalar_steps(device, "loss") == [0, 2]


def test_the_rollouts_resume_by_themselves_once_a_full_device_has_room(
        tmp_path, monkeypatch, caplog):
    """The sink turned itself off for good at the first write that failed, while the videos
    resumed: a run that filled its disk once had no more rollouts in TensorBoard."""
    import async_plotter.sinks.tensorboard as sink_module

    monkeypatch.setattr(sink_module, "RETRY_SECONDS", 0.5, raising=False)
    caplog.set_level(logging.INFO, logger="async_plotter")
    frames = moving_square(40)
    with small_device(tmp_path / "device", "400k") as device:
        sink = TensorBoardSink(str(device), "rollout/square", fps=30)
        _play(sink, _episode(1, 0), frames, EpisodeEnd(40, 1.0, True))
        fill(device)
        _play(sink, _episode(2, 1), frames, EpisodeEnd(40, 1.0, True))
        sink.begin_episode(_episode(3, 2))
        assert not sink.wants_pixels(), "collected while it cannot write"
        sink.end_episode(_episode(3, 2), EpisodeEnd(0, 0.0, False))
        make_room(device)
        time.sleep(0.6)
        _play(sink, _episode(4, 3), frames, EpisodeEnd(40, 1.0, True))
        sink.close()
        assert [step for step, _ in shown_images(device, "rollout/square")] == [0, 3]
    failed = [r for r in caplog.records if "cannot write into" in r.getMessage()]
    assert len(failed) == 1 and failed[0].levelno == logging.WARNING
    assert any("writing into" in r.getMessage() and "again" in r.getMessage()
               for r in caplog.records)


def test_an_unwritable_tensorboard_dir_is_named_at_the_call(tmp_path):
    from async_plotter import Plotter
    from async_plotter.errors import InvalidArgumentError, VideoDirError
    from tests.policies import LinearPolicy

    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    with pytest.raises(VideoDirError, match="tensorboard_dir .* cannot be written"):
        Plotter("Swimmer-v5", LinearPolicy(8, 2), window=False, tensorboard_dir=str(blocker))
    with pytest.raises(InvalidArgumentError, match="tensorboard_dir must be a path"):
        Plotter("Swimmer-v5", LinearPolicy(8, 2), window=False, tensorboard_dir=3)


def free_port():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fetch(url, timeout=30):
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.headers.get("Content-Type", ""), answer.read()


def fetch_json(url):
    return json.loads(fetch(url)[1])


@pytest.fixture
def tensorboard_server(plotted_run, tmp_path):
    """A real ``tensorboard --logdir`` over the plotted run's parent folder; yields its URL."""
    import psutil

    result, _ = plotted_run
    binary = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    assert os.path.exists(binary), "tensorboard is not installed (pip install -e .[test])"
    port = free_port()
    log = open(tmp_path / "tensorboard.log", "w")
    server = subprocess.Popen([
        binary, "--logdir",
        os.path.dirname(result.log_dir), "--host", "127.0.0.1", "--port",
        str(port)
    ],
                              stdout=log,
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        from tests.conftest import wait_for

        def serving():
            if server.poll() is not None:
                raise AssertionError("tensorboard exited: " +
                                     (tmp_path / "tensorboard.log").read_text()[-3000:])
            try:
                return fetch_json(url + "/data/plugin/images/tags").get("swimmer")
            except OSError:
                return None

        wait_for(serving, 120, interval=0.5, message="tensorboard to serve the run's images")
        yield url
    finally:
        children = psutil.Process(server.pid).children(recursive=True) if server.poll() is None \
            else []
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
        for child in children:  # its data server, should it outlive it
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        log.close()


def rollout_colours(screenshot):
    """Pixels of the Swimmer scene in the page's content area (left of it are TensorBoard's
    controls, above it its orange bar and the card's run chip): the checkered floor's grey and
    black and the swimmer's orange."""
    pixels = np.asarray(screenshot.convert("RGB"), np.int32)[260:, 330:]
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    grey = (np.abs(r - 192) < 24) & (np.abs(g - r) < 8) & (np.abs(b - r) < 8)
    black = (r < 24) & (g < 24) & (b < 24)
    orange = (r > 150) & (r - b > 80) & (g > 60) & (g < r - 30)
    return int(grey.sum()), int(black.sum()), int(orange.sum())


@pytest.mark.slow
@pytest.mark.timeout(540)
def test_tensorboard_serves_the_run_and_its_page_shows_the_rollout(plotted_run, tensorboard_server,
                                                                   tmp_path):
    from urllib.parse import urlencode

    result, _ = plotted_run
    url = tensorboard_server
    scalar_tags = fetch_json(url + "/data/plugin/scalars/tags")
    assert list(scalar_tags) == ["swimmer"]
    assert "progress/AverageReturn" in scalar_tags["swimmer"]
    points = fetch_json(url + "/data/plugin/scalars/scalars?" +
                        urlencode({
                            "run": "swimmer",
                            "tag": "progress/AverageReturn"
                        }))
    assert [step for _, step, _ in points] == [0, 1, 2]
    assert [value for _, _, value in points
            ] == pytest.approx([row["AverageReturn"] for row in result.history], rel=1e-6)

    image_tags = fetch_json(url + "/data/plugin/images/tags")
    assert list(image_tags["swimmer"]) == ["rollout/Swimmer-v5"]
    listed = fetch_json(url + "/data/plugin/images/images?" + urlencode({
        "run": "swimmer",
        "tag": "rollout/Swimmer-v5"
    }))
    written = accumulate(result.log_dir).Images("rollout/Swimmer-v5")
    assert [entry["step"] for entry in listed] == [image.step for image in written]
    content_type, blob = fetch(url + "/data/plugin/images/individualImage?" + listed[-1]["query"])
    assert content_type == "image/gif"
    assert blob == written[-1].encoded_image_string
    assert decode_gif(blob)[0] > 1

    # What a person sees: the Images tab, in a real (headless) browser.
    import shutil
    import tempfile

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.fail("Chromium is not installed; `make test` installs it (Debian package chromium)")
    shot = tmp_path / "tensorboard.png"
    colours = (0, 0, 0)
    for budget in (15000, 30000, 60000):  # a loaded machine may need more time to draw
        profile = tempfile.mkdtemp(prefix="chromium-profile-")
        try:
            subprocess.run([
                binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}", f"--screenshot={shot}",
                "--window-size=1280,900", f"--virtual-time-budget={budget}", url + "/#images"
            ],
                           capture_output=True,
                           timeout=180)
        finally:
            shutil.rmtree(profile, ignore_errors=True)
        if not shot.exists():
            continue
        image = Image.open(shot)
        colours = rollout_colours(image)
        if min(colours[:2]) > 5000 and colours[2] > 200:
            break
    keep = os.environ.get("ASYNC_PLOTTER_SCREENSHOT_DIR")
    if keep and shot.exists():
        shutil.copy(shot, os.path.join(keep, "tensorboard.png"))
    assert shot.exists(), "Chromium wrote no screenshot"
    assert np.asarray(image.convert("L")).std() > 20, "a blank page"
    grey, black, orange = colours
    assert grey > 5000 and black > 5000, f"no checkered floor in the page ({colours})"
    assert orange > 200, f"no swimmer in the page ({colours})"
