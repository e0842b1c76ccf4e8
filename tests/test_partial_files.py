"""The hidden files a video or a state recording is written under until whole: a live writer's
are never removed, also by another process starting in the same folder (another Plotter's
render process); those of a writer that died are (``render/partial_files.py``)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from async_plotter.appends import append_whole
from async_plotter.render.partial_files import PartialFile, remove_abandoned
from async_plotter.sinks.video import VideoSink
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo
from tests.small_device import fill, make_room, small_device

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cleanup_elsewhere(directory):
    """``remove_abandoned(directory)`` in another process, as a render process starting in the
    same folder runs it; the names it removed."""
    code = ("import sys; from async_plotter.render.partial_files import remove_abandoned; "
            "print('\\n'.join(remove_abandoned(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-c", code, str(directory)],
                          capture_output=True,
                          text=True,
                          timeout=60,
                          env=dict(os.environ, PYTHONPATH=ROOT),
                          check=True)
    return done.stdout.split()


def test_a_live_writers_file_is_left_alone_and_a_killed_writers_removed(tmp_path):
    writer = subprocess.Popen([
        sys.executable, "-c",
        textwrap.dedent("""
            import sys, time
            from async_plotter.render.partial_files import PartialFile
            partial = PartialFile(sys.argv[1])
            with open(partial.path, "wb") as file:  # written as any file, locked meanwhile
                file.write(b"half a video")
            print("writing", flush=True)
            time.sleep(120)
        """),
        str(tmp_path / "iter_0008.mp4")
    ],
                              stdout=subprocess.PIPE,
                              text=True,
                              env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        assert writer.stdout.readline().strip() == "writing"
        # Left by a writer that is gone (no lock), next to the live one.
        (tmp_path / ".partial_iter_0007.mp4").write_bytes(b"the rest of a killed run")
        (tmp_path / "iter_0006.mp4").write_bytes(b"a finished video")
        assert run_cleanup_elsewhere(tmp_path) == [".partial_iter_0007.mp4"]
        assert (tmp_path / ".partial_iter_0008.mp4").read_bytes() == b"half a video"
    finally:
        writer.kill()
        writer.wait(10)
    assert run_cleanup_elsewhere(tmp_path) == [".partial_iter_0008.mp4"]
    assert sorted(os.listdir(tmp_path)) == ["iter_0006.mp4"]


def test_the_video_being_encoded_survives_another_process_starting_in_its_folder(tmp_path):
    sink = VideoSink(str(tmp_path), fps=25.0)
    sink.attach(None)
    episode = EpisodeInfo(update=3, iteration=8, episode=0)
    sink.begin_episode(episode)
    frames = np.random.default_rng(0).integers(0, 255, size=(30, 64, 64, 3), dtype=np.uint8)
    for frame in frames[:15]:
        sink.add_frame(frame, episode)
    assert (tmp_path / ".partial_iter_0008.mp4").exists()
    assert run_cleanup_elsewhere(tmp_path) == []
    for frame in frames[15:]:
        sink.add_frame(frame, episode)
    sink.end_episode(episode, EpisodeEnd(30, 0.0, True))
    sink.close()
    assert os.listdir(tmp_path) == ["iter_0008.mp4"]
    assert os.path.getsize(tmp_path / "iter_0008.mp4") > 1000


def test_a_released_file_counts_as_abandoned_and_a_held_one_does_not(tmp_path):
    first = PartialFile(str(tmp_path / "iter_0001.npz"))
    first.release()
    assert remove_abandoned(str(tmp_path)) == [".partial_iter_0001.npz"]
    second = PartialFile(str(tmp_path / "iter_0001.npz"))
    assert remove_abandoned(str(tmp_path)) == []
    second.release()


def test_a_clip_dropped_for_its_whole_episode_leaves_nothing_and_does_not_wait_for_ffmpeg(tmp_path):
    """At close(), the final policy's clip being drawn is dropped for its whole episode
    (``worker/render_process.py``): its encoder is stopped, not waited for, even one that is
    stuck, and the whole episode is then written under the same name."""
    import signal
    import threading

    import psutil

    sink = VideoSink(str(tmp_path), fps=25.0)
    sink.attach(None)
    clip = EpisodeInfo(update=3, iteration=8, episode=0)
    frames = np.random.default_rng(0).integers(0, 255, size=(40, 64, 64, 3), dtype=np.uint8)
    sink.begin_episode(clip)
    for frame in frames[:10]:
        sink.add_frame(frame, clip)
    encoders = [child for child in psutil.Process().children() if "ffmpeg" in child.name()]
    assert len(encoders) == 1, encoders
    encoders[0].send_signal(signal.SIGSTOP)  # finishing its file would now wait forever
    try:
        dropping = threading.Thread(target=sink.drop_here, args=("its whole episode comes", ))
        dropping.start()
        dropping.join(30)
        assert not dropping.is_alive(), "the drop waited for the encoder"
    finally:
        if encoders[0].is_running():
            encoders[0].send_signal(signal.SIGCONT)
    assert not encoders[0].is_running()
    assert os.listdir(tmp_path) == []
    retake = EpisodeInfo(update=3, iteration=8, episode=1, retake=True)
    sink.begin_episode(retake)
    for frame in frames:
        sink.add_frame(frame, retake)
    sink.end_episode(retake, EpisodeEnd(40, 0.0, True))
    sink.close()
    assert os.listdir(tmp_path) == ["iter_0008.mp4"]


def test_an_append_a_full_device_cuts_short_leaves_the_file_as_it_was(tmp_path):
    """A row or record that does not fit is not left half in the file: the next append goes on
    after the last whole one (``returns.csv``, ``progress.csv`` and TensorBoard's event files
    append so; a buffered ``open(path, "a")`` left the part that fitted)."""
    with small_device(tmp_path / "device", "100k") as device:
        path = str(device / "rows.csv")
        append_whole(path, b"a,b\n1,2\n")
        fill(device)
        with pytest.raises(OSError):
            append_whole(path, b"3," + b"4" * 20000 + b"\n")  # more than the page it ends in
        with open(path, "rb") as file:
            assert file.read() == b"a,b\n1,2\n"
        make_room(device)
        append_whole(path, b"5,6\n")
        with open(path, "rb") as file:
            assert file.read() == b"a,b\n1,2\n5,6\n"
