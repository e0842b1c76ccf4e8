"""What MuJoCo says about the plotter's copies of the env stays off the trainer's terminal and out
of its working folder; what the user must know, the plotter says itself.

Before: a policy with NaN parameters was shown as a body frozen at its start while MuJoCo's "Nan,
Inf or huge value in CTRL at ACTUATOR 0" reached the trainer's stderr from the worker (rollout and
render processes), naming neither the update nor the cause; ``Plotter("HalfCheetah-v5", ...)``
printed MuJoCo's "settotalmass is deprecated" from its own check of the env; and MuJoCo wrote
``MUJOCO_LOG.TXT`` into the trainer's working folder.

Each trainer runs as a script in a fresh, empty working folder, and its stdout and stderr are read.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from async_plotter.render.recording import read_recording

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NAN_TRAINER = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    policy = LinearPolicy(17, 6)
    policy.fill(0.1)
    with Plotter("HalfCheetah-v5", policy, max_path_length=40, video_dir=sys.argv[1],
                 min_video_seconds=0, priority="normal") as plotter:
        for iteration in range(3):
            plotter.update_plot(policy, iteration=iteration)
        policy.fill(np.nan)                        # a diverged update
        for iteration in (3, 4):
            plotter.update_plot(policy, iteration=iteration)
            deadline = time.monotonic() + 120
            while (plotter.stats["last_applied_iteration"] != iteration
                   or plotter.stats["episodes"] < 1) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)                        # an episode of it, reported
    stats = plotter.stats
    print("STATS " + json.dumps({key: stats.get(key) for key in
                                 ("nonfinite_actions", "restarts", "last_error", "final_video")}))
    """)

CHECK_ONLY_TRAINER = textwrap.dedent("""
    import sys
    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    Plotter("HalfCheetah-v5", LinearPolicy(17, 6), video_dir=sys.argv[1])
    import mujoco
    print("HANDLER", mujoco.get_mju_user_warning())      # MuJoCo's default, as before

    def mine(message):
        print("USER HANDLER GOT", message)

    mujoco.set_mju_user_warning(mine)
    Plotter("HalfCheetah-v5", LinearPolicy(17, 6), video_dir=sys.argv[1])
    print("HANDLER KEPT", mujoco.get_mju_user_warning() is mine)
    """)

# An env object whose observation wrapper the plotter follows at each update (a lambda: no state
# that travels): Plotter() builds a copy for that check too.
WRAPPED_OBJECT_TRAINER = textwrap.dedent("""
    import sys
    import gymnasium as gym
    import numpy as np
    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    env = gym.make("HalfCheetah-v5")  # the user's own: MuJoCo says its warning here, once
    env = gym.wrappers.TransformObservation(env, lambda o: np.clip(o, -10, 10),
                                            env.observation_space)
    Plotter(env, LinearPolicy(17, 6), video_dir=sys.argv[1])
    """)


def _run_trainer(script, tmp_path):
    """Run ``script`` with an empty working folder (videos go elsewhere); its result and what
    the folder holds afterwards."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "videos")],
        cwd=str(cwd),
        env=env,
        capture_output=True,
        text=True,
        timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    return run, sorted(os.listdir(cwd))


def _mujoco_lines(run):
    return [
        line for line in (run.stdout + run.stderr).splitlines()
        if "MuJoCo" in line or "Nan, Inf" in line or "settotalmass" in line
    ]


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("nan_trainer")
    run, left = _run_trainer(NAN_TRAINER, tmp_path)
    stats = json.loads(
        next(line for line in run.stdout.splitlines() if line.startswith("STATS "))[len("STATS "):])
    return run, left, stats


def test_nan_parameters_are_one_warning_naming_the_iteration(nan_run):
    run, _, _ = nan_run
    warnings = [line for line in run.stderr.splitlines() if "not finite" in line]
    assert len(warnings) == 1, run.stderr[-3000:]
    assert "iteration 3" in warnings[0] and "stats['nonfinite_actions']" in warnings[0]


def test_nan_parameters_are_recorded_in_stats_and_shown_as_zero_actions(nan_run):
    """The worker steps the env with 0 in place of each NaN (what MuJoCo does to every control
    when one is bad, minus its warnings): no failure, and the final video's recording holds the
    actions the env was given."""
    _, _, stats = nan_run
    entry = stats["nonfinite_actions"]
    assert entry is not None and entry["iteration"] == 3 and entry["steps"] >= 1, stats
    assert stats["restarts"] == 0 and stats["last_error"] is None, stats
    assert stats["final_video"] and stats["final_video"].endswith("iter_0004.mp4")
    recording = read_recording(stats["final_video"][:-len(".mp4")] + ".npz")
    # A recording marks the reset state of each episode, which no action led to, with NaN.
    starts = np.flatnonzero(np.diff(recording.episodes, prepend=-1))
    given = np.delete(recording.actions, starts, axis=0)
    assert recording.actions.shape[1] == 6 and len(given) >= 1 and np.all(given == 0)


def test_no_mujoco_line_reaches_the_trainers_terminal(nan_run):
    run, _, _ = nan_run
    assert not _mujoco_lines(run), run.stderr[-3000:]


def test_no_file_appears_in_the_trainers_working_folder(nan_run):
    _, left, _ = nan_run
    assert left == [], left


def test_the_checks_own_mujoco_warning_stays_off_the_terminal_and_the_handler_is_put_back(tmp_path):
    """``Plotter("HalfCheetah-v5")`` builds the env once in the trainer to check it; MuJoCo's
    "settotalmass is deprecated" from that build is a DEBUG record now, and MuJoCo's warning
    handler is the one in force before (its default, or the user's own) once Plotter() returns."""
    run, left = _run_trainer(CHECK_ONLY_TRAINER, tmp_path)
    assert not _mujoco_lines(run), run.stdout + run.stderr[-3000:]
    assert "HANDLER None" in run.stdout and "HANDLER KEPT True" in run.stdout, run.stdout
    assert "USER HANDLER GOT" not in run.stdout, "the check's warnings are its own"
    assert left == [], left


def test_the_copy_that_follows_an_env_objects_wrappers_says_nothing_either(tmp_path):
    """An env object with an observation wrapper the plotter follows at each update: MuJoCo's
    "settotalmass is deprecated" reaches the terminal and ``MUJOCO_LOG.TXT`` once, from the
    user's own env. Before, the copy built for that check said it a second time."""
    run, left = _run_trainer(WRAPPED_OBJECT_TRAINER, tmp_path)
    assert len(_mujoco_lines(run)) == 1, run.stdout + run.stderr[-3000:]
    assert left == ["MUJOCO_LOG.TXT"], left
    with open(tmp_path / "cwd" / "MUJOCO_LOG.TXT") as log:
        assert log.read().count("settotalmass") == 1
