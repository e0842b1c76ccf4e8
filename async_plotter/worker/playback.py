"""How fast a video plays and which of its steps are drawn: the env's own rate, under the cap
(docs/design.md, "Real-time videos"). A video plays at ``metadata["render_fps"]``, else
``1 / env.unwrapped.dt``, else the Plotter's ``fps`` (a Gymnasium MuJoCo env: ``1 / dt`` first,
its settings given); above the cap only every k-th step is drawn,
k the smallest stride that brings the rate within ``CAP_TOLERANCE`` of the cap (Hopper: every
4th at 31.25 frames/s). The rollout process decides and sends it in ``SceneInfo``, so every sink
plays at the same rate.
"""
import dataclasses
import math
from typing import Any, Optional

from async_plotter.env.layers import own

#: how far above the cap a shown frame rate may be: 125 steps/s at a cap of 30 -> every 4th step
CAP_TOLERANCE = 0.05


@dataclasses.dataclass(frozen=True)
class Playback:
    """An env's rate and the stride that keeps its video under the frame cap."""

    #: env steps per second of simulated time
    rate: float
    #: every ``stride``-th step is drawn (an episode's first and last steps always are)
    stride: int
    #: where ``rate`` came from: ``"render_fps"``, ``"dt"`` or ``"fps"`` (the Plotter's cap)
    source: str

    @property
    def fps(self) -> float:
        """Frames per second of the video: real time."""
        return self.rate / self.stride

    def steps(self, seconds: float) -> int:
        """Env steps in ``seconds`` of simulated time."""
        return math.ceil(seconds * self.rate)


def env_rate(env: Any) -> Optional[tuple]:
    """``(steps per second of simulated time, source)`` of ``env``, or None when it says none."""
    unwrapped = getattr(env, "unwrapped", env)
    try:
        dt = _positive(getattr(unwrapped, "dt", None))
    except Exception:  # noqa: BLE001 - a property of a user's env that fails: no rate from it
        dt = None
    fps = _render_fps(env, unwrapped)
    # Gymnasium's MuJoCo envs (a model stepped frame_skip times): render_fps is 1 / dt as the
    # env was made (a class-wide dict); a frame_skip or time step set since (they travel)
    # changes dt alone.
    if fps is not None and not (dt is not None and _steps_a_mujoco_model(unwrapped)
                                and round(1.0 / dt) != round(fps)):
        return fps, "render_fps"
    if dt is not None:
        return 1.0 / dt, "dt"
    return None


def _render_fps(env: Any, unwrapped: Any) -> Optional[float]:
    for holder in (env, unwrapped):
        metadata = getattr(holder, "metadata", None)
        if isinstance(metadata, dict):
            # old gym envs named it "video.frames_per_second"
            for key in ("render_fps", "video.frames_per_second"):
                rate = _positive(metadata.get(key))
                if rate is not None:
                    return rate
    return None


def _steps_a_mujoco_model(env: Any) -> bool:
    own_attributes = own(env)
    return "frame_skip" in own_attributes and type(
        own_attributes.get("model")).__name__ == "MjModel"


def plan_playback(env: Any, cap: float) -> Playback:
    """The playback of ``env``'s videos at a frame cap of ``cap`` frames per second."""
    found = env_rate(env)
    if found is None:
        return Playback(float(cap), 1, "fps")
    rate, source = found
    stride = max(1, math.ceil(rate / (cap * (1.0 + CAP_TOLERANCE))))
    return Playback(rate, stride, source)


def _positive(value: Any) -> Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None
