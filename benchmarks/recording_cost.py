"""CPU per history recording: one whole deterministic episode rolled out and written, as the
rollout process's history thread does it (``worker/history.py``), this checkout against another.

Each round runs, per env and per checkout, a fresh process that rolls out the RL host's
``GaussianMLPPolicy`` (32, 32) through its numpy copy from one start state, ``--episodes``
times, each a 500-step episode read state by state (``mjSTATE_FULLPHYSICS``) and written as
a recording file; it reports the CPU per recording. The checkouts alternate which goes first;
medians over ``--rounds``. Without ``--before-tree`` only this checkout is measured.

    python benchmarks/recording_cost.py --before-tree /path/to/old/checkout [--rounds 3]

Takes ~1 minute on 2 cores. Writes ``benchmarks/results/recording_cost.json``.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(HERE, "benchmarks", "results")
os.environ.update({"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""})


def child(env_id: str, episodes: int, folder: str) -> None:
    """In a process whose ``sys.path`` starts at the measured checkout: print CPU-ms a
    recording."""
    import gymnasium

    from async_plotter.env.recipe import build_env, describe_env
    from async_plotter.env.state import EnvStateLayout, WorkerEnvState
    from async_plotter.env.stepper import EnvStepper
    from async_plotter.policy.adapters import acting_copy, adapter_for
    from async_plotter.policy.recipe import PolicyRuntime, describe_policy
    from async_plotter.render.recording import (RecordingBuilder, model_to_mjb, write_recording)
    from async_plotter.rl.policies import GaussianMLPPolicy
    from async_plotter.worker.history import _States

    trained = GaussianMLPPolicy(env_id, seed=0)
    acting = acting_copy(trained)
    runtime = PolicyRuntime(describe_policy(acting, adapter_for(acting), None), True)
    runtime.set_params(trained.get_param_values())
    env = build_env(describe_env(gymnasium.make(env_id)), render_mode=None)
    stepper = EnvStepper(env, WorkerEnvState(env, EnvStateLayout(), env_id))
    states, model_mjb = _States(env), model_to_mjb(env.unwrapped.model)

    def record(number: int) -> None:
        observation = stepper.reset(0)
        builder = RecordingBuilder(model_mjb, {"iteration": number})
        builder.add(states.read(), None, 0.0, 0)
        for _ in range(500):
            step = stepper.step(runtime.act(observation))
            observation = step.observation
            builder.add(states.read(), step.action, step.reward, 0)
            if step.ended:
                break
        write_recording(os.path.join(folder, f"iter_{number % 4:04d}.npz"), builder.build())

    record(0)  # warm-up: the first write, the policy's first call
    started = time.process_time()
    for number in range(episodes):
        record(number)
    print(json.dumps({"cpu_ms": 1000 * (time.process_time() - started) / episodes}))


def measure(tree: str, env_id: str, episodes: int) -> float:
    from benchmarks.machine import child_in_scratch_folder

    return child_in_scratch_folder(__file__, env_id, tree, ["--episodes", str(episodes)])["cpu_ms"]


def main() -> None:
    sys.path.insert(0, HERE)
    from benchmarks.machine import checkouts_parser, child_or_side_by_side, write_results

    parser = checkouts_parser(__doc__, "--envs", ("Swimmer-v5", "HalfCheetah-v5", "Hopper-v5"), 3,
                              os.path.join(RESULTS, "recording_cost.json"))
    parser.add_argument("--episodes", type=int, default=12)
    args = parser.parse_args()
    ran = child_or_side_by_side(args, HERE, args.envs.split(","),
                                lambda tree, env_id: measure(tree, env_id, args.episodes),
                                lambda: child(args.child, args.episodes, args.folder))
    if ran is None:
        return
    import numpy as np

    trees, load_before, runs = ran
    summary = {}
    print("| env | " + " | ".join(f"{name}: CPU / recording" for name in trees) +
          (" | now / before |" if len(trees) == 2 else " |"))
    print("| --- |" + " ---: |" * (len(trees) + (len(trees) == 2)))
    for env_id, by_tree in runs.items():
        medians = {name: float(np.median(values)) for name, values in by_tree.items()}
        summary[env_id] = dict(medians, runs=by_tree)
        row = " | ".join(f"{medians[name]:.1f} ms" for name in trees)
        if len(trees) == 2:
            summary[env_id]["ratio"] = medians["now"] / medians["before"]
            row += f" | {summary[env_id]['ratio']:.2f}x"
        print(f"| {env_id} | {row} |")
    write_results(args.out, args, load_before, trees=trees, results=summary)


if __name__ == "__main__":
    main()
