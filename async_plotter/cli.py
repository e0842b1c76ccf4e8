"""``async-plotter``: follow a training run from another machine through a Redis server (view,
list, serve), and draw or replay the state recordings beside a run's videos (render, replay).

    async-plotter view redis://host:6379/0 --experiment swimmer-7 --video-dir videos
    async-plotter list redis://host:6379/0
    async-plotter serve redis://host:6379/0 --http 8080 --record-dir history
    async-plotter acl --experiment swimmer-7 | redis-cli -u redis://admin@host:6379
    async-plotter render runs/demo/videos/ --quality full --size 720
    async-plotter replay runs/demo/videos/iter_0059.npz --http 8080
    async-plotter replay runs/demo/videos/history/ --http 8080
    async-plotter replay redis://host:6379/0 --experiment swimmer-7 --video-dir videos

This module parses and checks the arguments; the viewer itself is ``serve/viewer.py``.
"""
import argparse
import logging
import math
import os
import shutil
import sys
import tempfile
import unicodedata
from typing import Any, List, NoReturn, Optional, Sequence

from async_plotter.console import configure_command_logging
from async_plotter.channel.redis.refusals import explain_failure
from async_plotter.channel.redis.urls import redact, url_problem
from async_plotter.channel.redis.signing import (SECRET_ENV, read_secret_file, resolve_secret,
                                                 warn_if_weak)
from async_plotter.channel.redis.wire import valid_experiment
from async_plotter.supervision.budget import DEFAULT_BUDGET
from async_plotter.supervision.priorities import PRIORITIES
from async_plotter.until_stopped import EXIT_DEADLINE_SECONDS, end_by_deadline, until_interrupted
from async_plotter.validation import folder_problem

logger = logging.getLogger("async_plotter")

EXIT_USAGE = 2
#: the Redis URL when none is given on the command line (which every local user can read)
URL_ENV = "ASYNC_PLOTTER_REDIS_URL"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``async-plotter`` console script; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    args.is_the_command = argv is None  # sys.argv: it may run itself again (render)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _configure_logging(args.verbose, args.quiet)
    commands = {"list": _list, "serve": _serve, "render": _render, "replay": _replay, "acl": _acl}
    try:
        code = commands.get(args.command, _view)(args.subparser, args)
    finally:
        while _claims:
            _claims.pop().release()
    if args.is_the_command:
        end_by_deadline(EXIT_DEADLINE_SECONDS)  # the interpreter's exit, which joins threads
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="async-plotter",
        description="Watch policies trained with async_plotter: follow a run from another "
        "machine through a Redis server (view, list, serve; acl prints least-privilege Redis "
        "users), or draw and replay the state recordings (.npz) beside a run's videos (render, "
        "replay).")
    commands = parser.add_subparsers(dest="command", metavar="{view,list,serve,render,replay,acl}")

    view = commands.add_parser(
        "view",
        help="render an experiment's newest policy",
        description="Render the newest policy of an experiment published by "
        "Plotter(..., channel=URL, experiment=NAME), as a local plotter would.")
    _add_url_argument(view)
    view.add_argument("--experiment", "-e", required=True, help="the experiment's name")
    view.add_argument("--video-dir", help="write one mp4 per update into this directory")
    view.add_argument("--tensorboard-dir",
                      help="write each update's rollout into TensorBoard event files here "
                      "(an animated image, and the trainer's metrics and every recorded "
                      "policy's return as scalars)")
    view.add_argument("--window", action="store_true", help="open a window (needs a display)")
    _add_worker_arguments(view,
                          http=None,
                          http_help="serve a live page: a port (8080) or host:port; other hosts "
                          "than 127.0.0.1 need --http-token",
                          fps=None,
                          workers="the worker")
    view.add_argument("--view",
                      choices=("2d", "3d"),
                      default="2d",
                      help="what --http opens: 2d (MJPEG) or 3d (the browser draws the scene; "
                      "pip install -e .[view3d])")
    view.add_argument("--max-restarts",
                      type=int,
                      default=3,
                      help="worker failures tolerated before plotting stops (default 3)")
    drawn = view.add_mutually_exclusive_group()
    drawn.add_argument("--states",
                       action="store_true",
                       help="draw the trainer's live episode from the states it sends while "
                       "watched, never rebuilding its policy: needs neither TensorFlow nor the "
                       "policy's code and loads no pickle (pip install -e .[view]). The default "
                       "where the trainer sends them (a MuJoCo env)")
    drawn.add_argument("--rollouts",
                       action="store_true",
                       help="rebuild the trainer's policy and env here (its pickled recipe: "
                       "TensorFlow and the policy's code needed) and run rollouts of its newest "
                       "parameters. The default where the trainer sends no states")
    _add_trust_arguments(view)

    listing = commands.add_parser("list",
                                  help="list the experiments on a Redis server",
                                  description="List the experiments a Redis server holds.")
    _add_url_argument(listing)

    serve = _serve_parser(commands)
    render = _render_parser(commands)
    replay = _replay_parser(commands)
    acl = _acl_parser(commands)

    for sub in (view, listing, serve, render, replay, acl):
        sub.set_defaults(subparser=sub)  # errors then show the subcommand's usage
        sub.add_argument("--verbose", "-v", action="store_true", help="log more")
        sub.add_argument("--quiet", "-q", action="store_true", help="log only problems")
    return parser


def _add_url_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url",
                        nargs="?",
                        default=os.environ.get(URL_ENV),
                        help="the Redis server: redis://[USER:PASSWORD@]host:6379/0, or "
                        "rediss://...?ssl_ca_certs=ca.pem for TLS (docs/security.md); default "
                        f"${URL_ENV}, which keeps a password out of the process list")


def _checked_url(parser: argparse.ArgumentParser, url: Optional[str]) -> str:
    if url is None:
        parser.error(f"name the Redis server: a URL such as redis://host:6379/0, or ${URL_ENV}")
    problem = url_problem(url)
    if problem is not None:
        parser.error(f"the Redis URL {problem}")
    return url


def _configure_logging(verbose: bool, quiet: bool) -> None:
    configure_command_logging(
        logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)


# ---------------------------------------------------------------------------------- render


def _render_parser(commands: Any) -> argparse.ArgumentParser:
    render = commands.add_parser(
        "render",
        help="re-render state recordings (iter_NNNN.npz) to mp4",
        description="Draw state recordings again as mp4 videos, at another quality or size. "
        "Needs no env code and no TensorFlow: a recording holds the model.")
    render.add_argument("path", help="a recording (.npz) or a folder of them")
    render.add_argument("--quality",
                        choices=("same", "cheap", "full", "auto"),
                        default="same",
                        help="visual preset (default: the one the recording was drawn with)")
    render.add_argument("--size",
                        type=int,
                        help="the frame's longer side in pixels (default: the video's own)")
    render.add_argument("--out",
                        help="where the videos go (default: <folder>/rendered; an existing "
                        "video of the same name there is replaced)")
    render.add_argument("--jobs",
                        "-j",
                        type=int,
                        help="how many recordings are drawn at once, each in a process of its "
                        "own (default: one per usable core)")
    return render


def _render(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from async_plotter.render.recording import RecordingError, recordings_in

    if args.size is not None and not 16 <= args.size <= 4096:
        parser.error(f"--size must be between 16 and 4096 pixels, got {args.size}")
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if not os.path.exists(args.path):
        parser.error(f"{args.path} does not exist")
    paths = recordings_in(args.path)
    if not paths:
        parser.error(f"no state recordings (*.npz) in {args.path}")
    folder = args.path if os.path.isdir(args.path) else os.path.dirname(args.path) or "."
    out = args.out or os.path.join(folder, "rendered")
    from async_plotter.cpu import usable_cores
    from async_plotter.render.mujoco_scene import OffscreenGLError
    from async_plotter.sinks.rerender import rerender_each, text_progress

    may_fall_back = _choose_gl(args)
    jobs = min(args.jobs or usable_cores(), len(paths))
    outcomes = rerender_each(paths, out, args.quality, args.size, jobs,
                             None if args.quiet else text_progress)
    failed = 0
    for path, outcome in outcomes:
        try:
            video = outcome()
        except RecordingError as error:
            logger.error("%s", error)
            failed += 1
            continue
        except OffscreenGLError as error:
            outcomes.close()  # the other processes fail alike: let them end first
            _answer_gl_error(error, may_fall_back)
        logger.debug("rendered %s into %s", path, video)  # the video sink said "wrote ..."
    return 1 if failed else 0


def _check_offscreen_gl(args: argparse.Namespace) -> None:
    """Choose the GL backend and make one context now, for a command that draws later (in a
    thread, when recordings come): where EGL was only our default and makes none, run the
    command again with OSMesa before anything is served."""
    from async_plotter.render.mujoco_scene import OffscreenGLError, check_offscreen_gl

    may_fall_back = _choose_gl(args)
    try:
        check_offscreen_gl()
    except OffscreenGLError as error:
        _answer_gl_error(error, may_fall_back)


def _choose_gl(args: argparse.Namespace) -> bool:
    """Set the offscreen GL backend for this process (before anything imports mujoco); whether
    EGL's failure may be answered with OSMesa (``_answer_gl_error``): EGL was only our default,
    as read before ``MUJOCO_GL`` is set here, and this is the command itself (it runs again)."""
    from async_plotter.display import osmesa_fallback_allowed
    from async_plotter.sinks.rerender import prepare_gl

    may_fall_back = args.is_the_command and osmesa_fallback_allowed()
    prepare_gl()
    return may_fall_back


def _answer_gl_error(error: Exception, may_fall_back: bool) -> NoReturn:
    """EGL made no context: run this command (``sys.argv``) again with OSMesa where that is
    allowed, as the plot worker does (PyOpenGL keeps the platform it was first imported with,
    so it takes a new process); else raise ``error``."""
    if not may_fall_back:
        raise error
    logger.warning(
        "no EGL context (%s); drawing with OSMesa instead (MUJOCO_GL=osmesa skips the "
        "try)", getattr(error, "reason", error))
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.environ["MUJOCO_GL"] = "osmesa"
    os.execv(sys.executable, [sys.executable, "-m", "async_plotter.cli", *sys.argv[1:]])


def _replay_parser(commands: Any) -> argparse.ArgumentParser:
    replay = commands.add_parser(
        "replay",
        help="open a state recording (iter_NNNN.npz), or a run's folder of them, in the 3D viewer",
        description="Serve a state recording in the 3D viewer (play/pause, a time slider, "
        "speed) until Ctrl-C; or a folder's recordings (e.g. runs/demo/videos/history/): an "
        "iteration scrubber, each recording's return on a curve, and up to 3 other iterations "
        "shown at once. Needs pip install -e .[view3d]; no env code, no GL.")
    replay.add_argument("path",
                        help="a recording (.npz), a folder of them, or a Redis server "
                        "(redis://host:6379/0) whose trainer publishes its run's history")
    replay.add_argument("--experiment",
                        "-e",
                        help="with a Redis server: the experiment whose history to show")
    replay.add_argument("--into",
                        help="with a Redis server: the folder the recordings are fetched into, "
                        "with every recording's return in returns.csv (default: a new "
                        "temporary one, removed at the end)")
    replay.add_argument("--video-dir",
                        help="with a Redis server: also draw the newest recording fetched to an "
                        "mp4 here, as they come (skipping those that come while one is drawn)")
    _add_trust_arguments(replay)
    replay.add_argument("--http",
                        default="8080",
                        help="where to serve: a port (default 8080, on 127.0.0.1; 0: a free "
                        "one) or host:port; other hosts than loopback need --http-token")
    replay.add_argument("--http-token",
                        default=os.environ.get("ASYNC_PLOTTER_HTTP_TOKEN"),
                        help="the token a browser must present (default "
                        "$ASYNC_PLOTTER_HTTP_TOKEN)")
    return replay


def _replay(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from async_plotter.render.recording import RecordingError, read_recording
    from async_plotter.render.videos import list_recordings
    from async_plotter.view3d import INSTALL_HINT, missing_modules

    missing = missing_modules()
    if missing:
        parser.error(f"the 3D viewer needs {' and '.join(missing)}: {INSTALL_HINT}")
    if args.path.startswith(("redis://", "rediss://")):
        return _replay_from_redis(parser, args)
    if args.into or args.video_dir or args.experiment:
        parser.error("--experiment, --into and --video-dir are for a Redis server (redis://...); "
                     "for a folder's recordings as mp4, use async-plotter render")
    if os.path.isdir(args.path):
        if not list_recordings(args.path):
            parser.error(f"{args.path} holds no state recordings (iter_NNNN.npz, update_NNNN.npz)")
    elif not os.path.isfile(args.path):
        parser.error(f"{args.path} is neither a file nor a folder")
    else:
        try:
            read_recording(args.path)
        except RecordingError as error:
            parser.error(str(error))
    http = _checked_http(parser, args.http, args.http_token)
    from async_plotter.view3d.replay import serve_replay

    with until_interrupted(lambda: None) as stop:
        serve_replay(args.path, http, stop)
    return 0


def _replay_from_redis(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The history a trainer publishes, fetched into a folder as it grows and replayed from
    there: states only, so this process needs neither TensorFlow nor the policy's code."""
    _checked_url(parser, args.path)
    if not valid_experiment(args.experiment):
        parser.error("replaying from Redis needs --experiment NAME (letters, digits, '.', '_', "
                     "'-'): the experiment whose history to show")
    secret = _checked_secret(parser, args, loads_pickles=False)  # states: numbers only
    http = _checked_http(parser, args.http, args.http_token)
    video_dir = _claimed_video_dir(parser, args.video_dir)
    from async_plotter.sinks.rerender import NewestRenderer, prepare_gl

    if video_dir:
        _check_offscreen_gl(args)  # which also chooses the backend
    else:
        prepare_gl()  # before anything imports mujoco
    from async_plotter.channel.redis.signing import Verifier
    from async_plotter.channel.redis.states_fetch import RecordingFetcher
    from async_plotter.view3d.replay import serve_replay

    folder = args.into or tempfile.mkdtemp(prefix=f"async_plotter_{args.experiment}_")
    renderer = NewestRenderer(video_dir) if video_dir else None
    fetcher = RecordingFetcher(args.path, args.experiment, Verifier(secret, args.trust_unsigned),
                               folder, renderer.offer if renderer else None)

    def close() -> None:
        fetcher.close()
        if renderer is not None:
            renderer.close(30.0)
        if not args.into:
            shutil.rmtree(folder, ignore_errors=True)

    with until_interrupted(close) as stop:
        logger.info("waiting for the history of experiment %r on %s", args.experiment,
                    redact(args.path))
        while not stop.is_set() and not fetcher.wait_for_first(0.25):
            if fetcher.refusal is not None:
                return 1  # said by the fetcher, naming what to fix
        if not stop.is_set():
            serve_replay(folder, http, stop)
    return 0


# ---------------------------------------------------------------------------------- list


def _list(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    url = _checked_url(parser, args.url)
    import redis

    from async_plotter.channel.redis.refusals import AccessDenied
    from async_plotter.channel.redis.link import connect
    from async_plotter.channel.redis.watcher import list_experiments

    client = connect(url)
    try:
        rows = list_experiments(client)
    except (redis.exceptions.RedisError, OSError, AccessDenied) as error:
        print("async-plotter: cannot list experiments: " +
              explain_failure(error, url, "the viewer role (list needs its +scan and +pttl)"),
              file=sys.stderr)
        return 1
    finally:
        client.close()
    if not rows:
        print(f"no experiments on {redact(url)}")
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


def _view(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    options = _check_view_arguments(parser, args)
    if options.secret is None and not options.states:
        logger.warning(
            "--trust-unsigned without a secret: whatever is in %s under experiment %r will be "
            "loaded, and loading runs code. Only do this on a Redis server nobody else can "
            "write to.", redact(options.url), options.experiment)
    from async_plotter.serve.viewer import ExperimentViewer

    return ExperimentViewer(options).run()


def _check_view_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """Every argument checked before anything starts; problems exit with code 2."""
    _checked_url(parser, args.url)
    if not valid_experiment(args.experiment):
        parser.error(f"--experiment {args.experiment!r} is not a valid name: use letters, "
                     "digits, '.', '_' and '-', starting with a letter or digit, at most 128 "
                     "characters")
    if args.fps is not None and not (math.isfinite(args.fps) and args.fps > 0):
        parser.error(f"--fps must be a positive number, got {args.fps}")
    if args.max_restarts < 0:
        parser.error(f"--max-restarts must be 0 or more, got {args.max_restarts}")
    _check_cpu_arguments(parser, args)
    if args.window:
        from async_plotter.display import x_display_available

        if not x_display_available():
            parser.error("--window needs a display, and none is reachable (DISPLAY is "
                         f"{os.environ.get('DISPLAY') or 'unset'}); use --video-dir or --http "
                         "instead")
    video_dir = _claimed_video_dir(parser, args.video_dir)
    tensorboard_dir = _checked_video_dir(parser, args.tensorboard_dir, "--tensorboard-dir")
    http = _checked_http(parser, args.http, args.http_token)
    if not (video_dir or tensorboard_dir or args.window or http is not None):
        parser.error("nothing to show: pass --video-dir DIR (mp4 files), --tensorboard-dir DIR "
                     "(TensorBoard), --http PORT (a live page) or --window")
    secret = _checked_secret(parser, args, loads_pickles=not args.states)
    from async_plotter.sinks.specs import (HttpSpec, StatesSpec, TensorBoardSpec, VideoSpec,
                                           WindowSpec)
    from async_plotter.serve.viewer import ViewOptions

    sinks: List[Any] = []
    if video_dir:
        sinks.extend((VideoSpec(video_dir), StatesSpec(video_dir)))
    if tensorboard_dir:
        sinks.append(TensorBoardSpec(tensorboard_dir))
    if args.window:
        sinks.append(WindowSpec())
    if http is not None:
        sinks.append(HttpSpec(http, video_dir, _checked_view(parser, args.view)))
    return ViewOptions(args.url,
                       args.experiment,
                       secret,
                       args.trust_unsigned,
                       tuple(sinks),
                       fps=args.fps,
                       priority=args.priority,
                       max_restarts=args.max_restarts,
                       budget=args.budget,
                       states=args.states,
                       rollouts=args.rollouts)


def _checked_video_dir(parser: argparse.ArgumentParser,
                       video_dir: Optional[str],
                       flag: str = "--video-dir") -> Optional[str]:
    if video_dir is None:
        return None
    path = os.path.abspath(video_dir)
    problem = folder_problem(path)
    if problem is not None:
        parser.error(f"{flag} {path!r} cannot be written: {problem}")
    return path


# The video folders this command writes a run into, claimed until it exits (the kernel lets go).
_claims: List[Any] = []


def _claimed_video_dir(parser: argparse.ArgumentParser, video_dir: Optional[str]) -> Optional[str]:
    """``--video-dir`` checked, and claimed as a Plotter claims its own: an earlier run's videos
    there are set aside, and a folder a live run writes into is refused (the same names would
    overwrite each other)."""
    path = _checked_video_dir(parser, video_dir)
    if path is not None:
        from async_plotter.errors import FolderInUseError
        from async_plotter.trainer.run_folder import RunFolder

        try:
            _claims.append(RunFolder(path, verbose=1, holder="an async-plotter viewer"))
        except FolderInUseError as error:
            parser.error(f"--video-dir: {error}")
    return path


def _checked_view(parser: argparse.ArgumentParser, view: str) -> str:
    if view == "3d":
        from async_plotter.view3d import INSTALL_HINT, missing_modules

        missing = missing_modules()
        if missing:
            parser.error(f"--view 3d needs {' and '.join(missing)}: {INSTALL_HINT}")
    return view


def _checked_http(parser: argparse.ArgumentParser, http: Optional[str],
                  token: Optional[str]) -> Optional[Any]:
    if http is None:
        if token is not None:
            parser.error("--http-token needs --http")
        return None
    from async_plotter.errors import InvalidArgumentError
    from async_plotter.web.address import parse_http_address

    try:
        return parse_http_address(int(http) if http.strip().isdigit() else http, token)
    except InvalidArgumentError as error:
        parser.error(f"--http: {error}")


# ----------------------------------------------------------------------------------- acl


def _acl_parser(commands: Any) -> argparse.ArgumentParser:
    acl = commands.add_parser(
        "acl",
        help="print the Redis ACL users trainers and viewers need",
        description="Print ACL SETUSER commands, with fresh random passwords, for a user per "
        "trainer that may publish only its experiment, and a viewer user that may only read "
        "(view, list, serve). Pipe them into redis-cli as an admin; the URLs to use go to "
        "stderr. docs/security.md explains each role.")
    acl.add_argument("--experiment",
                     "-e",
                     action="append",
                     default=[],
                     help="a trainer user for this experiment (repeat for more)")
    return acl


def _acl(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from async_plotter.channel.redis.acl import new_password, trainer_acl, viewer_acl

    for experiment in args.experiment:
        if not valid_experiment(experiment):
            parser.error(f"--experiment {experiment!r} is not a valid name")
    for experiment in args.experiment:
        user, password = f"trainer-{experiment}", new_password()
        print(trainer_acl(experiment, user, password))
        print(
            f"# trainer: Plotter(..., channel='redis://{user}:{password}@HOST:6379/0', "
            f"experiment={experiment!r})",
            file=sys.stderr)
    password = new_password()
    print(viewer_acl("viewer", password))
    print(f"# viewers: async-plotter view|list|serve redis://viewer:{password}@HOST:6379/0",
          file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------- serve


def _serve_parser(commands: Any) -> argparse.ArgumentParser:
    from async_plotter.serve.options import (DEFAULT_FPS, DEFAULT_GRACE, DEFAULT_MAX_LIVE,
                                             DEFAULT_RECORD_BUDGET, DEFAULT_RECORD_EVERY)

    serve = commands.add_parser(
        "serve",
        help="one page for every experiment on a Redis server",
        description="Serve one page listing every experiment on the Redis server (env, "
        "iteration, age, learning curve), with a live view of those you watch: a render worker "
        "runs for an experiment only while somebody watches it.")
    _add_url_argument(serve)
    _add_worker_arguments(serve,
                          http="8080",
                          http_help="where to serve the page: a port (default 8080, on "
                          "127.0.0.1) or host:port; other hosts than loopback need --http-token",
                          fps=DEFAULT_FPS,
                          workers="each live worker")
    serve.add_argument("--max-live",
                       type=int,
                       default=DEFAULT_MAX_LIVE,
                       help="render workers at once, one per watched experiment (default "
                       f"{DEFAULT_MAX_LIVE})")
    serve.add_argument("--grace",
                       type=float,
                       default=DEFAULT_GRACE,
                       help="seconds a render worker outlives its last viewer (default "
                       f"{DEFAULT_GRACE:g})")
    serve.add_argument("--record-dir",
                       help="keep a history: a video of each experiment every few updates, "
                       "in DIR/<experiment>/")
    serve.add_argument("--record-every",
                       type=int,
                       default=DEFAULT_RECORD_EVERY,
                       help="updates between two videos of an experiment, at least (default "
                       f"{DEFAULT_RECORD_EVERY})")
    serve.add_argument("--record-budget",
                       type=float,
                       default=DEFAULT_RECORD_BUDGET,
                       help="fraction of this machine's CPU recording may use on average, "
                       f"start-ups included (default {DEFAULT_RECORD_BUDGET:g})")
    _add_trust_arguments(serve)
    return serve


def _serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    options = _check_serve_arguments(parser, args)
    if options.secret is None:
        logger.warning(
            "--trust-unsigned without a secret: whatever is in %s will be loaded when somebody "
            "watches it, and loading runs code. Only do this on a Redis server nobody else can "
            "write to.", redact(options.url))
    from async_plotter.serve.app import ServeApp

    try:
        app = ServeApp(options)
    except OSError as error:
        print(f"async-plotter serve: {error.strerror or error}", file=sys.stderr)
        return 1
    return app.run()


def _check_serve_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """Every argument checked before anything starts; problems exit with code 2."""
    _checked_url(parser, args.url)
    if args.max_live < 1:
        parser.error(f"--max-live must be 1 or more, got {args.max_live}")
    if not (math.isfinite(args.grace) and args.grace >= 0):
        parser.error(f"--grace must be 0 or more seconds, got {args.grace}")
    if not (math.isfinite(args.fps) and args.fps > 0):
        parser.error(f"--fps must be a positive number, got {args.fps}")
    if args.record_every < 1:
        parser.error(f"--record-every must be 1 or more updates, got {args.record_every}")
    _check_cpu_fraction(parser, "--record-budget", args.record_budget)
    _check_cpu_arguments(parser, args)
    record_dir = _checked_video_dir(parser, args.record_dir)
    http = _checked_http(parser, args.http, args.http_token)
    secret = _checked_secret(parser, args)
    from async_plotter.serve.options import ServeOptions

    return ServeOptions(args.url,
                        http,
                        secret,
                        args.trust_unsigned,
                        record_dir=record_dir,
                        max_live=args.max_live,
                        grace=args.grace,
                        fps=args.fps,
                        record_budget=args.record_budget,
                        record_every=args.record_every,
                        priority=args.priority,
                        budget=args.budget)


def _add_worker_arguments(parser: argparse.ArgumentParser, *, http: Optional[str], http_help: str,
                          fps: Optional[float], workers: str) -> None:
    """--http, --http-token, --fps, --budget and --priority: the live page and the CPU settings
    of the render workers ``view`` and ``serve`` start."""
    fps_default = "the trainer's" if fps is None else f"{fps:g}"
    parser.add_argument("--http", default=http, help=http_help)
    parser.add_argument("--http-token",
                        help="token the page requires (default $ASYNC_PLOTTER_HTTP_TOKEN)")
    parser.add_argument("--fps",
                        type=float,
                        default=fps,
                        help=f"frame-rate cap of the live view and videos (default: {fps_default})")
    parser.add_argument("--budget",
                        type=float,
                        help=f"fraction of this machine's CPU {workers} may take from other work, "
                        "beyond idle CPU (default: the trainer's budget, "
                        f"{DEFAULT_BUDGET:g} unless it set one)")
    parser.add_argument("--priority",
                        choices=PRIORITIES,
                        help=f"a fixed CPU priority for {workers} instead of a budget: idle "
                        "yields to everything else; a machine that only views can use normal")


def _add_trust_arguments(parser: argparse.ArgumentParser) -> None:
    """--secret-file and --trust-unsigned, for the commands that load trainers' structures."""
    parser.add_argument("--secret-file",
                        help=f"file holding the shared signing secret (default ${SECRET_ENV})")
    parser.add_argument("--trust-unsigned",
                        action="store_true",
                        help="accept structures whose signature cannot be checked. Loading one "
                        "runs code: only for a Redis server nobody else can write to")


def _check_cpu_fraction(parser: argparse.ArgumentParser, flag: str, value: float) -> None:
    if not (math.isfinite(value) and 0 < value <= 1):
        parser.error(f"{flag} must be a fraction of the machine's CPU in (0, 1], e.g. "
                     f"{DEFAULT_BUDGET:g} for {DEFAULT_BUDGET:.0%}; got {value}")


def _check_cpu_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--budget (a fraction of the machine) or --priority, not both."""
    if args.budget is not None:
        _check_cpu_fraction(parser, "--budget", args.budget)
        if args.priority is not None:
            parser.error("pass either --budget or --priority, not both: a budget sets the "
                         "worker's priority itself")


def _checked_secret(parser: argparse.ArgumentParser,
                    args: argparse.Namespace,
                    loads_pickles: bool = True) -> Optional[bytes]:
    """The secret from --secret-file or $ASYNC_PLOTTER_SECRET, for ``view`` and ``serve``: with a
    secret, --trust-unsigned is a contradiction; without one, it is required."""
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
            f"this process load their pickle. Drop --trust-unsigned (or unset {SECRET_ENV} if "
            "the trainers really publish unsigned).")
    if secret is None and not args.trust_unsigned:
        why = ("Trainers publish pickles, and loading a pickle runs code, so without a secret to "
               "check them they are refused." if loads_pickles else
               "Without it nothing published can be checked, so everything is refused.")
        parser.error(
            f"no secret: set {SECRET_ENV} or pass --secret-file, with the secret the trainers "
            f"sign with. {why} If nobody else can write to this Redis server, --trust-unsigned "
            "accepts them anyway.")
    warn_if_weak(secret)
    return secret


if __name__ == "__main__":
    sys.exit(main())
