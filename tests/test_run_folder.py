"""One video folder, one run: a Plotter started on a folder an earlier run wrote into moves that
run's outputs into ``earlier_runs/<when it ended>/``, so that the folder's newest video is this
run's final policy and its history is this run's alone; a second run on a live run's folder is
refused by name, and a killed one's folder is free again."""
import hashlib
import logging
import os
import signal
import subprocess
import sys

import pytest

from async_plotter import FolderInUseError, InvalidArgumentError, Plotter
from async_plotter.cli import main as cli_main
from async_plotter.render.history_returns import read_returns
from async_plotter.render.videos import list_named_recordings
from async_plotter.trainer.run_folder import (EARLIER_RUNS, EARLIER_RUNS_KEPT, RunFolder,
                                              set_aside_earlier_run)
from tests.conftest import wait_for
from tests.policies import LinearPolicy

STEPS = 40


def run_plotter(folder, iterations, close=True):
    """A Plotter on Swimmer that shows ``iterations`` updates (each recorded in the history)."""
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=STEPS,
                      video_dir=str(folder),
                      priority="normal",
                      verbose=0).start()
    try:
        for iteration in range(iterations):
            policy.fill(0.1 * (iteration + 1))
            plotter.update_plot(policy, iteration=iteration)
            wait_for(lambda: any(
                entry.get("iteration") == iteration for entry in plotter.stats["history"]),
                     120,
                     message=f"iteration {iteration}'s history recording")
    finally:
        if close:
            plotter.close()
    return plotter


def digests(folder):
    """Every file below ``folder``, by its path relative to it, with its content's digest."""
    found = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as file:
                found[os.path.relpath(path, folder)] = hashlib.sha256(file.read()).hexdigest()
    return found


@pytest.mark.slow
def test_a_second_run_in_the_same_folder_sets_the_first_aside_whole(tmp_path, caplog):
    first = run_plotter(tmp_path, 4)
    assert first.stats["final_video"].endswith("iter_0003.mp4")
    before = digests(tmp_path)
    (tmp_path / "notes.txt").write_text("the user's own file")

    with caplog.at_level(logging.INFO, logger="async_plotter"):
        second = run_plotter(tmp_path, 2)

    # The folder shows the second run alone: its newest video is that run's final policy, and
    # its history holds that run's policies (iterations 0 and 1, and the initial one if the
    # worker took it before the first update came).
    final = os.path.basename(second.stats["final_video"])
    assert final == "iter_0001.mp4"
    videos = sorted(name for name in os.listdir(tmp_path) if name.startswith("iter_"))
    assert videos[-1] in (final, final.replace(".mp4", ".npz")), videos
    assert all(int(name[5:9]) <= 1 for name in videos), videos
    history = {entry.name for entry in list_named_recordings(str(tmp_path / "history"))}
    assert history - {"update_0000.npz"} == {"iter_0000.npz", "iter_0001.npz"}, history
    assert (tmp_path / "notes.txt").read_text() == "the user's own file"

    # The first run is whole, byte for byte, under earlier_runs/<when it ended>/.
    (aside, ) = os.listdir(tmp_path / EARLIER_RUNS)
    assert digests(tmp_path / EARLIER_RUNS / aside) == before
    told = [
        record.getMessage() for record in caplog.records if "earlier run" in record.getMessage()
    ]
    assert len(told) == 1 and os.path.join(str(tmp_path), EARLIER_RUNS, aside) in told[0], told
    first_history = [
        name for name in before if name.startswith("history/") and name.endswith(".npz")
    ]
    assert f"a history of {len(first_history)} policies" in told[0], told


@pytest.mark.slow
def test_a_second_run_into_one_tensorboard_dir_sets_the_first_runs_events_aside(tmp_path, caplog):
    """Before, both runs' event files stayed in the folder, and TensorBoard drew their curves as
    one run over the same steps. The user's own writer's file there stays."""
    from async_plotter.tensorboard import SummaryWriter
    from tests.test_tensorboard import accumulate

    board = tmp_path / "tb"

    def run(iterations):
        policy = LinearPolicy(8, 2)
        with Plotter("Swimmer-v5",
                     policy,
                     max_path_length=STEPS,
                     video_dir=str(tmp_path / f"videos_{iterations}"),
                     tensorboard_dir=str(board),
                     priority="normal",
                     verbose=0) as plotter:
            for iteration in range(iterations):
                policy.fill(0.1 * (iteration + 1))
                plotter.update_plot(policy, iteration=iteration, metrics={"loss": 1.0 * iteration})
        return plotter

    run(4)
    first = digests(board)
    mine = SummaryWriter(str(board))  # the user's own writer, in the same folder
    mine.add_scalars(0, {"mine": 1.0})
    mine.close()
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        run(2)
    (aside, ) = os.listdir(board / EARLIER_RUNS)
    assert digests(board / EARLIER_RUNS / aside) == first
    assert [event.step
            for event in accumulate(board / EARLIER_RUNS / aside).Scalars("loss")] == [0, 1, 2, 3]
    shown = accumulate(board)
    assert [event.step for event in shown.Scalars("loss")] == [0, 1]
    assert [event.step for event in shown.Scalars("mine")] == [0]
    assert f"plotter: {board} held an earlier run's outputs (1 TensorBoard event file)" \
        in caplog.text, caplog.text


def test_a_resumed_plotters_tensorboard_draws_each_step_once(tmp_path):
    """A bare Plotter resumed after iteration 1 into its tensorboard_dir: the earlier run's
    event files stayed (its steps up to 1 are the run's), and TensorBoard drew both runs' steps 2
    and 3. Now they keep their steps up to 1, and go whole into earlier_runs/. (A session restart
    event, tried first, depends on the order the files' names sort in, which two files of one
    second leave to their processes' ids: it failed so in CI.)"""
    from tests.test_tensorboard import accumulate

    board = tmp_path / "tb"

    def run(iterations, base, **resume):
        policy = LinearPolicy(8, 2)
        with Plotter("Swimmer-v5",
                     policy,
                     max_path_length=STEPS,
                     video_dir=str(tmp_path / "videos"),
                     tensorboard_dir=str(board),
                     priority="normal",
                     verbose=0,
                     **resume) as plotter:
            for iteration in iterations:
                policy.fill(0.1 * (iteration + 1))
                plotter.update_plot(policy, iteration=iteration, metrics={"loss": base + iteration})

    run(range(4), 0.0)
    run(range(2, 4), 10.0, resume_after=1)
    (aside, ) = os.listdir(board / EARLIER_RUNS)  # the first run's file, whole
    assert [(event.step, event.value)
            for event in accumulate(board / EARLIER_RUNS / aside).Scalars("loss")] == [(0, 0.0),
                                                                                       (1, 1.0),
                                                                                       (2, 2.0),
                                                                                       (3, 3.0)]
    assert [(event.step, event.value) for event in accumulate(board).Scalars("loss")] == [(0, 0.0),
                                                                                          (1, 1.0),
                                                                                          (2, 12.0),
                                                                                          (3, 13.0)]


@pytest.mark.slow
def test_a_second_plotter_on_a_live_runs_folder_is_refused_and_the_live_run_goes_on(tmp_path):
    """A notebook cell run again makes a second Plotter on the folder the first still writes
    into. Both would write iter_0000.mp4 and history/iter_0000.npz over each other, and each
    would call the other's last video its final one: the second is refused, by name, and the
    live run's files stay and its final video is its own."""
    live = run_plotter(tmp_path, 1, close=False)
    try:
        written = digests(tmp_path)
        with pytest.raises(FolderInUseError) as refusal:
            Plotter("Swimmer-v5",
                    LinearPolicy(8, 2),
                    max_path_length=STEPS,
                    video_dir=str(tmp_path),
                    verbose=0)
        message = str(refusal.value)
        assert repr(str(tmp_path)) in message
        assert "a Plotter for Swimmer-v5 of this process" in message
        assert "close() that one first" in message and "a folder of its own" in message
        assert digests(tmp_path) == written
        policy = LinearPolicy(8, 2)
        policy.fill(-0.3)
        live.update_plot(policy, iteration=5)
    finally:
        live.close()
    assert live.stats["final_video"] == str(tmp_path / "iter_0005.mp4")
    assert not os.path.exists(tmp_path / EARLIER_RUNS)
    # Closed: the folder is free, and the next Plotter sets the run aside.
    Plotter("Swimmer-v5",
            LinearPolicy(8, 2),
            max_path_length=STEPS,
            video_dir=str(tmp_path),
            verbose=0).close()
    (aside, ) = os.listdir(tmp_path / EARLIER_RUNS)
    assert "iter_0005.mp4" in os.listdir(tmp_path / EARLIER_RUNS / aside)
    assert not os.path.exists(tmp_path / "history")


def test_a_plotter_on_a_live_plotters_tensorboard_dir_is_refused(tmp_path):
    """Two live Plotters of one process writing event files into one folder: TensorBoard drew
    both runs' curves as one run over the same steps (the folder was taken for the first one's,
    as ``run_experiment_lite``'s log_dir is for its Plotter). The second is refused by name, and
    lets go of its own video folder."""

    def plotter(videos, board):
        return Plotter("Swimmer-v5",
                       LinearPolicy(8, 2),
                       max_path_length=STEPS,
                       video_dir=str(tmp_path / videos),
                       tensorboard_dir=str(tmp_path / board),
                       verbose=0)

    live = plotter("videos_a", "tb")
    try:
        for videos, board in (("videos_b", "tb"), ("videos_b", "videos_a")):
            with pytest.raises(FolderInUseError) as refusal:
                plotter(videos, board)
            message = str(refusal.value)
            assert f"tensorboard_dir {str(tmp_path / board)!r} is in use" in message, message
            assert "a Plotter for Swimmer-v5 of this process" in message
        plotter("videos_b", "tb_b").close()  # the refused ones held videos_b no longer
    finally:
        live.close()
    plotter("videos_b", "tb").close()  # closed, the first lets go of it


def test_close_all_lets_go_of_the_plotters_no_name_refers_to(tmp_path):
    """A notebook keeps a cell's Plotter in ``Out[n]`` (or a traceback) after the name is gone:
    the refusal says how to close it, and ``Plotter.close_all()`` does, final video first."""
    out = [
        Plotter("Swimmer-v5",
                LinearPolicy(8, 2),
                max_path_length=STEPS,
                video_dir=str(tmp_path / "started"),
                verbose=0).start(),
        Plotter("Swimmer-v5",
                LinearPolicy(8, 2),
                max_path_length=STEPS,
                video_dir=str(tmp_path / "never_started"),
                verbose=0)
    ]
    out[0].update_plot(LinearPolicy(8, 2), iteration=3)
    with pytest.raises(FolderInUseError, match=r"Plotter\.close_all\(\) closes it"):
        Plotter("Swimmer-v5", LinearPolicy(8, 2), video_dir=str(tmp_path / "started"))
    assert Plotter.close_all() == 2
    assert Plotter.close_all() == 0  # each once
    assert out[0].stats["final_video"] == str(tmp_path / "started" / "iter_0003.mp4")
    for folder in ("started", "never_started"):  # free again
        Plotter("Swimmer-v5", LinearPolicy(8, 2), video_dir=str(tmp_path / folder),
                verbose=0).close()


def test_a_folder_held_by_another_process_is_refused_until_it_is_killed(
        tmp_path, capsys, monkeypatch):
    """The claim is the kernel's lock: a run in another process is named by its pid and command
    line, to a Plotter and to ``async-plotter view --video-dir`` alike; killed with SIGKILL, it
    leaves no claim behind, and the next claim sets its files aside."""
    script = tmp_path.parent / "train_and_hold.py"
    script.write_text("import sys, time\n"
                      "from async_plotter.trainer.run_folder import RunFolder\n"
                      "claim = RunFolder(sys.argv[1], verbose=0)\n"
                      "print('claimed', claim.set_aside, flush=True)\n"
                      "time.sleep(600)\n")
    holder = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), "--seed-7"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().startswith("claimed ")
        for name in ("iter_0000.mp4", "iter_0001.mp4"):
            (tmp_path / name).write_bytes(b"the live run's video")
        pattern = f"process {holder.pid} \\(python\\S* \\S*train_and_hold.py .* --seed-7\\)"
        with pytest.raises(FolderInUseError, match=pattern):
            RunFolder(str(tmp_path), verbose=0)
        monkeypatch.setenv("ASYNC_PLOTTER_SECRET", "s" * 32)
        with pytest.raises(SystemExit) as exit_info:
            cli_main(["view", "redis://127.0.0.1:1/0", "-e", "x", "--video-dir", str(tmp_path)])
        assert exit_info.value.code == 2
        assert f"is in use: process {holder.pid}" in capsys.readouterr().err
        assert sorted(os.listdir(tmp_path)) == ["iter_0000.mp4", "iter_0001.mp4"]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    claim = RunFolder(str(tmp_path), verbose=0)
    claim.release()
    assert claim.set_aside is not None
    assert sorted(os.listdir(claim.set_aside)) == ["iter_0000.mp4", "iter_0001.mp4"]


def test_earlier_runs_keeps_the_newest_few(tmp_path, caplog):
    """A folder reused run after run does not grow without end: ``earlier_runs/`` keeps the
    newest ``EARLIER_RUNS_KEPT`` runs (a folder of the user's there stays), and says which it
    removed."""
    caplog.set_level(logging.INFO, logger="async_plotter")
    (tmp_path / EARLIER_RUNS).mkdir()
    (tmp_path / EARLIER_RUNS / "keep me").mkdir()
    runs = EARLIER_RUNS_KEPT + 2
    for run in range(runs):
        (tmp_path / "iter_0000.mp4").write_bytes(b"run %d" % run)
        ended = 1_700_000_000 + 3600 * run
        os.utime(tmp_path / "iter_0000.mp4", (ended, ended))
        assert set_aside_earlier_run(str(tmp_path), verbose=0) is not None
    kept = sorted(name for name in os.listdir(tmp_path / EARLIER_RUNS) if name != "keep me")
    assert len(kept) == EARLIER_RUNS_KEPT
    contents = [(tmp_path / EARLIER_RUNS / name / "iter_0000.mp4").read_bytes() for name in kept]
    assert contents == [b"run %d" % run for run in range(runs - EARLIER_RUNS_KEPT, runs)]
    assert (tmp_path / EARLIER_RUNS / "keep me").is_dir()
    told = [r.getMessage() for r in caplog.records if "removed the oldest" in r.getMessage()]
    assert len(told) == 2 and all(f"keeps the newest {EARLIER_RUNS_KEPT}" in line for line in told)


def test_the_line_that_sets_a_run_aside_names_what_there_was(tmp_path, caplog):
    """What an earlier run left, counted as it is: no "a history of 0 policies" for a folder a
    viewer's videos went to, no "1 videos"."""
    caplog.set_level(logging.INFO, logger="async_plotter")
    (tmp_path / "iter_0003.mp4").write_bytes(b"")
    for name in ("iter_0003.npz", "iter_0004.npz"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "history").mkdir()  # empty
    assert set_aside_earlier_run(str(tmp_path), verbose=0) is not None
    told = [r.getMessage() for r in caplog.records if "earlier run" in r.getMessage()]
    assert len(told) == 1 and "outputs (1 video, 2 state recordings): moved" in told[0], told


def test_earlier_runs_never_overwrite_each_other(tmp_path):
    """Two runs set aside within one second get folders of their own; folders of other names,
    partial files and the user's files stay."""
    for content in (b"first", b"second"):
        (tmp_path / "iter_0000.mp4").write_bytes(content)
        (tmp_path / "history").mkdir()
        (tmp_path / "history" / "iter_0000.npz").write_bytes(content)
        os.utime(tmp_path / "iter_0000.mp4", (1_700_000_000, 1_700_000_000))
        os.utime(tmp_path / "history" / "iter_0000.npz", (1_700_000_000, 1_700_000_000))
        assert set_aside_earlier_run(str(tmp_path), verbose=0) is not None
    (tmp_path / "mine").mkdir()
    (tmp_path / ".partial_iter_0001.mp4").write_bytes(b"")
    assert set_aside_earlier_run(str(tmp_path), verbose=0) is None  # nothing of a run's left
    first, second = sorted(os.listdir(tmp_path / EARLIER_RUNS))
    assert second == first + "_2"
    for name, content in ((first, b"first"), (second, b"second")):
        assert (tmp_path / EARLIER_RUNS / name / "iter_0000.mp4").read_bytes() == content
        assert (tmp_path / EARLIER_RUNS / name / "history" /
                "iter_0000.npz").read_bytes() == content
    assert sorted(os.listdir(tmp_path)) == [".partial_iter_0001.mp4", EARLIER_RUNS, "mine"]


def test_a_resumed_run_keeps_the_folders_iterations_up_to_its_snapshot(tmp_path):
    """``resume_after=3``: the run continues the one in the folder. Its videos, recordings,
    history and returns of iterations 0-3 stay (the history goes on), those of 4 and 5, which
    the resumed run does again, are set aside; the initial policy is shown as iteration 3."""
    first = run_plotter(tmp_path, 6)
    assert first.stats["final_video"].endswith("iter_0005.mp4")
    before = digests(tmp_path)

    policy = LinearPolicy(8, 2)
    policy.fill(0.1 * 4)  # the snapshot's policy: iteration 3's
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=STEPS,
                 video_dir=str(tmp_path),
                 priority="normal",
                 resume_after=3,
                 verbose=0) as resumed:
        # Numbered from 0 again by mistake, an update would overwrite the run's own iteration 0.
        with pytest.raises(InvalidArgumentError, match="resumes its run after iteration 3"):
            resumed.update_plot(policy, iteration=0)
        assert resumed.stats["updates_sent"] == 0
        for iteration in (4, 5, 6):
            policy.fill(-0.1 * iteration)  # another branch than the first run's
            resumed.update_plot(policy, iteration=iteration)
            wait_for(lambda: any(
                entry.get("iteration") == iteration for entry in resumed.stats["history"]),
                     120,
                     message=f"iteration {iteration}'s history recording")
    assert resumed.stats["final_video"] == str(tmp_path / "iter_0006.mp4")
    assert {entry.get("iteration") for entry in resumed.stats["history"]} <= {3, 4, 5, 6}

    # Iterations 0-3 are the first run's, byte for byte; 4-6 the resumed run's.
    after = digests(tmp_path)
    for name in ("history/iter_0000.npz", "history/iter_0002.npz", "history/iter_0003.npz"):
        assert after[name] == before[name], name
    assert after["history/iter_0004.npz"] != before["history/iter_0004.npz"]
    rows = read_returns(str(tmp_path / "history"))
    assert [row["iteration"] for row in rows if row["iteration"] is not None][-7:] == list(range(7))
    # The first run's 4 and 5 are aside, whole, with their rows.
    (aside, ) = os.listdir(tmp_path / EARLIER_RUNS)
    aside = tmp_path / EARLIER_RUNS / aside
    for name in ("history/iter_0004.npz", "history/iter_0005.npz"):
        assert digests(aside)[name] == before[name]
    assert [row["iteration"] for row in read_returns(str(aside / "history"))][-2:] == [4, 5]
