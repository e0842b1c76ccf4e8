"""One Ctrl-C ends ``train()``, even when Python swallows it.

A ``KeyboardInterrupt`` raised while the main thread runs a ``__del__`` or a weakref callback is
printed as "Exception ignored in ..." and lost; TensorFlow runs such callbacks all the time, and a
TRPO run went on training after a Ctrl-C that landed in one (seen in tests/test_interrupts.py).
"""
import subprocess
import sys
import textwrap

#: a TRPO run whose first optimisation drops an object that sends this process SIGINT from its
#: ``__del__``, as a terminal's Ctrl-C landing in TensorFlow's weakref callbacks does
TRAINER = textwrap.dedent("""
    import os, signal
    from async_plotter.rl import TRPO, CategoricalMLPPolicy

    class CtrlCWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10000):  # Python runs the handler here, inside __del__
                pass

    algo = TRPO("CartPole-v1", CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, )),
                batch_size=200, max_path_length=50, n_itr=6, seed=0)
    optimize = algo.optimize_policy

    def optimize_and_collect(itr, samples):
        if itr == 1:
            CtrlCWhileCollected()  # dropped at once
        return optimize(itr, samples)

    algo.optimize_policy = optimize_and_collect
    algo.train()
    print("TRAINED", len(algo.history), flush=True)
""")


def test_a_ctrl_c_that_python_swallowed_still_ends_training(tmp_path):
    run = subprocess.run([sys.executable, "-c", TRAINER],
                         cwd=tmp_path,
                         capture_output=True,
                         text=True,
                         timeout=300)
    assert "Exception ignored in" in run.stderr, "the SIGINT did not land in __del__"
    assert "TRAINED" not in run.stdout, "training went on after Ctrl-C"
    assert run.returncode != 0 and "KeyboardInterrupt" in run.stderr, run.stderr[-2000:]
