"""run_experiment_lite: files, overrides, process hygiene, Ctrl-C (bad arguments: see
test_bad_input_experiment.py)."""
import concurrent.futures
import csv
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest

import async_plotter
from async_plotter.rl import (TRPO, VPG, CategoricalMLPPolicy, GaussianMLPPolicy, ResumeError,
                              SnapshotNotFoundError, load_snapshot, run_experiment_lite)
from async_plotter.render.history_returns import read_returns
from async_plotter.rl.resume import apply_to, resume_point
from async_plotter.trainer.run_folder import new_folder
from tests.conftest import default_sigint, wait_for
from tests.redis_server import redis_server  # noqa: F401 - the fixture


def small_trpo(**kwargs):
    settings = dict(batch_size=300, max_path_length=50, n_itr=2)
    settings.update(kwargs)
    return TRPO("CartPole-v1", CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, )), **settings)


def test_the_final_policys_shown_return_reaches_the_learning_curve_drawn_at_close(tmp_path):
    """The last row's ShownReturn comes after the row was written and its curve drawn (the final
    policy is recorded at the plotter's close()): the curve is drawn again with it."""
    from async_plotter.rl.recorder import RunRecorder, save_learning_curve

    recorder = RunRecorder(str(tmp_path / "run"))
    recorder.record({"Iteration": 0, "AverageReturn": 1.0, "StdReturn": 0.5})
    recorder.amend_last({"ShownReturn": 3.0, "ShownIteration": 0})
    recorder.close()
    save_learning_curve(tmp_path / "expected.png", [0], [1.0], [0.5],
                        title="run",
                        shown=[(0.0, 3.0)])
    expected = (tmp_path / "expected.png").read_bytes()
    assert (tmp_path / "run" / "learning_curve.png").read_bytes() == expected


def test_the_curve_draws_every_recordings_return_also_those_no_row_holds(tmp_path):
    """Two recordings finished within iteration 1: its row holds the newer (``ShownReturn``),
    the curve draws both."""
    from async_plotter.rl.recorder import RunRecorder, save_learning_curve
    from async_plotter.rl.shown_returns import ShownReturns

    shown = ShownReturns()
    recorder = RunRecorder(str(tmp_path / "run"))
    history = [{"update": 0, "iteration": None, "return": 1.5}]
    row = {"Iteration": 0, "AverageReturn": 1.0, "StdReturn": 0.5}
    row.update(shown.columns({"history": history}))
    recorder.note_shown(shown.points)
    recorder.record(row)
    history += [{
        "update": 1,
        "iteration": 0,
        "return": 2.0
    }, {
        "update": 2,
        "iteration": 1,
        "return": 4.0
    }]
    row = {"Iteration": 1, "AverageReturn": 2.0, "StdReturn": 0.5}
    row.update(shown.columns({"history": history}))
    assert (row["ShownIteration"], row["ShownReturn"]) == (1, 4.0)  # the newer only
    recorder.note_shown(shown.points)
    recorder.record(row)
    recorder.close()
    for name, points in (("every.png", [(-1.0, 1.5), (0.0, 2.0),
                                        (1.0, 4.0)]), ("rows.png", [(-1.0, 1.5), (1.0, 4.0)])):
        save_learning_curve(tmp_path / name, [0, 1], [1.0, 2.0], [0.5, 0.5],
                            title="run",
                            shown=points)
    drawn = (tmp_path / "run" / "learning_curve.png").read_bytes()
    assert drawn == (tmp_path / "every.png").read_bytes() != (tmp_path / "rows.png").read_bytes()


def test_the_console_shows_an_iteration_that_finished_no_recording_as_a_dash():
    from async_plotter.rl.logger import format_table

    lines = format_table({"AverageReturn": 93.41, "ShownReturn": None}).splitlines()
    assert lines[1:3] == ["AverageReturn  93.41", "ShownReturn    -"]


def test_tensorboard_gets_one_value_a_step_when_close_amends_the_last_row(tmp_path):
    """The last row's ShownReturn is replaced at close() by the final policy's: progress.csv is
    written again, and TensorBoard holds each value once (the returns as ``history/return`` at
    their policy's iteration; no second ``progress/`` value at the last step)."""
    from async_plotter.rl.recorder import RunRecorder
    from tests.test_tensorboard import accumulate

    recorder = RunRecorder(str(tmp_path / "run"), tensorboard=True)
    recorder.note_shown({-1.0: 1.5})
    recorder.record({
        "Iteration": 0,
        "AverageReturn": 1.0,
        "ShownReturn": 1.5,
        "ShownIteration": -1
    })
    recorder.record({
        "Iteration": 1,
        "AverageReturn": 2.0,
        "ShownReturn": None,
        "ShownIteration": None
    })
    recorder.note_shown({-1.0: 1.5, 1.0: 4.0})  # the final policy's, recorded at close()
    recorder.amend_last({"ShownReturn": 4.0, "ShownIteration": 1})
    recorder.close()
    with open(tmp_path / "run" / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(row["ShownIteration"], row["ShownReturn"]) for row in rows] == [("-1", "1.5"),
                                                                             ("1", "4.0")]
    board = accumulate(tmp_path / "run")
    assert sorted(board.Tags()["scalars"]) == ["history/return", "progress/AverageReturn"]
    assert [(e.step, e.value) for e in board.Scalars("history/return")] == [(-1, 1.5), (1, 4.0)]
    assert [(e.step, e.value) for e in board.Scalars("progress/AverageReturn")] == [(0, 1.0),
                                                                                    (1, 2.0)]


def test_writes_progress_curve_snapshot_and_log(tmp_path):
    result = run_experiment_lite(small_trpo(n_itr=3), log_dir=str(tmp_path / "run"), seed=1)
    run = tmp_path / "run"
    assert result.log_dir == str(run)
    for name in ("progress.csv", "learning_curve.png", "params.pkl", "debug.log",
                 "experiment.json"):
        assert (run / name).stat().st_size > 0, name
    with open(run / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["Iteration"]) for r in rows] == [0, 1, 2]
    assert {
        "AverageReturn", "StdReturn", "MaxReturn", "MinReturn", "NumTrajs", "Entropy", "MeanKL",
        "ExplainedVariance", "ItrTime", "SampleTime"
    } <= set(rows[0])
    assert (run / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "AverageReturn" in (run / "debug.log").read_text()
    assert not [p for p in os.listdir(run) if p.endswith(".tmp")]

    snapshot = load_snapshot(run / "params.pkl")
    assert snapshot["itr"] == 2
    np.testing.assert_array_equal(snapshot["policy"].get_param_values(),
                                  result.algo.policy.get_param_values())
    # Read as rllab's scripts read it (joblib.load(path)["policy"]): the trained policy too.
    with open(run / "params.pkl", "rb") as f:
        np.testing.assert_array_equal(
            pickle.load(f)["policy"].get_param_values(), result.algo.policy.get_param_values())
    assert result.video_dir is None


def test_snapshot_modes(tmp_path):
    run_experiment_lite(small_trpo(), log_dir=str(tmp_path / "all"), snapshot_mode="all")
    assert sorted(p for p in os.listdir(tmp_path / "all")
                  if p.endswith(".pkl")) == ["itr_0.pkl", "itr_1.pkl"]
    run_experiment_lite(small_trpo(), log_dir=str(tmp_path / "none"), snapshot_mode="none")
    assert not [p for p in os.listdir(tmp_path / "none") if p.endswith(".pkl")]


def test_default_log_dir_is_runs_exp_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_experiment_lite(small_trpo(n_itr=1), exp_name="my_exp")
    assert result.log_dir == str(tmp_path / "runs" / "my_exp")
    assert os.path.exists(result.progress_csv)
    again = run_experiment_lite(small_trpo(n_itr=1), exp_name="my_exp")
    assert again.log_dir == str(tmp_path / "runs" / "my_exp_2")  # a folder of its own


def test_runs_started_together_get_folders_of_their_own(tmp_path):
    """The default folder is made, not looked for: runs of one name started at once never
    share one."""
    stem = str(tmp_path / "runs" / "sweep")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: new_folder(stem), range(16)))
    assert sorted(made) == sorted([stem] + [f"{stem}_{n}" for n in range(2, 17)])


def digests(folder):
    """Every file below ``folder``, by its path relative to it, with its bytes."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in folder.rglob("*") if path.is_file()
    }


def files(folder):
    """Each file directly in ``folder``, by name, with its bytes."""
    return {entry.name: entry.read_bytes() for entry in folder.iterdir() if entry.is_file()}


def read_rows(progress_csv):
    with open(progress_csv, newline="") as f:
        return [int(row["Iteration"]) for row in csv.DictReader(f)]


def test_a_second_run_in_the_same_log_dir_sets_the_first_aside_whole(tmp_path, caplog):
    """Run into the same log_dir again and, before, the first run's progress.csv was lost, its
    snapshot overwritten and its TensorBoard events left beside the second's, tangling both
    runs' curves over the same steps. Now each earlier run moves to earlier_runs/ whole (a run
    of its own in TensorBoard), also where ``algo.train()`` writes the folder itself."""
    run = tmp_path / "run"
    run_experiment_lite(small_trpo(n_itr=3), log_dir=str(run), seed=1)
    first = files(run)
    (run / "notes.txt").write_text("the user's own file")
    caplog.clear()

    with caplog.at_level(logging.INFO, logger="async_plotter"):
        result = run_experiment_lite(small_trpo(n_itr=2), log_dir=str(run), seed=2)
    assert read_rows(result.progress_csv) == [0, 1]
    assert len([name for name in os.listdir(run) if name.startswith("events.out.tfevents")]) == 1
    (aside, ) = os.listdir(run / "earlier_runs")
    assert files(run / "earlier_runs" / aside) == first
    assert read_rows(run / "earlier_runs" / aside / "progress.csv") == [0, 1, 2]
    assert (run / "notes.txt").read_text() == "the user's own file"
    told = caplog.text
    assert (f"run_experiment_lite: {run} held an earlier run's outputs (progress.csv, 1 "
            "TensorBoard event file, 1 snapshot, 3 more files): moved to "
            f"{run / 'earlier_runs' / aside}") in told, told

    second = files(run)
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        small_trpo(n_itr=1, log_dir=str(run)).train()
    assert read_rows(run / "progress.csv") == [0]
    assert len(os.listdir(run / "earlier_runs")) == 2
    newest = max(os.listdir(run / "earlier_runs"), key=lambda name: (name[:19], len(name), name))
    assert f"TRPO.train(): {run} held an earlier run's outputs" in caplog.text  # who moved them
    assert files(run / "earlier_runs" / newest) == {
        name: content
        for name, content in second.items() if name != "notes.txt"
    }


HOLDING_SCRIPT = """
from async_plotter.rl import TRPO, CategoricalMLPPolicy, run_experiment_lite

algo = TRPO("CartPole-v1", CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, )),
            batch_size=300, max_path_length=50, n_itr=100000)
run_experiment_lite(algo, log_dir={log_dir!r}, exp_name="the_live_one")
"""


@pytest.mark.slow
def test_a_log_dir_a_live_run_writes_into_is_refused(tmp_path):
    """Two runs given one log_dir at once (a sweep's copy-paste): the second is refused before
    it writes anything, naming the first's process; the first trains on untouched."""
    run = tmp_path / "run"
    live = subprocess.Popen(
        [sys.executable, "-c", HOLDING_SCRIPT.format(log_dir=str(run))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (run / "progress.csv").exists() or len(read_rows(run / "progress.csv")) < 2:
            assert live.poll() is None and time.monotonic() < deadline, "the live run never wrote"
            time.sleep(0.2)
        with pytest.raises(async_plotter.FolderInUseError,
                           match=f"log_dir '{run}' is in use: process {live.pid} "):
            run_experiment_lite(small_trpo(n_itr=1), log_dir=str(run), exp_name="second")
        rows = len(read_rows(run / "progress.csv"))
        while len(read_rows(run / "progress.csv")) <= rows:  # still training, into its file
            assert live.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        assert not (run / "earlier_runs").exists()
        assert "the_live_one" in (run / "experiment.json").read_text()
    finally:
        live.kill()
        live.wait(timeout=60)
    # Killed, it holds nothing: the next run sets it aside and goes on.
    result = run_experiment_lite(small_trpo(n_itr=1), log_dir=str(run))
    assert read_rows(result.progress_csv) == [0]
    assert len(os.listdir(run / "earlier_runs")) == 1


def test_function_forms(tmp_path):
    seen = {}

    def build(seed, log_dir):  # receives the settings it names
        seen.update(seed=seed, log_dir=log_dir)
        return small_trpo(n_itr=1)

    result = run_experiment_lite(build, seed=3, log_dir=str(tmp_path / "a"))
    assert seen == {"seed": 3, "log_dir": str(tmp_path / "a")}
    assert len(result.history) == 1

    def runs_itself():  # builds and trains; the experiment's files still get written
        small_trpo(n_itr=1).train()

    result = run_experiment_lite(runs_itself, log_dir=str(tmp_path / "b"))
    assert result.algo is not None and os.path.exists(tmp_path / "b" / "progress.csv")

    with pytest.raises(TypeError, match="neither returned an algorithm nor trained one"):
        run_experiment_lite(lambda: None, log_dir=str(tmp_path / "c"))


@pytest.mark.slow
def test_parallel_run_leaves_no_child_processes(tmp_path, no_leftover_children):
    algo = VPG("InvertedPendulum-v5",
               GaussianMLPPolicy("InvertedPendulum-v5", hidden_sizes=(8, )),
               batch_size=400,
               max_path_length=50,
               n_itr=2)
    result = run_experiment_lite(algo, n_parallel=2, log_dir=str(tmp_path / "run"), seed=0)
    assert len(result.history) == 2
    assert type(algo.sampler).__name__ == "ParallelSampler" and algo.sampler.n_parallel == 2


class InterruptedTRPO(TRPO):
    """Behaves as if the user pressed Ctrl-C during the second iteration's update."""

    def optimize_policy(self, itr, samples):
        if itr == 1:
            raise KeyboardInterrupt
        return super().optimize_policy(itr, samples)


class RecordingPlotter(async_plotter.Plotter):
    """The real Plotter (real worker processes), recording how the training loop drives it."""

    instances = []

    def __init__(self, env, policy, **kwargs):
        super().__init__(env, policy, **kwargs)
        self.env, self.policy, self.kwargs = env, policy, kwargs
        self.calls = []
        RecordingPlotter.instances.append(self)

    def start(self):
        self.calls.append("start")
        return super().start()

    def update_plot(self, policy, max_path_length=None, iteration=None, metrics=None):
        self.calls.append(("update", iteration, len(policy.get_param_values())))
        super().update_plot(policy, max_path_length, iteration, metrics)

    def close(self, timeout=None, **kwargs):
        self.calls.append("close")
        super().close(timeout, **kwargs)


@pytest.mark.slow
def test_ctrl_c_stops_workers_and_plotter_and_keeps_the_snapshot(tmp_path, monkeypatch,
                                                                 no_leftover_children):
    monkeypatch.setattr(async_plotter, "Plotter", RecordingPlotter, raising=False)
    RecordingPlotter.instances.clear()
    algo = InterruptedTRPO("CartPole-v1",
                           CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, )),
                           batch_size=300,
                           max_path_length=50,
                           n_itr=5)
    with pytest.raises(KeyboardInterrupt):
        run_experiment_lite(algo, n_parallel=2, plot=True, log_dir=str(tmp_path / "run"))
    (plotter, ) = RecordingPlotter.instances
    assert plotter.calls[0] == "start" and plotter.calls[-1] == "close"
    assert snapshot_itr(tmp_path / "run" / "params.pkl") == 0
    assert not [p for p in os.listdir(tmp_path / "run") if p.endswith(".tmp")]


def snapshot_itr(path):
    return load_snapshot(path)["itr"]


@pytest.mark.slow
def test_plot_flag_overrides_the_algorithm_with_parallel_sampling(tmp_path, monkeypatch,
                                                                  no_leftover_children):
    """rllab/garage's bug: plot=True silently did nothing with n_parallel > 1."""
    monkeypatch.setattr(async_plotter, "Plotter", RecordingPlotter, raising=False)
    RecordingPlotter.instances.clear()
    algo = small_trpo(n_itr=3, plot=False)
    run_experiment_lite(algo, n_parallel=2, plot=True, log_dir=str(tmp_path / "run"), fps=10)
    (plotter, ) = RecordingPlotter.instances
    assert plotter.env == "CartPole-v1"
    assert plotter.policy is algo.policy
    assert plotter.kwargs["video_dir"] == str(tmp_path / "run" / "videos")
    assert plotter.kwargs["max_path_length"] == 50 and plotter.kwargs["fps"] == 10
    assert plotter.calls == ["start"] + [("update", i, algo.policy.num_params)
                                         for i in range(3)] + ["close"]

    # And the other way round: plot=False from run_experiment_lite wins over the algorithm's True.
    RecordingPlotter.instances.clear()
    run_experiment_lite(small_trpo(n_itr=1, plot=True), log_dir=str(tmp_path / "off"))
    assert RecordingPlotter.instances == []


class VideoAwareTRPO(TRPO):
    """Holds its last iteration until the plotter has written a video (bounded), so the test does
    not depend on how fast training is compared to the plot worker's start-up (~3 s)."""

    def optimize_policy(self, itr, samples):
        stats = super().optimize_policy(itr, samples)
        if itr == self.n_itr - 1:
            deadline = time.monotonic() + 90
            while self.plotter.stats["videos"] < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
        return stats


@pytest.mark.slow
@pytest.mark.plotter_core
def test_plot_with_parallel_sampling_records_videos(tmp_path, no_leftover_children):
    """End to end with the real core Plotter: videos appear in <log_dir>/videos."""
    import async_plotter.trainer.plotter_handle  # noqa: F401  (fails loudly when the core is missing)

    algo = VideoAwareTRPO("InvertedPendulum-v5",
                          GaussianMLPPolicy("InvertedPendulum-v5", hidden_sizes=(8, )),
                          batch_size=300,
                          max_path_length=50,
                          n_itr=3)
    result = run_experiment_lite(algo,
                                 n_parallel=2,
                                 plot=True,
                                 log_dir=str(tmp_path / "run"),
                                 fps=200)
    videos = tmp_path / "run" / "videos"
    assert result.video_dir == str(videos)
    files = sorted(p.name for p in videos.iterdir() if p.is_file() and p.stat().st_size > 0)
    # Whole videos, each with its state recording beside it, and nothing else but the history.
    assert files and all(name.endswith((".mp4", ".npz")) for name in files), files
    videos_ = {name[:-4] for name in files if name.endswith(".mp4")}
    assert videos_ and {name[:-4] for name in files if name.endswith(".npz")} == videos_, files
    assert sorted(p.name for p in videos.iterdir() if p.is_dir()) == ["history"]
    history = sorted(p.name for p in (videos / "history").iterdir())
    assert "iter_0002.npz" in history and "returns.csv" in history, history
    assert all(name.endswith(".npz") for name in history if name != "returns.csv"), history


def test_train_without_run_experiment_lite_writes_to_its_log_dir(tmp_path):
    algo = small_trpo(n_itr=1, log_dir=str(tmp_path / "direct"))
    history = algo.train()
    assert len(history) == 1
    for name in ("progress.csv", "learning_curve.png", "params.pkl", "debug.log"):
        assert (tmp_path / "direct" / name).exists(), name


UNGUARDED_SCRIPT = """
# A training script without an `if __name__ == "__main__":` guard, as rllab's examples were.
from async_plotter.rl import TRPO, CategoricalMLPPolicy, run_experiment_lite

algo = TRPO("CartPole-v1", CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, )),
            batch_size=300, max_path_length=50, n_itr=100000)
run_experiment_lite(algo, n_parallel=2, log_dir={log_dir!r})
"""


def running(process):
    """Alive and not a zombie (an exited orphan may wait a moment for PID 1 to reap it)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_real_ctrl_c_on_an_unguarded_script(tmp_path):
    """SIGINT to the whole process group, as a terminal sends it: the script stops, its sampler
    workers (which ignore SIGINT) are shut down by it, and the last snapshot loads."""
    log_dir = tmp_path / "run"
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED_SCRIPT.format(log_dir=str(log_dir)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, str(script)],
                            cwd=str(tmp_path),
                            env=env,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE,
                            start_new_session=True,
                            preexec_fn=default_sigint)  # also under `make test &`
    try:
        deadline = time.monotonic() + 120
        progress = log_dir / "progress.csv"
        while time.monotonic() < deadline and proc.poll() is None:
            # Rows of iterations 0-2: iteration 1's snapshot is written (a row goes first, then
            # its snapshot: a Ctrl-C between them leaves a row that a resume does again).
            if progress.exists() and len(progress.read_text().splitlines()) >= 4:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert len([w for w in workers if "resource_tracker" not in " ".join(w.cmdline())]) == 2
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0
    assert b"KeyboardInterrupt" in stderr
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(running(w) for w in workers):
        time.sleep(0.1)
    alive = [w.pid for w in workers if running(w)]
    assert not alive, f"workers survived Ctrl-C: {alive}"
    assert load_snapshot(log_dir / "params.pkl")["itr"] >= 1
    assert not [p for p in os.listdir(log_dir) if p.endswith(".tmp")]


def test_the_examples_say_where_every_policys_return_is_when_the_history_was_thinned(tmp_path):
    """A run that recorded more policies than its history folder keeps: the examples' closing
    lines name returns.csv, which has them all; where all are kept, the folder alone."""
    from async_plotter.render.history_returns import ReturnsFile
    from async_plotter.rl.example_cli import describe_outputs
    from async_plotter.rl.experiment import ExperimentResult

    history = tmp_path / "videos" / "history"
    history.mkdir(parents=True)
    returns = ReturnsFile(str(history))
    for update in range(3):
        returns.append({"update": update, "iteration": update - 1, "return": 1.0, "length": 5})
        (history / f"iter_{update:04d}.npz").write_bytes(b"")
    result = ExperimentResult(str(tmp_path), str(tmp_path / "progress.csv"), "", "",
                              str(tmp_path / "videos"), None, [])
    lines = describe_outputs(result).splitlines()
    assert f"history:        3 policies in {history}" in lines
    assert not [line for line in lines if line.startswith("returns:")]
    (history / "iter_0000.npz").unlink()  # thinned away
    lines = describe_outputs(result).splitlines()
    assert f"history:        2 policies in {history}" in lines
    assert f"returns:        3 policies in {history / 'returns.csv'}" in lines


def scalar_steps(log_dir, tag):
    """The steps TensorBoard shows for ``tag`` in the run folder ``log_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return [event.step for event in accumulator.Scalars(tag)]


@pytest.mark.slow
def test_a_resumed_run_goes_on_in_its_own_folder(tmp_path, caplog):
    """rllab's resume_from: a run resumed from its snapshot of iteration 1 trains iterations 2
    and 3 again from that policy, in its folder, as one run: progress.csv, TensorBoard, the
    videos and the history keep iterations 0-1 and go on; the first run's later iterations are
    set aside, whole."""
    run = tmp_path / "run"
    first = run_experiment_lite(small_trpo(n_itr=4),
                                log_dir=str(run),
                                seed=1,
                                snapshot_mode="all",
                                plot=True)
    assert read_rows(first.progress_csv) == [0, 1, 2, 3]
    first_rows = list(first.history)
    later = {name: (run / name).read_bytes() for name in ("itr_2.pkl", "itr_3.pkl")}
    first_final = (run / "videos" / "iter_0003.mp4").read_bytes()
    first_recorded = {row["iteration"] for row in read_returns(str(run / "videos" / "history"))}
    first_name = json.loads((run / "experiment.json").read_text())["exp_name"]
    # The first run's TensorBoard files named to sort after the resumed run's (as files made in
    # one second sort by their processes' ids): TensorBoard reads them last.
    for name in os.listdir(run):
        if name.startswith("events.out.tfevents."):
            parts = name.split(".")
            parts[3] = "9999999999"
            os.rename(run / name, run / ".".join(parts))

    algo = small_trpo(n_itr=4)
    caplog.clear()  # the resumed run's lines alone
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        result = run_experiment_lite(algo,
                                     seed=2,
                                     snapshot_mode="all",
                                     plot=True,
                                     resume_from=str(run / "itr_1.pkl"))
    assert result.log_dir == str(run)
    assert algo.start_itr == 2 and "resuming from" in caplog.text
    # It goes on under the run's name (it had taken a new timestamp).
    name = json.loads((run / "experiment.json").read_text())["exp_name"]
    assert name == first_name and f"experiment {name}: outputs in {run}" in caplog.text, name
    # Its close line tells of the policies it recorded, as those since the resume.
    assert "Since the resume after iteration 1: " in caplog.text
    assert "The whole run:" not in caplog.text
    # One progress.csv, its first rows the first run's; TensorBoard shows each step once.
    assert read_rows(result.progress_csv) == [0, 1, 2, 3]
    with open(result.progress_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    for kept, row in zip(first_rows[:2], rows[:2]):
        assert float(row["AverageReturn"]) == pytest.approx(kept["AverageReturn"])
    assert sorted(scalar_steps(run, "progress/AverageReturn")) == [0, 1, 2, 3]
    # The first run's iterations 2 and 3 are kept aside, whole.
    (aside, ) = os.listdir(run / "earlier_runs")
    aside = run / "earlier_runs" / aside
    assert {name: (aside / name).read_bytes() for name in later} == later
    assert read_rows(aside / "progress.csv") == [0, 1, 2, 3]
    assert scalar_steps(aside, "progress/AverageReturn") == [0, 1, 2, 3]
    assert (aside / "videos" / "iter_0003.mp4").read_bytes() == first_final
    # The videos go on: the newest is the resumed run's final policy; the history's returns
    # hold each iteration once.
    assert result.final_video == str(run / "videos" / "iter_0003.mp4")
    # (the final policy is always recorded; the others where the worker took them in time)
    iterations = [row["iteration"] for row in read_returns(str(run / "videos" / "history"))]
    assert {itr for itr in first_recorded if itr <= 1} | {3} <= set(iterations)
    assert len(iterations) == len(set(iterations))


def normalized_cartpole():
    return gym.wrappers.NormalizeObservation(gym.make("CartPole-v1"))


@pytest.mark.parametrize("algorithm,env,n_parallel", [(TRPO, "CartPole-v1", 2),
                                                      (VPG, "CartPole-v1", 2),
                                                      (TRPO, normalized_cartpole, 1)])
def test_a_resumed_run_goes_on_as_the_run_would_have(tmp_path, algorithm, env, n_parallel, caplog):
    """A run that stopped after iteration 1, resumed with no seed given to 4 iterations,
    samples and steps as one run of 4 did: the same returns, the same parameters. Before, VPG's
    Adam moments started afresh, an unseeded resume drew a new sampling seed, and an env's
    running observation statistics started from nothing."""

    def algo(n_itr):
        policy = CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, ), seed=0)
        return algorithm(env, policy, batch_size=300, max_path_length=50, n_itr=n_itr)

    whole = run_experiment_lite(algo(4),
                                log_dir=str(tmp_path / "whole"),
                                seed=1,
                                n_parallel=n_parallel)
    run_experiment_lite(algo(2), log_dir=str(tmp_path / "cut"), seed=1, n_parallel=n_parallel)
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        resumed = run_experiment_lite(algo(4),
                                      resume_from=str(tmp_path / "cut"),
                                      n_parallel=n_parallel)
    assert [row["AverageReturn"]
            for row in resumed.history] == [row["AverageReturn"] for row in whole.history]
    np.testing.assert_array_equal(resumed.algo.policy.get_param_values(),
                                  whole.algo.policy.get_param_values())
    assert "sampling with the run's seed, 1" in caplog.text
    if env is normalized_cartpole:
        assert "wrappers go on from what they had learned (NormalizeObservation" in caplog.text


def test_each_sampler_goes_on_from_the_runs_statistics(tmp_path, caplog):
    """With n_parallel=2 each sampler learns its own: the snapshot keeps both, and resumed, each
    goes on from its own (a few more steps, not from nothing; before, both from the first's)."""

    def algo(n_itr):
        policy = CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, ), seed=0)
        return TRPO(normalized_cartpole, policy, batch_size=300, max_path_length=50, n_itr=n_itr)

    cut = run_experiment_lite(algo(2), log_dir=str(tmp_path / "cut"), n_parallel=2)
    counted = [state[-1] for state in cut.algo.get_itr_snapshot(1, None)["env_states"]]
    assert len(counted) == 2 and min(counted) > 50, counted  # obs_rms.count, last
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        resumed = run_experiment_lite(algo(3), resume_from=str(tmp_path / "cut"), n_parallel=3)
    went_on = [state[-1] for state in resumed.algo.get_itr_snapshot(2, None)["env_states"]]
    assert all(now >= before for now, before in zip(went_on, counted + counted[:1])), went_on
    assert "the run had 2 samplers and this one 3: sampler i goes on from the run's sampler " \
        "i % 2" in caplog.text, caplog.text


def test_a_resumed_runs_plotter_draws_the_runs_curve_from_its_first_iteration(
        tmp_path, redis_server):  # noqa: F811
    """A run resumed with plot=True gives its Plotter the AverageReturn of its progress.csv rows
    up to the snapshot (``Plotter.add_metrics``): the live page's curve, and a viewer's over
    Redis (here: serve's catalog, of a run whose first part published nothing), start at
    iteration 0, not at the resumed run's first."""
    from async_plotter.channel.redis.signing import Verifier
    from async_plotter.serve.catalog import Catalog
    from tests.conftest import settles

    run = tmp_path / "run"
    run_experiment_lite(small_trpo(n_itr=3), log_dir=str(run), snapshot_mode="all")
    resumed = run_experiment_lite(small_trpo(n_itr=5),
                                  resume_from=str(run / "itr_1.pkl"),
                                  plot=True,
                                  channel=redis_server.url,
                                  experiment="resumed")
    with open(resumed.progress_csv, newline="") as f:
        rows = [[int(row["Iteration"]), float(row["AverageReturn"])] for row in csv.DictReader(f)]
    assert [iteration for iteration, _ in rows] == [0, 1, 2, 3, 4]
    catalog = Catalog(redis_server.url, Verifier(None, trust_unsigned=True))
    catalog.acquire()
    try:

        def curve():
            found = {row["name"]: row for row in catalog.rows()}.get("resumed", {})
            return found.get("curve", {}).get("points")

        settles(curve, rows, 30)
    finally:
        catalog.close()


class WaitsForTheSnapshotsRecording(gym.Wrapper):
    """The training env's first reset waits until the plot worker has recorded the snapshot's
    policy (else the next iteration's policy may replace it before the worker is up). Left out of
    the plotter's copy."""

    async_plotter_leave_out = True
    recorded = None  # a threading.Event, set by the Plotter's on_event

    def reset(self, **kwargs):
        assert type(self).recorded.wait(120), "the snapshot's policy was never recorded"
        return self.env.reset(**kwargs)


def normalized_cartpole_that_waits():
    return WaitsForTheSnapshotsRecording(normalized_cartpole())


def test_a_resumed_plotter_shows_the_snapshots_policy_with_what_the_env_had_learned(tmp_path):
    """The resumed plotter's first policy is the snapshot's, shown as its iteration: its history
    recording is the one a Plotter given the snapshot's policy and the env's learned statistics
    makes. Before, the plotter's copy of the env got them after its first batch only, so the
    snapshot's policy was shown (and its recorded return replaced) on statistics started
    afresh."""
    import threading

    from async_plotter import Plotter
    from async_plotter.env.state import TrainerEnvState

    def algo(env, n_itr):
        policy = CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, ), seed=0)
        return TRPO(env, policy, batch_size=300, max_path_length=50, n_itr=n_itr)

    cut = run_experiment_lite(algo(normalized_cartpole, 2), log_dir=str(tmp_path / "run"))
    snapshot = cut.algo.get_itr_snapshot(1, None)
    env = normalized_cartpole()
    TrainerEnvState(env, "the expected").write(snapshot["env_states"][0])
    policy = cut.algo.policy
    with Plotter(env,
                 policy,
                 max_path_length=50,
                 video_dir=str(tmp_path / "expected"),
                 priority="normal",
                 verbose=0) as plotter:
        plotter.update_plot(policy, iteration=1)
        expected = wait_for(
            lambda: [e["return"] for e in plotter.stats["history"] if e["iteration"] == 1],
            60,
            message="the expected return")

    shown = {}
    WaitsForTheSnapshotsRecording.recorded = threading.Event()

    def on_event(kind, payload):
        if kind == "history" and payload.get("iteration") == 1:
            shown.setdefault("return", payload["episode_return"])
            WaitsForTheSnapshotsRecording.recorded.set()

    run_experiment_lite(algo(normalized_cartpole_that_waits, 3),
                        resume_from=str(tmp_path / "run"),
                        plot=True,
                        priority="normal",
                        on_event=on_event)
    assert shown["return"] == pytest.approx(expected[0], rel=1e-6, abs=1e-6)


def test_a_resumed_run_on_other_wrappers_says_their_statistics_start_afresh(tmp_path, caplog):
    policy = CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, ), seed=0)
    run_experiment_lite(TRPO(normalized_cartpole, policy, batch_size=200, n_itr=1),
                        log_dir=str(tmp_path / "cut"))
    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        run_experiment_lite(TRPO("CartPole-v1", policy, batch_size=200, n_itr=2),
                            resume_from=str(tmp_path / "cut"))
    assert ("the run's env wrappers had learned NormalizeObservation (obs_rms.mean, obs_rms.var, "
            "obs_rms.count), and this env's hold nothing: what they learn starts afresh"
            in caplog.text), caplog.text


def test_a_resumed_algorithm_starts_from_the_snapshots_policy_and_baseline(tmp_path):
    run = tmp_path / "run"
    trained = run_experiment_lite(small_trpo(n_itr=3), log_dir=str(run), snapshot_mode="all")
    point = resume_point(str(run / "itr_1.pkl"))
    algo = small_trpo(n_itr=5)
    assert not np.array_equal(algo.policy.get_param_values(), point.snapshot["policy_params"])
    apply_to(algo, point)
    assert algo.start_itr == 2
    np.testing.assert_array_equal(algo.policy.get_param_values(), point.snapshot["policy_params"])
    assert algo.baseline is point.snapshot["baseline"]
    # A run's folder resumes from its newest snapshot.
    assert resume_point(str(run)).itr == 2
    np.testing.assert_array_equal(
        resume_point(str(run)).snapshot["policy_params"], trained.algo.policy.get_param_values())


def test_resume_from_names_what_is_wrong_before_anything_is_written(tmp_path):
    run = tmp_path / "run"
    run_experiment_lite(small_trpo(n_itr=2), log_dir=str(run), snapshot_mode="none")
    before = sorted(os.listdir(run))
    # Named errors, FileNotFoundError and ValueError as before too.
    with pytest.raises(SnapshotNotFoundError, match="holds no snapshot"):
        run_experiment_lite(small_trpo(n_itr=3), resume_from=str(run))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_experiment_lite(small_trpo(n_itr=3), resume_from=str(run / "params.pkl"))
    assert sorted(os.listdir(run)) == before
    run_experiment_lite(small_trpo(n_itr=2), log_dir=str(run))
    written = digests(run)
    with pytest.raises(ResumeError, match="iteration 1, and n_itr is 2"):
        run_experiment_lite(small_trpo(n_itr=2), resume_from=str(run))
    other = TRPO("CartPole-v1",
                 CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(4, )),
                 batch_size=300,
                 max_path_length=50,
                 n_itr=5)
    with pytest.raises(ValueError, match="parameters, and the algorithm's has"):
        run_experiment_lite(other, resume_from=str(run))
    assert digests(run) == written  # refused before the folder was touched


def test_a_run_resumed_by_hand_with_start_itr_goes_on_in_its_folder(tmp_path):
    """rllab's other way: load the snapshot, give the policy its parameters and start the
    algorithm at the next iteration (``start_itr``) in the same log_dir. Before, the folder's
    progress.csv was lost; now the run goes on there."""
    run = tmp_path / "run"
    small_trpo(n_itr=2, log_dir=str(run)).train()
    snapshot = load_snapshot(run / "params.pkl")
    algo = small_trpo(n_itr=4, log_dir=str(run), start_itr=snapshot["itr"] + 1)
    algo.policy.set_param_values(snapshot["policy_params"])
    algo.train()
    assert read_rows(run / "progress.csv") == [0, 1, 2, 3]
    assert not (run / "earlier_runs").exists()  # nothing of the run was done again
    # The same through run_experiment_lite, with TensorBoard: each step once.
    other = tmp_path / "other"
    run_experiment_lite(small_trpo(n_itr=2), log_dir=str(other))
    algo = small_trpo(n_itr=3, start_itr=2)
    algo.policy.set_param_values(load_snapshot(other / "params.pkl")["policy_params"])
    run_experiment_lite(algo, log_dir=str(other))
    assert read_rows(other / "progress.csv") == [0, 1, 2]
    assert scalar_steps(other, "progress/AverageReturn") == [0, 1, 2]
