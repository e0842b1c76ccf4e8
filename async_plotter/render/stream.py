"""What reaches the render process, one ``(StreamKind, body)`` message per ``Connection.send``.

From the rollout process: ``(SCENE, SceneInfo)`` once, then per episode ``(BEGIN, EpisodeInfo)``,
one ``(STATE, StepState)`` (MuJoCo physics state, the action and the reward: a few hundred
bytes) or ``(FRAME, array)`` (pixels, for envs that draw themselves) per shown step (every ``SceneInfo.stride``-th, and the episode's
first and last), and ``(END, EpisodeEnd)``. From the trainer, on the
lifeline: ``(METRICS, (iteration, metrics))`` and ``(FINAL, None)`` (training is over: record the
final video at full speed). The kind on the wire is the ``StreamKind`` member itself, as it is
the ``StatusKind`` member in the worker's reports (``worker/status.py``); the render process
hands each kind to its handler through one table. The types live here, with their reader, so
that sinks and the live page depend on this module and not on the worker that builds them.
"""
import dataclasses
import enum
from typing import Any, Dict, Optional

import numpy as np


class StreamKind(str, enum.Enum):
    """The kinds of message on the render process's two inputs."""

    SCENE = "scene"
    BEGIN = "begin"
    STATE = "state"
    FRAME = "frame"
    END = "end"
    METRICS = "metrics"
    FINAL = "final"
    #: from the trainer, as it stops a worker that failed: the open episode is not a video
    FAILED = "failed"


class UnknownMessage(Exception):
    """A message whose kind is not a ``StreamKind`` (a bug: both ends are this package)."""


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
    #: frames per second of this scene's videos: the env's rate over ``stride`` (real time;
    #: ``worker/playback.py``); None: the Plotter's ``fps``
    fps: Optional[float] = None
    #: every ``stride``-th env step is sent (an episode's first and last always are)
    stride: int = 1
    #: the env's steps per second of simulated time; None: unknown (the Plotter's ``fps``)
    env_rate: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class StepState:
    """One shown step of a MuJoCo env: what the render process poses its model from, and what a
    state recording keeps of it."""

    #: ``mjSTATE_FULLPHYSICS`` (simulated time first, then qpos, qvel, act, ...)
    state: np.ndarray
    #: the action that led here (None for an episode's first state)
    action: Optional[np.ndarray] = None
    #: the reward summed over the env steps since the previous shown step
    reward: float = 0.0


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
