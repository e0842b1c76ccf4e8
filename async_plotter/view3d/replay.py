"""State recordings in the 3D viewer: one recording with play/pause, a time slider and a speed
(``async-plotter replay FILE``), or a run's whole history (``async-plotter replay DIR``, the live
page's ``/history/``, ``async-plotter serve``'s 3D links) with, besides, an iteration scrubber,
the curve of each recording's return with a marker per recording (a click shows it), and up to
``MAX_GHOSTS`` other iterations played at once beside the one shown, translucent, from their
shared start, each labelled with its iteration and return.

Needs no env code, no TensorFlow and no GL: the recordings hold the model; the browser draws.
A ``Replay`` is the model in a viser scene (``view3d``) behind a ``View3DFront``, and a thread
that poses it at the recording's frame rate times the speed, only while a viewer is connected
(and, for a history, lists the folder again every ``RELIST_SECONDS`` meanwhile: new recordings
appear as they are written); the sliders (dragged in the browser) seek. It serves nothing
itself: ``ReplayServer`` (the command), the live page's server (``HistoryRoute``) or serve's
answer for it, behind their token, Host and Origin checks, through ``Replay.answer``.
``ReplayPool`` keeps a bounded number of them open.
"""
import logging
import os
import threading
import time
from http import HTTPStatus
from typing import Any, Dict, List, Optional, Sequence, Tuple

from aiohttp import web

from async_plotter.render.recording import RecordingError, StateRecording
from async_plotter.until_stopped import StopRequest
from async_plotter.view3d import INSTALL_HINT, missing_modules
from async_plotter.view3d.curve import curve_svg
from async_plotter.view3d.front import View3DFront
from async_plotter.view3d.ghosts import MAX_GHOSTS, TINTS
from async_plotter.view3d.history import Entry, RunHistory
from async_plotter.web.address import HttpConfig
from async_plotter.web.server import HttpServer, plain

logger = logging.getLogger(__name__)

SPEEDS = ("0.25", "0.5", "1", "2", "4")
#: replays one ``ReplayPool`` holds open at once (each a viser server and a playback thread)
MAX_REPLAYS = 4
#: seconds a replay nobody watches stays open (a reload finds it ready), then it is closed
REPLAY_LINGER = 60.0
#: seconds between two listings of a history's folder while somebody watches
RELIST_SECONDS = 2.0
#: seconds between two moves of the step slider and the time while it plays (each is a
#: message through viser: at every shown step they cost more than the poses)
POSITION_INTERVAL = 0.25
# Seconds between two looks of a replay nobody watches at whether somebody does now.
_IDLE_POLL = 0.25


class ReplayServer(HttpServer):
    """``async-plotter replay``'s server: only the replay's page and its socket, at ``/``, and
    its curve's clicks (``POST /pick``)."""

    def __init__(self, config: HttpConfig, replay: "Replay") -> None:
        super().__init__(config, what="the replay")
        self.replay = replay

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/{path:.*}", self._route, allow_head=False)
        router.add_post("/pick", self._route)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        if request.rel_url.raw_path not in ("/", "/index.html", "/pick"):
            return plain(404, "not found; open / for the replay")
        return await self.replay.answer(request, self)


class Replay:
    """Plays the recording, or the run's recordings, at ``source`` (a file, or a folder:
    ``render/videos.py``'s ``list_recordings``) to every browser connected to ``front``
    (``start`` the playback; ``serve`` to answer for it on an address of its own). A folder's
    history starts at its newest recording, or at the one named ``select``."""

    def __init__(self, source: str, title: str, select: Optional[str] = None) -> None:
        import mujoco

        from async_plotter.render.camera import make_camera
        from async_plotter.view3d.scene import Scene3D

        self._mujoco = mujoco
        self.history = RunHistory(source)
        self.history.refresh()
        if not self.history.entries:
            raise RecordingError(f"no state recordings in {source}")
        #: a run's history (a folder), not one recording: the scrubber, the curve, ghosts
        self.many = os.path.isdir(source)
        self.entry = self._named(select) or self.history.entries[-1]
        self.recording = self.history.load(self.entry)
        self.model = self.recording.load_model()
        self.data = mujoco.MjData(self.model)
        meta = self.recording.meta
        camera = make_camera(self.model, self.data, meta.get("camera"),
                             int(meta.get("camera_id", -1)))
        self._pose(self.data, self.recording, 0)
        self.scene = Scene3D(self.model, self.data, camera, title, MAX_GHOSTS if self.many else 0)
        self.scene.set_text(f"**{title}**")
        self.front = View3DFront()
        self.front.connect(self.scene.port, self.scene.secret)
        self.server: Optional[ReplayServer] = None
        self.url: Optional[str] = None
        self.fps = float(meta.get("fps") or 30.0)
        self.index = 0
        self.playing = True
        self.speed = 1.0
        #: the other iterations shown beside this one, and their recordings and states
        self.ghosts: List[Entry] = []
        self._ghost_recordings: List[StateRecording] = []
        self._ghost_data = [
            mujoco.MjData(self.model) for _ in range(MAX_GHOSTS if self.many else 0)
        ]
        #: when a viewer was last connected (or the replay opened)
        self.watched_at = time.monotonic()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._listed_at = self._position_at = time.monotonic()
        #: the returns line the curve has (``returns.csv``): drawn again when it changes
        self._line_drawn: List[Tuple[int, float]] = []
        self._add_controls()
        self._player = threading.Thread(target=self._play, name="replay-play", daemon=True)

    @property
    def steps(self) -> int:
        """Shown steps of the longest recording shown (the others hold their last pose)."""
        return max(len(recording.states) for recording in [self.recording, *self._ghost_recordings])

    def start(self) -> "Replay":
        """Play (in a thread)."""
        self._player.start()
        return self

    def serve(self, config: HttpConfig) -> "Replay":
        """Also answer at ``config``'s address (``ReplayServer``, in a thread)."""
        self.server = ReplayServer(config, self)
        self.url = self.server.url
        threading.Thread(target=self.server.serve_forever, name="replay-http", daemon=True).start()
        return self

    async def answer(self,
                     request: web.Request,
                     server: HttpServer,
                     select: Optional[str] = None) -> web.StreamResponse:
        """What a request for this replay's page gets from ``server`` (whose guard has checked
        it): ``POST .../pick?x=N`` shows the recording at ``N`` (the curve's markers); else the
        page or its socket. The page shows the recording named ``select``, or the one at
        ``?x=N``, and ``?ghosts=N,M`` beside it, where asked."""
        picking = request.rel_url.raw_path.endswith("/pick")
        if picking != (request.method == "POST"):
            return plain(HTTPStatus.METHOD_NOT_ALLOWED, "POST .../pick?x=N; GET the page",
                         {"Allow": "POST" if picking else "GET"})
        if picking:
            try:
                x = int(request.query.get("x", ""))
            except ValueError:
                return plain(HTTPStatus.BAD_REQUEST, "pick?x=<an iteration shown on the curve>")
            if not await server.in_worker(self.pick, x):
                return plain(HTTPStatus.NOT_FOUND, "no recording there")
            return web.Response(status=HTTPStatus.NO_CONTENT)
        if self.many and request.headers.get("upgrade", "").lower() != "websocket":
            await server.in_worker(self._asked, select, request.query.get("x"),
                                   request.query.get("ghosts"))
        return await self.front.answer(request, server)

    def seek(self, index: int) -> None:
        """Show step ``index`` (clamped), as the step slider does."""
        with self._lock:
            self.index = max(0, min(int(index), self.steps - 1))
            self._show()

    def pick(self, x: int) -> bool:
        """Show the recording at ``x`` (its iteration); whether there is one."""
        with self._lock:
            entry = self.history.find(x) if self.many else None
            if entry is None:
                return False
            self.show(entry)
            self._follow.value = entry == self.history.entries[-1]
            return True

    def show(self, entry: Entry) -> None:
        """Show ``entry``'s recording (at the step shown now: the same moment of another
        iteration), if it holds the model shown."""
        with self._lock:
            recording = self._loaded(entry)
            if recording is None:
                return
            self.entry, self.recording = entry, recording
            kept = [(ghost, held) for ghost, held in zip(self.ghosts, self._ghost_recordings)
                    if ghost != entry]
            self.ghosts = [ghost for ghost, _ in kept]
            self._ghost_recordings = [held for _, held in kept]
            self._refresh_shown()

    def set_ghosts(self, entries: Sequence[Entry]) -> None:
        """Show these iterations beside the one shown (at most ``MAX_GHOSTS``; the one shown,
        and recordings of another model, are left out)."""
        with self._lock:
            ghosts, recordings = [], []
            for entry in entries:
                if entry == self.entry or entry in ghosts or len(ghosts) == len(self._ghost_data):
                    continue
                recording = self._loaded(entry)
                if recording is not None:
                    ghosts.append(entry)
                    recordings.append(recording)
            self.ghosts, self._ghost_recordings = ghosts, recordings
            self._refresh_shown()

    def idle_seconds(self) -> float:
        """Seconds since a viewer was last connected (0 while one is)."""
        return 0.0 if self.front.viewers else time.monotonic() - self.watched_at

    def close(self) -> None:
        """Stop playing and serving."""
        self._stop.set()
        if self.server is not None:
            self.server.close()
        self.scene.close()

    # ------------------------------------------------------------------------ inside

    def _asked(self, select: Optional[str], x: Optional[str], ghosts: Optional[str]) -> None:
        """What a page's address asks to show: a recording by name or by ``x``, ghosts."""
        with self._lock:
            entry = self._named(select)
            if entry is None and x is not None:
                entry = next(iter(self._parse_ghosts(x)), None)
            if entry is not None:
                self.show(entry)
                self._follow.value = entry == self.history.entries[-1]
            if ghosts is not None:
                self.set_ghosts(self._parse_ghosts(ghosts))

    def _named(self, name: Optional[str]) -> Optional[Entry]:
        """The entry of the recording file named ``name`` (by policy: a history's own recording
        of the same policy stands in for one beside a video)."""
        if not name:
            return None
        stem = os.path.basename(name)
        return next(
            (entry for entry in self.history.entries if os.path.basename(entry.file.path) == stem),
            None)

    def _loaded(self, entry: Entry) -> Optional[StateRecording]:
        """``entry``'s recording, if it can be read and holds the model shown (else said in
        the panel)."""
        try:
            recording = self.history.load(entry)
        except RecordingError as error:
            self._say(f"{entry.label} cannot be read: {error}")
            return None
        if self.many and recording.model_mjb != self.recording.model_mjb:
            self._say(f"{entry.label} holds another model: not shown here")
            return None
        return recording

    def _say(self, text: str) -> None:
        logger.info("3D history: %s", text)
        if self.many:
            self._note.content = text

    def _add_controls(self) -> None:
        gui = self.scene.server.gui
        meta = self.recording.meta
        ghost_buttons = None
        if self.many:
            ghost_buttons = self._add_history_widgets(gui)
        else:
            policy = (f"iteration {meta['iteration']}"
                      if meta.get("iteration") is not None else f"update {meta.get('update')}")
            gui.add_markdown(f"replay of {policy}: {len(self.recording.states)} steps, "
                             f"{self.recording.seconds:.1f} s")
        self._play_button = gui.add_button("Pause")
        self._slider = gui.add_slider("step", 0, max(self.steps - 1, 1), 1, 0)
        self._time = gui.add_markdown("t = 0.00 s")
        self._speed = gui.add_dropdown("speed", SPEEDS, initial_value="1")

        @self._play_button.on_click
        def _(_event: Any) -> None:
            with self._lock:
                self.playing = not self.playing
                self._play_button.label = "Pause" if self.playing else "Play"
                self._show_position()

        @self._slider.on_update
        def _(event: Any) -> None:
            if event.client is not None:  # dragged in a browser, not set by the playback
                self.seek(self._slider.value)

        @self._speed.on_update
        def _(_event: Any) -> None:
            self.speed = float(self._speed.value)

        if ghost_buttons is not None:
            self._wire_history_controls(*ghost_buttons)
            self._refresh_shown()

    def _add_history_widgets(self, gui: Any) -> Tuple[Any, Any, Any]:
        """A run's controls above the playback's: its curve, the iteration scrubber, following
        the newest, the ghosts; returns the ghosts' three buttons (add, spread, clear)."""
        self._summary = gui.add_markdown("")
        self._curve = gui.add_html("")
        entries = self.history.entries
        self._iteration = gui.add_slider("iteration", entries[0].x,
                                         max(entries[-1].x, entries[0].x + 1), 1, self.entry.x)
        self._shown = gui.add_markdown("")
        self._follow = gui.add_checkbox("follow the newest", self.entry == entries[-1])
        self._onward = gui.add_checkbox("then the next iteration", False)
        with gui.add_folder("ghosts"):
            self._ghost_text = gui.add_text("iterations", "")
            buttons = (gui.add_button("add the one shown"), gui.add_button("spread over the run"),
                       gui.add_button("clear"))
        self._note = gui.add_markdown("")
        return buttons

    def _wire_history_controls(self, add: Any, spread: Any, clear: Any) -> None:
        """What the scrubber and the ghosts' controls do when a browser moves them."""

        @self._iteration.on_update
        def _(event: Any) -> None:
            if event.client is None:
                return
            with self._lock:
                wanted = float(self._iteration.value)
                toward = (wanted > self.entry.x) - (wanted < self.entry.x)
                entry = self.history.nearest(wanted, toward)
                if entry is None:
                    return
                self.show(entry)
                self._iteration.value = entry.x  # between recordings: snapped to one
                self._follow.value = entry == self.history.entries[-1]

        @self._ghost_text.on_update
        def _(event: Any) -> None:
            if event.client is not None:
                self.set_ghosts(self._parse_ghosts(self._ghost_text.value))

        @add.on_click
        def _(_event: Any) -> None:
            with self._lock:
                self._say("")
                self.set_ghosts([*self.ghosts[-(len(self._ghost_data) - 1):], self.entry])

        @spread.on_click
        def _(_event: Any) -> None:
            with self._lock:
                others = [entry for entry in self.history.entries if entry != self.entry]
                count = min(len(self._ghost_data), len(others))
                picks = sorted(
                    {round(k * (len(others) - 1) / max(count - 1, 1))
                     for k in range(count)})
                self.set_ghosts([others[k] for k in picks])

        @clear.on_click
        def _(_event: Any) -> None:
            self.set_ghosts([])

    def _parse_ghosts(self, text: str) -> List[Entry]:
        """The recordings at the iterations listed in ``text`` (``"10, 20"``)."""
        entries = []
        for word in text.replace(",", " ").split():
            try:
                entry = self.history.find(int(word))
            except ValueError:
                entry = None
            if entry is None:
                self._say(f"no recording of iteration {word!r}")
            else:
                entries.append(entry)
        return entries

    def _refresh_shown(self) -> None:
        """The panel, the labels and the pose after the recordings shown changed."""
        if self.many:
            entries = self.history.entries
            self._summary.content = (f"{len(entries)} recordings, {entries[0].label} to "
                                     f"{entries[-1].label}")
            self._iteration.min = entries[0].x
            self._iteration.max = max(entries[-1].x, entries[0].x + 1)
            if self._iteration.value != self.entry.x:
                self._iteration.value = self.entry.x
            self._shown.content = f"shown: **{self.entry.describe()}**"
            ghosts = ", ".join(str(ghost.x) for ghost in self.ghosts)
            if self._ghost_text.value != ghosts:
                self._ghost_text.value = ghosts
            self._draw_curve()
            if self.scene.ghosts is not None:
                self.scene.ghosts.show([entry.describe() for entry in [self.entry, *self.ghosts]])
        self._slider.max = max(self.steps - 1, 1)
        self.index = min(self.index, self.steps - 1)
        self._show()

    def _draw_curve(self) -> None:
        tints = {ghost.x: TINTS[slot] for slot, ghost in enumerate(self.ghosts)}
        self._line_drawn = self.history.returns_line()
        self._curve.content = curve_svg([(entry.x, entry.episode_return, entry.describe())
                                         for entry in self.history.entries], self.entry.x, tints,
                                        self._line_drawn)

    def _relist(self) -> None:
        """New recordings in the folder: on the curve and the scrubber (and shown, when the
        newest is followed). New returns alone (``returns.csv``): on the curve."""
        self._listed_at = time.monotonic()
        with self._lock:
            newest = self.history.entries[-1]
            if not self.history.refresh() or not self.history.entries:
                if self.history.entries and self.history.returns_line() != self._line_drawn:
                    self._draw_curve()
                return
            if self._follow.value and self.history.entries[-1] != newest:
                self.show(self.history.entries[-1])
            else:
                self._refresh_shown()

    def _play(self) -> None:
        next_due = time.monotonic()
        while not self._stop.is_set():
            if not self.front.viewers:  # nothing is posed or listed while nobody watches
                self._stop.wait(_IDLE_POLL)
                next_due = time.monotonic()
                continue
            self.watched_at = time.monotonic()
            if self.many and self.watched_at - self._listed_at >= RELIST_SECONDS:
                self._relist()
            next_due += 1.0 / (self.fps * self.speed)
            delay = next_due - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_due = time.monotonic()
            with self._lock:
                # Checked under the lock: paused and then moved by the slider while this thread
                # was waiting for the lock, it must not step past where the slider put it.
                if not self.playing or not self.front.viewers:
                    continue
                if self.many and self._onward.value and self.index + 1 >= self.steps:
                    self._onward_step()
                self.index = (self.index + 1) % self.steps
                due = time.monotonic() - self._position_at >= POSITION_INTERVAL
                self._show(position=due)

    def _onward_step(self) -> None:
        """At the end of the episode, "then the next iteration": the next one (after the
        newest, the first)."""
        entries = self.history.entries
        later = [entry for entry in entries if entry.x > self.entry.x]
        self.show(later[0] if later else entries[0])

    def _show(self, position: bool = True) -> None:
        """Pose the step shown (for the viewers, if any), and say where it is (``position``)."""
        self._pose(self.data, self.recording, self.index)
        others = []
        for data, recording in zip(self._ghost_data, self._ghost_recordings):
            self._pose(data, recording, self.index)
            others.append(data)
        if position:
            self._show_position()
        if self.front.viewers:
            message = self.scene.pose(self.data, others)
            if message is not None:
                self.front.broadcast(message)

    def _show_position(self) -> None:
        """The step slider and the time at the step shown."""
        self._position_at = time.monotonic()
        shown = min(self.index, len(self.recording.states) - 1)
        self._time.content = f"t = {self.recording.times[shown]:.2f} s"
        if self._slider.value != self.index:
            self._slider.value = self.index

    def _pose(self, data: Any, recording: StateRecording, index: int) -> None:
        """``data`` at ``recording``'s step ``index`` (past its end: its last)."""
        mujoco = self._mujoco
        mujoco.mj_setState(self.model, data, recording.states[min(index,
                                                                  len(recording.states) - 1)],
                           mujoco.mjtState.mjSTATE_FULLPHYSICS)
        mujoco.mj_forward(self.model, data)


def load_replay(path: str, select: Optional[str] = None) -> Replay:
    """A playing ``Replay`` of the recording, or the folder of recordings, at ``path``
    (``RecordingError`` if there is none), titled by the run's label and the path's name."""
    replay_title = os.path.basename(os.path.normpath(path))
    replay = Replay(path, replay_title, select)
    label = replay.recording.meta.get("label")
    if label:
        replay.scene.set_text(f"**{label}: {replay_title}**")
    return replay.start()


def open_replay(path: str, config: HttpConfig) -> Replay:
    """A playing ``Replay`` of ``path``, served at ``config``'s address."""
    return load_replay(path).serve(config)


def serve_replay(path: str, config: HttpConfig, stop: StopRequest) -> None:
    """Serve ``path``'s replay until asked to ``stop``."""
    replay = open_replay(path, config)
    try:
        if not stop.is_set():
            logger.info("replay of %s at %s%s", path, replay.url,
                        " (token required: ?token=...)" if config.token else "")
        stop.wait()
    finally:
        replay.close()


class ReplayBusy(Exception):
    """Every replay a pool may hold is being watched."""


class ReplayPool:
    """The replays one server holds open (``async-plotter serve``, the live page's history), by
    folder: a recording's link opens its run's history there (at it), the first request for one
    opens it, at most ``limit`` at once. Opening another closes the one watched least recently
    among those nobody watches (none: ``ReplayBusy``); one nobody has watched for ``linger``
    seconds is closed by the pool's sweeper. Thread-safe; ``open`` blocks (it reads the files
    and builds the scene: call it off the event loop)."""

    def __init__(self, limit: int = MAX_REPLAYS, linger: float = REPLAY_LINGER) -> None:
        self.limit = limit
        self.linger = linger
        self._replays: Dict[str, Replay] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._sweeper: Optional[threading.Thread] = None

    def __len__(self) -> int:
        return len(self._replays)

    def get(self, folder: str) -> Optional[Replay]:
        """The history of ``folder`` if it is open."""
        with self._lock:
            return self._replays.get(os.path.abspath(folder))

    def open(self, path: str) -> Replay:
        """The history of the folder at ``path``, or of the folder a recording at ``path`` is
        in (showing it when it opens); ``RecordingError`` if there is no recording there."""
        folder, select = (os.path.dirname(path), os.path.basename(path)) if os.path.isfile(path) \
            else (path, None)
        key = os.path.abspath(folder)
        with self._lock:
            if self._closed.is_set():
                raise ReplayBusy("the server is stopping")
            replay = self._replays.get(key)
            if replay is not None:
                replay.watched_at = max(replay.watched_at, time.monotonic())
                return replay
            if len(self._replays) >= self.limit:
                idle = [item for item in self._replays.items() if not item[1].front.viewers]
                if not idle:
                    raise ReplayBusy(f"{self.limit} replays are being watched; try again later")
                victim, _ = max(idle, key=lambda item: item[1].idle_seconds())
                self._replays.pop(victim).close()
            replay = self._replays[key] = load_replay(folder, select)
            if self._sweeper is None:
                self._sweeper = threading.Thread(target=self._sweep,
                                                 name="async_plotter-replays",
                                                 daemon=True)
                self._sweeper.start()
            return replay

    def close(self) -> None:
        """Close every replay; ``open`` refuses from now on."""
        with self._lock:
            self._closed.set()
            replays, self._replays = list(self._replays.values()), {}
        for replay in replays:
            replay.close()

    def _sweep(self) -> None:
        while not self._closed.wait(min(self.linger / 4, 5.0)):
            with self._lock:
                expired = [
                    key for key, replay in self._replays.items()
                    if replay.idle_seconds() > self.linger
                ]
                closing = [self._replays.pop(key) for key in expired]
            for replay in closing:
                replay.close()


class HistoryRoute:
    """The live page's ``/history/``: the 3D history of the run's video folder (its
    recordings and its ``history/``'s), opened in this process by the first request for it and
    closed ``REPLAY_LINGER`` s after its last viewer left. Without the 3D extra the page says
    what to install."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._pool: Optional[ReplayPool] = None
        self._lock = threading.Lock()

    async def answer(self, request: web.Request, server: HttpServer) -> web.StreamResponse:
        """The history's page, socket or curve click (``Replay.answer``)."""
        missing = missing_modules()
        if missing:
            return plain(
                HTTPStatus.NOT_FOUND, f"the run's history in 3D needs {' and '.join(missing)}: "
                f"{INSTALL_HINT}")
        with self._lock:
            if self._pool is None:
                self._pool = ReplayPool(limit=1)
            pool = self._pool
        try:
            replay = await server.in_worker(pool.open, self.folder)
        except RecordingError:
            return plain(HTTPStatus.NOT_FOUND, "no state recordings in this run's video folder yet")
        except ReplayBusy as busy:
            return plain(HTTPStatus.SERVICE_UNAVAILABLE, str(busy), {"Retry-After": "5"})
        return await replay.answer(request, server)

    def close(self) -> None:
        """Close the history if it is open."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
