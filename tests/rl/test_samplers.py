"""Serial and parallel samplers: same batch for the same seed, and clean process handling."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest

import rl_child
from async_plotter import processes
from async_plotter.rl.envs import EnvMaker
from async_plotter.rl.policies import CategoricalMLPPolicy, GaussianMLPPolicy
from async_plotter.rl.samplers import ParallelSampler, SerialSampler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def running(pid):
    """True for a live process; an exited one that nobody reaped yet (a zombie) does not count."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_same_batch(a, b):
    for field in ("observations", "actions", "rewards", "path_lengths", "terminated"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    for key in a.agent_infos:
        np.testing.assert_array_equal(a.agent_infos[key], b.agent_infos[key], err_msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("env_id,policy_cls", [("CartPole-v1", CategoricalMLPPolicy),
                                               ("InvertedPendulum-v5", GaussianMLPPolicy)])
def test_serial_and_parallel_give_the_same_batch(env_id, policy_cls, no_leftover_children):
    policy = policy_cls(env_id, seed=0)
    params = policy.get_param_values()
    serial = SerialSampler()
    serial.start(env_id, policy, seed=7)
    expected = serial.obtain_samples(3, params, batch_size=600, max_path_length=50)
    serial.shutdown()

    assert expected.num_steps >= 600
    assert expected.num_steps - expected.path_lengths[-1] < 600  # whole paths, no extra one
    assert expected.path_lengths.max() <= 50

    with ParallelSampler(2) as parallel:
        parallel.start(env_id, policy, seed=7)
        assert len(parallel.worker_pids) == 2
        assert_same_batch(parallel.obtain_samples(3, params, 600, 50), expected)
        assert_same_batch(parallel.obtain_samples(3, params, 600, 50), expected)
        other_itr = parallel.obtain_samples(4, params, 600, 50)
        assert not np.array_equal(other_itr.observations[:10], expected.observations[:10])
        pids = parallel.worker_pids
    assert not any(running(pid) for pid in pids)


def test_different_seeds_give_different_batches():
    policy = GaussianMLPPolicy("InvertedPendulum-v5", seed=0)
    sampler = SerialSampler()
    sampler.start("InvertedPendulum-v5", policy, seed=1)
    a = sampler.obtain_samples(0, None, 100, 20)
    sampler.start("InvertedPendulum-v5", policy, seed=2)
    b = sampler.obtain_samples(0, None, 100, 20)
    sampler.shutdown()
    assert not np.array_equal(a.observations[:5], b.observations[:5])


def test_max_path_length_truncates_and_terminal_paths_are_flagged():
    policy = CategoricalMLPPolicy("CartPole-v1", seed=0)
    sampler = SerialSampler()
    sampler.start("CartPole-v1", policy, seed=0)
    batch = sampler.obtain_samples(0, None, 300, 15)
    sampler.shutdown()
    for length, terminated in zip(batch.path_lengths, batch.terminated):
        assert length == 15 or terminated  # a path ends by failing or by the limit


@pytest.mark.slow
def test_worker_errors_come_back_with_their_traceback(no_leftover_children):
    sampler = ParallelSampler(1)
    with pytest.raises(RuntimeError, match="(?s)sampler worker 0 failed.*cannot be built"):
        sampler.start(EnvMaker(factory=rl_child.failing_env), rl_child.NumpyLinearPolicy(4, 1))
    sampler.shutdown()


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="n_parallel must be a positive int, got 0"):
        ParallelSampler(0)
    sampler = SerialSampler()
    sampler.start("CartPole-v1", CategoricalMLPPolicy("CartPole-v1"), seed=0)
    with pytest.raises(ValueError, match="batch_size and max_path_length must be positive"):
        sampler.obtain_samples(0, None, 0, 10)
    sampler.shutdown()


@pytest.mark.slow
def test_workers_exit_when_their_parent_dies(no_leftover_children):
    receiver, sender = processes.spawn_context().Pipe(duplex=False)
    parent = processes.start_process(rl_child.start_sampler_then_wait, (sender, "CartPole-v1"),
                                     daemon=False)  # daemonic processes may not have children
    sender.close()
    try:
        assert receiver.poll(90), "the sampler did not start"
        worker_pids = receiver.recv()
        assert all(running(pid) for pid in worker_pids)
        os.kill(parent.pid, signal.SIGKILL)  # no chance to clean up
        parent.join(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(running(pid) for pid in worker_pids):
            time.sleep(0.1)
        alive = [pid for pid in worker_pids if running(pid)]
        for pid in alive:  # do not leak them into other tests even when failing
            os.kill(pid, signal.SIGKILL)
        assert not alive, "workers outlived their parent"
    finally:
        processes.stop_process(parent, 1)


def _environment_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as environ:
        entries = environ.read().split(b"\0")
    return dict(entry.decode().partition("=")[::2] for entry in entries if b"=" in entry)


@pytest.mark.slow
@pytest.mark.parametrize("policy_device,hidden", [("cpu", True), ("gpu", False)])
def test_sampler_workers_start_with_gpus_hidden_unless_asked_and_one_blas_thread(
        policy_device, hidden, monkeypatch, no_leftover_children):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    before = dict(os.environ)
    with ParallelSampler(2, policy_device=policy_device) as parallel:
        parallel.start("InvertedPendulum-v5", rl_child.NumpyLinearPolicy(4, 1), seed=0)
        started = [_environment_of(pid) for pid in parallel.worker_pids]
    seen = [environment["CUDA_VISIBLE_DEVICES"] for environment in started]
    assert seen == (["", ""] if hidden else ["0", "0"])
    # numpy's BLAS on one thread: a thread per core in each sampler would only spin
    assert [environment.get("OPENBLAS_NUM_THREADS") for environment in started] == ["1", "1"]
    assert dict(os.environ) == before, "the trainer's environment is untouched"


def test_a_bad_policy_device_is_named():
    from async_plotter.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="policy_device must be one of 'cpu', 'gpu'"):
        ParallelSampler(2, policy_device="cuda:0")


@pytest.mark.slow
def test_what_the_env_learns_is_read_and_a_broken_hook_never_fails_training(no_leftover_children):
    """The samplers read their env's wrapper state for the plotter (``env_state()``), with or
    without plotting; a hook that returns no arrays is the plotter's error to name, not a reason
    for training to fail."""
    policy = CategoricalMLPPolicy("CartPole-v1", seed=0)
    params = policy.get_param_values()
    for sampler in (SerialSampler(), ParallelSampler(2)):
        with sampler:
            sampler.start(rl_child.cartpole_with_a_broken_hook, policy, seed=1)
            assert sampler.obtain_samples(0, params, 200, 50).num_steps >= 200
            assert sampler.env_state() is None
            sampler.start(rl_child.normalized_cartpole, policy, seed=1)
            assert sampler.env_state() is None  # before a batch
            batch = sampler.obtain_samples(0, params, 200, 50)
            mean, var, count = np.split(sampler.env_state(), [4, 8])
            assert count[0] >= 1 and not np.allclose(mean, 0) and mean.shape == var.shape
            if isinstance(sampler, SerialSampler):  # every step of the batch, and the resets
                assert count[0] == pytest.approx(batch.num_steps + len(batch.path_lengths), abs=1)


def test_each_parallel_sampler_goes_on_from_its_own_learned_state(no_leftover_children):
    """A snapshot keeps every sampler's wrapper state, and a resumed run gives each sampler its
    own (sampler i the run's i % n where the run had n); before, every sampler went on from
    the first's. Each answer carries its sampler's state, a dropped path's steps included, so
    that what the snapshot keeps is what each holds."""
    policy = CategoricalMLPPolicy("CartPole-v1", seed=0)
    params = policy.get_param_values()
    with ParallelSampler(3) as sampler:
        sampler.start(rl_child.normalized_cartpole, policy, seed=1)
        assert sampler.env_states() == []  # before a batch
        sampler.obtain_samples(0, params, 200, 50)
        learned = sampler.env_states()
        assert len(learned) == 3 and sampler.env_state() is learned[0]
        # Two of a run's samplers, told apart: far apart means, and many steps behind them, so
        # that a batch moves each mean little.
        run = [
            np.concatenate([np.full(4, offset), np.ones(4), [count]])
            for offset, count in ((0.0, 1e5), (7.0, 2e5))
        ]
        sampler.restore_env_states(run)
        for state, given in zip(sampler.env_states(), run + run[:1]):
            np.testing.assert_array_equal(state, given)  # what each worker holds now
        sampler.obtain_samples(1, params, 600, 50)
        for state, given in zip(sampler.env_states(), run + run[:1]):
            mean, _, count = np.split(state, [4, 8])
            assert given[-1] <= count[0] <= given[-1] + 700, (count, given)
            np.testing.assert_allclose(mean, given[:4], atol=0.1)


WARNS_WHEN_MADE = textwrap.dedent("""
    import logging, sys
    sys.path.insert(0, {root!r})
    import gymnasium
    from async_plotter.rl import TRPO, GaussianMLPPolicy, LinearFeatureBaseline

    def make_env():  # float64 bounds: Gymnasium warns as the env is made
        return gymnasium.wrappers.RescaleAction(gymnasium.make("InvertedPendulum-v5"), -1.0, 1.0)

    if sys.argv[1] == "factory":  # the policy's spaces read from the factory, in the trainer
        policy = GaussianMLPPolicy(make_env, hidden_sizes=(4,))
    else:  # given by hand: only the samplers build the env
        policy = GaussianMLPPolicy(obs_dim=4, action_dim=1, hidden_sizes=(4,))
    logging.basicConfig(level=logging.INFO)
    TRPO(make_env, policy, LinearFeatureBaseline(), batch_size=100, max_path_length=20, n_itr=1,
         n_parallel=2).train()
    """)


@pytest.mark.parametrize("spaces_from", ["factory", "dims"])
def test_what_making_the_env_warns_of_is_said_once_however_many_samplers_make_it(
        spaces_from, tmp_path):
    """Each sampler process printed Gymnasium's construction warnings again, after the
    trainer's own copy had."""
    script = tmp_path / "train.py"
    script.write_text(WARNS_WHEN_MADE.format(root=ROOT))
    run = subprocess.run([sys.executable, str(script), spaces_from],
                         capture_output=True,
                         text=True,
                         timeout=300,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.count("Box low's precision lowered") == 1, run.stderr[-3000:]
    assert run.stderr.count("Box high's precision lowered") == 1, run.stderr[-3000:]
    assert "TRPO on make_env:" in run.stderr, run.stderr[-3000:]  # the factory's name
