"""Publish-to-applied latency through Redis on loopback: our channel against the old way.

For 1e4, 1e6 and 1e7 float32 parameters, one trainer process publishes and one consumer process
per method applies the parameters (copies them into its policy's buffer), and reports the moment
it did. Two methods, interleaved round by round so that machine drift hits both alike:

* ``ours``: ``RedisWriter.publish`` (newest-wins slot, background sender, HMAC-SHA256 signed raw
  floats, ``SET`` + ``PUBLISH``) to a ``RedisReader`` (subscribed: wakes on the notification,
  fetches, verifies).
* ``baseline``: the way an earlier trainer did it: a pickled dict of arrays written with ``SET``
  and announced with ``PUBLISH`` from the training thread; the subscriber checks for a message,
  and sleeps 1 s between checks.

Each round publishes once, at a random moment (uniform over one second) after the previous update
was applied, so the baseline's sleep phase is sampled fairly. Latency is measured on the shared
monotonic clock of the two processes. Also reported: what publishing costs the trainer per update
(the wall time of the call in the training thread, and for ours the sender thread's CPU time).

    python benchmarks/redis_latency.py [--quick] [--rounds N] [--url redis://...]

Starts a private redis-server unless ``--url`` is given. Writes
benchmarks/results/redis_latency.json.
"""
import argparse
import json
import os
import pickle
import random
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.machine import machine_facts  # noqa: E402
from async_plotter.channel.redis.writer import RedisWriter  # noqa: E402
from async_plotter.channel.redis.reader import RedisReader  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results")
SECRET = b"benchmark secret, 32 bytes long!"
SIZES = (10_000, 1_000_000, 10_000_000)
BASELINE_POLL_SLEEP = 1.0
ROUND_TIMEOUT = 10.0

# --------------------------------------------------------------------------- consumers


def consume_ours(url, experiment, expected, size, report):
    """Worker end of our channel: apply each update the reader hands over, report when."""
    reader = RedisReader(url, experiment, SECRET, False, expected)
    policy = np.zeros(size, np.float32)
    report.send("ready")
    while True:
        update = reader.wait(timeout=None)
        np.copyto(policy, update.params)  # "applied"
        report.send((update.number, time.monotonic()))


def consume_baseline(url, experiment, size, report):
    """The old subscriber: a message check, then a 1 s sleep, forever."""
    import redis

    client = redis.Redis.from_url(url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(f"baseline:{experiment}:new_policy")
    policy = {}
    report.send("ready")
    while True:
        message = pubsub.get_message()
        if message is not None:
            arrays = pickle.loads(client.get(f"baseline:{experiment}:policy"))
            for name, array in arrays.items():
                policy[name] = np.array(array, copy=True)  # "applied"
            report.send((int(message["data"]), time.monotonic()))
        time.sleep(BASELINE_POLL_SLEEP)


# ---------------------------------------------------------------------------- trainers


class Ours:
    """Trainer side of our channel."""

    name = "ours"

    def __init__(self, url, size, context):
        from async_plotter.env.recipe import describe_env
        from async_plotter.policy.recipe import PolicyRecipe
        from async_plotter.worker.config import WorkerConfig
        from async_plotter.worker.parameters import ParameterLayout

        config = WorkerConfig(env=describe_env("CartPole-v1"),
                              policy=PolicyRecipe("protocol", b"unused", False, "benchmark"),
                              max_path_length=5,
                              fps=30,
                              deterministic=False,
                              quality="auto",
                              priority="normal",
                              frame_size=None,
                              mujoco_gl="egl",
                              seed=None,
                              parameters=ParameterLayout(size, np.dtype(np.float32)))
        self.stats = {}
        experiment = f"bench-{size}"
        self.writer = RedisWriter(url, experiment, config, size, np.float32, SECRET, self.stats)
        expected = self.writer.expected
        self.report, child_end = context.Pipe(duplex=False)
        self.process = context.Process(target=consume_ours,
                                       args=(url, experiment, expected, size, child_end),
                                       daemon=True)

    def publish(self, params, number):
        self.writer.publish(params, number, 5, number=number)

    def close(self):
        self.writer.close()


class Baseline:
    """Trainer side of the old way: pickle a dict of arrays, SET, PUBLISH, in the caller."""

    name = "baseline"

    def __init__(self, url, size, context):
        import redis

        self.client = redis.Redis.from_url(url)
        self.experiment = f"bench-{size}"
        self.report, child_end = context.Pipe(duplex=False)
        self.process = context.Process(target=consume_baseline,
                                       args=(url, self.experiment, size, child_end),
                                       daemon=True)

    def publish(self, params, number):
        # Four "layers", as a policy's get_param_values dict would hold them.
        arrays = {f"layer{i}": piece for i, piece in enumerate(np.array_split(params, 4))}
        self.client.set(f"baseline:{self.experiment}:policy", pickle.dumps(arrays))
        self.client.publish(f"baseline:{self.experiment}:new_policy", str(number))

    def close(self):
        self.client.close()


# ------------------------------------------------------------------------------ measuring


def measure(url, size, rounds, rng):
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    methods = [Ours(url, size, context), Baseline(url, size, context)]
    for method in methods:
        method.process.start()
        assert method.report.recv() == "ready"
    params = np.random.default_rng(0).standard_normal(size).astype(np.float32)
    results = {method.name: {"latency_s": [], "publish_call_s": []} for method in methods}
    try:
        for method in methods:  # warm-up: connections, first allocations
            _one_round(method, params, 0, 0.0)
        for number in range(1, rounds + 1):
            gap = rng.uniform(0.0, 1.0)
            for method in methods:
                latency, call = _one_round(method, params, number, gap)
                results[method.name]["latency_s"].append(latency)
                results[method.name]["publish_call_s"].append(call)
        ours = methods[0]
        published = max(ours.stats["published"], 1)
        results["ours"]["sender_cpu_per_update_s"] = ours.stats["publish_cpu_seconds"] / published
    finally:
        for method in methods:
            method.process.terminate()
            method.process.join(5)
            method.close()
    return results


def _one_round(method, params, number, gap):
    time.sleep(gap)
    started = time.monotonic()
    method.publish(params, number)
    call = time.monotonic() - started
    deadline = started + ROUND_TIMEOUT
    while True:
        if not method.report.poll(max(deadline - time.monotonic(), 0)):
            raise RuntimeError(f"{method.name}: update {number} was not applied within "
                               f"{ROUND_TIMEOUT} s")
        applied_number, applied_at = method.report.recv()
        if applied_number == number:
            return applied_at - started, call


def _median_ms(values):
    return 1e3 * statistics.median(values)


def _p90_ms(values):
    return 1e3 * float(np.percentile(values, 90))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds per size")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per size (default 15)")
    parser.add_argument("--url", help="an existing Redis server (default: start a private one)")
    args = parser.parse_args()
    rounds = 3 if args.quick else args.rounds
    server = None
    url = args.url
    if url is None:
        from tests.redis_server import MISSING_MESSAGE, RedisServer, find_redis_server

        executable = find_redis_server()
        if executable is None:
            sys.exit(MISSING_MESSAGE)
        server = RedisServer(executable).start()
        url = server.url
    rng = random.Random(0)
    import redis.connection

    # redis-py uses hiredis (C) when it is installed, for parsing replies and packing commands;
    # the result says which parser ran (the package leaves it out: measured slower overall).
    parser = "hiredis" if "Hiredis" in redis.connection.DefaultParser.__name__ else "python"
    load_before = os.getloadavg()
    results = {}
    try:
        for size in SIZES:
            print(f"measuring {size:.0e} parameters, {rounds} rounds ...", flush=True)
            results[size] = measure(url, size, rounds, rng)
    finally:
        if server is not None:
            server.stop()
    load_after = os.getloadavg()
    rows = []
    print()
    print(f"publish-to-applied latency on loopback, median (p90) over {rounds} rounds; speedup of "
          "medians (of means); trainer-side cost per update")
    header = (f"{'params':>8}  {'ours ms':>16}  {'baseline ms':>18}  {'speedup':>14}  "
              f"{'ours publish()':>14}  {'ours sender CPU':>15}  {'baseline publish':>16}")
    print(header)
    print("-" * len(header))
    for size, result in results.items():
        ours, base = result["ours"], result["baseline"]
        ours_ms, base_ms = _median_ms(ours["latency_s"]), _median_ms(base["latency_s"])
        row = {
            "params": size,
            "ours_latency_ms_median": ours_ms,
            "ours_latency_ms_p90": _p90_ms(ours["latency_s"]),
            "baseline_latency_ms_median": base_ms,
            "baseline_latency_ms_p90": _p90_ms(base["latency_s"]),
            "ours_latency_ms_min": 1e3 * min(ours["latency_s"]),
            "baseline_latency_ms_min": 1e3 * min(base["latency_s"]),
            "speedup_median": base_ms / ours_ms,
            # The baseline's latency is about uniform over its 1 s sleep: its mean is steadier
            # than its median over a few rounds.
            "speedup_mean": statistics.mean(base["latency_s"]) / statistics.mean(ours["latency_s"]),
            "ours_publish_call_ms_median": _median_ms(ours["publish_call_s"]),
            "ours_sender_cpu_ms_per_update": 1e3 * ours["sender_cpu_per_update_s"],
            "baseline_publish_call_ms_median": _median_ms(base["publish_call_s"]),
            "raw": {
                name: {
                    "latency_s": result[name]["latency_s"],
                    "publish_call_s": result[name]["publish_call_s"]
                }
                for name in ("ours", "baseline")
            },
        }
        rows.append(row)
        print(f"{size:>8.0e}  {ours_ms:>8.1f} ({row['ours_latency_ms_p90']:>5.1f})  "
              f"{base_ms:>9.1f} ({row['baseline_latency_ms_p90']:>6.1f})  "
              f"{row['speedup_median']:>5.0f}x ({row['speedup_mean']:>4.0f}x)  "
              f"{row['ours_publish_call_ms_median']:>11.2f} ms  "
              f"{row['ours_sender_cpu_ms_per_update']:>12.1f} ms  "
              f"{row['baseline_publish_call_ms_median']:>13.1f} ms")
    million = next(row for row in rows if row["params"] == 1_000_000)
    goal_latency = million["ours_latency_ms_median"] < 20
    goal_speedup = million["speedup_median"] >= 10
    print()
    print(f"goal, 1e6 params: latency < 20 ms: {'met' if goal_latency else 'MISSED'} "
          f"({million['ours_latency_ms_median']:.1f} ms); >= 10x the baseline: "
          f"{'met' if goal_speedup else 'MISSED'} ({million['speedup_median']:.0f}x)")
    print(f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} "
          f"({os.cpu_count()} CPUs); redis-py reply parser: {parser}")
    if max(load_before[0], load_after[0]) > os.cpu_count():
        print("warning: the machine was busy with other work (load average above its CPU "
              "count); latencies include waiting for a CPU. Rerun on a quiet machine.")
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "redis_latency.json")
    with open(path, "w") as handle:
        json.dump(
            {
                "machine": machine_facts(load_before, load_after),
                "rounds": rounds,
                "reply_parser": parser,
                "baseline_poll_sleep_s": BASELINE_POLL_SLEEP,
                "goal_1e6_latency_under_20ms": goal_latency,
                "goal_1e6_speedup_at_least_10x": goal_speedup,
                "results": rows,
            },
            handle,
            indent=1)
    print(f"wrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
