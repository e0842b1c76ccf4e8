"""Real TensorFlow policies of every kind, rebuilt in the worker's own TF runtime and rendered on
Mesa's software GL (llvmpipe) - the combination that segfaults when TF and GL share a process."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from async_plotter import Plotter
from tests.conftest import wait_for

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_until_videos(plotter, policy, perturb, count=2):
    for iteration in range(count):
        perturb(policy)
        plotter.update_plot(policy, iteration=iteration)
        wait_for(lambda: plotter.stats["last_applied_update"] == iteration + 1 and plotter.stats[
            "videos"] >= iteration + 1,
                 90,
                 message=f"video of iteration {iteration}")


def test_keras_model(tmp_path, no_leftovers):
    import keras

    model = keras.Sequential(
        [keras.Input((8, )),
         keras.layers.Dense(16, activation="tanh"),
         keras.layers.Dense(2)])
    with Plotter("Swimmer-v5", model, max_path_length=10, video_dir=str(tmp_path),
                 fps=500) as plotter:
        run_until_videos(plotter, model,
                         lambda m: m.set_weights([w + 0.1 for w in m.get_weights()]))
        stats = plotter.stats
    assert stats["restarts"] == 0 and stats["last_error"] is None
    assert "llvmpipe" in stats["gl_renderer"]
    assert {"iter_0000.mp4", "iter_0001.mp4"} <= set(os.listdir(tmp_path))


def test_tf_module(tmp_path, no_leftovers):
    from tests.tf_policies import LinearModule

    module = LinearModule(8, 2)
    with Plotter("Swimmer-v5", module, max_path_length=10, video_dir=str(tmp_path),
                 fps=500) as plotter:
        run_until_videos(plotter, module, lambda m: m.w.assign_add(np.ones((8, 2), np.float32)))
        assert plotter.stats["last_error"] is None


def test_rllab_protocol_tf2_policy(tmp_path, no_leftovers):
    from tests.tf_policies import TF2Policy

    policy = TF2Policy(8, 2)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=10,
                 video_dir=str(tmp_path),
                 fps=500,
                 deterministic=True) as plotter:
        run_until_videos(plotter, policy, lambda p: p.set_param_values(p.get_param_values() * 1.5))
        assert plotter.stats["last_error"] is None


def test_graph_mode_policy_in_the_workers_own_graph_and_session(tmp_path):
    # disable_eager_execution is process-wide, so the trainer runs in its own interpreter.
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {ROOT!r})
        import tensorflow as tf
        tf.compat.v1.disable_eager_execution()
        from async_plotter import Plotter
        from tests.tf_policies import GraphModePolicy
        session = tf.compat.v1.Session()
        session.__enter__()
        policy = GraphModePolicy(8, 2)
        session.run(tf.compat.v1.global_variables_initializer())
        plotter = Plotter("Swimmer-v5", policy, max_path_length=10, video_dir={str(tmp_path)!r},
                          fps=500)
        plotter.start()
        for iteration in range(2):
            policy.set_param_values(policy.get_param_values() + 0.5)
            plotter.update_plot(policy, iteration=iteration)
            deadline = time.time() + 90
            while plotter.stats["videos"] < iteration + 1 and time.time() < deadline:
                time.sleep(0.1)
        stats = plotter.stats
        plotter.close()
        print("RESULT", stats["videos"], stats["updates_applied"], stats["last_error"])
        """)
    result = subprocess.run([sys.executable, "-c", script],
                            capture_output=True,
                            text=True,
                            timeout=240)
    assert "RESULT 2 2 None" in result.stdout, result.stdout + result.stderr[-3000:]
    assert {"iter_0000.mp4", "iter_0001.mp4"} <= set(os.listdir(tmp_path))
