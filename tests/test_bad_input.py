"""Every mistake a user can make at the API gets a specific error in the trainer, at that call."""
import threading

import numpy as np
import pytest

from async_plotter import (EnvSpecError, InvalidArgumentError, NoDisplayError,
                           ParameterMismatchError, Plotter, PlotterClosedError,
                           PolicyNotRebuildableError, PolicyProtocolError, VideoDirError)
from tests.conftest import worker_children
from tests.policies import LinearPolicy


class NoProtocol:

    def get_action(self, obs):
        return obs, {}


class UnpicklablePolicy:

    def __init__(self):
        self.w = np.zeros(16, np.float32)
        self.guard = threading.Lock()

    def get_param_values(self):
        return self.w

    def set_param_values(self, flat):
        self.w = flat

    def get_action(self, obs):
        return np.zeros(2), {}


class MatrixParams(UnpicklablePolicy):

    def __init__(self):
        self.w = np.zeros((4, 4), np.float32)

    def get_param_values(self):
        return self.w


class IntParams(MatrixParams):

    def get_param_values(self):
        return np.zeros(16, np.int64)


def make(**overrides):
    kwargs = dict(env="Swimmer-v5",
                  policy=LinearPolicy(8, 2),
                  video_dir=None,
                  window=False,
                  on_frame=lambda f, i: None)
    kwargs.update(overrides)
    return Plotter(**kwargs)


CONSTRUCTOR_CASES = [
    (dict(policy=NoProtocol()), PolicyProtocolError, "missing: get_param_values, set_param_values"),
    (dict(policy=object()), PolicyProtocolError, "neither a keras.Model nor a tf.Module"),
    (dict(policy=UnpicklablePolicy()), PolicyNotRebuildableError, "the attribute guard"),
    (dict(policy=MatrixParams()), ParameterMismatchError, "must be a 1-D vector, got shape (4, 4)"),
    (dict(policy=IntParams()), ParameterMismatchError, "dtype int64 are not supported"),
    (dict(env="NoSuchEnv-v0"), EnvSpecError, "unknown env id 'NoSuchEnv-v0'"),
    (dict(env=42), EnvSpecError, "pass a Gymnasium id"),
    (dict(max_path_length=0), InvalidArgumentError,
     "max_path_length must be a positive int, got 0"),
    (dict(max_path_length=-5), InvalidArgumentError, "got -5"),
    (dict(max_path_length=2.5), InvalidArgumentError, "got 2.5"),
    (dict(max_path_length="100"), InvalidArgumentError, "got '100'"),
    (dict(max_path_length=True), InvalidArgumentError, "got True"),
    (dict(fps=0), InvalidArgumentError, "fps must be a positive number, got 0"),
    (dict(fps=-30), InvalidArgumentError, "got -30"),
    (dict(fps=float("nan")), InvalidArgumentError, "got nan"),
    (dict(fps="30"), InvalidArgumentError, "got '30'"),
    (dict(window="yes"), InvalidArgumentError, "window must be True, False or 'auto'"),
    (dict(quality="ultra"), InvalidArgumentError, "quality must be one of 'auto', 'cheap'"),
    (dict(priority="high"), InvalidArgumentError, "priority must be one of 'idle', 'low'"),
    (dict(budget=0), InvalidArgumentError, "budget must be a fraction of the machine's CPU"),
    (dict(budget=1.5), InvalidArgumentError, "in (0, 1], e.g. 0.05 for 5%; got 1.5"),
    (dict(budget="5%"), InvalidArgumentError, "got '5%'"),
    (dict(budget=0.1,
          priority="low"), InvalidArgumentError, "pass either budget= or priority=, not both"),
    (dict(final_video_timeout=-1), InvalidArgumentError,
     "final_video_timeout must be a non-negative number, got -1"),
    (dict(min_video_seconds=float("inf")), InvalidArgumentError,
     "min_video_seconds must be a non-negative number, got inf"),
    (dict(video_length=0), InvalidArgumentError,
     "video_length must be a positive number of steps, 'auto' "),
    (dict(video_length="8s"), InvalidArgumentError, "or None for whole rollouts; got '8s'"),
    (dict(policy_device="cuda"), InvalidArgumentError,
     "policy_device must be one of 'cpu', 'gpu'; got 'cuda'"),
    (dict(video_length=2.5), InvalidArgumentError, "video_length must be a positive number"),
    (dict(max_restarts=-1), InvalidArgumentError, "max_restarts must be a non-negative int"),
    (dict(hang_timeout=0), InvalidArgumentError, "hang_timeout must be a positive number"),
    (dict(verbose=-1), InvalidArgumentError, "verbose must be a non-negative int, got -1"),
    (dict(verbose="yes"), InvalidArgumentError, "verbose must be a non-negative int, got 'yes'"),
    (dict(frame_size=(640, )), InvalidArgumentError, "frame_size must be (width, height)"),
    (dict(frame_size=(640, -1)), InvalidArgumentError, "frame_size must be (width, height)"),
    (dict(on_frame="print"), InvalidArgumentError, "on_frame must be a callable or None, got str"),
    (dict(seed="1"), InvalidArgumentError, "seed must be an int or None"),
    (dict(deterministic="yes"), InvalidArgumentError, "deterministic must be True or False"),
    (dict(video_dir=3), InvalidArgumentError, "video_dir must be a path or None, got int"),
    (dict(policy_factory=5), PolicyNotRebuildableError, "policy_factory must be a zero-argument"),
    (dict(record_states="yes"), InvalidArgumentError, "record_states must be True or False"),
    (dict(record_states=True), InvalidArgumentError, "into <video_dir>/live/: pass video_dir="),
    (dict(record_states=True, video_dir="never_made"), InvalidArgumentError,
     "records the episodes a live view shows, and there is none: pass http="),
]


@pytest.mark.parametrize("overrides, error, message",
                         CONSTRUCTOR_CASES,
                         ids=[f"{next(iter(c[0]))}-{i}" for i, c in enumerate(CONSTRUCTOR_CASES)])
def test_constructor_rejects(overrides, error, message):
    with pytest.raises(error) as raised:
        make(**overrides)
    assert message in str(raised.value)
    assert not worker_children()


def test_window_true_without_display_is_an_error_not_an_abort(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    with pytest.raises(NoDisplayError, match="window=True, but no display is reachable"):
        make(window=True)
    monkeypatch.setenv("DISPLAY", ":987")  # set, but nothing listens there
    with pytest.raises(NoDisplayError, match="DISPLAY is :987"):
        make(window=True)


def test_unwritable_video_dir(tmp_path):
    """A folder that cannot be made names the file in its way (the OS said "File exists" for
    the file itself, "Not a directory" for a folder under it)."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    for given in (blocker, blocker / "videos"):
        with pytest.raises(VideoDirError) as raised:
            make(video_dir=str(given))
        assert str(raised.value) == (
            f"video_dir {str(given)!r} cannot be written: {str(blocker)!r} is a file, not a "
            "folder. Choose a directory you can write to."), raised.value


def test_nothing_to_show_is_said_once_and_costs_nothing(monkeypatch, caplog):
    monkeypatch.delenv("DISPLAY", raising=False)
    plotter = make(on_frame=None, window="auto")
    warnings = [r for r in caplog.records if "nowhere to show anything" in r.getMessage()]
    assert len(warnings) == 1 and "video_dir" in warnings[0].getMessage()
    plotter.start()
    plotter.update_plot(LinearPolicy(8, 2))
    assert plotter.stats["disabled"] and plotter.stats["updates_sent"] == 1
    assert not worker_children()
    plotter.close()


UPDATE_CASES = [
    (dict(policy=LinearPolicy(8, 3)), ParameterMismatchError,
     "got 24 parameters of dtype float32, but this Plotter was built for 16 parameters of dtype "
     "float32"),
    (dict(policy=LinearPolicy(8, 2, dtype=np.float64)), ParameterMismatchError,
     "got 16 parameters of dtype float64, but this Plotter was built for 16 parameters of dtype "
     "float32"),
    (dict(policy=NoProtocol()), PolicyProtocolError, "missing: get_param_values"),
    (dict(max_path_length=0), InvalidArgumentError, "max_path_length must be a positive int"),
    (dict(iteration=-1), InvalidArgumentError, "iteration must be a non-negative int or None"),
    (dict(iteration="3"), InvalidArgumentError, "got '3'"),
    (dict(metrics=[1, 2]), InvalidArgumentError, "metrics must be a dict"),
    (dict(metrics={"AverageReturn": "high"}), InvalidArgumentError,
     "metrics['AverageReturn'] must be a number"),
    (dict(metrics={"Returns": np.ones(3)}), InvalidArgumentError,
     "metrics['Returns'] must be a number (or an array or tensor of one), got ndarray of shape "
     "(3,)"),
    (dict(max_path_length=2.5), InvalidArgumentError, "max_path_length must be a positive int"),
]


@pytest.mark.parametrize("overrides, error, message", UPDATE_CASES)
def test_update_plot_rejects(overrides, error, message, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    plotter = make(on_frame=None)  # nothing to show: no worker, only the checks
    kwargs = dict(policy=LinearPolicy(8, 2))
    kwargs.update(overrides)
    with pytest.raises(error) as raised:
        plotter.update_plot(kwargs.pop("policy"), **kwargs)
    assert message in str(raised.value)
    assert plotter.stats["updates_sent"] == 0  # a rejected update is not counted
    plotter.close()


def test_update_plot_takes_tensors_as_metrics_and_whole_floats_as_counts(monkeypatch):
    """A TensorFlow loss, a ``tf.Variable`` and a 0-d array are numbers, as in
    ``tf.summary.scalar``; ``1e3`` from a config file is a step count. Before, each was an
    ``InvalidArgumentError``."""
    import tensorflow as tf

    from async_plotter.validation import metrics

    monkeypatch.delenv("DISPLAY", raising=False)
    given = {
        "loss": tf.constant(0.25),
        "kl": tf.Variable(0.5),
        "entropy": np.array(1.5),
        "AverageReturn": np.float32(2.0),
        "Steps": 1000
    }
    assert metrics(given) == {
        "loss": 0.25,
        "kl": 0.5,
        "entropy": 1.5,
        "AverageReturn": 2.0,
        "Steps": 1000.0
    }
    plotter = make(on_frame=None)
    plotter.update_plot(LinearPolicy(8, 2), 1e3, iteration=4.0, metrics=given)
    assert plotter.stats["updates_sent"] == 1
    plotter.close()
    assert make(on_frame=None, max_path_length=5e2)._config.worker.max_path_length == 500


def test_update_plot_after_close_is_a_named_error(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    plotter = make(on_frame=None)
    plotter.close()
    plotter.close()
    with pytest.raises(PlotterClosedError, match="after close"):
        plotter.update_plot(LinearPolicy(8, 2))
    with pytest.raises(PlotterClosedError):
        plotter.start()


def test_a_folder_given_from_home_is_in_home_not_a_folder_named_tilde(tmp_path, monkeypatch):
    """``video_dir="~/videos"``, as written in a script, made a folder named ``~`` in the
    working directory (Python does not expand it; a shell does, for a command's arguments)."""
    from async_plotter.rl.recorder import RunRecorder

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    plotter = make(video_dir="~/videos", tensorboard_dir="~/tb")
    assert plotter.video_dir == str(tmp_path / "home" / "videos")
    assert plotter._config.tensorboard_dir == str(tmp_path / "home" / "tb")
    plotter.close()
    assert RunRecorder("~/run").log_dir == str(tmp_path / "home" / "run")
    assert not (tmp_path / "~").exists()


class BareAction(LinearPolicy):
    """Returns the action alone from get_action, forgetting rllab's ``(action, info)``."""

    def get_action(self, obs):
        return super().get_action(obs)[0]


class WeightsList(LinearPolicy):
    """Gives its parameters as Keras's get_weights() does: a list of arrays."""

    def get_param_values(self):
        flat = super().get_param_values()
        return [flat[:8].reshape(4, 2), flat[8:]]


PROTOCOL_SLIPS = [
    # Before, its two values were taken for an action and an info, and the error blamed the
    # policy's output layer ("the policy's action has shape ()... Give ... 2 units").
    (BareAction, PolicyProtocolError,
     "BareAction.get_action(obs) returned a ndarray of shape (2,), not the pair (action, info) "
     "of rllab's protocol: return the action with a dict, e.g. `return action, {}`"),
    # Before, numpy's "setting an array element with a sequence ... inhomogeneous shape".
    (WeightsList, ParameterMismatchError,
     "WeightsList.get_param_values() returned a list of 2 arrays (shapes (4, 2), (8,)), not one "
     "flat vector: return np.concatenate([p.ravel() for p in params])"),
]


@pytest.mark.parametrize("policy_class, error, message", PROTOCOL_SLIPS)
def test_a_slip_of_rllabs_protocol_is_named_with_the_fix(policy_class, error, message, monkeypatch,
                                                         tmp_path):
    monkeypatch.delenv("DISPLAY", raising=False)
    with pytest.raises(error) as refused:
        Plotter("Swimmer-v5", policy_class(8, 2), video_dir=str(tmp_path / "v"))
    assert str(refused.value).startswith(message), refused.value
    assert not (tmp_path / "v").exists()
