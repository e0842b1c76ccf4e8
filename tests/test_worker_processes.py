"""What the worker's processes start with and leave behind: GPUs hidden from the rollout
process's TensorFlow (not from the render process, nor the trainer), and the env closed however
the rollout process ends."""
import logging
import os
import subprocess
import sys

import cloudpickle
import pytest

from async_plotter import Plotter
from tests.conftest import wait_for
from tests.policies import CloseRecordingEnvFactory, LinearPolicy

pytestmark = pytest.mark.slow


def environment_of(pid):
    """The environment ``pid`` was started with (this machine has no GPU for TensorFlow to
    list, so what CUDA would be told is what there is to check)."""
    with open(f"/proc/{pid}/environ", "rb") as environ:
        entries = environ.read().split(b"\0")
    return dict(entry.decode().partition("=")[::2] for entry in entries if b"=" in entry)


def started_plotter(tmp_path, **kwargs):
    plotter = Plotter("Swimmer-v5",
                      LinearPolicy(8, 2),
                      max_path_length=10,
                      video_dir=str(tmp_path),
                      **kwargs).start()
    wait_for(lambda: plotter.stats["worker_pids"], 60, message="the worker's processes")
    return plotter


def test_the_rollout_process_starts_with_gpus_hidden_and_the_trainer_keeps_its_own(
        tmp_path, monkeypatch, no_leftovers):
    import tensorflow  # noqa: F401 - a TF trainer (importing TF sets variables of its own)

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a trainer told to use GPU 0
    before = dict(os.environ)
    plotter = started_plotter(tmp_path)
    try:
        pids = plotter.stats["worker_pids"]
        rollout, render = environment_of(pids["rollout"]), environment_of(pids["render"])
    finally:
        plotter.close(final_video=False)
    assert rollout["CUDA_VISIBLE_DEVICES"] == ""
    assert render["CUDA_VISIBLE_DEVICES"] == "0", "the render process keeps the GPU for EGL"
    assert dict(os.environ) == before, "the trainer's environment is untouched"


def test_policy_device_gpu_lets_the_rollout_process_see_the_trainers_gpus(
        tmp_path, monkeypatch, no_leftovers):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    plotter = started_plotter(tmp_path, policy_device="gpu")
    try:
        rollout = environment_of(plotter.stats["worker_pids"]["rollout"])
    finally:
        plotter.close(final_video=False)
    assert "CUDA_VISIBLE_DEVICES" not in rollout
    assert rollout["TF_FORCE_GPU_ALLOW_GROWTH"] == "true", "it does not take a whole GPU"
    assert "TF_FORCE_GPU_ALLOW_GROWTH" not in os.environ


@pytest.mark.parametrize("users", [None, "2"])
def test_the_workers_numpy_runs_blas_on_one_thread_unless_the_user_said(
        tmp_path, monkeypatch, users, no_leftovers):
    """A thread per core started at numpy's import spins after each call: CPU the budget pays
    for, on arrays too small to split."""
    if users is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", users)
    plotter = started_plotter(tmp_path)
    try:
        pids = plotter.stats["worker_pids"]
        seen = [environment_of(pids[name])["OPENBLAS_NUM_THREADS"] for name in pids]
    finally:
        plotter.close(final_video=False)
    assert seen == [users or "1"] * 2
    assert os.environ.get("OPENBLAS_NUM_THREADS") == users, "the trainer's is untouched"


_RENDER_PROCESS_START = """
import pickle, sys
from async_plotter.sinks.rerender import prepare_gl
prepare_gl()  # MuJoCo's GL backend, as the render process chooses it
import async_plotter.worker.render_process
config = pickle.loads(sys.stdin.buffer.read())
import mujoco
from async_plotter.render.mujoco_scene import MujocoScene
model = mujoco.MjModel.from_xml_string(
    "<mujoco><worldbody><geom type='plane' size='1 1 .1'/><body pos='0 0 .5'><freejoint/>"
    "<geom type='sphere' size='.1'/></body></worldbody></mujoco>")
scene = MujocoScene(pickle.dumps(model), None, -1, 64, 64, "auto")
frame = scene.render()
print(config.env.label, frame.shape[2], scene.gl_renderer.split()[0], sorted(
    name for name in ("gymnasium", "keras", "tensorflow", "async_plotter.env.recipe",
                      "async_plotter.policy.recipe", "OpenGL.GL") if name in sys.modules))
"""


def test_the_render_process_starts_without_gymnasium_the_policys_code_or_pyopengls_gl(tmp_path):
    """What the render process imports before its first frame (its module, the config it is
    sent, GL) is all start-up CPU, taken from a busy trainer; it builds no env and runs no
    policy, and PyOpenGL's GL module alone cost 60-100 ms (``render/gl_calls.py``)."""
    import keras

    model = keras.Sequential([keras.Input((8, )), keras.layers.Dense(2, activation="tanh")])
    config = cloudpickle.dumps(Plotter("Swimmer-v5", model, video_dir=str(tmp_path))._config.worker)
    shown = subprocess.run([sys.executable, "-c", _RENDER_PROCESS_START],
                           input=config,
                           capture_output=True,
                           check=True,
                           timeout=120)
    assert shown.stdout.decode().split() == ["Swimmer-v5", "3", "llvmpipe", "[]"], shown.stderr


def closes_recorded(marker):
    return marker.read_text().split() if marker.exists() else []


def test_the_rollout_process_closes_its_env_on_a_normal_stop(tmp_path, no_leftovers):
    marker = tmp_path / "closed.txt"
    with Plotter(CloseRecordingEnvFactory(str(marker)),
                 LinearPolicy(8, 2),
                 max_path_length=10,
                 video_dir=str(tmp_path)) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 60, message="a video")
        rollout = plotter.stats["worker_pids"]["rollout"]
    assert str(rollout) in closes_recorded(marker)


def test_the_rollout_process_closes_its_env_when_the_rollout_fails(tmp_path, no_leftovers):
    marker = tmp_path / "closed.txt"
    plotter = Plotter(CloseRecordingEnvFactory(str(marker), fail_after=3),
                      LinearPolicy(8, 2),
                      max_path_length=10,
                      video_dir=str(tmp_path),
                      max_restarts=0).start()
    try:
        wait_for(lambda: plotter.stats["disabled"], 60, message="the failure to disable plotting")
        rollout = plotter.stats["worker_pids"]["rollout"]
        last_error = plotter.stats["last_error"]
    finally:
        plotter.close()
    assert "env.step exploded (test)" in last_error, "the close did not mask the real error"
    assert str(rollout) in closes_recorded(marker)


_IMPORT_AS_A_WORKER = """
import json, sys
import async_plotter.worker.render_process, async_plotter.worker.rollout_process
loaded = sorted(name for name in sys.modules if name.startswith("async_plotter."))
import async_plotter
public = {}
exec("from async_plotter import *", public)
print(json.dumps({"loaded": loaded, "tensorflow": "tensorflow" in sys.modules, "public": sorted(k for k in public if k != "__builtins__"),
                  "all": sorted(async_plotter.__all__)}))
"""


def test_the_worker_processes_load_none_of_the_trainers_side():
    """A worker process imports the package on its way to its own module; the Plotter, its
    checks and its supervisor cost each process ~50 ms of CPU at start-up (while the trainer's
    first iterations want both cores) and were imported for nothing."""
    import json
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _IMPORT_AS_A_WORKER],
                            capture_output=True,
                            text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    trainers = [
        name for name in found["loaded"] if name.split(".")[1] in ("trainer", "supervision")
    ]
    assert not trainers, trainers
    assert not found["tensorflow"]
    # Every public name is still there for the trainer, from `import *` too.
    assert found["public"] == found["all"] and "Plotter" in found["all"], found


def _run_without_egl(tmp_path, monkeypatch, mujoco_gl, until, **kwargs):
    """A plotter's stats once ``until`` holds, with EGL as on a machine with no EGL driver:
    glvnd, which libEGL is, reads the drivers from a list, and this one names none."""
    monkeypatch.setenv("__EGL_VENDOR_LIBRARY_FILENAMES", str(tmp_path / "no_egl_vendor.json"))
    if mujoco_gl is None:
        monkeypatch.delenv("MUJOCO_GL", raising=False)
    else:
        monkeypatch.setenv("MUJOCO_GL", mujoco_gl)
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=20,
                 video_dir=str(tmp_path / "videos"),
                 min_video_seconds=0,
                 **kwargs) as plotter:
        plotter.update_plot(policy)
        wait_for(lambda: until(plotter.stats) or plotter.stats["disabled"], 120, message="it")
        return plotter.stats


def test_without_an_egl_driver_the_worker_draws_with_osmesa(tmp_path, monkeypatch, caplog,
                                                            no_leftovers):
    """EGL is only our default: where it makes no context and OSMesa is installed, the worker
    draws with OSMesa instead (the same llvmpipe) rather than failing four times and stopping."""
    with caplog.at_level(logging.WARNING, logger="async_plotter"):
        stats = _run_without_egl(tmp_path, monkeypatch, None, lambda stats: stats["videos"])
    assert stats["videos"] >= 1 and not stats["disabled"], stats["last_error"]
    assert stats["restarts"] == 0, "a fallback is not a failure of the worker"
    assert "llvmpipe" in stats["gl_renderer"]
    said = [r.getMessage() for r in caplog.records if "no EGL context" in r.getMessage()]
    assert len(said) == 1 and "drawing with OSMesa instead" in said[0], said
    assert "Cannot initialize a EGL" in said[0], "it says what EGL answered"
    assert stats["last_error"].startswith("no EGL context, drawn with OSMesa instead")


def test_an_egl_the_user_asked_for_is_kept_and_its_failure_named(tmp_path, monkeypatch,
                                                                 no_leftovers):
    stats = _run_without_egl(tmp_path,
                             monkeypatch,
                             "egl",
                             lambda stats: stats["disabled"],
                             max_restarts=0)
    assert stats["disabled"] and stats["videos"] == 0
    assert "no offscreen GL context through MUJOCO_GL=egl" in stats["last_error"]
    assert "libegl-mesa0" in stats["last_error"] and "OSMesa" in stats["last_error"]
