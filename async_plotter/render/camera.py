"""Where the render process's camera looks: every env framed at least as well as by its own
``render()`` (Gymnasium's free camera, forced even where the XML names one, lets walkers leave the
frame; MuJoCo's default shrinks scenes with a large floor). For ``camera=None``: the camera the
env was built with, else ``"track"`` for a locomotion env (the XML's ``track`` camera, or a
tracking camera on the root body), else a free camera fitting the visible bodies from the env's
own angles (docs/design.md, "camera").

:func:`plan_camera` chooses in the rollout process (plain data for ``SceneInfo``), without GL;
:func:`make_camera` builds the ``MjvCamera`` in the render process; the trainer checks ``camera=``
with :func:`check_camera_argument` and :func:`check_camera_for_model`.
"""
import math
import numbers
from typing import Any, Dict, List, Optional

import numpy as np

from async_plotter.errors import CameraError, InvalidArgumentError

#: the free-camera settings a ``camera=dict(...)`` may give (those of a ``default_camera_config``)
FREE_CAMERA_KEYS = ("lookat", "distance", "azimuth", "elevation", "trackbodyid")
TRACK = "track"

_MARGIN = 1.15  # room around the fitted content, so a limb moving a little stays in frame
_HIDDEN_GROUP = 3  # MuJoCo's default visual options draw geom groups 0-2 only


def check_camera_argument(camera: Any) -> Any:
    """Type-check ``Plotter(camera=...)`` in the trainer; returns a plain-data copy."""
    if camera is None or (isinstance(camera, str) and camera):
        return camera
    if isinstance(camera, numbers.Integral) and not isinstance(camera, bool):
        if camera < -1:
            raise InvalidArgumentError(
                f"camera id must be -1 (a free camera) or a camera of the model, got {camera}")
        return int(camera)
    if isinstance(camera, dict):
        unknown = sorted(set(camera) - set(FREE_CAMERA_KEYS), key=str)
        if unknown:
            raise InvalidArgumentError(
                f"camera dict has unknown keys {unknown}; free-camera settings are "
                f"{', '.join(FREE_CAMERA_KEYS)} (like a Gymnasium default_camera_config)")
        settings: Dict[str, Any] = {}
        for key, value in camera.items():
            settings[key] = _check_setting(key, value)
        return settings
    raise InvalidArgumentError(
        "camera must be None, 'track', a camera name, a camera id or a dict of free-camera "
        f"settings ({', '.join(FREE_CAMERA_KEYS)}); got {camera!r}")


def _check_setting(key: str, value: Any) -> Any:
    if key == "lookat":
        array = np.asarray(value, dtype=float) if _is_numeric_sequence(value) else None
        if array is None or array.shape != (3, ) or not np.all(np.isfinite(array)):
            raise InvalidArgumentError(f"camera['lookat'] must be 3 finite numbers, got {value!r}")
        return [float(v) for v in array]
    if key == "trackbodyid":
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < -1:
            raise InvalidArgumentError(f"camera['trackbodyid'] must be a body id, got {value!r}")
        return int(value)
    if (not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value)
            or (key == "distance" and value <= 0)):
        raise InvalidArgumentError(f"camera[{key!r}] must be a finite number"
                                   f"{' > 0' if key == 'distance' else ''}, got {value!r}")
    return float(value)


def _is_numeric_sequence(value: Any) -> bool:
    try:
        np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return False
    return True


def camera_names(model: Any) -> List[str]:
    """The names of the model's cameras, in id order (unnamed ones as ``#<id>``)."""
    import mujoco

    names = []
    for camera_id in range(model.ncam):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, camera_id)
        names.append(name or f"#{camera_id}")
    return names


def check_camera_for_model(camera: Any, model: Any, label: str) -> None:
    """Raise ``CameraError`` when ``camera`` names a camera or body the model lacks."""
    names = camera_names(model)
    listed = ", ".join(repr(n) for n in names) if names else "none"
    if isinstance(camera, str) and camera != TRACK and camera not in names:
        raise CameraError(
            f"camera={camera!r}: the env {label} has no camera of that name. Its cameras: "
            f"{listed}. Pass one of them, a camera id, 'track' (follow the body) or a dict of "
            "free-camera settings.")
    if isinstance(camera, int) and camera >= model.ncam:
        raise CameraError(f"camera={camera}: the env {label} has {model.ncam} camera(s) "
                          f"(ids 0..{model.ncam - 1}: {listed}); pass -1 for a free camera")
    if isinstance(camera, dict) and camera.get("trackbodyid", -1) >= model.nbody:
        raise CameraError(f"camera['trackbodyid']={camera['trackbodyid']}: the env {label} has "
                          f"{model.nbody} bodies (ids 0..{model.nbody - 1})")


# ------------------------------------------------------------------ rollout process: the plan


def plan_camera(model: Any,
                camera: Any = None,
                env_config: Optional[Dict[str, Any]] = None,
                env_camera_id: int = -1) -> Dict[str, Any]:
    """Decide which camera shows the scene; plain data, so it travels in ``SceneInfo``.

    Args:
        model: the env's ``MjModel``.
        camera: the user's ``camera=`` argument (checked), or None for the default rule.
        env_config: the env's ``default_camera_config`` (Gymnasium's ``default_cam_config``).
        env_camera_id: the camera the env itself renders with (-1: Gymnasium's free camera).
    """
    env_settings = {k: _plain(v) for k, v in (env_config or {}).items() if k in FREE_CAMERA_KEYS}
    if camera is None:
        if env_camera_id >= 0:
            return {"kind": "fixed", "id": int(env_camera_id)}
        if _root_body_of_locomotion(model) is not None:
            camera = TRACK
        else:
            # Gymnasium keeps its free camera even where the config names a trackbodyid.
            env_settings.pop("trackbodyid", None)
            return {"kind": "free", "settings": env_settings, "env": True}
    if isinstance(camera, str):
        return _named(model, camera, env_settings)
    if isinstance(camera, int):
        if camera >= 0:
            return {"kind": "fixed", "id": camera}
        return {"kind": "free", "settings": {}, "env": False}
    settings = dict(camera)
    body = settings.pop("trackbodyid", -1)
    if body >= 1:  # body 0 is the world: tracking it is a free camera
        return {"kind": "tracking", "body": int(body), "settings": settings}
    return {"kind": "free", "settings": settings, "env": False}


def _named(model: Any, name: str, env_settings: Dict[str, Any]) -> Dict[str, Any]:
    import mujoco

    camera_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
    if camera_id >= 0:
        return {"kind": "fixed", "id": int(camera_id)}
    if name != TRACK:
        raise CameraError(f"the model has no camera named {name!r}; its cameras: "
                          f"{camera_names(model) or 'none'}")
    body = _root_body_of_locomotion(model)
    if body is None:
        body = _main_root_body(model)
    settings = {k: v for k, v in env_settings.items() if k not in ("lookat", "trackbodyid")}
    return {"kind": "tracking", "body": int(body), "settings": settings}


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [float(v) for v in value.ravel()]
    return value


def _main_root_body(model: Any) -> int:
    """The child of the world with the most bodies below it: the robot, not a target marker."""
    if model.nbody <= 1:
        return 0
    roots = np.asarray(model.body_rootid[1:])
    values, counts = np.unique(roots, return_counts=True)
    return int(values[np.argmax(counts)])


def _root_body_of_locomotion(model: Any) -> Optional[int]:
    """The main root body if it can travel (free joint, or unlimited slide joint), else None."""
    import mujoco

    body = _main_root_body(model)
    if body == 0:
        return None
    first, count = int(model.body_jntadr[body]), int(model.body_jntnum[body])
    for joint in range(first, first + max(count, 0)):
        kind = model.jnt_type[joint]
        if kind == mujoco.mjtJoint.mjJNT_FREE:
            return body
        if kind == mujoco.mjtJoint.mjJNT_SLIDE and not model.jnt_limited[joint]:
            return body
    return None


# --------------------------------------------------------------- render process: the camera


def make_camera(model: Any, data: Any, plan: Optional[Dict[str, Any]], camera_id: int = -1) -> Any:
    """An ``MjvCamera`` for ``plan`` (from :func:`plan_camera`), framed against the model's
    initial pose. ``data`` is posed at that pose as a side effect (it is posed again per frame).

    A plan without a ``kind`` is taken as an env's ``default_camera_config`` (older senders).
    """
    import mujoco

    if plan is None or "kind" not in plan:
        plan = plan_camera(model, None, plan, camera_id)
    camera = mujoco.MjvCamera()
    if plan["kind"] == "fixed":
        camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        camera.fixedcamid = int(plan["id"])
        return camera
    mujoco.mj_forward(model, data)
    lookat, distance = _fit(model, data)
    camera.lookat[:] = lookat
    camera.distance = distance
    settings = dict(plan.get("settings") or {})
    if plan.get("env") and "lookat" not in settings:
        # Gymnasium's distance (the env's, else the model's extent) was meant for its own look-at
        # point; fitting may bring the camera closer, never farther.
        settings["distance"] = min(settings.get("distance", float(model.stat.extent)), distance)
    for key, value in settings.items():
        if key == "lookat":
            camera.lookat[:] = value
        elif key != "trackbodyid":
            setattr(camera, key, float(value))
    if plan.get("env") and "azimuth" not in settings:
        camera.azimuth = _facing_into_the_table(model, data, camera.lookat, camera.azimuth)
    if plan["kind"] == "tracking":
        camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        camera.trackbodyid = int(plan["body"])
        camera.lookat[:] = data.subtree_com[int(plan["body"])]
    else:
        camera.type = mujoco.mjtCamera.mjCAMERA_FREE
    return camera


def _fit(model: Any, data: Any) -> tuple:
    """Look-at point and distance that fit the visible geoms (ground planes excluded)."""
    import mujoco

    radius = np.asarray(model.geom_rbound, dtype=float)
    kinds = np.asarray(model.geom_type)
    visible = ((radius > 0) & (kinds != mujoco.mjtGeom.mjGEOM_PLANE)
               & (kinds != mujoco.mjtGeom.mjGEOM_HFIELD)
               & (np.asarray(model.geom_rgba)[:, 3] > 0)
               & (np.asarray(model.geom_group) < _HIDDEN_GROUP))
    if not visible.any():
        # Nothing but ground: Gymnasium's own rule.
        return np.median(data.geom_xpos, axis=0), float(model.stat.extent)
    # Each geom's own box turned into the world frame: bounding spheres would make a long rail
    # (InvertedDoublePendulum's) as tall as it is wide.
    aabb = np.asarray(model.geom_aabb)[visible]
    rotations = np.asarray(data.geom_xmat)[visible].reshape(-1, 3, 3)
    centres = np.asarray(data.geom_xpos)[visible] + np.einsum("gij,gj->gi", rotations, aabb[:, :3])
    half = np.einsum("gij,gj->gi", np.abs(rotations), aabb[:, 3:])
    low, high = (centres - half).min(axis=0), (centres + half).max(axis=0)
    half_diagonal = 0.5 * float(np.linalg.norm(high - low))
    half_fov = math.radians(float(model.vis.global_.fovy)) / 2
    distance = max(half_diagonal / math.sin(half_fov) * _MARGIN, 1e-3)
    return (low + high) / 2, distance


def _facing_into_the_table(model: Any, data: Any, lookat: np.ndarray, azimuth: float) -> float:
    """``azimuth``, or the opposite one when the scene stands at the near edge of a finite ground
    plane (Pusher's arm at its table's edge): seen from there the frame's lower part is the void
    past the edge; from the other side the table fills the bottom and the void is a sky above."""
    import mujoco

    kinds, sizes = np.asarray(model.geom_type), np.asarray(model.geom_size)
    tables = np.flatnonzero((kinds == mujoco.mjtGeom.mjGEOM_PLANE) & (sizes[:, 0] > 0)
                            & (sizes[:, 1] > 0) & (np.asarray(data.geom_xpos)[:, 2] <= lookat[2]))
    if tables.size == 0:
        return azimuth
    table = tables[np.argmax(sizes[tables, 0] * sizes[tables, 1])]
    rotation = np.asarray(data.geom_xmat[table]).reshape(3, 3)
    local = rotation.T @ (np.asarray(lookat) - data.geom_xpos[table])
    half = sizes[table, :2]
    if np.any(np.abs(local[:2]) > half):
        return azimuth  # not above the table
    angle = math.radians(azimuth)
    forward = (rotation.T @ np.array([math.cos(angle), math.sin(angle), 0.0]))[:2]

    def to_edge(direction: np.ndarray) -> float:
        steps = [(half[i] - np.sign(direction[i]) * local[i]) / abs(direction[i]) for i in range(2)
                 if abs(direction[i]) > 1e-9]
        return min(steps) if steps else math.inf

    if to_edge(-forward) < 0.5 * to_edge(forward):
        return (azimuth + 180.0) % 360.0
    return azimuth
