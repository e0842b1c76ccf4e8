"""What the plot worker's two processes hold in memory once its first video exists, and the CPU
its render process took to get there, this checkout against another in the same rounds.

Each run is a fresh trainer process: a real ``Plotter(env, LinearPolicy, video_dir=...)`` at the
defaults (software GL here: the cheap preset), one update, and once the first video is reported,
each worker process's memory read from /proc through psutil: USS (the pages only it holds: what
it alone adds to the machine), PSS and RSS; and the render process's CPU so far (its imports, the
GL context, the first video). Medians over ``--rounds``, checkouts taking turns at going first.

    python benchmarks/worker_memory.py --before-tree /path/to/old/checkout [--rounds 3]

Takes ~1.5 minutes on 2 cores. Writes ``benchmarks/results/worker_memory.json``.
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(HERE, "benchmarks", "results")
ENVS = ("Swimmer-v5", "HalfCheetah-v5", "Hopper-v5")
MB = 1e6


def child(env_id: str, folder: str) -> None:
    """In a process whose ``sys.path`` starts at the measured checkout: print one run's JSON."""
    import gymnasium
    import psutil

    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    spaces = gymnasium.make(env_id)
    policy = LinearPolicy(spaces.observation_space.shape[0], spaces.action_space.shape[0])
    spaces.close()
    plotter = Plotter(env_id, policy, max_path_length=200, video_dir=folder, seed=0).start()
    try:
        policy.fill(0.1)
        plotter.update_plot(policy, iteration=0)
        deadline = time.monotonic() + 120
        while not plotter.stats["video_log"]:
            if time.monotonic() > deadline:
                raise TimeoutError("no first video within 120 s")
            time.sleep(0.05)
        found = {}
        for role, pid in plotter.stats["worker_pids"].items():
            process = psutil.Process(pid)
            memory = process.memory_full_info()
            times = process.cpu_times()
            found[role] = {
                "uss_mb": memory.uss / MB,
                "pss_mb": memory.pss / MB,
                "rss_mb": memory.rss / MB,
                "cpu_seconds": times.user + times.system,
            }
    finally:
        plotter.close(final_video=False)
    print(json.dumps(found))


def measure(tree: str, env_id: str) -> dict:
    from benchmarks.machine import child_in_scratch_folder

    return child_in_scratch_folder(__file__, env_id, tree, CUDA_VISIBLE_DEVICES="")


def main() -> None:
    sys.path.insert(0, HERE)
    from benchmarks.machine import checkouts_parser, child_or_side_by_side, write_results

    args = checkouts_parser(__doc__, "--envs", ENVS, 3,
                            os.path.join(RESULTS, "worker_memory.json")).parse_args()
    ran = child_or_side_by_side(args, HERE, args.envs.split(","), measure,
                                lambda: child(args.child, args.folder))
    if ran is None:
        return
    trees, load_before, runs = ran
    summary = {}
    print("| env | checkout | render USS | render PSS | render RSS | rollout USS | render CPU to "
          "the first video |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for env_id, by_tree in runs.items():
        summary[env_id] = {}
        for name, results in by_tree.items():

            def median(role: str, key: str) -> float:
                return statistics.median(result[role][key] for result in results)

            row = {
                f"{role}_{key}": median(role, key)
                for role in ("render", "rollout")
                for key in ("uss_mb", "pss_mb", "rss_mb", "cpu_seconds")
            }
            summary[env_id][name] = dict(row, runs=results)
            print(f"| {env_id} | {name} | {row['render_uss_mb']:.0f} MB | "
                  f"{row['render_pss_mb']:.0f} MB | {row['render_rss_mb']:.0f} MB | "
                  f"{row['rollout_uss_mb']:.0f} MB | {row['render_cpu_seconds']:.2f} s |")
        if len(trees) == 2:
            now, before = summary[env_id]["now"], summary[env_id]["before"]
            ratios = {
                key: now[key] / before[key]
                for key in ("render_uss_mb", "render_rss_mb", "render_cpu_seconds")
            }
            summary[env_id]["ratios"] = ratios
            print(f"| {env_id} | now / before | {ratios['render_uss_mb']:.2f}x | | "
                  f"{ratios['render_rss_mb']:.2f}x | | {ratios['render_cpu_seconds']:.2f}x |")
    write_results(args.out, args, load_before, trees=trees, results=summary)


if __name__ == "__main__":
    main()
