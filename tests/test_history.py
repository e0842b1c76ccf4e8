"""The whole run, kept: every policy the worker takes, rolled out once more without drawing (one
whole, deterministic episode from the run's start state) into ``<video_dir>/history/``, its
return in ``stats["history"]`` and TensorBoard; ``async-plotter render`` draws any of them."""
import json
import logging
import math
import os
import subprocess
import sys
import time

import imageio.v2 as imageio
import numpy as np
import pytest

from async_plotter import Plotter
from async_plotter.render.history_returns import read_returns
from async_plotter.render.recording import read_recording
from tests.conftest import wait_for
from tests.policies import (FailsInHistoryPolicy, HangsInHistoryPolicy, LinearPolicy,
                            NoisyLinearPolicy, SlowLinearPolicy)
from tests.test_tensorboard import accumulate

pytestmark = pytest.mark.slow

ITERATIONS = 20
STEPS = 300  # Hopper: 125 steps/s, every 4th step shown


def history_of(plotter):
    return {entry["update"]: entry for entry in plotter.stats["history"]}


def wait_for_history(plotter, update, timeout=120):
    wait_for(lambda: update in history_of(plotter), timeout, message=f"update {update}'s history")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """20 iterations of a policy that samples its actions (as rl's do), paced so that the
    worker takes each update; iterations 10 and 11 have the same parameters. The last update
    goes in just before close()."""
    folder = tmp_path_factory.mktemp("videos")
    board = tmp_path_factory.mktemp("tensorboard")
    policy = NoisyLinearPolicy(11, 3)
    plotter = Plotter("Hopper-v5",
                      policy,
                      max_path_length=STEPS,
                      video_dir=str(folder),
                      tensorboard_dir=str(board),
                      priority="normal").start()
    try:
        wait_for_history(plotter, 0)  # the initial policy
        for iteration in range(ITERATIONS):
            policy.fill(parameter_of(iteration))
            plotter.update_plot(policy, iteration=iteration)
            if iteration < ITERATIONS - 1:
                wait_for_history(plotter, iteration + 1)
    finally:
        plotter.close()
    return folder, board, plotter.stats


def recording_names(folder):
    """The recordings in a history folder, by name (``returns.csv`` beside them left out)."""
    return sorted(name for name in os.listdir(folder) if name.endswith(".npz"))


def parameter_of(iteration):
    """Every parameter of the run's policy of ``iteration``: 10 and 11 are the same."""
    return 0.1 * (iteration if iteration != 11 else 10) - 1.0


def shown_steps(length, stride):
    """The steps a recording keeps: the reset, every stride-th, and the last."""
    return 1 + len({step for step in range(1, length + 1) if step % stride == 0 or step == length})


def test_every_update_is_recorded_as_a_whole_deterministic_episode_from_one_start(run):
    folder, _, stats = run
    history = folder / "history"
    names = recording_names(history)
    assert names == ["iter_%04d.npz" % i for i in range(ITERATIONS)] + ["update_0000.npz"], names
    entries = {entry["update"]: entry for entry in stats["history"]}
    assert sorted(entries) == list(range(ITERATIONS + 1))
    starts = []
    for update, entry in entries.items():
        name = "update_0000.npz" if update == 0 else "iter_%04d.npz" % (update - 1)
        assert entry["path"] == str(history / name)
        assert entry["iteration"] == (None if update == 0 else update - 1)
        recording = read_recording(entry["path"])
        meta = recording.meta
        assert meta["history"] is True and meta["deterministic"] is True
        assert meta["update"] == update and meta["start_seed"] == 0
        # Whole: until the episode ended by itself, or max_path_length.
        assert meta["length"] == entry["length"]
        assert meta["completed"] or entry["length"] == STEPS
        assert meta["stride"] == 4 and meta["fps"] == pytest.approx(31.25)
        assert len(recording.states) == shown_steps(entry["length"], 4)
        assert recording.rewards.sum() == pytest.approx(entry["return"], rel=1e-4, abs=1e-3)
        assert meta["return"] == pytest.approx(entry["return"])
        assert 0 < entry["cpu_seconds"] < 60  # what recording it cost, for the benchmarks
        starts.append(recording.states[0])
    # One start state for the whole run.
    assert all(np.array_equal(start, starts[0]) for start in starts)
    # returns.csv: a row each, as stats says (the initial policy at iteration -1).
    rows = read_returns(str(history))
    assert [(row["update"], row["iteration"], row["return"], row["length"], row["recording"])
            for row in rows] == [(update, -1 if entry["iteration"] is None else entry["iteration"],
                                  entry["return"], entry["length"], os.path.basename(entry["path"]))
                                 for update, entry in sorted(entries.items())]
    # Different policies act differently from it.
    assert len({round(entry["return"], 6) for entry in entries.values()}) > ITERATIONS // 2


def test_two_recordings_of_the_same_parameters_are_the_same_step_for_step(run):
    folder, _, _ = run
    ten = read_recording(str(folder / "history" / "iter_0010.npz"))
    eleven = read_recording(str(folder / "history" / "iter_0011.npz"))
    assert np.array_equal(ten.states, eleven.states)
    assert np.array_equal(ten.actions, eleven.actions, equal_nan=True)
    assert np.array_equal(ten.rewards, eleven.rewards)


@pytest.mark.parametrize("iteration", [5, ITERATIONS - 1])
def test_a_recording_is_the_episode_the_trainer_gets_from_that_policy(run, iteration):
    """What the history shows is what trains: the trainer's own copy of the policy of
    ``iteration``, acting on its mean from the run's start state (reset seed 0), gives the
    recorded episode state for state, and its return."""
    import gymnasium
    import mujoco

    folder, _, stats = run
    entry = next(entry for entry in stats["history"] if entry["iteration"] == iteration)
    recording = read_recording(str(folder / "history" / ("iter_%04d.npz" % iteration)))
    policy = LinearPolicy(11, 3)
    policy.fill(parameter_of(iteration))
    env = gymnasium.make("Hopper-v5")
    model, data = env.unwrapped.model, env.unwrapped.data
    observation, _ = env.reset(seed=0)
    states, total, length = [_full_state(mujoco, model, data)], 0.0, 0
    for step in range(1, STEPS + 1):
        observation, reward, terminated, _, _ = env.step(policy.get_action(observation)[1]["mean"])
        total, length = total + reward, step
        if step % 4 == 0 or terminated or step == STEPS:
            states.append(_full_state(mujoco, model, data))
        if terminated:
            break
    env.close()
    assert (entry["length"], recording.meta["length"]) == (length, length)
    assert entry["return"] == pytest.approx(total, rel=1e-6)
    assert np.array_equal(recording.states, np.array(states))


def _full_state(mujoco, model, data):
    state = np.empty(mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(model, data, state, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    return state


def test_the_final_policy_is_recorded_at_close_and_the_videos_go_on(run):
    folder, _, stats = run
    assert stats["history"][-1]["iteration"] == ITERATIONS - 1
    assert (folder / "history" / ("iter_%04d.npz" % (ITERATIONS - 1))).exists()
    assert stats["final_video"] == str(folder / ("iter_%04d.mp4" % (ITERATIONS - 1)))
    everything = [name for _, _, names in os.walk(folder) for name in names]
    assert not [name for name in everything if name.startswith(".partial_")], everything


def test_the_returns_are_in_tensorboard_at_each_policys_iteration(run):
    _, board, stats = run
    scalars = accumulate(board).Scalars("history/return")
    written = {event.step: event.value for event in scalars}
    expected = {
        (-1 if e["iteration"] is None else e["iteration"]): e["return"]
        for e in stats["history"]
    }
    assert written.keys() == expected.keys()
    for step, value in expected.items():
        assert written[step] == pytest.approx(value, rel=1e-5, abs=1e-4)


def test_render_draws_a_history_recording_at_any_quality(run, tmp_path):
    folder, _, stats = run
    path = folder / "history" / "iter_0007.npz"
    recording = read_recording(str(path))
    out = tmp_path / "drawn"
    result = subprocess.run([
        sys.executable, "-m", "async_plotter.cli", "render",
        str(path), "--quality", "full", "--size", "160", "--out",
        str(out)
    ],
                            capture_output=True,
                            text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    reader = imageio.get_reader(str(out / "iter_0007.mp4"))
    try:
        frames = [frame for frame in reader]
        fps = reader.get_meta_data()["fps"]
    finally:
        reader.close()
    assert len(frames) == len(recording.states)
    assert max(frames[0].shape[:2]) == 160 and fps == pytest.approx(31.25, rel=0.01)
    assert frames[0].std() > 5, "a blank picture"


def render_folder(folder, out, *arguments, env=None):
    return subprocess.run([
        sys.executable, "-m", "async_plotter.cli", "render",
        str(folder), "--size", "64", "--out",
        str(out), *arguments
    ],
                          capture_output=True,
                          text=True,
                          timeout=300,
                          env=env)


def test_render_draws_a_whole_history_in_processes_of_its_own(run, tmp_path):
    """A run's folder at once, a process a job: every recording, each video as one process
    alone draws it, the ``wrote`` line once each, and the work spread over the processes."""
    folder, _, _ = run
    history = folder / "history"
    result = render_folder(history, tmp_path / "all", "--jobs", "2", "--verbose")
    assert result.returncode == 0, result.stderr
    names = recording_names(history)
    assert sorted(os.listdir(tmp_path / "all")) == [name[:-4] + ".mp4" for name in names]
    lines = result.stderr.splitlines()
    assert any(f"drawing {len(names)} recordings in 2 processes" in line for line in lines)
    assert sum(" wrote " in line for line in lines) == len(names), lines
    drawers = {line.split(" process ")[1].split()[0] for line in lines if " drew " in line}
    assert len(drawers) == 2, lines
    alone = render_folder(history / "iter_0007.npz", tmp_path / "alone")
    assert alone.returncode == 0, alone.stderr
    together = frames_of(tmp_path / "all" / "iter_0007.mp4")
    assert len(together) == len(read_recording(str(history / "iter_0007.npz")).states)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(together, frames_of(tmp_path / "alone" / "iter_0007.mp4")))


def test_render_jobs_draw_with_osmesa_where_egl_makes_no_context(run, tmp_path):
    """The processes that draw meet EGL's failure; the command runs again with OSMesa once."""
    folder, _, _ = run
    two = tmp_path / "two"
    two.mkdir()
    for name in ("iter_0003.npz", "iter_0004.npz"):
        (two / name).write_bytes((folder / "history" / name).read_bytes())
    environment = dict(os.environ,
                       __EGL_VENDOR_LIBRARY_FILENAMES=str(tmp_path / "no_egl_vendor.json"))
    environment.pop("MUJOCO_GL", None)
    result = render_folder(two, tmp_path / "out", "--jobs", "2", env=environment)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("drawing with OSMesa instead") == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert sorted(os.listdir(tmp_path / "out")) == ["iter_0003.mp4", "iter_0004.mp4"]


_JOBS_ENVIRONMENT = """
import json, sys
import psutil
from async_plotter.sinks.rerender import prepare_gl, rerender_each
prepare_gl()
seen = []
for path, outcome in rerender_each(sys.argv[2:], sys.argv[1], "same", 64, jobs=2):
    outcome()
    for child in psutil.Process().children():
        seen.append(child.environ().get("OPENBLAS_NUM_THREADS"))
print(json.dumps(seen))
"""


@pytest.mark.parametrize("users", [None, "3"])
def test_render_jobs_run_numpy_on_one_blas_thread_unless_the_user_said(run, tmp_path, users):
    """Each drawing process would start a BLAS thread per core at numpy's import."""
    folder, _, _ = run
    paths = [str(folder / "history" / name) for name in ("iter_0003.npz", "iter_0004.npz")]
    environment = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if users is not None:
        environment["OPENBLAS_NUM_THREADS"] = users
    result = subprocess.run(
        [sys.executable, "-c", _JOBS_ENVIRONMENT,
         str(tmp_path / "out"), *paths],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen and set(seen) == {users or "1"}, seen
    assert sorted(os.listdir(tmp_path / "out")) == ["iter_0003.mp4", "iter_0004.mp4"]


def frames_of(path):
    reader = imageio.get_reader(str(path))
    try:
        return [frame for frame in reader]
    finally:
        reader.close()


def test_newest_wins_while_a_recording_runs_and_the_running_one_finishes(tmp_path):
    """Each action takes 10 ms: a 200-step recording lasts 2 s. Five updates sent within it:
    the one waiting is replaced by each newer one; the newest is recorded."""
    policy = SlowLinearPolicy(8, 2, delay=0.01)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=200,
                 video_dir=str(tmp_path),
                 video_length=10,
                 priority="normal") as plotter:
        wait_for_history(plotter, 0)
        for iteration in range(5):
            policy.fill(0.1 * iteration)
            plotter.update_plot(policy, iteration=iteration)
            time.sleep(0.05)
        wait_for_history(plotter, 5)
        recorded = sorted(history_of(plotter))
    assert 5 in recorded and len(recorded) < 6, recorded
    for entry in plotter.stats["history"]:
        assert entry["length"] == 200  # whole: Swimmer never ends by itself


@pytest.mark.parametrize("kept", [2, 6])
def test_the_folder_is_bounded_and_keeps_the_first_and_the_newest(tmp_path, kept):
    """Every update recorded, the folder thinned to ``kept`` (2, the smallest, once stopped
    the recordings at the third: the initial policy's and iterations' files are two kinds)."""
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=20,
                 video_dir=str(tmp_path),
                 history=kept,
                 priority="normal") as plotter:
        wait_for_history(plotter, 0)
        for iteration in range(ITERATIONS):
            policy.fill(0.01 * iteration)
            plotter.update_plot(policy, iteration=iteration)
            wait_for_history(plotter, iteration + 1)
    names = recording_names(tmp_path / "history")
    assert len(plotter.stats["history"]) == ITERATIONS + 1
    assert len(names) <= kept and {"update_0000.npz", "iter_0019.npz"} <= set(names), names
    assert kept == 2 or "iter_0000.npz" in names, names
    # The returns of the recordings thinned away stay in returns.csv.
    rows = read_returns(str(tmp_path / "history"))
    assert [row["iteration"] for row in rows] == list(range(-1, ITERATIONS))
    assert {row["recording"]
            for row in rows
            } == {"update_0000.npz"} | {"iter_%04d.npz" % i
                                        for i in range(ITERATIONS)}
    for name in names:
        assert read_recording(str(tmp_path / "history" / name)).meta["history"] is True


def test_a_count_that_starts_again_is_numbered_on_and_overwrites_nothing(tmp_path, caplog):
    """A second phase of training counting from 0 again: before, its recordings and videos
    replaced the first phase's of the same numbers, without a word. A point with no policy
    (``add_metrics``) of the second phase goes where its policy would."""
    from tests.test_tensorboard import accumulate

    policy = LinearPolicy(8, 2)
    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        with Plotter("Swimmer-v5",
                     policy,
                     max_path_length=20,
                     video_dir=str(tmp_path),
                     tensorboard_dir=str(tmp_path),
                     priority="normal") as plotter:
            wait_for_history(plotter, 0)
            for update, iteration in enumerate([0, 1, 2, 0, 1, 2], 1):  # two phases
                policy.fill(0.1 * update)
                plotter.update_plot(policy, iteration=iteration)
                wait_for_history(plotter, update)
            first_phase = (tmp_path / "history" / "iter_0000.npz").read_bytes()
            policy.fill(0.1 * 5)  # phase 1's iteration 1 sent again, as it was: the same number
            plotter.update_plot(policy, iteration=1)
            wait_for_history(plotter, 7)
            plotter.add_metrics({"loss": 9.0}, iteration=2)  # phase 1's count: shown as 5
    numbers = [entry["iteration"] for entry in plotter.stats["history"]]
    assert numbers == [None, 0, 1, 2, 3, 4, 5, 4], numbers
    assert [(e.step, e.value) for e in accumulate(tmp_path).Scalars("loss")] == [(5, 9.0)]
    names = recording_names(tmp_path / "history")
    assert names == ["iter_%04d.npz" % n for n in range(6)] + ["update_0000.npz"], names
    assert (tmp_path / "history" / "iter_0000.npz").read_bytes() == first_phase
    returns = {entry["iteration"]: entry["return"] for entry in plotter.stats["history"]}
    assert len(set(returns.values())) == 7, returns  # each number shows its own policy
    assert plotter.stats["final_video"] == str(tmp_path / "iter_0004.mp4")  # the newest
    said = [r.getMessage() for r in caplog.records if "count started again" in r.getMessage()]
    assert len(said) == 1 and "update_plot(iteration=0) came after iteration 2" in said[0], said
    assert "shown as iteration 3, and each later iteration N as N + 3" in said[0], said


def test_returns_csv_spans_a_restart_of_the_worker(tmp_path):
    """The rollout process SIGKILLed mid-run: the restarted worker's recordings are added to the
    same file, under the one header."""
    import signal

    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=20,
                 video_dir=str(tmp_path),
                 priority="normal") as plotter:
        for iteration in range(4):
            if iteration == 2:
                os.kill(plotter.stats["worker_pids"]["rollout"], signal.SIGKILL)
                wait_for(lambda: plotter.stats["restarts"] == 1 and plotter.stats["alive"],
                         120,
                         message="the worker's restart")
            policy.fill(0.01 * (iteration + 1))
            plotter.update_plot(policy, iteration=iteration)
            wait_for_history(plotter, iteration + 1)
    lines = (tmp_path / "history" / "returns.csv").read_text().splitlines()
    assert lines[0].startswith("iteration,") and sum(line == lines[0] for line in lines) == 1
    rows = read_returns(str(tmp_path / "history"))
    assert [row["iteration"] for row in rows][-4:] == [0, 1, 2, 3]


def test_the_bound_of_a_500_iteration_run():
    from async_plotter.render.history import to_remove

    kept = set()
    for iteration in range(500):
        kept.add(("iter", iteration))
        kept -= to_remove(kept, 200)
    numbers = sorted(number for _, number in kept)
    assert len(numbers) <= 200
    assert numbers[0] == 0 and numbers[-50:] == list(range(450, 500))
    assert max(np.diff(numbers)) <= 4  # the older ones evenly thinned


@pytest.mark.parametrize("kept", [2, 3, 5, 8, 200])
def test_every_bound_holds_with_the_initial_policy_beside_iterations(kept):
    """``update_0000`` (the initial policy) and ``iter_NNNN`` are thinned as one run: at
    ``kept=2`` the two kinds once made the thinning loop for ever, in the history thread."""
    from async_plotter.render.history import to_remove

    present = {("update", 0)}
    for iteration in range(300):
        present.add(("iter", iteration))
        present -= to_remove(present, kept)
        assert len(present) <= kept
        assert ("update", 0) in present and ("iter", iteration) in present


def _three_recorded(policy, tmp_path, **options):
    """A Swimmer plotter of ``policy`` (no restart allowed) once the initial policy and
    iterations 0-2 are recorded; iteration 3's parameters are ``policy.MARKER``'s, not sent."""
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=50,
                      video_dir=str(tmp_path),
                      max_restarts=0,
                      priority="normal",
                      **options).start()
    try:
        wait_for_history(plotter, 0)
        for iteration in range(3):
            policy.fill(0.01 * (iteration + 1))
            plotter.update_plot(policy, iteration=iteration)
            wait_for_history(plotter, iteration + 1)
    except BaseException:
        plotter.close()
        raise
    policy.fill(policy.MARKER)
    return plotter


def test_a_policy_that_fails_mid_history_keeps_the_recordings_already_written(tmp_path):
    policy = FailsInHistoryPolicy(8, 2, fail_at=20)
    plotter = _three_recorded(policy, tmp_path)
    try:
        plotter.update_plot(policy, iteration=3)
        wait_for(lambda: plotter.stats["disabled"], 120, message="the worker to fail")
    finally:
        plotter.close()
    stats = plotter.stats
    assert "the history recording failed" in stats["last_error"]
    assert "the policy failed in the history (test)" in stats["last_error"]
    names = recording_names(tmp_path / "history")
    assert names == ["iter_0000.npz", "iter_0001.npz", "iter_0002.npz", "update_0000.npz"], names
    for name in names:
        assert len(read_recording(str(tmp_path / "history" / name)).states) == 51
    assert [row["recording"] for row in read_returns(str(tmp_path / "history"))
            ] == ["update_0000.npz", "iter_0000.npz", "iter_0001.npz", "iter_0002.npz"]


@pytest.mark.parametrize("how", ["spins", "waits"])
def test_a_hung_history_stops_alone_and_the_videos_go_on(tmp_path, caplog, how):
    """A history thread that never finishes a step cannot be ended alone; left, it burned a
    core (or recorded nothing more) for the rest of the run, unseen. Within hang_timeout the
    worker starts again without it, not counted as a failure: the videos go on to the final
    policy's, and the recordings already written stay."""
    policy = HangsInHistoryPolicy(8, 2, fail_at=20, how=how)
    plotter = _three_recorded(policy, tmp_path, hang_timeout=3.0)
    try:
        with caplog.at_level(logging.INFO, logger="async_plotter"):
            plotter.update_plot(policy, iteration=3)
            wait_for(lambda: plotter.stats["history_stopped"], 120, message="the history to stop")
            for iteration in (4, 5):
                policy.fill(0.01 * (iteration + 1))
                plotter.update_plot(policy, iteration=iteration)
            plotter.close()
    finally:
        plotter.close()
    stats = plotter.stats
    stopped = stats["history_stopped"]
    assert stopped.startswith(
        "the history thread hung: the recording of iteration 3 made no "
        f"progress ({dict(spins='spinning', waits='waiting')[how]}: "), stopped
    assert "policies.py" in stopped and "get_action" in stopped, stopped  # where it hung
    warnings = [
        r.getMessage() for r in caplog.records
        if r.levelno == logging.WARNING and "history stopped" in r.getMessage()
    ]
    assert len(warnings) == 1 and stopped in warnings[0], warnings
    assert not stats["disabled"] and stats["restarts"] == 0, stats["last_error"]
    assert stats["final_video"] == str(tmp_path / "iter_0005.mp4")
    assert [entry["iteration"] for entry in stats["history"]] == [None, 0, 1, 2]
    assert recording_names(tmp_path / "history") == [
        "iter_0000.npz", "iter_0001.npz", "iter_0002.npz", "update_0000.npz"
    ]
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plotter: ")]
    assert ("; 3 of the 6 iterations: the history stopped there, its thread hung"
            in summary[-1]), summary


def test_an_env_that_draws_itself_keeps_returns_only_and_says_so_once(tmp_path, caplog):
    policy = LinearPolicy(4, 2)
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "returns.csv").write_text("an earlier run's rows\n")
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        plotter = Plotter("CartPole-v1", policy, max_path_length=100, video_dir=str(tmp_path))
        with plotter:
            policy.fill(0.5)
            plotter.update_plot(policy, iteration=0)
            wait_for_history(plotter, 1)
    said = [r.getMessage() for r in caplog.records if "history keeps" in r.getMessage()]
    assert len(said) == 1 and "CartPole-v1" in said[0] and "return" in said[0], said
    entries = plotter.stats["history"]
    assert [entry["path"] for entry in entries] == [None] * len(entries)
    assert all(math.isfinite(entry["return"]) and entry["length"] >= 1 for entry in entries)
    # No file but returns.csv, written anew by this Plotter: a row each, without a recording.
    assert os.listdir(tmp_path / "history") == ["returns.csv"]
    rows = read_returns(str(tmp_path / "history"))
    assert [(row["update"], row["return"], row["recording"])
            for row in rows] == [(entry["update"], entry["return"], None) for entry in entries]


@pytest.mark.timeout(600)
def test_a_trpo_run_puts_the_shown_returns_into_progress_csv_and_tensorboard(tmp_path):
    """Each row's ShownReturn is the newest recording finished while that iteration ran, of
    the policy of iteration ShownIteration (blank where none finished); the last row gets the
    final policy's, recorded at close()."""
    import csv

    from async_plotter.rl import TRPO, GaussianMLPPolicy, run_experiment_lite

    algo = TRPO("Swimmer-v5",
                GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(8, )),
                batch_size=1000,
                max_path_length=100,
                n_itr=8)
    result = run_experiment_lite(algo, plot=True, seed=1, log_dir=str(tmp_path / "run"))
    stats = result.algo.plotter.stats
    assert stats["policy_call"] == "numpy"  # the MLP's snapshot: no TensorFlow call a step
    returns = {
        (-1 if e["iteration"] is None else e["iteration"]): e["return"]
        for e in stats["history"]
    }
    with open(result.progress_csv) as file:
        rows = list(csv.DictReader(file))
    assert [int(row["Iteration"]) for row in rows] == list(range(8))
    shown = [(int(row["Iteration"]), int(row["ShownIteration"]), float(row["ShownReturn"]))
             for row in rows if row["ShownReturn"] != ""]
    assert all(row["ShownIteration"] == "" for row in rows if row["ShownReturn"] == "")
    assert shown[-1][:2] == (7, 7), shown  # the final policy's, in the last row
    for iteration, policy, value in shown[:-1]:
        assert -1 <= policy < iteration  # recorded after that policy's own row
    assert [policy for _, policy, _ in shown] == sorted({policy for _, policy, _ in shown})
    for _, policy, value in shown:
        assert value == pytest.approx(returns[policy], rel=1e-6)
    board = accumulate(result.log_dir)
    # Every recording once, at its policy's iteration: also those no row holds.
    every_return = [(event.step, event.value) for event in board.Scalars("history/return")]
    assert sorted(step for step, _ in every_return) == sorted(returns)
    assert dict(every_return) == pytest.approx(returns, rel=1e-5)
    # A row's one return is not a scalar of its own: it would be a lagged copy of the above,
    # with two values at the last step once close() replaced it.
    assert not {"progress/ShownReturn", "progress/ShownIteration"} & set(board.Tags()["scalars"])
    assert [event.step for event in board.Scalars("progress/AverageReturn")] == list(range(8))
    assert (tmp_path / "run" / "videos" / "history" / "iter_0007.npz").exists()
    # The final policy's return is the trainer's own: its policy's mean, clipped as the sampler
    # clips, from reset seed 0 (the worker acts through the MLP's numpy copy, within rounding).
    assert returns[7] == pytest.approx(_trainers_return(result.algo.policy), rel=1e-5)
    # learning_curve.png draws every recording's return beside AverageReturn (a row holds one),
    # the final policy's included.
    from async_plotter.rl.recorder import save_learning_curve, shown_points

    numbers = [{key: float(value) for key, value in row.items() if value != ""} for row in rows]
    assert shown_points(numbers)[-1] == (7.0, pytest.approx(shown[-1][2]))
    every = sorted((float(iteration), value) for iteration, value in returns.items())
    assert set(shown_points(numbers)) <= set(every)
    curve = [[row[key] for row in numbers] for key in ("Iteration", "AverageReturn", "StdReturn")]
    for name, points in (("with.png", every), ("without.png", ())):
        save_learning_curve(tmp_path / name, *curve, title="run", shown=points)
    drawn = (tmp_path / "run" / "learning_curve.png").read_bytes()
    assert drawn == (tmp_path / "with.png").read_bytes() != (tmp_path / "without.png").read_bytes()


def _trainers_return(policy, steps=100):
    """One episode of ``policy``'s mean action on Swimmer-v5 from reset seed 0, in this process."""
    import gymnasium

    env = gymnasium.make("Swimmer-v5")
    observation, _ = env.reset(seed=0)
    total = 0.0
    for _ in range(steps):
        mean = policy.dist_info_np(observation[None].astype(np.float32))["mean"][0]
        action = np.clip(mean, env.action_space.low, env.action_space.high)
        observation, reward, terminated, _, _ = env.step(action)
        total += reward
        if terminated:
            break
    env.close()
    return total


def test_the_curve_shows_the_trainers_column_and_the_history_beside_it():
    from async_plotter.learning_curve import SHOWN_RETURN, LearningCurve

    curve = LearningCurve()
    curve.add(-1, {SHOWN_RETURN: 1.0})  # the initial policy's recording comes first
    assert curve.shown == SHOWN_RETURN  # alone, it is what there is to draw
    curve.add(0, {"loss": 0.5})
    curve.add(0, {SHOWN_RETURN: 2.0})
    assert curve.shown == "loss"
