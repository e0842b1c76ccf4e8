"""How fast a video plays and which of its steps are drawn: the env's own rate, under the cap.

A video plays at the rate its env runs in simulated time, as Stable-Baselines3's
``VecVideoRecorder`` and Gymnasium's ``RecordVideo`` write them: ``metadata["render_fps"]``, else
``1 / env.unwrapped.dt`` (MuJoCo envs), else the Plotter's ``fps``. Where that rate is above the
frame cap (``Plotter(fps=30)``), only every k-th step is drawn and encoded, k the smallest stride
that brings the rate within ``CAP_TOLERANCE`` of the cap: Hopper and Walker2d (125 steps/s) show
every 4th step at 31.25 frames/s (not every 5th at 25: 4% over the cap is within it), CartPole
and Reacher (50) every 2nd at 25, Humanoid (67) every 3rd at 22.3; Swimmer (25) and HalfCheetah
(20) every step. So every video shows its motion at real speed, and since drawing and encoding
are nearly all of a video's CPU, a stride of k costs about 1/k of drawing every step.

The rollout process decides (it knows the env) and sends the result in the scene
(``render/stream.py`` ``SceneInfo``), so that every sink plays at the same rate.
"""
import dataclasses
import math
from typing import Any, Optional

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
    for holder in (env, getattr(env, "unwrapped", None)):
        metadata = getattr(holder, "metadata", None)
        if isinstance(metadata, dict):
            # old gym envs named it "video.frames_per_second"
            for key in ("render_fps", "video.frames_per_second"):
                rate = _positive(metadata.get(key))
                if rate is not None:
                    return rate, "render_fps"
    unwrapped = getattr(env, "unwrapped", env)
    try:
        dt = _positive(getattr(unwrapped, "dt", None))
    except Exception:  # noqa: BLE001 - a property of a user's env that fails: no rate from it
        dt = None
    if dt is not None:
        return 1.0 / dt, "dt"
    return None


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
