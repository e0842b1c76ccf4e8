"""TRPO on CartPole-v1 (discrete actions); the return reaches the maximum, 500, in ~20-40 iterations.

    python examples/trpo_cartpole.py                 # 100 iterations, watched while it trains
    python examples/trpo_cartpole.py --no-plot --n-itr 30

CartPole draws itself in software, so plotting works on any machine; videos land in
``runs/<exp-name>/videos``.
"""
import sys

from async_plotter.rl.example_cli import example_parser, run_example

ENV_ID = "CartPole-v1"


def main() -> int:
    args = example_parser(__doc__, n_itr=100, batch_size=4000).parse_args()
    # After the flags: --help answers without loading TensorFlow.
    from async_plotter.rl import TRPO, CategoricalMLPPolicy, LinearFeatureBaseline

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

    return run_example(make_algo, args)


if __name__ == "__main__":
    sys.exit(main())
