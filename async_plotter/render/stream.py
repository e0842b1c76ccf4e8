"""What reaches the render process, one ``(StreamKind, body)`` message per ``Connection.send``.

From the rollout process: ``(SCENE, SceneInfo)`` once, then per episode ``(BEGIN, EpisodeInfo)``,
the shown steps as ``(STATES, StateChunk)`` (several MuJoCo steps each) or one ``(FRAME, array)``
per step for envs that draw themselves, and ``(END, EpisodeEnd)``; in a live view
``(CATCH_UP, Optional[EpisodeEnd])`` says that what follows, up to the first ``END`` not
``continued``, finishes a short video for the sinks that keep rollouts only
(``worker/video_chain.py``). From the trainer, on the lifeline: ``(METRICS, (iteration,
metrics))``, ``(HISTORY, HistoryPoint)`` (a history recording's point on the curve of what was
shown), ``(FINAL, update)`` (training is over; ``update`` is the final policy's) and ``(FAILED,
None)``. The render process hands each kind to its handler through one table. The types live
here so that sinks and the live page depend on this module, not on the worker that builds them.
"""
import dataclasses
import enum
from typing import Any, Dict, List, Optional

import numpy as np


class StreamKind(str, enum.Enum):
    """The kinds of message on the render process's two inputs."""

    SCENE = "scene"
    BEGIN = "begin"
    STATES = "states"
    FRAME = "frame"
    END = "end"
    METRICS = "metrics"
    FINAL = "final"
    #: from the trainer, as it stops a worker that failed: the open episode is not a video
    FAILED = "failed"
    #: from the rollout process in a live view: the rest of a short video, for recordings only
    CATCH_UP = "catch_up"
    #: from the trainer: a history recording's ``HistoryPoint`` (``render/history.py``)
    HISTORY = "history"
    #: from a viewer's supervisor: the curve starts again (another trainer run's points follow)
    CURVE_RESTART = "curve_restart"


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
class StateChunk:
    """Consecutive shown steps of a MuJoCo env, sent as one message.

    One message per chunk, not per step: on a busy machine each wakeup of a worker process costs
    several times the step it wakes for (caches gone cold; docs/design.md), so a live view
    gets its next fraction of a second at once and the render process shows it on time."""

    #: one ``mjSTATE_FULLPHYSICS`` row per step
    states: np.ndarray
    #: one row per step: the action that led there (zeros in an episode's first state's row)
    actions: np.ndarray
    #: per step, the reward summed over the env steps since the previous shown step
    rewards: np.ndarray
    #: the first row is an episode's first state, which no action led to
    starts_episode: bool = False

    def steps(self) -> List[StepState]:
        """The chunk as ``StepState`` s (views of its arrays)."""
        return [
            StepState(state, None if index == 0 and self.starts_episode else action, float(reward))
            for index, (state, action,
                        reward) in enumerate(zip(self.states, self.actions, self.rewards))
        ]


@dataclasses.dataclass(frozen=True)
class EpisodeInfo:
    """Which policy an episode shows."""

    update: int  # 0 = the initial policy
    iteration: Optional[int]
    episode: int  # episodes since the worker started
    #: 0 for an update's first episode; 1, 2, ... for episodes chained into the same video
    part: int = 0
    #: the final policy's whole episode, asked for by ``close()`` after its video had stopped
    #: as a clip: the recordings of its update are made again, replacing the clip's
    retake: bool = False


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
    #: stopped at the video's length while the episode went on (a clip: the history, where
    #: there is one, keeps the policy's whole episode)
    clipped: bool = False
