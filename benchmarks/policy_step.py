"""CPU per policy step in the worker: each policy form called eagerly, through the compiled path
(``async_plotter.policy.compiled_call``: one traced function per observation shape, XLA where it
compiles), and as the worker calls it (rebuilt from its recipe, as ``PolicyRuntime`` does), side
by side in one process with the worker's own thread limits.

    .venv/bin/python benchmarks/policy_step.py [--steps 3000]

Forms: a Keras Sequential and a functional 17-64-64-6 MLP (HalfCheetah's sizes), and the
Sequential one with its input normalized and each hidden layer layer-normalized, the functional
MLP with its input joined to the last layer's (a skip connection), and a residual one (two
blocks of ``x + Dense(relu(Dense(LayerNormalization(x))))``), and one with ``keras.ops`` of its
own (``leaky_relu(x, 0.1)`` after each hidden layer, the actions scaled by an array), which the
worker calls as their
numpy copy (``policy/numpy_copy.py``), a ``tf.Module`` of the same shape (compiled in the
worker), and the RL host's ``GaussianMLPPolicy`` (64, 64), whose ``get_action`` calls its own
concrete function (its "eager" column) and which the worker calls as its numpy copy
(``rl/numpy_mlp.py``). Goal (issue 21): compiled <= 0.3 ms a step for the 2x64 MLP and >= 10x
below eager Keras. Prints a table; writes benchmarks/results/policy_step.json.
"""
import argparse
import json
import os
import sys
import time

# The rollout process's limits (worker/rollout_process.py), set before TensorFlow starts.
os.environ.update({
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "CUDA_VISIBLE_DEVICES": "",
})
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from benchmarks.machine import machine_facts  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
OBS, ACT, HIDDEN = 17, 6, 64


def cpu_ms_per_call(call, observation, steps):
    call(observation)  # traced or compiled here, not timed
    started = time.process_time()
    for _ in range(steps):
        call(observation)
    return 1000.0 * (time.process_time() - started) / steps


def forms():
    import keras
    import tensorflow as tf

    from async_plotter.rl.policies import GaussianMLPPolicy

    sequential = keras.Sequential([
        keras.Input((OBS, )),
        keras.layers.Dense(HIDDEN, activation="tanh"),
        keras.layers.Dense(HIDDEN, activation="tanh"),
        keras.layers.Dense(ACT)
    ])
    normalized = keras.Sequential([
        keras.Input((OBS, )),
        keras.layers.Normalization(mean=np.zeros(OBS), variance=np.ones(OBS)),
        keras.layers.Dense(HIDDEN),
        keras.layers.LayerNormalization(),
        keras.layers.Activation("tanh"),
        keras.layers.Dense(HIDDEN),
        keras.layers.LayerNormalization(),
        keras.layers.Activation("tanh"),
        keras.layers.Dense(ACT)
    ])
    inputs = keras.Input((OBS, ))
    hidden = keras.layers.Dense(HIDDEN, activation="tanh")(inputs)
    hidden = keras.layers.Dense(HIDDEN, activation="tanh")(hidden)
    functional = keras.Model(inputs, keras.layers.Dense(ACT)(hidden))
    joined = keras.layers.Concatenate()([inputs, hidden])
    skip = keras.Model(inputs, keras.layers.Dense(ACT)(joined))
    residual = keras.layers.Dense(HIDDEN)(inputs)
    for _ in range(2):
        block = keras.layers.LayerNormalization()(residual)
        block = keras.layers.Dense(HIDDEN, activation="relu")(block)
        residual = keras.layers.Add()([residual, keras.layers.Dense(HIDDEN)(block)])
    residual = keras.Model(inputs, keras.layers.Dense(ACT)(residual))
    leaky = keras.ops.leaky_relu(keras.layers.Dense(HIDDEN)(inputs), 0.1)
    leaky = keras.ops.leaky_relu(keras.layers.Dense(HIDDEN)(leaky), 0.1)
    scale = np.linspace(0.5, 1.0, ACT).astype(np.float32)
    with_ops = keras.Model(inputs, keras.ops.tanh(keras.layers.Dense(ACT)(leaky)) * scale)

    class MLPModule(tf.Module):

        def __init__(self):
            super().__init__()
            sizes = (OBS, HIDDEN, HIDDEN, ACT)
            self.weights = [
                tf.Variable(tf.random.normal((a, b), stddev=0.1)) for a, b in zip(sizes, sizes[1:])
            ]

        def __call__(self, observations):
            hidden = observations
            for weight in self.weights[:-1]:
                hidden = tf.tanh(tf.matmul(hidden, weight))
            return tf.matmul(hidden, self.weights[-1])

    gaussian = GaussianMLPPolicy(obs_dim=OBS, action_dim=ACT, hidden_sizes=(HIDDEN, HIDDEN))
    return [("Keras Sequential", sequential), ("Keras functional", functional),
            ("Keras Sequential, normalized", normalized),
            ("Keras functional, skip connection", skip),
            ("Keras functional, residual blocks", residual),
            ("Keras functional, keras.ops with arguments", with_ops), ("tf.Module", MLPModule()),
            ("rl GaussianMLPPolicy", gaussian)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--out", default=os.path.join(RESULTS, "policy_step.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()

    from async_plotter.policy.adapters import adapter_for
    from async_plotter.policy.recipe import PolicyRuntime, describe_policy

    observation = np.random.default_rng(0).normal(size=OBS).astype(np.float32)
    rows = []
    for name, policy in forms():
        adapter = adapter_for(policy)
        # What the worker acts with: rebuilt from the recipe, given the trainer's parameters.
        worker = PolicyRuntime(describe_policy(policy, adapter), deterministic=True)
        worker.set_params(adapter.flat(policy))
        worker_ms = cpu_ms_per_call(worker.act, observation, args.steps)
        compiled = None
        if adapter.kind != "protocol":  # the RL host's get_action is its own compiled call
            compiled = cpu_ms_per_call(lambda o: adapter.act(policy, o, True), observation,
                                       args.steps)
        eager_steps = max(args.steps // 10, 100)
        eager = cpu_ms_per_call(lambda o: adapter.reference_act(policy, o, True), observation,
                                eager_steps)
        rows.append(
            dict(policy=name,
                 kind=adapter.kind,
                 worker_path=worker.call_path,
                 eager_ms=round(eager, 4),
                 compiled_ms=None if compiled is None else round(compiled, 4),
                 worker_ms=round(worker_ms, 4),
                 eager_over_worker=round(eager / worker_ms, 2),
                 compiled_over_worker=None if compiled is None else round(compiled / worker_ms, 2)))
        print(f"  measured {name}", flush=True)
    keras_eager = next(r["eager_ms"] for r in rows if r["policy"] == "Keras Sequential")
    print(f"\nCPU per policy step, {OBS}-{HIDDEN}-{HIDDEN}-{ACT} MLP, one observation, "
          f"{args.steps} steps (eager: {max(args.steps // 10, 100)}); worker thread limits")
    print("| policy | worker path | eager ms | compiled ms | worker ms | eager / worker | "
          "compiled / worker | eager Keras / worker |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        row["eager_keras_over_worker"] = round(keras_eager / row["worker_ms"], 1)
        compiled = "-" if row["compiled_ms"] is None else f"{row['compiled_ms']:.3f}"
        ratio = "-" if row["compiled_over_worker"] is None else f"{row['compiled_over_worker']:.1f}x"
        print(f"| {row['policy']} | {row['worker_path']} | {row['eager_ms']:.3f} | {compiled} | "
              f"{row['worker_ms']:.3f} | {row['eager_over_worker']:.1f}x | {ratio} | "
              f"{row['eager_keras_over_worker']:.1f}x |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump(
            {
                "rows": rows,
                "steps": args.steps,
                "machine": machine_facts(load_before, os.getloadavg())
            },
            out,
            indent=2)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
