"""A TRPO run that announces a chosen stage, for tests/test_interrupts.py to press Ctrl-C in it.

    python tests/interrupt_trainer.py STAGE LOG_DIR

Like the training scripts users write, it has no ``if __name__ == "__main__":`` guard. The library
is not edited: the stages are hooked by wrapping its functions here. Each hook prints
``STAGE <name>`` when the stage begins and then keeps the stage running for up to
``HOLD_SECONDS``, from inside the library function the test looks for (calling again something it
calls where that is harmless, or polling the pipe it waits on), so that the test's SIGINT, sent a
moment after it reads the line, lands inside that function and not in a sleep of this script.
Every shared-memory segment created is printed as ``SEGMENT <name>`` so the test can check that
exactly those are gone afterwards (other processes may create their own meanwhile).
"""
import sys
import time

import async_plotter.trainer.plotter_handle
from async_plotter.channel import shm
from async_plotter.rl import GaussianMLPPolicy, TRPO, run_experiment_lite
from async_plotter.rl import batch_polopt, recorder, sample_processing, samplers, trpo

STAGE, LOG_DIR = sys.argv[1], sys.argv[2]
ITERATION = 1  # hook the second iteration, so that a snapshot is already on disk
HOLD_SECONDS = 30.0  # the test sends SIGINT within a second; this only bounds a failure
RENDER_WAIT_SECONDS = 90.0


def announce(stage):
    print(f"STAGE {stage}", flush=True)


def hold(stage, call):
    """Announce ``stage``, then run ``call`` over and over until the signal interrupts it."""
    announce(stage)
    deadline = time.monotonic() + HOLD_SECONDS
    while True:
        result = call()
        if time.monotonic() > deadline:
            return result


def wait_until_rendering():
    """Until the plot worker has drawn frames, so that update_plot reaches a live reader and
    closing finds a video being written (it takes seconds to start: TensorFlow, MuJoCo, GL)."""
    deadline = time.monotonic() + RENDER_WAIT_SECONDS
    while algo.plotter.stats["frames"] < 1:
        if time.monotonic() > deadline:
            print("NOT RENDERING", flush=True)
            break
        time.sleep(0.05)


def wrap(owner, name, stage, hooked, repeat=True, rendering=False):
    """Replace ``owner.name`` with a version that holds ``stage`` when ``hooked()`` says this call
    is the one (first waiting for the plot worker to render, if ``rendering``)."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        if STAGE != stage or not hooked():
            return original(*args, **kwargs)
        if rendering:
            wait_until_rendering()
        if not repeat:
            announce(stage)
            return original(*args, **kwargs)
        return hold(stage, lambda: original(*args, **kwargs))

    setattr(owner, name, wrapper)


def current_iteration():
    return algo.current_itr == ITERATION


def always():
    return True


original_writer_init = shm.SharedMemoryWriter.__init__


def reporting_writer_init(self, *args, **kwargs):
    original_writer_init(self, *args, **kwargs)
    print(f"SEGMENT {self.name.lstrip('/')}", flush=True)


shm.SharedMemoryWriter.__init__ = reporting_writer_init

# Every stage is held inside the library function the test looks for, at something it calls:
# held around the whole call, the signal now and then landed in this script's loop between two
# calls (its handler runs at the first check Python makes after the call's last C work), seen in
# CI for sample processing and optimisation.
#
# Start-up: the plot worker is booting (Plotter.start returned at once) while the trainer waits for
# the sampler workers to build their environments. Starting is not repeated (it starts processes);
# instead start() is held where it waits for the first worker's "ready", the pipe polled as it
# polls it. The workers are ready within ~2 s, and on a loaded machine the test's signal once
# came later than that, after start() had returned.
# Sampling: held the same way where obtain_samples takes the first answer of the iteration.
wrap(samplers.ParallelSampler, "start", "startup", always, repeat=False)
original_receive = samplers.ParallelSampler._receive
sampling_held = []


def receive_when_held(self, index):
    starting = STAGE == "startup" and self._ready == 0  # inside start(), before the first "ready"
    sampling = STAGE == "sampling" and current_iteration() and not sampling_held
    if sampling:
        sampling_held.append(index)
        announce("sampling")
    if starting or sampling:
        deadline = time.monotonic() + HOLD_SECONDS
        while time.monotonic() < deadline:
            self._conns[index].poll(0.05)
    return original_receive(self, index)


samplers.ParallelSampler._receive = receive_when_held
# Sample processing: returns, advantages, fitting the baseline; held at its advantages.
wrap(sample_processing, "gae_advantages", "processing", current_iteration)
# Optimisation: held at its conjugate gradient (TensorFlow's Fisher-vector products).
wrap(trpo, "conjugate_gradient", "optimisation", current_iteration)
# Writing params.pkl (atomically; an interruption must leave the previous file whole): held at the
# write inside RunRecorder.save_snapshot.
wrap(recorder, "save_snapshot", "snapshot", current_iteration)
# Handing the new parameters to the plot worker: held at update_plot's read of the parameters.
wrap(async_plotter.trainer.plotter_handle.Plotter,
     "_flat",
     "update_plot",
     current_iteration,
     rendering=True)
# Shutdown after the last iteration: the render process is finishing its video. Not repeatable.
wrap(batch_polopt.BatchPolopt, "_close_plotter", "shutdown", always, repeat=False, rendering=True)


def slow_frame(frame, info):
    # Runs in the render process: while it draws a frame, close() has to wait for it, so the test's
    # Ctrl-C finds the trainer inside close() (closing otherwise takes only a fraction of a second).
    time.sleep(2.0)


algo = TRPO("Swimmer-v5",
            GaussianMLPPolicy("Swimmer-v5", hidden_sizes=(8, )),
            batch_size=200,
            max_path_length=50,
            n_itr=ITERATION + 1)
plot_kwargs = {"on_frame": slow_frame} if STAGE == "shutdown" else {}
run_experiment_lite(algo, n_parallel=2, plot=True, seed=0, log_dir=LOG_DIR, fps=60, **plot_kwargs)
print("FINISHED", flush=True)
