"""``run_experiment_lite``: run an algorithm with logging, snapshots, parallel sampling and
plotting.

rllab's function of the same name launched a stub through a subprocess; this one runs in the
calling process and hands its settings to the algorithm through :mod:`async_plotter.rl.context`,
which also reaches algorithms that the user's function builds and trains itself.
"""
import dataclasses
import inspect
import json
import logging
import os
import random
import re
import time
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np

from async_plotter.errors import mark_logged
from async_plotter.render.videos import list_videos
from async_plotter.rl import context as experiment_context
from async_plotter.rl.batch_polopt import BatchPolopt
from async_plotter.validation import positive_int, user_path
from async_plotter.rl.logger import console_logging
from async_plotter.rl.recorder import EXPERIMENT_FILE, SNAPSHOT_MODES, RunRecorder
from async_plotter.rl.resume import ResumePoint, check_fits, resume_point
from async_plotter.trainer.run_folder import new_folder

logger = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
# What a user function may ask for by parameter name.
_SETTINGS = ("n_parallel", "plot", "seed", "exp_name", "log_dir")


@dataclasses.dataclass
class ExperimentResult:
    """Where a run's outputs are, and the algorithm that produced them."""

    log_dir: str
    progress_csv: str
    learning_curve: str
    debug_log: str
    video_dir: Optional[str]  # set when the run was plotted
    algo: Optional[BatchPolopt]
    history: list
    #: the videos written, oldest first (by iteration: ``render/videos.py``'s ``list_videos``)
    videos: List[str] = dataclasses.field(default_factory=list)
    #: the video of the final policy, made when training ended (None without plotting)
    final_video: Optional[str] = None


def _default_exp_name() -> str:
    return time.strftime("experiment_%Y_%m_%d_%H_%M_%S")


def _validate(fn_or_algo: Any, n_parallel: Any, plot: Any, seed: Any, exp_name: Any, log_dir: Any,
              snapshot_mode: Any, tensorboard: Any, plot_kwargs: Dict[str, Any]) -> None:
    """Reject bad arguments before anything is created, started or written."""
    if not (isinstance(fn_or_algo, BatchPolopt) or callable(fn_or_algo)):
        raise TypeError(f"fn_or_algo must be an algorithm (e.g. TRPO) or a function that returns "
                        f"or runs one, got {type(fn_or_algo).__name__}")
    if not isinstance(fn_or_algo, BatchPolopt):
        _check_function(fn_or_algo)
    positive_int("n_parallel", n_parallel)
    if not isinstance(plot, bool):
        raise TypeError(f"plot must be True or False, got {plot!r}")
    if not isinstance(tensorboard, bool):
        raise TypeError(f"tensorboard must be True or False, got {tensorboard!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                             or not 0 <= seed < 2**32):
        raise ValueError(f"seed must be None or an int in [0, 2**32), got {seed!r}")
    # "." and ".." pass the character check but would put the run into runs/ itself or into the
    # working directory.
    if exp_name is not None and (not isinstance(exp_name, str) or not _SAFE_NAME.match(exp_name)
                                 or exp_name in (".", "..")):
        raise ValueError(f"exp_name must be a non-empty name of letters, digits, '.', '_' or '-', "
                         f"not '.' or '..' (it becomes a folder), got {exp_name!r}")
    if log_dir is not None:
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a path, got {type(log_dir).__name__}")
        if not os.fspath(log_dir):  # would become the working directory
            raise ValueError("log_dir must be a non-empty path (or None for runs/<exp_name>)")
        path = user_path(log_dir)
        if os.path.exists(path) and not os.path.isdir(path):
            raise NotADirectoryError(f"log_dir {path!r} is a file, not a folder")
    if snapshot_mode not in SNAPSHOT_MODES:
        raise ValueError(f"snapshot_mode must be one of {', '.join(map(repr, SNAPSHOT_MODES))}; "
                         f"got {snapshot_mode!r}")
    _check_plot_kwargs(plot_kwargs)


def _check_function(fn: Callable[..., Any]) -> None:
    """A function must be callable with the settings it names (see _call_user_function)."""
    if isinstance(fn, type) and issubclass(fn, BatchPolopt):
        raise TypeError(f"fn_or_algo is the class {fn.__name__}; pass an instance, e.g. "
                        f"{fn.__name__}(env, policy, ...), or a function that builds one")
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: called without arguments
        return
    # Settings are passed by keyword, so a positional-only parameter never gets one.
    missing = [
        p.name for p in parameters
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and (
            p.kind is p.POSITIONAL_ONLY or p.name not in _SETTINGS)
    ]
    if missing:
        raise TypeError(f"{getattr(fn, '__name__', fn)!r} needs {', '.join(map(repr, missing))}, "
                        f"which run_experiment_lite does not supply; it passes any of "
                        f"{', '.join(_SETTINGS)} by name")


def _check_plot_kwargs(plot_kwargs: Dict[str, Any]) -> None:
    """Names only (the plotter checks the values when it is built); a misspelt name is an error
    even with plot=False, where it would otherwise go unnoticed."""
    if not plot_kwargs:
        return
    from async_plotter.trainer.plotter_handle import Plotter

    own = sorted({"env", "policy"} & set(plot_kwargs))
    if own:
        what = "a plotter argument" if len(own) == 1 else "plotter arguments"
        raise TypeError(f"{' and '.join(own)} cannot be {what}: the plotter shows the algorithm's "
                        f"own env and policy")
    accepted = [
        name for name in inspect.signature(Plotter).parameters if name not in ("env", "policy")
    ]
    unknown = sorted(set(plot_kwargs) - set(accepted))
    if unknown:
        raise TypeError(f"unknown plotter argument{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(map(repr, unknown))}; Plotter takes {', '.join(accepted)}")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    import tensorflow as tf
    tf.random.set_seed(seed)


def _call_user_function(fn: Callable[..., Any], ctx: Dict[str, Any]) -> Any:
    """Call ``fn`` with the experiment settings it asks for by name (all of them for ``**kw``)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return fn()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return fn(**ctx)
    return fn(**{p.name: ctx[p.name] for p in parameters if p.name in ctx})


def run_experiment_lite(fn_or_algo: Union[BatchPolopt, Callable[..., Any]],
                        n_parallel: int = 1,
                        plot: bool = False,
                        seed: Optional[int] = None,
                        exp_name: Optional[str] = None,
                        log_dir: Optional[str] = None,
                        snapshot_mode: str = "last",
                        tensorboard: bool = True,
                        resume_from: Optional[str] = None,
                        **plot_kwargs: Any) -> ExperimentResult:
    """Train an algorithm and write its outputs into ``log_dir``.

    Args:
        fn_or_algo: an algorithm such as :class:`~async_plotter.rl.trpo.TRPO`, or a function that
            returns one or builds and trains one itself. The function receives, by parameter name
            (or all through ``**kwargs``), any of ``n_parallel``, ``plot``, ``seed``, ``exp_name``,
            ``log_dir``; a function without parameters is called without arguments.
        n_parallel: sampling processes; it replaces the algorithm's own sampler setting.
        plot: watch the policy while it trains; it overrides the algorithm's ``plot`` flag (and
            works with any ``n_parallel``). Videos go to ``<log_dir>/videos``.
        seed: seeds Python, numpy and TensorFlow before anything is built, and the sampling.
        exp_name: name of the run (default: a timestamp; resumed, the run's); the default
            folder is ``runs/<exp_name>/``.
        log_dir: folder of the run's files (created if needed). Without it, ``runs/<exp_name>``
            is used, with a ``_2``, ``_3``... suffix if that folder exists, so that two runs
            never write into one ``progress.csv``; with ``resume_from``, the snapshot's folder.
            An earlier run's files in it move to ``earlier_runs/``; a live run's is refused
            (``FolderInUseError``).
        snapshot_mode: ``"last"`` (``params.pkl`` each iteration), ``"all"`` (``itr_<N>.pkl``)
            or ``"none"``.
        tensorboard: write TensorBoard event files into ``log_dir``: every numeric column of
            ``progress.csv`` as a scalar ``progress/<column>`` at step = the iteration, and with
            ``plot`` each plotted rollout as an animated image ``rollout/<env>``. Needs neither
            TensorFlow nor ``tensorboard`` to write; ``tensorboard --logdir runs`` shows each
            run folder as one run.
        resume_from: a snapshot (``params.pkl``, ``itr_<N>.pkl``) or a run's folder to resume
            from, as rllab's: the algorithm (built as usual, its policy of the same structure)
            gets the snapshot's policy parameters and baseline and trains from the next
            iteration. In the run's own folder, the run goes on: ``progress.csv``, the curve,
            TensorBoard, the videos and the history keep their iterations up to the snapshot's
            (later ones, which it does again, move to ``earlier_runs/``). An optimizer's moments
            (VPG's Adam) start afresh.
        **plot_kwargs: passed on to :class:`async_plotter.Plotter` (e.g. ``fps``, ``window``); a
            name ``Plotter`` does not take is an error even with ``plot=False``.

    Files: ``progress.csv``, ``learning_curve.png``, ``debug.log``, ``experiment.json``, the
    snapshots, ``events.out.tfevents.*`` with ``tensorboard`` (one from the trainer, one per
    render process when plotting), and ``videos/`` when plotting. Ctrl-C stops the sampler workers
    and the plotter before the ``KeyboardInterrupt`` propagates; the last complete snapshot stays
    intact.
    """
    _validate(fn_or_algo, n_parallel, plot, seed, exp_name, log_dir, snapshot_mode, tensorboard,
              plot_kwargs)
    n_parallel = positive_int("n_parallel", n_parallel)  # 2.0 from a config file is 2
    point = resume_point(resume_from) if resume_from is not None else None
    if point is not None and isinstance(fn_or_algo, BatchPolopt):
        check_fits(fn_or_algo, point)  # before its folder is touched
    if exp_name is None:
        exp_name = point.run_name if point is not None else _default_exp_name()
    if log_dir is None and point is not None:
        log_dir = point.folder
    path = os.path.abspath(os.path.join("runs",
                                        exp_name)) if log_dir is None else user_path(log_dir)
    try:
        # runs/<exp_name>, or runs/<exp_name>_2 if that exists: made, so two runs started
        # together never share one.
        log_dir = new_folder(path) if log_dir is None else path
        recorder = RunRecorder(log_dir, snapshot_mode, tensorboard=tensorboard)
    except OSError as error:  # say which argument it was; the same exception class
        raise type(error)(error.errno, f"log_dir {path!r} cannot be created: "
                          f"{error.strerror}") from error
    # Held until the run ends; an earlier run's files there go aside first, and a live one's
    # folder is refused (FolderInUseError): its progress.csv and snapshots would be overwritten.
    # Resumed in its own folder, the run goes on there: its iterations up to the snapshot's
    # stay; so they do for an algorithm whose start_itr was set by hand.
    if point is not None:
        resume_after = point.itr if os.path.samefile(point.folder, log_dir) else None
    elif isinstance(fn_or_algo, BatchPolopt) and fn_or_algo.start_itr > 0:
        resume_after = fn_or_algo.start_itr - 1
    else:
        resume_after = None
    with recorder.claimed(f"run_experiment_lite({exp_name!r})", resume_after):
        return _run(fn_or_algo, exp_name, log_dir, recorder, n_parallel, plot, seed, snapshot_mode,
                    tensorboard, plot_kwargs, point)


def _run(fn_or_algo: Any, exp_name: str, log_dir: str, recorder: RunRecorder, n_parallel: int,
         plot: bool, seed: Optional[int], snapshot_mode: str, tensorboard: bool,
         plot_kwargs: Dict[str, Any], point: Optional[ResumePoint]) -> ExperimentResult:
    """The run itself, in its claimed folder."""
    if not plot and plot_kwargs:
        logger.warning("plot is False; ignoring plotter arguments %s", sorted(plot_kwargs))
    settings = {
        "exp_name": exp_name,
        "log_dir": log_dir,
        "n_parallel": int(n_parallel),
        "plot": plot,
        "seed": None if seed is None else int(seed),
    }
    recorded = dict(settings,
                    snapshot_mode=snapshot_mode,
                    tensorboard=tensorboard,
                    resume_from=point.path if point else None)
    recorded["plot_kwargs"] = {key: repr(value) for key, value in plot_kwargs.items()}
    recorder.write_text(EXPERIMENT_FILE, json.dumps(recorded, indent=2) + "\n")
    ctx = experiment_context.ExperimentContext(plot=plot,
                                               n_parallel=int(n_parallel),
                                               seed=settings["seed"],
                                               plot_kwargs=dict(plot_kwargs),
                                               recorder=recorder,
                                               resume=point)
    with console_logging(recorder.debug_log), experiment_context.activate(ctx):
        logger.info("experiment %s: outputs in %s", exp_name, log_dir)
        try:
            algo = _train(fn_or_algo, settings, ctx)
        except KeyboardInterrupt:
            logger.warning("experiment %s interrupted; outputs so far are in %s", exp_name, log_dir)
            raise
        except Exception as error:
            # The traceback reaches the console when the exception propagates; keep it in
            # debug.log too, which is where one looks after the terminal is gone.
            logger.debug("experiment %s failed", exp_name, exc_info=True)
            logger.error("experiment %s failed: %s: %s", exp_name, type(error).__name__, error)
            mark_logged(error)
            raise
        logger.info("experiment %s done: %s", exp_name, log_dir)
    videos = _videos(recorder.video_dir) if plot else []
    final_video = _final_video(algo)
    if final_video:
        logger.info("the final policy: %s", final_video)
    return ExperimentResult(log_dir=log_dir,
                            progress_csv=recorder.progress_csv,
                            learning_curve=recorder.learning_curve_png,
                            debug_log=recorder.debug_log,
                            video_dir=recorder.video_dir if plot else None,
                            algo=algo,
                            history=list(recorder.rows),
                            videos=videos,
                            final_video=final_video)


def _train(fn_or_algo: Union[BatchPolopt, Callable[..., Any]], settings: Dict[str, Any],
           ctx: experiment_context.ExperimentContext) -> BatchPolopt:
    """Seed everything, then train the algorithm, or call the user's function and train what it
    returns (unless it trained it itself); the algorithm that trained."""
    if settings["seed"] is not None:
        _seed_everything(settings["seed"])
    if isinstance(fn_or_algo, BatchPolopt):
        fn_or_algo.train()
        return fn_or_algo
    returned = _call_user_function(fn_or_algo, settings)
    if isinstance(returned, BatchPolopt) and returned not in ctx.trained:
        returned.train()
        return returned
    if ctx.trained:
        return ctx.trained[-1]
    raise TypeError(f"{getattr(fn_or_algo, '__name__', fn_or_algo)!r} neither returned an "
                    f"algorithm nor trained one (it returned {type(returned).__name__})")


def _videos(video_dir: Optional[str]) -> List[str]:
    return [os.path.join(video_dir, v.name) for v in list_videos(video_dir)] if video_dir else []


def _final_video(algo: Optional[BatchPolopt]) -> Optional[str]:
    stats = getattr(getattr(algo, "plotter", None), "stats", None) or {}
    return stats.get("final_video") or getattr(algo, "final_video", None)
