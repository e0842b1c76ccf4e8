"""What the rollout process sends the render process, one message per ``Connection.send``.

``("scene", SceneInfo)`` once, then per episode ``("begin", EpisodeInfo)``, one ``("state", array)``
(MuJoCo physics state, a few hundred bytes) or ``("frame", array)`` (pixels, for envs that draw
themselves) per step, and ``("end", EpisodeEnd)``.
"""
import dataclasses
from typing import Any, Dict, Optional


@dataclasses.dataclass(frozen=True)
class SceneInfo:
    """How the render process turns what it receives into pixels."""

    kind: str  # "mujoco": states to render; "frames": ready pixels
    model: Optional[bytes] = None  # pickled mujoco.MjModel
    #: the camera plan from ``async_plotter.render.camera.plan_camera`` (plain data; a dict
    #: without ``kind`` is read as Gymnasium's ``default_cam_config``)
    camera: Optional[Dict[str, Any]] = None
    camera_id: int = -1
    width: int = 480
    height: int = 480
    label: str = ""


@dataclasses.dataclass(frozen=True)
class EpisodeInfo:
    """Which policy an episode shows."""

    update: int  # 0 = the initial policy
    iteration: Optional[int]
    episode: int  # episodes since the worker started
    #: 0 for an update's first episode; 1, 2, ... for episodes chained into the same video
    part: int = 0


@dataclasses.dataclass(frozen=True)
class EpisodeEnd:
    """How an episode ended."""

    steps: int
    total_reward: float
    #: False if cut short because newer parameters arrived (live mode) or the worker is stopping
    completed: bool
    #: another episode of the same parameters follows in the same video (this one ended early)
    continued: bool = False
    #: the rollout process failed during the episode: nothing of it is worth keeping
    failed: bool = False
