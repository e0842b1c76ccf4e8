"""TRPO on CartPole-v1 (discrete actions); the return reaches the maximum, 500, in ~20-40 iterations.

    python examples/trpo_cartpole.py                 # 100 iterations, no plotting
    python examples/trpo_cartpole.py --plot --n-itr 30

With ``--plot`` the policy is watched while it trains (CartPole draws itself in software, so this
works on any machine); videos land in ``runs/<exp-name>/videos``.
"""
import argparse
import sys

from async_plotter.rl import (TRPO, CategoricalMLPPolicy, LinearFeatureBaseline,
                              run_experiment_lite)

ENV_ID = "CartPole-v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plot",
                        action=argparse.BooleanOptionalAction,
                        default=False,
                        help="watch the policy while it trains (default: off)")
    parser.add_argument("--n-parallel", type=int, default=2, help="sampling processes")
    parser.add_argument("--n-itr", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4000, help="env steps per iteration")
    parser.add_argument("--exp-name", default=None, help="run folder name under runs/")
    parser.add_argument("--http",
                        default=None,
                        help="also serve a live page: a port (8080) or host:port")
    args = parser.parse_args()

    def make_algo():
        policy = CategoricalMLPPolicy(ENV_ID, hidden_sizes=(32, 32))
        return TRPO(ENV_ID,
                    policy,
                    LinearFeatureBaseline(),
                    batch_size=args.batch_size,
                    max_path_length=500,
                    n_itr=args.n_itr,
                    discount=0.99,
                    gae_lambda=0.97,
                    step_size=0.01)

    try:
        result = run_experiment_lite(make_algo,
                                     n_parallel=args.n_parallel,
                                     plot=args.plot,
                                     seed=args.seed,
                                     exp_name=args.exp_name,
                                     **({"http": args.http} if args.plot and args.http else {}))
    except KeyboardInterrupt:
        print("interrupted; workers and plotter were shut down", file=sys.stderr)
        sys.exit(130)
    print(f"\nprogress:       {result.progress_csv}")
    print(f"learning curve: {result.learning_curve}")
    print(f"snapshot:       {result.log_dir}/params.pkl")
    if result.video_dir:
        print(f"videos:         {result.video_dir}")


if __name__ == "__main__":
    main()
