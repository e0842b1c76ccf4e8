"""TRPO on Swimmer-v5, watched while it trains (videos on a headless machine, a window on a desktop).

    python examples/trpo_swimmer.py                      # 100 iterations, 2 sampling processes
    python examples/trpo_swimmer.py --no-plot --n-itr 20

The plot worker rebuilds the environment and the policy in its own processes and gets only the
flat parameter vector after each iteration, so plotting does not slow the training loop down.
"""
import argparse
import sys

from async_plotter.rl import TRPO, GaussianMLPPolicy, LinearFeatureBaseline, run_experiment_lite

ENV_ID = "Swimmer-v5"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plot",
                        action=argparse.BooleanOptionalAction,
                        default=True,
                        help="watch the policy while it trains (default: on)")
    parser.add_argument("--n-parallel", type=int, default=2, help="sampling processes")
    parser.add_argument("--n-itr", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=5000, help="env steps per iteration")
    parser.add_argument("--exp-name", default=None, help="run folder name under runs/")
    parser.add_argument("--plot-priority",
                        choices=("idle", "low", "normal"),
                        default=None,
                        help="CPU priority of the plot worker (default: the library's, idle); "
                        "low shows more frames at some cost to training")
    parser.add_argument("--plot-path-length",
                        type=int,
                        default=None,
                        help="steps per plotted rollout (default: the training's 500); shorter "
                        "rollouts give more frequent videos")
    parser.add_argument("--http",
                        default=None,
                        help="also serve a live page: a port (8080) or host:port")
    args = parser.parse_args()

    def make_algo():
        policy = GaussianMLPPolicy(ENV_ID, hidden_sizes=(32, 32))
        return TRPO(ENV_ID,
                    policy,
                    LinearFeatureBaseline(),
                    batch_size=args.batch_size,
                    max_path_length=500,
                    n_itr=args.n_itr,
                    discount=0.995,
                    gae_lambda=0.97,
                    step_size=0.01)

    try:
        result = run_experiment_lite(make_algo,
                                     n_parallel=args.n_parallel,
                                     plot=args.plot,
                                     seed=args.seed,
                                     exp_name=args.exp_name,
                                     **_plot_options(args))
    except KeyboardInterrupt:
        print("interrupted; workers and plotter were shut down", file=sys.stderr)
        sys.exit(130)
    print(f"\nprogress:       {result.progress_csv}")
    print(f"learning curve: {result.learning_curve}")
    print(f"snapshot:       {result.log_dir}/params.pkl")
    if result.video_dir:
        print(f"videos:         {result.video_dir}")


def _plot_options(args: argparse.Namespace) -> dict:
    if not args.plot:
        return {}
    options = {
        "http": args.http,
        "priority": args.plot_priority,
        "max_path_length": args.plot_path_length
    }
    return {name: value for name, value in options.items() if value is not None}


if __name__ == "__main__":
    main()
