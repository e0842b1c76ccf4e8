"""The command line every training example shares: what to train and how to watch it.

    parser = example_parser(__doc__, n_itr=100, batch_size=5000)
    args = parser.parse_args()
    sys.exit(run_example(make_algo, args))

Plotting flags: ``--plot/--no-plot`` (on by default), ``--plot-budget`` (the CPU budget),
``--plot-path-length`` (steps per plotted rollout), ``--plot-video-length`` (steps per video
while training), ``--http`` (a live page), ``--plot-history/--no-plot-history`` (every policy
recorded once more, undrawn) and ``--plot-priority`` (a fixed priority instead of a budget).
Training flags: ``--n-parallel``, ``--n-itr``, ``--seed``, ``--batch-size``, ``--exp-name``,
``--tensorboard/--no-tensorboard`` (event files in the run folder, on by default).
"""
import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List

from async_plotter.errors import PlotterError, was_logged
from async_plotter.render.history import HISTORY_FOLDER
from async_plotter.render.history_returns import RETURNS_FILE, read_returns
from async_plotter.trainer.config import DEFAULT_VIDEO_SECONDS
from async_plotter.supervision.budget import DEFAULT_BUDGET
from async_plotter.supervision.priorities import PRIORITIES
from async_plotter.words import amount

if TYPE_CHECKING:  # TensorFlow: loaded only to train, so that --help answers at once
    from async_plotter.rl.experiment import ExperimentResult


def example_parser(doc: str,
                   *,
                   n_itr: int = 100,
                   batch_size: int = 5000,
                   n_parallel: int = 2) -> argparse.ArgumentParser:
    """A parser with the training and plotting flags; ``doc``'s first paragraph describes it."""
    # TensorFlow's C++ INFO lines on the CPU's instructions say nothing about the run; its
    # warnings and errors still show. (Its oneDNN line comes before its logging reads this, and
    # turning oneDNN off would change the training's speed.) Set before TensorFlow is imported.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--n-parallel", type=int, default=n_parallel, help="sampling processes")
    parser.add_argument("--n-itr", type=int, default=n_itr, help="training iterations")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch-size",
                        type=int,
                        default=batch_size,
                        help="env steps per iteration")
    parser.add_argument("--exp-name", default=None, help="run folder name under runs/")
    parser.add_argument("--resume-from",
                        default=None,
                        metavar="PATH",
                        help="go on with a run from its snapshot (runs/NAME/params.pkl, "
                        "itr_N.pkl) or its folder, in that folder; --n-itr is the total")
    parser.add_argument("--tensorboard",
                        action=argparse.BooleanOptionalAction,
                        default=True,
                        help="write TensorBoard event files (scalars, rollout animations) into "
                        "the run folder: tensorboard --logdir runs")
    add_plot_arguments(parser)
    return parser


def add_plot_arguments(parser: argparse.ArgumentParser) -> None:
    """The plotting flags, for any script that trains with ``run_experiment_lite``."""
    group = parser.add_argument_group("plotting")
    group.add_argument("--plot",
                       action=argparse.BooleanOptionalAction,
                       default=True,
                       help="watch the policy while it trains")
    group.add_argument("--plot-budget",
                       type=float,
                       default=None,
                       help="fraction of the machine's CPU plotting may take from training, "
                       f"beyond idle CPU (default: the library's, {DEFAULT_BUDGET})")
    group.add_argument("--plot-path-length",
                       type=int,
                       default=None,
                       help="steps per plotted rollout (default: the training's); the final "
                       "policy's video shows this many")
    group.add_argument("--plot-video-length",
                       type=int,
                       default=None,
                       help="steps a video recorded while training shows at most (default: "
                       f"the library's, {DEFAULT_VIDEO_SECONDS:g} s of simulated time in the "
                       "env's steps); shorter videos come more often for the same budget")
    group.add_argument("--http",
                       default=None,
                       help="also serve a live page: a port (8080) or host:port")
    group.add_argument("--view",
                       choices=("2d", "3d"),
                       default=None,
                       help="what --http opens: 2d (MJPEG, the default) or 3d (the browser "
                       "draws the scene; pip install -e .[view3d])")
    group.add_argument("--record-states",
                       action="store_true",
                       help="with --http: also keep every episode the live page shows as a state "
                       "recording in the run's videos/live/ (async-plotter replay plays one)")
    group.add_argument("--plot-history",
                       action=argparse.BooleanOptionalAction,
                       default=True,
                       help="keep the whole run: every policy the plotter takes, rolled out once "
                       "more without drawing (one deterministic episode) into videos/history/ "
                       "(async-plotter render draws one), its return in progress.csv's "
                       "ShownReturn")
    group.add_argument("--plot-priority",
                       choices=PRIORITIES,
                       default=None,
                       help="a fixed CPU priority for the plot worker instead of a budget")


def plot_options(args: argparse.Namespace) -> Dict[str, Any]:
    """``run_experiment_lite``'s keyword arguments for plotting, from the parsed flags."""
    if not args.plot:
        return {"plot": False}
    options = {
        "budget": args.plot_budget,
        "max_path_length": args.plot_path_length,
        "video_length": args.plot_video_length,
        "http": args.http,
        "view": args.view,
        "record_states": args.record_states or None,
        "priority": args.plot_priority,
        "history": None if args.plot_history else False,
    }
    return dict({name: value for name, value in options.items() if value is not None}, plot=True)


def run_example(make_algo: Callable[[], Any], args: argparse.Namespace) -> int:
    """Train with ``run_experiment_lite`` as the flags say, print where the outputs are; returns
    the exit code (130 after Ctrl-C)."""
    from async_plotter.rl.experiment import run_experiment_lite

    try:
        result = run_experiment_lite(make_algo,
                                     n_parallel=args.n_parallel,
                                     seed=args.seed,
                                     exp_name=args.exp_name,
                                     tensorboard=args.tensorboard,
                                     resume_from=args.resume_from,
                                     **plot_options(args))
    except KeyboardInterrupt:
        print("interrupted; workers and plotter were shut down", file=sys.stderr)
        return 130
    except PlotterError as error:
        # A named error says what was wrong and what to do: no traceback for a mistake in the
        # flags (a --resume-from with nothing left to train, a folder in use), and said once
        # (the run's own line, "experiment NAME failed: ...", where the run had begun).
        if not was_logged(error):
            print(f"{os.path.basename(sys.argv[0])}: error: {error}", file=sys.stderr)
        return 2
    print(describe_outputs(result))
    return 0


def describe_outputs(result: "ExperimentResult") -> str:
    """Where a run's files are, videos counted (an empty folder is not announced as videos)."""
    lines = [
        f"progress:       {result.progress_csv}",
        f"learning curve: {result.learning_curve}",
        f"snapshot:       {result.log_dir}/params.pkl",
    ]
    if any(name.startswith("events.out.tfevents.") for name in _listdir(result.log_dir)):
        lines.append(f"tensorboard:    tensorboard --logdir {os.path.dirname(result.log_dir)}")
    if result.video_dir:
        count = len(result.videos)
        lines.append(f"videos:         {count} in {result.video_dir}"
                     if count else "videos:         none (see the plotter's summary above)")
        if result.final_video:
            lines.append(f"final policy:   {result.final_video}")
        lines.extend(_describe_history(os.path.join(result.video_dir, HISTORY_FOLDER)))
    return "\n" + "\n".join(lines)


def _describe_history(history: str) -> List[str]:
    """The history's lines: the recordings kept, and every policy's return where more were
    recorded than kept (the older ones thinned away) or none is a file (an env drawn by itself)."""
    kept = [name for name in _listdir(history) if name.endswith(".npz")]
    recorded = len(read_returns(history))
    lines = []
    if kept:
        lines.append(f"history:        {amount(len(kept), 'policy', 'policies')} in {history}")
    if recorded > len(kept):
        lines.append(f"returns:        {amount(recorded, 'policy', 'policies')} in "
                     f"{os.path.join(history, RETURNS_FILE)}")
    return lines


def _listdir(path: str) -> list:
    try:
        return os.listdir(path)
    except OSError:
        return []
