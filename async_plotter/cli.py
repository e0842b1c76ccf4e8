"""``async-plotter``: watch a training run from another machine through a Redis server.

    async-plotter view redis://host:6379/0 --experiment swimmer-7 --video-dir videos
    async-plotter list redis://host:6379/0

``view`` waits for the experiment's structure (it may start before the trainer), checks its
signature, and runs the same worker a local ``Plotter`` runs (rollout and render processes,
restarted after crashes), fed from Redis instead of shared memory. A trainer restarted with another
policy publishes a new structure; the worker is then restarted with it. Ctrl-C stops everything.
"""
import argparse
import collections
import dataclasses
import logging
import math
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
import unicodedata
from typing import Any, Deque, Dict, List, Optional, Sequence

from async_plotter.channel.redis_link import redact, url_problem
from async_plotter.display import offscreen_gl_backend
from async_plotter.channel.redis_wire import (METRICS_CAP, MetricsEntry, Structure,
                                              valid_experiment)
from async_plotter.channel.signing import (SECRET_ENV, PayloadRejected, Verifier, read_secret_file,
                                           resolve_secret, warn_if_weak)

logger = logging.getLogger("async_plotter")

EXIT_USAGE = 2
_WAITING_HINT_AFTER = 15.0  # seconds without the experiment before suggesting `list`


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``async-plotter`` console script; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _configure_logging(args.verbose, args.quiet)
    if args.command == "list":
        return _list(args.subparser, args)
    return _view(args.subparser, args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="async-plotter",
        description="Watch a policy train from another machine, through a Redis server.")
    commands = parser.add_subparsers(dest="command", metavar="{view,list}")

    view = commands.add_parser(
        "view",
        help="render an experiment's newest policy",
        description="Render the newest policy of an experiment published by "
        "Plotter(..., channel=URL, experiment=NAME), as a local plotter would.")
    view.add_argument("url", help="the Redis server, e.g. redis://host:6379/0 or rediss://...")
    view.add_argument("--experiment", "-e", required=True, help="the experiment's name")
    view.add_argument("--video-dir", help="write one mp4 per update into this directory")
    view.add_argument("--window", action="store_true", help="open a window (needs a display)")
    view.add_argument("--http",
                      help="serve a live page: a port (8080) or host:port; other hosts than "
                      "127.0.0.1 need --http-token")
    view.add_argument("--http-token",
                      help="token the live page requires (default $ASYNC_PLOTTER_HTTP_TOKEN)")
    view.add_argument("--fps", type=float, help="frame-rate cap (default: the trainer's)")
    view.add_argument("--budget",
                      type=float,
                      help="fraction of this machine's CPU the worker may take from other work, "
                      "beyond idle CPU (default: the trainer's budget, 0.05 unless it set one)")
    view.add_argument("--priority",
                      choices=("idle", "low", "normal"),
                      help="a fixed CPU priority for the worker instead of a budget. A machine "
                      "that only views can use normal; idle yields to everything else")
    view.add_argument("--max-restarts",
                      type=int,
                      default=3,
                      help="worker failures tolerated before plotting stops (default 3)")
    view.add_argument("--secret-file",
                      help=f"file holding the shared signing secret (default ${SECRET_ENV})")
    view.add_argument("--trust-unsigned",
                      action="store_true",
                      help="accept structures whose signature cannot be checked. Loading one "
                      "runs code: only for a Redis server nobody else can write to")

    listing = commands.add_parser("list",
                                  help="list the experiments on a Redis server",
                                  description="List the experiments a Redis server holds.")
    listing.add_argument("url", help="the Redis server, e.g. redis://host:6379/0")

    for sub in (view, listing):
        sub.set_defaults(subparser=sub)  # errors then show the subcommand's usage
        sub.add_argument("--verbose", "-v", action="store_true", help="log more")
        sub.add_argument("--quiet", "-q", action="store_true", help="log only problems")
    return parser


def _configure_logging(verbose: bool, quiet: bool) -> None:
    # Other libraries (redis-py) stay at INFO even with -v: their debug lines are noise here.
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    if verbose:
        logger.setLevel(logging.DEBUG)


# ---------------------------------------------------------------------------------- list


def _list(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    problem = url_problem(args.url)
    if problem is not None:
        parser.error(f"the Redis URL {problem}")
    import redis

    from async_plotter.channel.redis_link import connect
    from async_plotter.channel.redis_viewer import list_experiments

    client = connect(args.url)
    try:
        rows = list_experiments(client)
    except (redis.exceptions.RedisError, OSError) as error:
        print(f"async-plotter: cannot list experiments on {redact(args.url)}: {error}",
              file=sys.stderr)
        return 1
    finally:
        client.close()
    if not rows:
        print(f"no experiments on {redact(args.url)}")
        return 0
    header = ("EXPERIMENT", "ENV", "POLICY", "PARAMS", "UPDATE", "ITERATION", "AGE", "EXPIRES",
              "SIGNED", "HOST")
    table: List[Any] = [header]
    for row in rows:
        if row.problem and row.size is None:
            table.append((row.experiment, f"(unreadable: {_cell(row.problem, 200)})"))
            continue
        signed = {True: "yes", False: "no", None: "?"}[row.signed]
        params = "?" if row.size is None else f"{row.size:,} {_cell(row.dtype)}"
        table.append((row.experiment, _cell(row.env), _cell(row.policy), _cell(params),
                      _or_dash(row.last_update), _or_dash(row.last_iteration), _duration(row.age),
                      _duration(row.expires_in), signed, _cell(row.host)))
    # Unreadable rows (two cells: the name and the problem) do not widen the columns.
    widths = [
        max(len(line[i]) for line in table if len(line) == len(header)) for i in range(len(header))
    ]
    for line in table:
        print("  ".join(cell.ljust(width)
                        for cell, width in zip(line, widths)).rstrip() if len(line) ==
              len(header) else f"{line[0].ljust(widths[0])}  {line[1]}")
    for row in rows:
        if row.problem and row.size is not None:
            print(f"warning: {row.experiment}: {_cell(row.problem, 200)}", file=sys.stderr)
    return 0


def _cell(text: Any, limit: int = 60) -> str:
    """``text`` safe to print in a terminal: control and format characters (escape sequences,
    bidirectional overrides) written as ``\\xNN`` / ``\\uNNNN``, at most ``limit`` characters.

    Everything ``list`` shows comes from the server unverified, and a terminal obeys escape
    sequences (it can be made to retitle itself, hide text or, on some, answer with input).
    """
    shown = []
    for char in str(text)[:limit + 1]:
        if unicodedata.category(char)[0] in "CZ" and char != " ":
            shown.append(char.encode("unicode_escape").decode("ascii"))
        else:
            shown.append(char)
    escaped = "".join(shown)
    return escaped if len(escaped) <= limit else escaped[:limit - 3] + "..."


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


# ---------------------------------------------------------------------------------- view


@dataclasses.dataclass(frozen=True)
class _ViewOptions:
    """The validated ``view`` arguments."""

    url: str
    experiment: str
    secret: Optional[bytes]
    trust_unsigned: bool
    video_dir: Optional[str]
    window: bool
    http: Optional[Any]
    fps: Optional[float]
    priority: Optional[str]
    max_restarts: int
    budget: Optional[float] = None


def _view(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    options = _check_view_arguments(parser, args)
    if options.secret is None:
        logger.warning(
            "--trust-unsigned without a secret: whatever is in %s under experiment %r will be "
            "loaded, and loading runs code. Only do this on a Redis server nobody else can "
            "write to.", redact(options.url), options.experiment)
    return _Viewer(options).run()


def _check_view_arguments(parser: argparse.ArgumentParser,
                          args: argparse.Namespace) -> _ViewOptions:
    """Every argument checked before anything starts; problems exit with code 2."""
    problem = url_problem(args.url)
    if problem is not None:
        parser.error(f"the Redis URL {problem}")
    if not valid_experiment(args.experiment):
        parser.error(f"--experiment {args.experiment!r} is not a valid name: use letters, "
                     "digits, '.', '_' and '-', starting with a letter or digit, at most 128 "
                     "characters")
    if args.fps is not None and not (math.isfinite(args.fps) and args.fps > 0):
        parser.error(f"--fps must be a positive number, got {args.fps}")
    if args.max_restarts < 0:
        parser.error(f"--max-restarts must be 0 or more, got {args.max_restarts}")
    if args.budget is not None:
        if not (math.isfinite(args.budget) and 0 < args.budget <= 1):
            parser.error(f"--budget must be a fraction of the machine's CPU in (0, 1], e.g. 0.05 "
                         f"for 5%; got {args.budget}")
        if args.priority is not None:
            parser.error("pass either --budget or --priority, not both: a budget sets the "
                         "worker's priority itself")
    if args.window:
        from async_plotter.display import x_display_available

        if not x_display_available():
            parser.error("--window needs a display, and none is reachable (DISPLAY is "
                         f"{os.environ.get('DISPLAY') or 'unset'}); use --video-dir or --http "
                         "instead")
    video_dir = _checked_video_dir(parser, args.video_dir)
    http = _checked_http(parser, args.http, args.http_token)
    if not (video_dir or args.window or http is not None):
        parser.error("nothing to show: pass --video-dir DIR (mp4 files), --http PORT (a live "
                     "page) or --window")
    try:
        if args.secret_file is not None:
            secret = read_secret_file(args.secret_file)
        else:
            secret = resolve_secret(None)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    if secret is not None and args.trust_unsigned:
        source = "--secret-file" if args.secret_file is not None else f"${SECRET_ENV}"
        parser.error(
            f"--trust-unsigned conflicts with the secret from {source}: with a secret, signatures "
            "are required, always, so that nobody who can write to the Redis server can make "
            f"this viewer load their pickle. Drop --trust-unsigned (or unset {SECRET_ENV} if the "
            "trainer really publishes unsigned).")
    if secret is None and not args.trust_unsigned:
        parser.error(
            f"no secret: set {SECRET_ENV} or pass --secret-file, with the secret the trainer "
            "signs with. The trainer publishes a pickle, and loading a pickle runs code, so "
            "without a secret to check it the viewer refuses it. If nobody else can write to "
            "this Redis server, --trust-unsigned accepts it anyway.")
    warn_if_weak(secret)
    return _ViewOptions(args.url, args.experiment, secret, args.trust_unsigned, video_dir,
                        args.window, http, args.fps, args.priority, args.max_restarts, args.budget)


def _cpu_settings(options: _ViewOptions, trainer_config: Any) -> Dict[str, Any]:
    """The viewer's own --budget or --priority, else the trainer's choice (budget 0.05 when a
    trainer from before budgets set neither)."""
    if options.budget is not None:
        return {"budget": options.budget, "priority": None}
    if options.priority is not None:
        return {"budget": None, "priority": options.priority}
    from async_plotter.core import DEFAULT_BUDGET

    budget = getattr(trainer_config, "budget", None)
    priority = getattr(trainer_config, "priority", None)
    return {
        "budget": DEFAULT_BUDGET if budget is None and priority is None else budget,
        "priority": priority
    }


def _checked_video_dir(parser: argparse.ArgumentParser, video_dir: Optional[str]) -> Optional[str]:
    if video_dir is None:
        return None
    path = os.path.abspath(video_dir)
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        parser.error(f"--video-dir {path!r} cannot be written: {error.strerror or error}")
    return path


def _checked_http(parser: argparse.ArgumentParser, http: Optional[str],
                  token: Optional[str]) -> Optional[Any]:
    if http is None:
        if token is not None:
            parser.error("--http-token needs --http")
        return None
    try:
        from async_plotter.web.address import parse_http_address
    except ImportError as error:
        parser.error(f"--http: this installation has no live page ({error})")
    from async_plotter.errors import InvalidArgumentError

    try:
        return parse_http_address(int(http) if http.strip().isdigit() else http, token)
    except InvalidArgumentError as error:
        parser.error(f"--http: {error}")


class _Viewer:
    """Runs one worker at a time for the newest structure of an experiment."""

    def __init__(self, options: _ViewOptions) -> None:
        self._options = options
        self._verifier = Verifier(options.secret, options.trust_unsigned)
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._newest: Optional[Structure] = None
        self._metrics: Deque[MetricsEntry] = collections.deque(maxlen=METRICS_CAP)
        self._supervisor: Optional[Any] = None
        self._worker_stats: Dict[str, Any] = {}
        self._current: Optional[Structure] = None
        self._failed_structure: Optional[bytes] = None

    def run(self) -> int:
        from async_plotter.channel.redis_viewer import ExperimentWatcher

        options = self._options
        watcher = ExperimentWatcher(options.url, options.experiment, self._verifier,
                                    self._on_structure, self._on_metrics)
        signal.signal(signal.SIGTERM, _interrupt)
        logger.info("waiting for experiment %r on %s (Ctrl-C to stop)", options.experiment,
                    redact(options.url))
        disabled_logged = False
        hint_at = time.monotonic() + _WAITING_HINT_AFTER
        try:
            watcher.start()
            while True:
                if self._changed.wait(0.5):
                    self._changed.clear()
                    self._switch()
                    disabled_logged = False
                if self._current is None and time.monotonic() > hint_at:
                    hint_at = float("inf")
                    logger.info(
                        "still waiting for experiment %r; `async-plotter list %s` shows the "
                        "experiments that server holds", options.experiment, redact(options.url))
                if self._worker_stats.get("disabled") and not disabled_logged:
                    disabled_logged = True
                    logger.error("the worker keeps failing; waiting for the trainer to publish "
                                 "a new structure (or press Ctrl-C)")
        except KeyboardInterrupt:
            logger.info("stopping")
        finally:
            # A second Ctrl-C must not cut the bounded shutdown short and orphan the worker.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._stop_worker()
            watcher.stop()
        return 0

    # Called from the watcher's thread.
    def _on_structure(self, structure: Structure) -> None:
        with self._lock:
            self._newest = structure
        self._changed.set()

    def _on_metrics(self, entry: MetricsEntry) -> None:
        with self._lock:
            self._metrics.append(entry)
            supervisor, current = self._supervisor, self._current
        if supervisor is not None and current is not None and entry.run_id == current.run_id:
            supervisor.post_metrics(entry.iteration, entry.metrics)

    def _switch(self) -> None:
        with self._lock:
            structure = self._newest
        if structure is None:
            return
        current = self._current
        if current is not None and current.structure_id == structure.structure_id:
            if current.run_id == structure.run_id:
                return
            logger.info("the trainer restarted with the same policy structure")
            if not self._worker_stats.get("disabled"):
                with self._lock:
                    self._current = structure  # the running worker follows the new run
                    self._replay_metrics(structure)
                return
            # A worker that gave up gets another chance with the new run.
        if structure.structure_id == self._failed_structure:
            return
        config = self._load(structure)
        if config is None:
            self._failed_structure = structure.structure_id
            return
        self._stop_worker()
        self._start_worker(structure, config)

    def _load(self, structure: Structure) -> Optional[Any]:
        """Unpickle the verified structure into the worker configuration for this viewer."""
        from async_plotter.worker.config import WorkerConfig

        try:
            trainer_config = pickle.loads(structure.body)
            if not isinstance(trainer_config, WorkerConfig):
                raise PayloadRejected(f"it holds a {type(trainer_config).__name__}, not a "
                                      "WorkerConfig")
        except Exception as error:  # noqa: BLE001 - a missing module, a version mismatch, ...
            logger.error(
                "cannot load the structure of experiment %r: %s: %s. The viewer needs the "
                "packages that define the trainer's env and policy.", self._options.experiment,
                type(error).__name__, error)
            return None
        options = self._options
        return dataclasses.replace(trainer_config,
                                   video_dir=options.video_dir,
                                   window=options.window,
                                   live=bool(options.window or options.http is not None),
                                   http=options.http,
                                   fps=options.fps or trainer_config.fps,
                                   **_cpu_settings(options, trainer_config),
                                   on_frame=None,
                                   mujoco_gl=offscreen_gl_backend())

    def _start_worker(self, structure: Structure, config: Any) -> None:
        from async_plotter.worker.supervisor import WorkerSupervisor, new_worker_stats

        options = self._options
        meta = structure.meta
        logger.info("experiment %r: %s with %s, %s %s parameters, from %s", options.experiment,
                    meta.get("env"), meta.get("policy"), meta.get("size"), meta.get("dtype"),
                    meta.get("host"))
        args = ("redis", options.url, options.experiment, options.secret, options.trust_unsigned,
                structure.expected())
        self._worker_stats = new_worker_stats()
        supervisor = WorkerSupervisor(config,
                                      lambda: args,
                                      self._worker_stats,
                                      max_restarts=options.max_restarts,
                                      listener=_log_event)
        with self._lock:
            self._supervisor, self._current = supervisor, structure
            self._replay_metrics(structure)
        supervisor.start()

    def _replay_metrics(self, structure: Structure) -> None:
        """Hand the worker the run's curve so far; later entries come through _on_metrics.

        Called with the lock held, as _on_metrics stores and checks under it: each entry then
        reaches the worker exactly once."""
        for entry in self._metrics:
            if entry.run_id == structure.run_id:
                self._supervisor.post_metrics(entry.iteration, entry.metrics)

    def _stop_worker(self) -> None:
        with self._lock:
            supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.stop(5.0)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt()


def _log_event(kind: str, payload: Dict[str, Any]) -> None:
    if kind == "applied":
        iteration = payload.get("iteration")
        logger.info("applied update %s%s", payload.get("update"),
                    "" if iteration is None else f" (iteration {iteration})")
    elif kind == "video":
        logger.info("wrote %s", payload.get("path"))
    elif kind == "episode":
        logger.debug("episode of update %s: %s steps, return %.3g", payload.get("update"),
                     payload.get("steps"), payload.get("reward", float("nan")))


if __name__ == "__main__":
    sys.exit(main())
