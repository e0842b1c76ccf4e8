"""What ``close()`` takes when training ends while the final policy's clip is being drawn, this
checkout against another.

A video made while training is a clip (8 s of Swimmer's 20-s episode at the defaults), drawn at
the frame cap; ``close()`` wants the final policy's whole episode. When training ends right after
the worker began the final policy's clip (it had finished the video before and waited for a
newer policy), the rollout process retakes the episode whole. Each run, in a fresh process: a
real ``Plotter("Swimmer-v5", max_path_length=500, video_dir=...)`` at the defaults; iteration
0's video is waited for; iteration 1 is sent, and once its clip has begun, ``close()`` is timed.
Reported: ``close()``'s wall time, the frames drawn during it (the whole episode is 501), and the
final video's frames.

``--cases whole`` is the control: ``video_length=None``, so videos are whole episodes, nothing is
retaken, and ``close()`` waits for the rest of the final policy's video being drawn.

    python benchmarks/close_cost.py --before-tree /path/to/old/checkout [--rounds 5]

Takes ~2 minutes on 2 cores. Writes ``benchmarks/results/close_cost.json``.
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(HERE, "benchmarks", "results")
CASES = ("clip", "whole")


def child(case: str, folder: str) -> None:
    """In a process whose ``sys.path`` starts at the measured checkout: print one run's JSON."""
    import imageio.v2 as imageio

    from async_plotter import Plotter
    from tests.policies import LinearPolicy

    def wait_for(predicate, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("the worker did not get there in time")
            time.sleep(0.02)

    options = {} if case == "clip" else {"video_length": None}
    policy = LinearPolicy(8, 2)
    plotter = Plotter("Swimmer-v5",
                      policy,
                      max_path_length=500,
                      video_dir=folder,
                      seed=0,
                      **options).start()
    policy.fill(0.1)
    plotter.update_plot(policy, iteration=0)
    wait_for(lambda: any(v["iteration"] == 0 for v in plotter.stats["video_log"]), 120)
    episodes = plotter.stats["episodes"]
    policy.fill(0.2)
    plotter.update_plot(policy, iteration=1)
    wait_for(lambda: plotter.stats["episodes"] > episodes, 60)  # iteration 1's episode was sent
    time.sleep(1.0)  # and its drawing is a second along, at the cap
    frames_before = plotter.stats["frames"]
    started = time.monotonic()
    plotter.close()
    seconds = time.monotonic() - started
    stats = plotter.stats
    reader = imageio.get_reader(stats["final_video"])
    try:
        final_frames = sum(1 for _ in reader)
    finally:
        reader.close()
    print(
        json.dumps({
            "close_seconds": seconds,
            "frames_in_close": stats["frames"] - frames_before,
            "final_video_frames": final_frames,
        }))


def measure(tree: str, case: str) -> dict:
    from benchmarks.machine import child_in_scratch_folder

    return child_in_scratch_folder(__file__,
                                   case,
                                   tree,
                                   TF_CPP_MIN_LOG_LEVEL="2",
                                   CUDA_VISIBLE_DEVICES="")


def main() -> None:
    sys.path.insert(0, HERE)
    from benchmarks.machine import checkouts_parser, child_or_side_by_side, write_results

    args = checkouts_parser(__doc__, "--cases", CASES, 5,
                            os.path.join(RESULTS, "close_cost.json")).parse_args()
    ran = child_or_side_by_side(args, HERE, args.cases.split(","), measure,
                                lambda: child(args.child, args.folder))
    if ran is None:
        return
    trees, load_before, runs = ran
    summary = {}
    print("| case | checkout | close() (median, range) | frames drawn in close() | final video "
          "frames |")
    print("| --- | --- | ---: | ---: | ---: |")
    for case, by_tree in runs.items():
        summary[case] = {}
        for name, results in by_tree.items():
            seconds = [result["close_seconds"] for result in results]
            drawn = [result["frames_in_close"] for result in results]
            final = sorted({result["final_video_frames"] for result in results})
            summary[case][name] = {
                "close_seconds": statistics.median(seconds),
                "frames_in_close": statistics.median(drawn),
                "final_video_frames": final,
                "runs": results,
            }
            print(f"| {case} | {name} | {statistics.median(seconds):.2f} s "
                  f"({min(seconds):.2f}-{max(seconds):.2f}) | {statistics.median(drawn):.0f} | "
                  f"{', '.join(map(str, final))} |")
        if len(trees) == 2:
            ratio = summary[case]["now"]["close_seconds"] / summary[case]["before"]["close_seconds"]
            summary[case]["ratio"] = ratio
            print(f"| {case} | now / before | {ratio:.2f}x | | |")
    write_results(args.out, args, load_before, trees=trees, results=summary)


if __name__ == "__main__":
    main()
