"""Vanilla policy gradient on InvertedPendulum-v5 (continuous actions, Adam).

    python examples/vpg_inverted_pendulum.py              # 100 iterations, watched while it trains
    python examples/vpg_inverted_pendulum.py --no-plot    # training only

A young policy drops the pole within a few steps; its videos chain several episodes so that each
lasts a few seconds (``min_video_seconds``).
"""
import sys

from async_plotter.rl.example_cli import example_parser, run_example

ENV_ID = "InvertedPendulum-v5"


def main() -> int:
    args = example_parser(__doc__, n_itr=100, batch_size=5000).parse_args()
    # After the flags: --help answers without loading TensorFlow.
    from async_plotter.rl import VPG, GaussianMLPPolicy, LinearFeatureBaseline

    def make_algo():
        policy = GaussianMLPPolicy(ENV_ID, hidden_sizes=(32, 32))
        return VPG(ENV_ID,
                   policy,
                   LinearFeatureBaseline(),
                   batch_size=args.batch_size,
                   max_path_length=1000,
                   n_itr=args.n_itr,
                   discount=0.99,
                   gae_lambda=0.97,
                   learning_rate=0.01)

    return run_example(make_algo, args)


if __name__ == "__main__":
    sys.exit(main())
