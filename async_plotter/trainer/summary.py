"""The one line a run ends with: what the user got to see, and, when it was little, why."""
import os
import shlex
from typing import Any, Dict, List, Optional

from async_plotter.cpu import usable_cores
from async_plotter.words import amount

#: fewer videos than one per this many iterations calls for an explanation
_ITERATIONS_PER_VIDEO_EXPECTED = 10


def summarize_videos(stats: Dict[str, Any],
                     iterations: int,
                     elapsed: float,
                     budget: Optional[float],
                     video_dir: Optional[str],
                     final_video_asked: bool = True,
                     resumed_after: Optional[int] = None) -> str:
    """``plotter: 7 videos in runs/x/videos of iterations 0, 9, ... 59; the newest,
    iter_0059.mp4, shows the final policy`` -- plus the reason and the knob when there were
    fewer than one per 10 iterations. ``stats``: ``Plotter.stats``; ``iterations``: how many
    updates came with an iteration; ``final_video_asked``: False after ``close(final_video=False)``,
    which cuts the video being drawn without waiting for it; ``resumed_after``: the iteration a
    resumed run went on from (its history here is what it recorded since)."""
    log: List[Dict[str, Any]] = list(stats.get("video_log") or [])
    if not video_dir:
        played, drawn = stats.get("frames", 0), stats.get("frames_drawn", 0)
        # A page's frames are drawn only while someone watches it.
        unwatched = f" ({drawn} drawn for a viewer)" if drawn != played else ""
        return (f"plotter: {played} frames shown live{unwatched}, "
                f"{stats.get('updates_applied', 0)} of {stats.get('updates_sent', 0)} updates")
    if not log:
        text = f"plotter: no video in {video_dir}"
    else:
        shown = [_label(entry) for entry in log]
        newest = os.path.basename(log[-1]["path"])
        final = ("shows the final policy" if stats.get("final_video") or _is_newest(log, stats) else
                 "does not show the final policy")
        text = (f"plotter: {amount(len(log), 'video', 'videos')} in {video_dir} of "
                f"{_compact(shown)}; the newest, {newest}, {final}"
                f"{_cut_short(log[-1], stats, final_video_asked)}{_clip(log[-1], stats)}")
    notes = [
        _removed(log),
        _no_initial_video(log, stats),
        _why_few(stats, len(log), iterations, elapsed, budget),
        _history(stats, iterations, resumed_after)
    ]
    return ". ".join([text] + [note for note in notes if note])


def _removed(log: List[Dict[str, Any]]) -> str:
    """``The video of iteration 0 is gone: removed since`` (its folder taken away with ``rm -rf``
    while the run went on, or the file deleted): the count before is of the videos written."""
    gone = [_label(entry) for entry in log if not os.path.exists(entry["path"])]
    if not gone:
        return ""
    which = "The video of" if len(gone) == 1 else "The videos of"
    return f"{which} {_compact(gone)} {'is' if len(gone) == 1 else 'are'} gone: removed since"


def _history(stats: Dict[str, Any], iterations: int, resumed_after: Optional[int]) -> str:
    """``The whole run: 21 policies recorded in .../history ...``, with the newest's return, and
    how many of the run's ``iterations`` they cover where that is not all of them (``Since the
    resume after iteration 59: ...`` for a resumed run: the folder holds the earlier ones too)."""
    entries = [entry for entry in stats.get("history") or () if entry.get("return") is not None]
    stopped = ("its thread hung, and the worker went on without it (stats['history_stopped'] "
               "says where)" if stats.get("history_stopped") else "")
    run = ("The whole run"
           if resumed_after is None else f"Since the resume after iteration {resumed_after}")
    if not entries:
        return f"{run}: no policy recorded: {stopped}" if stopped else ""
    newest = entries[-1]
    count = amount(len(entries), "policy", "policies")
    covered = len({entry["iteration"] for entry in entries if entry.get("iteration") is not None})
    share = ""
    if stopped:
        share = f"; {covered} of the {iterations} iterations: the history stopped there, {stopped}"
    elif covered < iterations:
        # The thread records the newest update: one that came during a recording replaced the
        # one waiting (under a budget, recordings are slower and more are replaced).
        share = (f"; {covered} of the {iterations} iterations, a newer policy replacing one "
                 "that waited for the recording before it")
    ret = f"the newest's return {newest['return']:.4g} in {newest['length']} steps"
    files = [entry["path"] for entry in entries if entry.get("path")]
    if files:
        return (f"{run}: {count} recorded in {os.path.dirname(files[-1])}, one "
                f"deterministic episode each from one start state ({ret}{share})")
    return (f"{run}: the returns of {count} in stats['history'], one deterministic "
            f"episode each from one start state ({ret}; this env keeps no states{share})")


def _cut_short(entry: Dict[str, Any], stats: Dict[str, Any], final_video_asked: bool) -> str:
    """Where ``close()`` stopped the newest video before its rollout ended: what the user can
    do about it (the state recording of the final rollout is whole where there is one)."""
    if entry.get("whole", True):
        return ""
    if not final_video_asked or stats.get("final_video") != entry.get("path"):
        return ", cut short by close()"
    recording = stats.get("final_state_recording")
    if recording:
        return (f", cut short at final_video_timeout; its state recording holds the whole "
                f"rollout: async-plotter render {shlex.quote(recording)} draws all of it")
    return ", cut short at final_video_timeout (raise it to wait for the whole rollout)"


def _clip(entry: Dict[str, Any], stats: Dict[str, Any]) -> str:
    """Where the newest video is a clip of its episode (a calm end: the final policy's video was
    made during training, at the video's length): where the policy's whole episode is."""
    if not entry.get("clipped"):
        return ""
    whole = [
        item["path"] for item in stats.get("history") or ()
        if item.get("update") == entry.get("update") and item.get("path")
    ]
    if whole:
        return (f", a {entry.get('frames')}-frame clip; the history holds a whole episode of that "
                f"policy: async-plotter render {shlex.quote(whole[-1])} draws it")
    return f", a {entry.get('frames')}-frame clip of its episode"


def _no_initial_video(log: List[Dict[str, Any]], stats: Dict[str, Any]) -> str:
    """Why the initial policy has no video although the user may expect ``update_0000.mp4``."""
    first = stats.get("first_applied_update")
    if not log or not first or any(entry.get("update") == 0 for entry in log):
        return ""
    return ("The initial policy has no video: update_plot() had sent newer parameters before "
            "the worker was ready, and the newest always wins")


def _label(entry: Dict[str, Any]) -> str:
    if entry.get("iteration") is not None:
        return str(entry["iteration"])
    return "the initial policy" if entry.get("update") == 0 else f"update {entry.get('update')}"


def _is_newest(log: List[Dict[str, Any]], stats: Dict[str, Any]) -> bool:
    sent = stats.get("updates_sent", 0)
    return log[-1].get("update") == sent


def _compact(labels: List[str]) -> str:
    """``the initial policy and iterations 8, 59`` (the middle elided past 12)."""
    others = [label for label in labels if not label.isdigit()]
    iterations = [label for label in labels if label.isdigit()]
    if len(iterations) > 12:
        iterations = iterations[:5] + ["..."] + iterations[-5:]
    parts = others[:3] + (
        [f"iteration{'s' if len(iterations) > 1 else ''} "
         f"{', '.join(iterations)}"] if iterations else [])
    return " and ".join(parts)


def _why_few(stats: Dict[str, Any], videos: int, iterations: int, elapsed: float,
             budget: Optional[float]) -> str:
    if stats.get("video_dir_full"):
        return "No space is left on the device for the videos; free some and they resume"
    if iterations == 0 or videos * _ITERATIONS_PER_VIDEO_EXPECTED >= iterations:
        return ""
    if stats.get("disabled"):
        return ("Plotting was disabled after repeated worker failures; stats['last_error'] "
                "says why")
    if stats.get("boot_seconds") is None:
        return ("Fewer than one per 10 iterations: the worker was still starting (importing "
                "TensorFlow and building the scene take a few CPU-seconds) when the run ended; "
                "longer runs show more")
    # The history thread's CPU shares the budget with the videos, but is no frame's cost.
    recorded = [entry for entry in stats.get("history") or () if entry.get("cpu_seconds")]
    history_cpu = sum(entry["cpu_seconds"] for entry in recorded)
    cpu = max(
        stats.get("worker_cpu_seconds", 0.0) - stats.get("boot_cpu_seconds", 0.0) - history_cpu,
        0.0)
    frames = max(stats.get("frames_drawn", 0), 1)
    per_frame_ms = 1000.0 * cpu / frames if cpu else None
    cost = f" (~{per_frame_ms:.0f} ms of CPU a frame)" if per_frame_ms else ""
    history = ""
    if recorded:
        history = (f"; recording {len(recorded)} policies in the history took another "
                   f"{history_cpu:.1f} CPU-s (history=False leaves it all to videos)")
    if budget is None:
        return (f"Fewer than one per 10 iterations: a fixed priority leaves the worker little "
                f"CPU beside a busy trainer{cost}; use budget= instead of priority=, e.g. 0.1")
    per_iteration = budget * usable_cores() * elapsed / iterations
    return (f"Fewer than one per 10 iterations: the budget ({budget:g} of the machine, "
            f"~{per_iteration:.2f} CPU-s an iteration) is small for this frame cost{cost}. "
            f"Raise budget= (e.g. {min(budget * 2, 1.0):g}), or make videos cheaper: shorter "
            f"ones (video_length=, steps a video shows while training) or a smaller "
            f"frame_size={history}")
