"""The hidden files a video or a state recording is written under until whole: a live writer's
are never removed, also by another process starting in the same folder (another Plotter's
render process); those of a writer that died are (``render/partial_files.py``)."""
import os
import subprocess
import sys
import textwrap

import numpy as np

from async_plotter.render.partial_files import PartialFile, remove_abandoned
from async_plotter.sinks.video import VideoSink
from async_plotter.render.stream import EpisodeEnd, EpisodeInfo

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
