"""What a user of the RL host gets to see: a short run on a busy machine shows its policy, and the
examples agree on their plotting flags."""
import logging
import os
import subprocess
import sys

import imageio.v2 as imageio
import numpy as np
import pytest

from async_plotter.rl import (TRPO, CategoricalMLPPolicy, GaussianMLPPolicy, LinearFeatureBaseline,
                              run_experiment_lite)
from async_plotter.rl.envs import EnvSpec
from async_plotter.rl.samplers import Sampler, SerialSampler
from async_plotter.rl.example_cli import example_parser, plot_options

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.alone
def test_a_short_run_on_a_saturated_machine_shows_its_final_policy(tmp_path, caplog,
                                                                   saturated_machine):
    """Before: 0 videos in 5-10 iterations beside a trainer that kept both cores busy (the worker
    never finished importing TensorFlow under SCHED_IDLE)."""
    algo = TRPO("Swimmer-v5",
                GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(16, )),
                LinearFeatureBaseline(),
                batch_size=1000,
                max_path_length=100,
                n_itr=8)
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        result = run_experiment_lite(algo,
                                     n_parallel=2,
                                     plot=True,
                                     seed=1,
                                     log_dir=str(tmp_path / "run"))
    assert result.videos, "no video at all"
    assert result.final_video == os.path.join(result.video_dir, "iter_0007.mp4")
    frames = [frame for frame in imageio.get_reader(result.final_video)]
    assert len(frames) == 101  # the reset pose and 100 steps: a whole rollout, not a fragment
    stats = result.algo.plotter.stats
    assert stats["videos"] == len(result.videos)
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plotter: ")]
    assert summary and "shows the final policy" in summary[-1]


def test_the_examples_share_their_plotting_flags():
    parser = example_parser(__doc__)
    args = parser.parse_args([
        "--plot-budget", "0.1", "--plot-path-length", "50", "--plot-video-length", "40", "--http",
        "0", "--record-states"
    ])
    assert plot_options(args) == {
        "plot": True,
        "budget": 0.1,
        "max_path_length": 50,
        "video_length": 40,
        "http": "0",
        "record_states": True
    }
    assert plot_options(parser.parse_args(["--no-plot", "--plot-budget", "0.1"])) == {"plot": False}
    for script in ("trpo_swimmer.py", "trpo_cartpole.py", "vpg_inverted_pendulum.py",
                   "plot_random_policy.py"):
        shown = subprocess.run(
            [sys.executable, os.path.join(ROOT, "examples", script), "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True).stdout
        for flag in ("--plot, --no-plot", "--plot-budget", "--plot-path-length",
                     "--plot-video-length", "--http", "--record-states"):
            assert flag in shown, f"{script} has no {flag}"


def test_an_example_names_its_videos_and_final_policy(tmp_path):
    """The end summary counts the videos (it used to announce an empty folder as 'videos')."""
    completed = subprocess.run([
        sys.executable,
        os.path.join(ROOT, "examples", "trpo_cartpole.py"), "--n-itr", "3", "--batch-size", "400",
        "--n-parallel", "1", "--exp-name", "example"
    ],
                               cwd=tmp_path,
                               capture_output=True,
                               text=True,
                               timeout=240)
    assert completed.returncode == 0, completed.stderr[-3000:]
    final = os.path.join(str(tmp_path), "runs", "example", "videos", "iter_0002.mp4")
    assert f"final policy:   {final}" in completed.stdout
    assert "videos:         " in completed.stdout and " in " in completed.stdout
    assert os.path.exists(final)
    # A --resume-from that cannot go on is a one-line error and exit code 2, no traceback: a
    # run with nothing left to train, and a path that holds no run.
    for resume_from, said in (("runs/example", "nothing is left to train"), ("runs/nothing",
                                                                             "does not exist")):
        refused = subprocess.run([
            sys.executable,
            os.path.join(ROOT, "examples", "trpo_cartpole.py"), "--n-itr", "3", "--resume-from",
            resume_from
        ],
                                 cwd=tmp_path,
                                 capture_output=True,
                                 text=True,
                                 timeout=240)
        both = refused.stdout + refused.stderr
        assert refused.returncode == 2, both[-3000:]
        # Said once: by the run where it had begun ("experiment NAME failed: ..."), else as a
        # command's error (it had said it twice).
        assert both.count(said) == 1, both[-3000:]
        assert ("trpo_cartpole.py: error: resume_from " in refused.stderr
                or "failed: ResumeError: resume_from " in refused.stdout), both[-3000:]
        assert "Traceback" not in both, both[-3000:]


@pytest.mark.parametrize("n_parallel", [1, 2])
def test_the_statistics_the_samplers_learn_are_the_ones_shown(n_parallel, tmp_path, caplog):
    """The samplers build the env from a factory. Before, the plot worker's NormalizeObservation
    started fresh (a warning said so) and learned from the worker's own episodes, and the shown
    episodes returned about 0 (``rl_child.action_echo_env``)."""
    from rl_child import action_echo_env

    algo = TRPO(action_echo_env,
                CategoricalMLPPolicy(EnvSpec.from_env(action_echo_env()), hidden_sizes=(4, )),
                LinearFeatureBaseline(),
                batch_size=200,
                max_path_length=10,
                n_itr=3)
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        result = run_experiment_lite(algo,
                                     n_parallel=n_parallel,
                                     plot=True,
                                     seed=1,
                                     log_dir=str(tmp_path / "run"))
    assert "start fresh in the plot worker" not in caplog.text
    # The final policy's episode, normalized by the samplers' final statistics: each of its 10
    # observations is +5 or -5 (by the action before it), so its return is one of 11 sums.
    mean, var, _ = result.algo.sampler.env_state()
    size = {observation: abs(observation - mean) / np.sqrt(var + 1e-8) for observation in (5, -5)}
    returns = [k * size[5] + (10 - k) * size[-5] for k in range(11)]
    final = result.algo.plotter.stats["history"][-1]
    assert final["iteration"] == 2
    assert min(abs(final["return"] - expected) for expected in returns) < 1e-3, (final, returns)


def test_an_env_whose_copy_cannot_travel_is_plotted_from_its_factory(tmp_path, caplog):
    """The plotter's copy of the env holds a lock, which cloudpickle cannot copy: the plot worker
    builds its own from the factory, with fresh statistics, as before the copy existed."""
    from rl_child import unpicklable_normalized_env

    algo = TRPO(unpicklable_normalized_env,
                CategoricalMLPPolicy(EnvSpec.from_env(unpicklable_normalized_env()),
                                     hidden_sizes=(4, )),
                LinearFeatureBaseline(),
                batch_size=100,
                max_path_length=10,
                n_itr=2)
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        result = run_experiment_lite(algo, plot=True, seed=1, log_dir=str(tmp_path / "run"))
    assert result.final_video is not None
    assert "not a copy that follows the samplers' statistics" in caplog.text
    assert "start fresh in the plot worker" in caplog.text
    # What to do, for a user who never called Plotter(): run_experiment_lite passes its copy.
    assert "run_experiment_lite and plot=True pass theirs where cloudpickle can copy" in caplog.text


class _QuietSampler(Sampler):
    """A user's own sampler, which says nothing of what its env learns (no ``env_state``)."""

    def __init__(self):
        self._inner = SerialSampler()

    def start(self, env, policy, seed=None):
        self._inner.start(env, policy, seed)

    def obtain_samples(self, itr, param_values, batch_size, max_path_length):
        return self._inner.obtain_samples(itr, param_values, batch_size, max_path_length)

    def shutdown(self):
        self._inner.shutdown()


def test_a_sampler_that_does_not_say_what_its_env_learns_leaves_the_worker_its_own(
        tmp_path, caplog):
    """A copy that no sampler updates would show the initial statistics for the whole run; the
    plot worker's own env, which learns from its episodes, is nearer (as before the copy)."""
    from rl_child import action_echo_env

    algo = TRPO(action_echo_env,
                CategoricalMLPPolicy(EnvSpec.from_env(action_echo_env()), hidden_sizes=(4, )),
                LinearFeatureBaseline(),
                batch_size=100,
                max_path_length=10,
                n_itr=2,
                sampler=_QuietSampler(),
                plot=True,
                log_dir=str(tmp_path / "run"))
    with caplog.at_level(logging.INFO, logger="async_plotter"):
        algo.train()
    assert "start fresh in the plot worker" in caplog.text
    assert algo.plotter.stats["videos"] >= 1
