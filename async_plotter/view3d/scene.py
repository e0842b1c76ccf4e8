"""``Scene3D``: the model in viser's scene, posed from the render process's ``MjData``, with the
iteration, the episode's return and the learning curve in viser's panel.

Poses go through mjviser's public ``update_from_mjdata`` (viser sends them to its clients, the
front's relays) or, where ``view3d/poses.py`` finds it works with this viser and mjviser, its
fast path (one message a frame, ~1.3 KB for HalfCheetah, sent by the live page's front);
``$ASYNC_PLOTTER_VIEW3D_POSES=public`` keeps the public path. The caller poses only while
somebody watches.
"""
import logging
import os
import pickle
import secrets
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from async_plotter.learning_curve import shown_metric
from async_plotter.view3d.ghosts import Ghosts
from async_plotter.view3d.guard import start_guarded_viser
from async_plotter.view3d.poses import fast_poses

logger = logging.getLogger(__name__)

#: points of the learning curve kept (the newest)
MAX_CURVE_POINTS = 2000
#: seconds between changes of the panel's text (a new policy shows at once)
STATUS_INTERVAL = 0.5
#: ``public``: pose through mjviser's public path even where the fast path works
POSES_ENV = "ASYNC_PLOTTER_VIEW3D_POSES"


class Scene3D:
    """A viser server showing ``model``, behind a secret only this object's front knows.

    Args:
        model: the ``MjModel`` (copied: mjviser changes some of its visual settings).
        data: an ``MjData`` of it posed as the video camera first sees it.
        camera: the video's ``MjvCamera``, where the orbit camera starts.
        title: shown in the panel.
        ghosts: slots for other policies shown beside this one (``view3d/ghosts.py``; 0: none).
    """

    def __init__(self, model: Any, data: Any, camera: Any, title: str, ghosts: int = 0) -> None:
        import mjviser
        import mujoco

        self.secret = secrets.token_urlsafe(32)
        self.server = start_guarded_viser(self.secret)
        self.port = int(self.server.get_port())
        self._model = pickle.loads(pickle.dumps(model))
        self.scene = mjviser.ViserMujocoScene(self.server, self._model, num_envs=1)
        self.server.gui.configure_theme(control_layout="collapsible",
                                        show_share_button=False,
                                        dark_mode=False)
        self._title = title
        self._status = self.server.gui.add_markdown(self._status_text(None, None, None))
        self._curve_name: Optional[str] = None
        self._curve_x: List[float] = []
        self._curve_y: List[float] = []
        self._curve: Any = None
        # Posed as the video's first frame: where mjviser puts the tracked body is where the
        # world's frame is moved from (the origin of the orbit camera).
        mujoco.mj_forward(model, data)
        with self.server.atomic():
            self.scene.update_from_mjdata(data)
        origin = -np.asarray(self.scene.fixed_bodies_frame.position, dtype=float)
        position, look_at, up, fov = start_camera(model, data, camera, origin)
        initial = self.server.initial_camera
        initial.position, initial.look_at, initial.up = position, look_at, up
        initial.fov = fov
        self._episode: Any = None
        self._last_return: Optional[float] = None
        self.ghosts: Optional[Ghosts] = Ghosts(self.server, self._model, ghosts) if ghosts else None
        #: the fast path's encoder, or None: the public path
        self.fast = (None if os.environ.get(POSES_ENV) == "public" else fast_poses(
            self.server, self.scene, data, self.ghosts))
        self._status_due, self._status_sent = False, 0.0

    def pose(self, data: Any, others: Sequence[Any] = ()) -> Optional[bytes]:
        """Show the bodies' poses in ``data`` (``mj_forward`` done), and the ghosts' in
        ``others`` (one ``MjData`` per ghost shown). The fast path returns them as one message
        for the front to send to every 3D viewer; the public path has viser send them at once,
        and returns None."""
        if self._status_due and time.monotonic() - self._status_sent >= STATUS_INTERVAL:
            self._set_status()
        if self.fast is not None:
            return self.fast.encode(data, others)
        with self.server.atomic():
            self.scene.update_from_mjdata(data)
            if self.ghosts is not None:
                self.ghosts.apply([data, *others])
        return None

    def set_text(self, text: str) -> None:
        """Put ``text`` (markdown) where the live view says which policy acts (a replay)."""
        self._status.content = text

    def begin_episode(self, episode: Any) -> None:
        """Show which policy acts now."""
        policy_changed = self._episode is None or self._episode.update != episode.update
        self._episode = episode
        self._set_status(force=policy_changed)

    def end_episode(self, total_reward: float) -> None:
        """Show a whole episode's return."""
        self._last_return = total_reward
        self._set_status()

    def _set_status(self, force: bool = False) -> None:
        # A young Hopper falls every few tenths of a second: the panel's text changes at most
        # twice a second (a new policy at once), and each change is a message through viser.
        self._status_due = True
        now = time.monotonic()
        if force or now - self._status_sent >= STATUS_INTERVAL:
            self._status.content = self._status_text(self._episode, self._last_return, None)
            self._status_due, self._status_sent = False, now

    def restart_curve(self) -> None:
        """The curve starts again (another trainer run's)."""
        self._curve_x.clear()
        self._curve_y.clear()
        if self._curve is not None:
            self._curve.data = (np.zeros(0), np.zeros(0))

    def add_metrics(self, iteration: Optional[int], metrics: Dict[str, float]) -> None:
        """A point of the learning curve."""
        name = self._curve_name
        if name is None:
            numeric = [key for key, value in metrics.items() if _finite(value)]
            if not numeric:
                return
            name = self._curve_name = shown_metric(numeric)
        value = metrics.get(name)
        if not _finite(value):
            return
        self._curve_x.append(float(len(self._curve_x) if iteration is None else iteration))
        self._curve_y.append(float(value))
        del self._curve_x[:-MAX_CURVE_POINTS], self._curve_y[:-MAX_CURVE_POINTS]
        data = (np.asarray(self._curve_x), np.asarray(self._curve_y))
        if self._curve is None:
            import viser.uplot

            self._curve = self.server.gui.add_uplot(
                data, (viser.uplot.Series(label="iteration"),
                       viser.uplot.Series(label=name, stroke="#1f77b4", width=2)),
                title=name,
                aspect=1.6)
        else:
            self._curve.data = data

    def close(self) -> None:
        """Stop viser's server."""
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            self.server.stop()

    def _status_text(self, episode: Any, last_return: Optional[float], _: Any) -> str:
        lines = [f"**{self._title}**"]
        if episode is None:
            lines.append("waiting for the first episode")
        else:
            policy = ("initial policy" if episode.update == 0 else f"iteration {episode.iteration}"
                      if episode.iteration is not None else f"update {episode.update}")
            lines.append(f"{policy} (update {episode.update}), episode {episode.episode}")
        if last_return is not None:
            lines.append(f"last episode's return: {last_return:.1f}")
        return "  \n".join(lines)


def start_camera(model: Any, data: Any, camera: Any,
                 origin: np.ndarray) -> Tuple[tuple, tuple, tuple, float]:
    """``(position, look_at, up, vertical fov in radians)`` of the video camera in mjviser's
    frame, whose ``origin`` (the tracked body: mjviser moves the world, not the camera, so an
    orbit camera placed relative to the body follows it as the video's tracking camera does)
    is given in the world's. ``data``: ``mj_forward`` done."""
    import mujoco

    scene = mujoco.MjvScene(model, maxgeom=max(1000, model.ngeom * 2))
    mujoco.mjv_updateScene(model, data, mujoco.MjvOption(), None, camera,
                           mujoco.mjtCatBit.mjCAT_ALL, scene)
    eyes = scene.camera
    position = (np.asarray(eyes[0].pos) + np.asarray(eyes[1].pos)) / 2
    forward = np.asarray(eyes[0].forward, dtype=float)
    up = np.asarray(eyes[0].up, dtype=float)
    if camera.type == mujoco.mjtCamera.mjCAMERA_FIXED:
        fovy = float(model.cam_fovy[camera.fixedcamid])
        reach = float(np.dot(origin - position, forward))
    else:
        fovy = float(model.vis.global_.fovy)
        reach = float(camera.distance)
    reach = reach if reach > 0.1 else 1.0
    look_at = position + forward * reach
    return (tuple(position - origin), tuple(look_at - origin), tuple(up), float(np.radians(fovy)))


def _finite(value: Any) -> bool:
    try:
        return bool(np.isfinite(float(value)))
    except (TypeError, ValueError):
        return False
