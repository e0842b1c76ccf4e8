"""Helpers for the Redis channel tests: a trainer to run in its own process, and launching viewers.

The trainer (``python -m tests.redis_helpers ...``) publishes updates whose parameters all equal the
update's iteration, prints one JSON line with what it measured, then (with ``--hold``) keeps its
``Plotter`` open until its stdin closes, like a trainer still running.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_sigint() -> None:
    """``preexec_fn``: the tests stop trainers and viewers with SIGINT, which a child inherits
    ignored when the tests run with SIGINT ignored (``make test &``, ``nohup``)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def child_env(**extra: str) -> Dict[str, str]:
    """The environment for trainer and viewer processes: ``tests`` importable (the viewer's worker
    rebuilds ``tests.policies`` classes), quiet TensorFlow, no display."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("DISPLAY", None)
    env.update(extra)
    return env


def start_trainer(url: str, experiment: str, log_path: str, *args: str,
                  **env: str) -> subprocess.Popen:
    """Start the trainer below: its stdout (one JSON line) is a pipe, its stderr ``log_path``."""
    return subprocess.Popen([sys.executable, "-m", "tests.redis_helpers", url, experiment, *args],
                            cwd=ROOT,
                            env=child_env(**env),
                            stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE,
                            stderr=open(log_path, "ab"),
                            text=True,
                            preexec_fn=default_sigint)


def start_viewer(url: str, experiment: str, log_path: str, *args: str,
                 **env: str) -> subprocess.Popen:
    """Start ``async-plotter view``; its output goes to ``log_path``."""
    log = open(log_path, "ab")
    return subprocess.Popen(viewer_command() + ["view", url, "--experiment", experiment, *args],
                            cwd=ROOT,
                            env=child_env(**env),
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            preexec_fn=default_sigint)


def viewer_command() -> List[str]:
    """The installed ``async-plotter`` console script, or the module if it is not installed."""
    script = os.path.join(os.path.dirname(sys.executable), "async-plotter")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "async_plotter.cli"]


def read_log(path: str) -> str:
    """Everything a process wrote to its log so far."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


def applied_updates(log: str) -> List[int]:
    """The update numbers a viewer's log says it applied, in order."""
    numbers = []
    for line in log.splitlines():
        marker = " applied update "
        if marker in line:
            numbers.append(int(line.split(marker, 1)[1].split()[0]))
    return numbers


def _make_policy(env_id: str, extra: int, keras_model: bool):
    import gymnasium

    env = gymnasium.make(env_id)
    obs_dim = env.observation_space.shape[0]
    act_dim = env.action_space.shape[0] if env.action_space.shape else env.action_space.n
    env.close()
    if keras_model:
        import keras

        model = keras.Sequential([
            keras.Input((obs_dim, )),
            keras.layers.Dense(8, activation="tanh"),
            keras.layers.Dense(act_dim, activation="tanh")
        ])
        return model, lambda value: model.set_weights([w * 0 + value for w in model.get_weights()])
    from tests.policies import LinearPolicy

    policy = LinearPolicy(obs_dim, act_dim, extra=extra)
    return policy, policy.fill


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("experiment")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--count", type=int, default=10, help="updates to publish")
    parser.add_argument("--interval", type=float, default=0.0, help="seconds between updates")
    parser.add_argument("--extra", type=int, default=0, help="padding parameters")
    parser.add_argument("--keras", action="store_true", help="a Keras model instead")
    parser.add_argument("--hold", action="store_true", help="stay open until stdin closes")
    args = parser.parse_args(argv)

    from async_plotter import Plotter

    policy, fill = _make_policy(args.env, args.extra, args.keras)
    durations = []
    plotter = Plotter(args.env,
                      policy,
                      max_path_length=5,
                      fps=1000,
                      channel=args.url,
                      experiment=args.experiment).start()
    for iteration in range(args.count):
        fill(float(iteration))
        started = time.perf_counter()
        plotter.update_plot(policy, iteration=iteration, metrics={"AverageReturn": iteration})
        durations.append(time.perf_counter() - started)
        if args.interval:
            time.sleep(args.interval)
    stats = plotter.stats
    print(json.dumps({
        "count": args.count,
        "median_update_plot_s": sorted(durations)[len(durations) // 2],
        "worst_update_plot_s": max(durations),
        "stats": stats
    }),
          flush=True)
    if args.hold:
        sys.stdin.read()
    plotter.close()


if __name__ == "__main__":
    main()
