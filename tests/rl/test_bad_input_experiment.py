"""Every bad argument of run_experiment_lite gets an error that names it, and starts no process.

Arguments run_experiment_lite checks itself are rejected before it writes anything; the values of
plotter arguments are checked by the plotter when the training loop builds it, which is still
before any sampler worker or plot worker starts.
"""
import os

import gymnasium
import pytest
from gymnasium.wrappers import NormalizeObservation

from async_plotter import EnvMismatchError, InvalidArgumentError, NoDisplayError, VideoDirError
from async_plotter.rl import TRPO, CategoricalMLPPolicy, run_experiment_lite
from tests import env_state_helpers as helpers

SETTINGS = "it passes any of n_parallel, plot, seed, exp_name, log_dir by name"
EXP_NAME = ("exp_name must be a non-empty name of letters, digits, '.', '_' or '-', not '.' or "
            "'..' (it becomes a folder), got ")
SNAPSHOT_MODE = "snapshot_mode must be one of 'last', 'all', 'none'; got "


def small_trpo():
    return TRPO("CartPole-v1",
                CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, )),
                batch_size=100,
                max_path_length=20,
                n_itr=1)


def needs_foo(foo):
    return small_trpo()


def positional_only_seed(seed, /):
    return small_trpo()


ALGO = object()  # stands for "a valid algorithm": small_trpo(), built per case
# "{tmp}" in a string argument is the test's (empty) working directory, which holds "a_file".

# id, fn_or_algo, keyword arguments, error, message
CHECKED_UP_FRONT = [
    ("fn-int", 42, {}, TypeError,
     "fn_or_algo must be an algorithm (e.g. TRPO) or a function that returns or runs one, got "
     "int"),
    ("fn-None", None, {}, TypeError, "or a function that returns or runs one, got NoneType"),
    ("fn-str", "TRPO", {}, TypeError, "or a function that returns or runs one, got str"),
    ("fn-class", TRPO, {}, TypeError,
     "fn_or_algo is the class TRPO; pass an instance, e.g. TRPO(env, policy, ...), or a function "
     "that builds one"),
    ("fn-unknown-parameter", needs_foo, {}, TypeError,
     f"'needs_foo' needs 'foo', which run_experiment_lite does not supply; {SETTINGS}"),
    ("fn-positional-only", positional_only_seed, {}, TypeError,
     "'positional_only_seed' needs 'seed', which run_experiment_lite does not supply"),
    ("n_parallel-0", ALGO, dict(n_parallel=0), ValueError,
     "n_parallel must be a positive int, got 0"),
    ("n_parallel-negative", ALGO, dict(n_parallel=-2), ValueError, "got -2"),
    ("n_parallel-float", ALGO, dict(n_parallel=2.5), ValueError, "got 2.5"),
    ("n_parallel-str", ALGO, dict(n_parallel="2"), ValueError, "got '2'"),
    ("n_parallel-bool", ALGO, dict(n_parallel=True), ValueError, "got True"),
    ("n_parallel-None", ALGO, dict(n_parallel=None), ValueError, "got None"),
    ("plot-str", ALGO, dict(plot="yes"), TypeError, "plot must be True or False, got 'yes'"),
    ("plot-int", ALGO, dict(plot=1), TypeError, "plot must be True or False, got 1"),
    ("plot-None", ALGO, dict(plot=None), TypeError, "plot must be True or False, got None"),
    ("seed-negative", ALGO, dict(seed=-1), ValueError,
     "seed must be None or an int in [0, 2**32), got -1"),
    ("seed-too-large", ALGO, dict(seed=2**32), ValueError, "got 4294967296"),
    ("seed-float", ALGO, dict(seed=1.5), ValueError, "got 1.5"),
    ("seed-str", ALGO, dict(seed="1"), ValueError, "got '1'"),
    ("seed-bool", ALGO, dict(seed=True), ValueError, "got True"),
    ("exp_name-slash", ALGO, dict(exp_name="a/b"), ValueError, EXP_NAME + "'a/b'"),
    ("exp_name-empty", ALGO, dict(exp_name=""), ValueError, EXP_NAME + "''"),
    ("exp_name-dot", ALGO, dict(exp_name="."), ValueError, EXP_NAME + "'.'"),
    ("exp_name-dotdot", ALGO, dict(exp_name=".."), ValueError, EXP_NAME + "'..'"),
    ("exp_name-space", ALGO, dict(exp_name="my run"), ValueError, EXP_NAME + "'my run'"),
    ("exp_name-int", ALGO, dict(exp_name=7), ValueError, EXP_NAME + "7"),
    ("log_dir-int", ALGO, dict(log_dir=42), TypeError, "log_dir must be a path, got int"),
    ("log_dir-bytes", ALGO, dict(log_dir=b"run"), TypeError, "log_dir must be a path, got bytes"),
    ("log_dir-empty", ALGO, dict(log_dir=""), ValueError,
     "log_dir must be a non-empty path (or None for runs/<exp_name>)"),
    ("log_dir-a-file", ALGO, dict(log_dir="{tmp}/a_file"), NotADirectoryError,
     "log_dir '{tmp}/a_file' is a file, not a folder"),
    ("log_dir-under-a-file", ALGO, dict(log_dir="{tmp}/a_file/run"), NotADirectoryError,
     "log_dir '{tmp}/a_file/run' cannot be created: Not a directory"),
    ("snapshot_mode-unknown", ALGO, dict(snapshot_mode="sometimes"), ValueError,
     SNAPSHOT_MODE + "'sometimes'"),
    ("snapshot_mode-case", ALGO, dict(snapshot_mode="LAST"), ValueError, SNAPSHOT_MODE + "'LAST'"),
    ("snapshot_mode-None", ALGO, dict(snapshot_mode=None), ValueError, SNAPSHOT_MODE + "None"),
    ("snapshot_mode-int", ALGO, dict(snapshot_mode=1), ValueError, SNAPSHOT_MODE + "1"),
    ("plot-kwarg-misspelt", ALGO, dict(plot=True, fsp=30), TypeError,
     "unknown plotter argument 'fsp'; Plotter takes max_path_length, video_dir, window, fps,"),
    ("plot-kwarg-misspelt-not-plotting", ALGO, dict(plot=False, fsp=30, widnow=True), TypeError,
     "unknown plotter arguments 'fsp', 'widnow'; Plotter takes"),
    ("plot-kwarg-env", ALGO, dict(plot=True, env="Swimmer-v5"), TypeError,
     "env cannot be a plotter argument: the plotter shows the algorithm's own env and policy"),
    ("plot-kwarg-env-and-policy", ALGO, dict(plot=True, env="Swimmer-v5", policy=None), TypeError,
     "env and policy cannot be plotter arguments"),
]

# Checked when the plotter is built: after the run's folder exists, before any process starts.
CHECKED_BY_THE_PLOTTER = [
    ("fps-0", dict(fps=0), InvalidArgumentError, "fps must be a positive number, got 0"),
    ("fps-negative", dict(fps=-30), InvalidArgumentError, "fps must be a positive number, got -30"),
    ("fps-nan", dict(fps=float("nan")), InvalidArgumentError, "got nan"),
    ("fps-str", dict(fps="30"), InvalidArgumentError, "got '30'"),
    ("max_path_length-0", dict(max_path_length=0), InvalidArgumentError,
     "max_path_length must be a positive int, got 0"),
    ("window-str", dict(window="yes"), InvalidArgumentError,
     "window must be True, False or 'auto', got 'yes'"),
    ("window-without-display", dict(window=True), NoDisplayError,
     "window=True, but no display is reachable (DISPLAY is unset)"),
    ("quality", dict(quality="ultra"), InvalidArgumentError,
     "quality must be one of 'auto', 'cheap', 'full'; got 'ultra'"),
    ("priority", dict(priority="high"), InvalidArgumentError,
     "priority must be one of 'idle', 'low', 'normal'; got 'high'"),
    ("max_restarts", dict(max_restarts=-1), InvalidArgumentError,
     "max_restarts must be a non-negative int, got -1"),
    ("video_dir-under-a-file", dict(video_dir="{tmp}/a_file/videos"), VideoDirError,
     "video_dir '{tmp}/a_file/videos' cannot be written: '{tmp}/a_file' is a file, not a "
     "folder. Choose a directory you can write to."),
]


def _ids(cases):
    return [case[0] for case in cases]


def _fill(value, tmp_path):
    return value.replace("{tmp}", str(tmp_path)) if isinstance(value, str) else value


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty working directory (the default runs/ goes there) holding only ``a_file``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISPLAY", raising=False)
    (tmp_path / "a_file").write_text("not a folder")
    return tmp_path


@pytest.mark.parametrize("case, fn_or_algo, kwargs, error, message",
                         CHECKED_UP_FRONT,
                         ids=_ids(CHECKED_UP_FRONT))
def test_rejected_before_anything_is_written(case, fn_or_algo, kwargs, error, message, workdir,
                                             no_leftover_children):
    if fn_or_algo is ALGO:
        fn_or_algo = small_trpo()
    kwargs = {key: _fill(value, workdir) for key, value in kwargs.items()}
    with pytest.raises(error) as raised:
        run_experiment_lite(fn_or_algo, **kwargs)
    assert _fill(message, workdir) in str(raised.value)
    assert os.listdir(workdir) == ["a_file"], "a rejected call wrote files"


@pytest.mark.parametrize("case, kwargs, error, message",
                         CHECKED_BY_THE_PLOTTER,
                         ids=_ids(CHECKED_BY_THE_PLOTTER))
def test_plotter_arguments_are_checked_before_any_process_starts(case, kwargs, error, message,
                                                                 workdir, no_leftover_children):
    kwargs = {key: _fill(value, workdir) for key, value in kwargs.items()}
    # n_parallel=2: sampler workers would be running by now if the check came late.
    with pytest.raises(error) as raised:
        run_experiment_lite(small_trpo(), n_parallel=2, plot=True, log_dir="run", **kwargs)
    assert _fill(message, workdir) in str(raised.value)
    # The failure is on record where one looks after the terminal is gone.
    assert _fill(message, workdir) in (workdir / "run" / "debug.log").read_text()
    assert not (workdir / "run" / "params.pkl").exists()


def _trpo_on(env):
    return TRPO(env,
                CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, )),
                batch_size=100,
                max_path_length=20,
                n_itr=1)


def test_parallel_sampling_refuses_an_env_whose_added_wrappers_it_would_leave_out(
        workdir, no_leftover_children):
    """Before: each sampler rebuilt the env from its registration, and training went on without
    the user's NormalizeObservation, silently."""
    env = NormalizeObservation(gymnasium.make("CartPole-v1"))
    with pytest.raises(ValueError) as raised:
        run_experiment_lite(_trpo_on(env), n_parallel=2, plot=True, log_dir="run")
    message = str(raised.value)
    assert "would leave out the wrappers added to it (NormalizeObservation)" in message
    assert "env=lambda: NormalizeObservation(gymnasium.make('CartPole-v1'))" in message
    assert message in (workdir / "run" / "debug.log").read_text()
    assert not (workdir / "run" / "videos").exists(), "the plotter started before the refusal"


def test_serial_sampling_plots_the_env_object_it_steps(workdir, no_leftover_children):
    """Before: the plotter got the env's id and showed CartPole without the user's wrapper, so
    the plotter's checks of that wrapper never ran; now they name it."""
    with pytest.raises(EnvMismatchError, match=r"StepNormalizer \(mean, seen\)"):
        run_experiment_lite(_trpo_on(helpers.StepNormalizer(gymnasium.make("CartPole-v1"))),
                            plot=True,
                            log_dir="run")
    assert not (workdir / "run" / "videos").exists()
