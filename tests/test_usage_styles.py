"""The ways people already plot: rllab's module functions, scripts without a main guard, a REPL."""
import os
import subprocess
import sys
import textwrap

import pytest

from async_plotter import plotter as rllab_plotter
from tests.conftest import wait_for
from tests.policies import LinearPolicy

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(tmp_path, source, timeout, name="train.py"):
    """Write ``source`` as the script ``name`` in ``tmp_path`` and run it there, as a user runs
    their training script; its completed process."""
    script = tmp_path / name
    script.write_text(source)
    return subprocess.run([sys.executable, str(script)],
                          capture_output=True,
                          text=True,
                          timeout=timeout,
                          cwd=tmp_path)


def test_rllab_module_functions(tmp_path, no_leftovers):
    policy = LinearPolicy(8, 2)
    rllab_plotter.init_worker(video_dir=str(tmp_path), fps=500)
    rllab_plotter.init_plot("Swimmer-v5", policy)
    try:
        for iteration in range(3):
            policy.fill(0.1 * iteration)
            rllab_plotter.update_plot(policy, max_length=12)
        plotter = rllab_plotter.get_plotter()
        wait_for(lambda: plotter.stats["last_applied_update"] == 3, 60, message="last update")
        wait_for(lambda: os.path.exists(tmp_path / "update_0003.mp4"), 30, message="its video")
    finally:
        rllab_plotter.shutdown_worker()
    rllab_plotter.shutdown_worker()  # harmless twice
    import imageio.v2 as imageio

    assert imageio.get_reader(str(tmp_path / "update_0003.mp4")).count_frames() == 13


def test_update_plot_before_init_plot_is_a_clear_error():
    rllab_plotter.shutdown_worker()
    with pytest.raises(Exception, match="before plotter.init_plot"):
        rllab_plotter.update_plot(LinearPolicy(8, 2))


# A training script as people write them: no `if __name__ == "__main__":` guard. Each run of the
# module body appends a line, so a worker that re-ran the script would show up as a second line.
UNGUARDED = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    with open({marker!r}, "a") as out:
        out.write("ran\\n")
    from async_plotter import Plotter
    from tests.policies import LinearPolicy
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5", policy, max_path_length=5, video_dir={videos!r}, fps=500)
    plotter.start()
    plotter.update_plot(policy, iteration=1)
    deadline = time.time() + 60
    while plotter.stats["videos"] < 1 and time.time() < deadline:
        time.sleep(0.05)
    plotter.close()
    print("VIDEOS", plotter.stats["videos"])
    """)


def test_script_without_main_guard_is_not_rerun(tmp_path):
    marker = tmp_path / "runs.txt"
    result = run_script(
        tmp_path, UNGUARDED.format(root=ROOT, marker=str(marker), videos=str(tmp_path / "videos")),
        120)
    assert "VIDEOS 1" in result.stdout, result.stderr[-3000:]
    assert marker.read_text() == "ran\n"


def test_repl_session(tmp_path):
    """Code typed into an interactive interpreter (stdin, no __main__ file) works too."""
    marker = tmp_path / "runs.txt"
    code = UNGUARDED.format(root=ROOT, marker=str(marker), videos=str(tmp_path / "videos"))
    # The interactive prompt ends a block only at an empty line.
    code = code.replace('out.write("ran\\n")\n', 'out.write("ran\\n")\n\n')
    code = code.replace("time.sleep(0.05)\n", "time.sleep(0.05)\n\n")
    result = subprocess.run([sys.executable, "-i", "-q"],
                            input=code,
                            capture_output=True,
                            text=True,
                            timeout=120,
                            cwd=tmp_path)
    assert "VIDEOS 1" in result.stdout, result.stderr[-3000:]
    assert marker.read_text() == "ran\n"
    # The worker ran in another directory: no MuJoCo log or TF files land where the user is.
    assert sorted(os.listdir(tmp_path)) == ["runs.txt", "videos"]


SWEEP = textwrap.dedent("""\
    import multiprocessing, os, sys, time
    sys.path.insert(0, {root!r})

    def train(seed, folder={videos!r}, leave_open=False):
        from async_plotter import Plotter
        from tests.policies import LinearPolicy
        policy = LinearPolicy(8, 2)
        plotter = Plotter("Swimmer-v5", policy, max_path_length=30, verbose=0,
                          video_dir=os.path.join(folder, str(seed))).start()
        for iteration in range(3):
            policy.fill(0.1 * (seed + iteration))
            plotter.update_plot(policy, iteration=iteration)
        if leave_open:  # the pool is terminated while its worker plots
            deadline = time.monotonic() + 60
            while len(plotter.stats["worker_pids"] or ()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            return os.getpid(), sorted((plotter.stats["worker_pids"] or {{}}).values())
        plotter.close()
        return plotter.stats["final_video"], plotter.stats["last_error"]

    def train_and_leave_open(seed):
        return train(seed, leave_open=True)

    if __name__ == "__main__":
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            print("FINAL", pool.map(train, [0, 1]), flush=True)
        pool = multiprocessing.get_context("spawn").Pool(1)
        print("OPEN", pool.map(train_and_leave_open, [2]), flush=True)
        pool.terminate()
    """)


def test_a_trainer_in_a_multiprocessing_pool_plots_and_leaves_no_orphans(tmp_path):
    """A hyperparameter sweep's trainer in a ``multiprocessing.Pool`` worker (a daemonic process,
    which multiprocessing refuses children) gets its videos, and a pool terminated while it
    plots takes the plot workers with it. Before, the supervisor thread died of "daemonic
    processes are not allowed to have children" and close() blamed a slow start."""
    import ast

    import psutil

    result = run_script(tmp_path,
                        SWEEP.format(root=ROOT, videos=str(tmp_path / "videos")),
                        240,
                        name="sweep.py")
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert "FINAL" in lines and "OPEN" in lines, result.stderr[-3000:]
    assert ast.literal_eval(lines["FINAL"]) == [
        (str(tmp_path / "videos" / str(seed) / "iter_0002.mp4"), None) for seed in (0, 1)
    ], result.stderr[-3000:]
    assert "daemonic" not in result.stderr
    [(trainer, workers)] = ast.literal_eval(lines["OPEN"])
    assert len(workers) == 2
    wait_for(lambda: not any(psutil.pid_exists(pid) for pid in [trainer, *workers]),
             30,
             message="the terminated pool's trainer and its plot workers to be gone")


FORKED_HELPER = textwrap.dedent("""\
    import logging, os, sys, time
    sys.path.insert(0, {root!r})
    logging.basicConfig(level=logging.WARNING, format="%(process)d %(levelname)s %(message)s")
    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5", policy, max_path_length=30, video_dir={videos!r},
                      priority="normal").start()
    plotter.update_plot(policy, iteration=0)
    deadline = time.monotonic() + 60
    while (plotter.stats["last_applied_update"] or 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    child = os.fork()
    if child == 0:  # a helper forked from the trainer, ending normally: exit handlers run
        policy.fill(9.0)
        plotter.update_plot(policy, iteration=99)
        sys.exit(0)
    os.waitpid(child, 0)
    for iteration in range(1, 4):
        policy.fill(0.1 * iteration)
        plotter.update_plot(policy, iteration=iteration)
        time.sleep(0.5)
    plotter.close()
    stats = plotter.stats
    print("PARENT", os.getpid(), "CHILD", child, stats["restarts"], stats["final_video"],
          sorted(entry["iteration"] for entry in stats["history"]))
    """)


def test_a_process_forked_from_the_trainer_leaves_its_plotter_alone(tmp_path):
    """A helper forked with ``os.fork()`` that exits normally ran the exit handlers on its copy
    of the trainer's Plotter: multiprocessing terminated the trainer's plot worker, and the
    Plotter's close() removed its segment, so plotting died for the trainer. Its update_plot
    would have shown the helper's parameters as the trainer's."""
    videos = tmp_path / "videos"
    result = run_script(tmp_path,
                        FORKED_HELPER.format(root=ROOT, videos=str(videos)),
                        180,
                        name="forks.py")
    assert result.returncode == 0 and "PARENT" in result.stdout, result.stderr[-3000:]
    _, parent, _, child, restarts, final, iterations = result.stdout.split(" ", 6)
    assert restarts == "0" and final == str(videos / "iter_0003.mp4"), result.stderr[-3000:]
    assert "99" not in iterations  # the helper's update was never shown
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    warned = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert len(warned) == 1 and warned[0].startswith(child + " "), result.stderr[-3000:]
    assert "update_plot() called in process " + child in warned[0] and parent in warned[0]


# A script that registers its own env, as people do with a variant of a Gymnasium env, then
# passes its id on. The plot worker and the samplers never run the script, so the registration
# must travel with the id: before, each of them failed with NameNotFound (the plot worker
# restarted three times, then plotting was off; the run itself failed with n_parallel=2).
REGISTERS_ITS_ENV = textwrap.dedent("""\
    import logging, sys
    sys.path.insert(0, {root!r})
    import gymnasium
    from gymnasium.envs.mujoco.swimmer_v5 import SwimmerEnv

    class PaidSwimmer(SwimmerEnv):
        def step(self, action):
            observation, reward, terminated, truncated, info = super().step(action)
            return observation, reward + 1.0, terminated, truncated, info

    gymnasium.register("PaidSwimmer-v0", entry_point=PaidSwimmer, max_episode_steps=1000)
    gymnasium.register("NamedSwimmer-v0", entry_point="__main__:PaidSwimmer")

    if __name__ == "__main__":
        from async_plotter import Plotter
        from async_plotter.rl import TRPO, GaussianMLPPolicy, ZeroBaseline, run_experiment_lite
        from tests.policies import LinearPolicy
        logging.basicConfig(level=logging.WARNING)
        policy = LinearPolicy(8, 2)
        with Plotter("NamedSwimmer-v0", policy, max_path_length=20,
                     video_dir={videos!r}) as plotter:
            plotter.update_plot(policy, iteration=0)
        print("PLOTTER", plotter.stats["final_video"], plotter.stats["history"][-1]["return"])
        algo = TRPO("PaidSwimmer-v0", GaussianMLPPolicy("PaidSwimmer-v0"), ZeroBaseline(),
                    batch_size=200, max_path_length=20, n_itr=2)
        result = run_experiment_lite(algo, n_parallel=2, plot=True, seed=1, log_dir={run!r},
                                     tensorboard=False)
        print("RUN", result.final_video)
    """)


def test_an_env_the_script_registers_is_made_by_the_worker_and_the_samplers(tmp_path):
    result = run_script(
        tmp_path,
        REGISTERS_ITS_ENV.format(root=ROOT,
                                 videos=str(tmp_path / "videos"),
                                 run=str(tmp_path / "run")), 300)
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert "RUN" in lines, result.stderr[-3000:]
    final_video, shown_return = lines["PLOTTER"].split()
    assert final_video == str(tmp_path / "videos" / "iter_0000.mp4")
    assert float(shown_return) >= 20 - 2  # PaidSwimmer's: +1 a step over Swimmer's ~0
    assert lines["RUN"] == str(tmp_path / "run" / "videos" / "iter_0001.mp4")
    assert "NameNotFound" not in result.stderr
    # The trained policy loads where the script never ran (its snapshot holds the spaces).
    load = (
        f"import pickle, sys; sys.path.insert(0, {ROOT!r}); "
        f"policy = pickle.load(open({str(tmp_path / 'run' / 'params.pkl')!r}, 'rb'))['policy']; "
        "print('LOADED', policy.get_action([0.0] * 8)[0].shape)")
    loaded = subprocess.run([sys.executable, "-c", load],
                            capture_output=True,
                            text=True,
                            timeout=120,
                            cwd=tmp_path)
    assert "LOADED (2,)" in loaded.stdout, loaded.stderr[-3000:]


DROPPED = textwrap.dedent("""\
    import gc, sys
    sys.path.insert(0, {root!r})
    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    def train():
        policy = LinearPolicy(8, 2)
        plotter = Plotter("Swimmer-v5", policy, max_path_length=20, video_dir={videos!r})
        plotter.start()
        plotter.update_plot(policy, iteration=0)  # and returns without close()

    train()
    gc.collect()
    print("TRAINED", flush=True)
    """)


def test_a_started_plotter_whose_last_name_went_away_is_closed_at_exit(tmp_path):
    """Before, nothing held it: at exit it was never closed, its final video was not made and
    the resource tracker warned of a leaked shared-memory segment on the terminal."""
    result = run_script(tmp_path, DROPPED.format(root=ROOT, videos=str(tmp_path / "videos")), 120)
    assert result.returncode == 0 and "TRAINED" in result.stdout, result.stderr[-3000:]
    assert "leaked shared_memory" not in result.stderr, result.stderr[-3000:]
    assert "the newest, iter_0000.mp4, shows the final policy" in result.stderr
    assert (tmp_path / "videos" / "iter_0000.mp4").exists()
