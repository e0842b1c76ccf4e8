"""The worker's configuration, built and validated in the trainer, pickled once to each child."""
import dataclasses
from typing import Any, Optional, Tuple

from async_plotter.env_recipe import EnvRecipe
from async_plotter.policy_recipe import PolicyRecipe


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """Plain data only: user objects are inside the recipes as cloudpickle bytes."""

    env: EnvRecipe
    policy: PolicyRecipe
    max_path_length: int
    fps: float
    deterministic: bool
    #: replay the newest policy continuously (a window or a browser is watching), rather than
    #: recording one rollout per update and then sleeping
    live: bool
    video_dir: Optional[str]
    window: bool
    quality: str  # "auto" | "cheap" | "full"
    #: a fixed CPU priority the user asked for ("idle" | "low" | "normal"); None: the budget
    priority: Optional[str]
    frame_size: Optional[Tuple[int, int]]  # (width, height); None: the env's own
    on_frame: Optional[bytes]  # cloudpickled callable(frame, info), run in the render process
    mujoco_gl: str  # offscreen GL backend for MuJoCo: "egl" or "osmesa"
    seed: Optional[int]
    #: where the render process serves the live page (``async_plotter.web``), or None
    http: Optional[Any] = None
    #: fraction of the machine's CPU the worker may take beyond idle CPU (``worker/budget.py``)
    budget: Optional[float] = None
    #: recorded videos last at least this long: short episodes are chained into one file
    min_video_seconds: float = 3.0
    #: the user's ``Plotter(camera=...)`` (checked): None, "track", a name, an id or a dict
    camera: Any = None
