"""TRPO on Swimmer-v5, watched while it trains (videos on a headless machine, a window on a desktop).

    python examples/trpo_swimmer.py                      # 100 iterations, 2 sampling processes
    python examples/trpo_swimmer.py --no-plot --n-itr 20
    python examples/trpo_swimmer.py --plot-budget 0.1    # more videos, at most 10% of the CPU

The plot worker rebuilds the environment and the policy in its own processes and gets only the
flat parameter vector after each iteration; it takes at most its CPU budget from training.
"""
import sys

from async_plotter.rl.example_cli import example_parser, run_example

ENV_ID = "Swimmer-v5"


def main() -> int:
    args = example_parser(__doc__, n_itr=100, batch_size=5000).parse_args()
    # After the flags: --help answers without loading TensorFlow.
    from async_plotter.rl import TRPO, GaussianMLPPolicy, LinearFeatureBaseline

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

    return run_example(make_algo, args)


if __name__ == "__main__":
    sys.exit(main())
