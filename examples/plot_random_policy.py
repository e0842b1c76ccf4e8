"""Watch a Keras policy whose weights change every "iteration", while the loop keeps going.

No RL here: each iteration nudges the network with a gradient step on random targets (a stand-in
for training, with real TensorFlow work), then hands the new weights to the plotter. The loop never
waits for the renderer; videos appear in the output directory as the worker gets to them.

    python examples/plot_random_policy.py --iterations 20 --out runs/random_policy
    python examples/plot_random_policy.py --plot-budget 0.2 --http 8080

The plotting flags are the training examples' own (``async_plotter.rl.example_cli``).
"""
import argparse
import logging
import os
import time

import numpy as np

from async_plotter.rl.example_cli import add_plot_arguments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Swimmer-v5")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--out", default="runs/random_policy")
    add_plot_arguments(parser)
    parser.set_defaults(plot_path_length=150)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    import gymnasium
    import keras
    import tensorflow as tf

    from async_plotter import Plotter
    from async_plotter.rl.example_cli import plot_options

    env = gymnasium.make(args.env)
    obs_dim = env.observation_space.shape[0]
    act_dim = env.action_space.shape[0]
    policy = keras.Sequential([
        keras.Input((obs_dim, )),
        keras.layers.Dense(64, activation="tanh"),
        keras.layers.Dense(64, activation="tanh"),
        keras.layers.Dense(act_dim, activation="tanh"),
    ])
    optimizer = keras.optimizers.Adam(1e-2)
    video_dir = os.path.join(args.out, "videos")
    options = plot_options(args)
    if not options.pop("plot"):
        logging.info("--no-plot: nothing to show; this example only plots")
        return
    with Plotter(args.env, policy, video_dir=video_dir, **options) as plotter:
        for iteration in range(args.iterations):
            started = time.perf_counter()
            observations = np.random.randn(256, obs_dim).astype(np.float32)
            targets = np.random.uniform(-1, 1, (256, act_dim)).astype(np.float32)
            for _ in range(20):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean((policy(observations) - targets)**2)
                grads = tape.gradient(loss, policy.trainable_variables)
                optimizer.apply_gradients(zip(grads, policy.trainable_variables))
            plotter.update_plot(policy, iteration=iteration, metrics={"Loss": float(loss)})
            stats = plotter.stats
            logging.info("iteration %d/%d  loss %.3f  %.2f s  worker: applied %d, videos %d",
                         iteration + 1, args.iterations, float(loss),
                         time.perf_counter() - started, stats["updates_applied"], stats["videos"])
            time.sleep(0.5)  # a real training iteration takes a while; give the worker a chance
    logging.info("done: %d videos in %s", plotter.stats["videos"], os.path.abspath(video_dir))


if __name__ == "__main__":
    main()
