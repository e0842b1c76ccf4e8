"""The worker's configuration, built and validated in the trainer, pickled once to each child."""
import dataclasses
from typing import Any, Iterable, Optional, Tuple

from async_plotter.env.recipe_record import EnvRecipe
from async_plotter.policy.recipe_record import PolicyRecipe
from async_plotter.render.history import DEFAULT_KEPT
from async_plotter.worker.parameters import ParameterLayout
from async_plotter.sinks.specs import SinkSpec, records, wants_live


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """Plain data only: user objects are inside the recipes and specs as cloudpickle bytes."""

    env: EnvRecipe
    policy: PolicyRecipe
    max_path_length: int
    #: the frame cap: frames drawn per second at most (videos play at the env's own rate under
    #: it, ``worker/playback.py``)
    fps: float
    deterministic: bool
    quality: str  # "auto" | "cheap" | "full"
    #: a fixed CPU priority the user asked for ("idle" | "low" | "normal"); None: the budget
    priority: Optional[str]
    frame_size: Optional[Tuple[int, int]]  # (width, height); None: the env's own
    mujoco_gl: str  # offscreen GL backend for MuJoCo: "egl" or "osmesa"
    seed: Optional[int]
    #: what an update's vector holds: the policy's parameters, then its env's wrapper state
    parameters: ParameterLayout
    #: that env part as it was at ``Plotter()`` (its wrappers' state and its settings), given
    #: to the rollout process's env before it plans the videos' rate, which a ``frame_skip``
    #: set after make() changes; None: nothing travels
    initial_env_state: Any = None
    #: fraction of the machine's CPU the worker may take beyond idle CPU (``supervision/budget.py``)
    budget: Optional[float] = None
    #: recorded videos last at least this long: short episodes are chained into one file
    min_video_seconds: float = 3.0
    #: steps a video recorded while training shows at most; None: ``video_seconds`` decides.
    #: The final policy's video and live views show whole rollouts
    video_length: Optional[int] = None
    #: seconds of simulated time a video recorded while training shows at most, turned into
    #: steps by the rollout process from the env's rate; None (and no ``video_length``): whole
    #: rollouts
    video_seconds: Optional[float] = None
    #: where the rollout process's TensorFlow may run: "cpu" (GPUs hidden from it) or "gpu"
    policy_device: str = "cpu"
    #: the user's ``Plotter(camera=...)`` (checked): None, "track", a name, an id or a dict
    camera: Any = None
    #: where frames go (``sinks/specs.py``); only the render process receives them
    sinks: Tuple[SinkSpec, ...] = ()
    #: replay the newest policy continuously (somebody is watching) rather than recording one
    #: rollout per update and then sleeping; set with the sinks by ``with_sinks``
    live: bool = False
    #: some sink keeps rollouts (a video, a TensorBoard image: ``records``), which the rollout
    #: process must know without the sinks: it chains short episodes into the video, and in a
    #: live view finishes a short one before showing a newer policy (``worker/video_chain.py``)
    keeps_rollouts: bool = False
    #: some sink shows episodes here; without one (a trainer that only publishes) the rollout
    #: process runs no episode of its own and only its history records the policies
    shows: bool = False
    #: a trainer that publishes: where its rollout process plays the live episode for viewers
    #: elsewhere while one watches (``channel/redis/states.RunTarget``); None: nowhere
    live_target: Any = None
    #: where the rollout process keeps the run's history: a state recording of one whole,
    #: deterministic episode of every policy it applies (``worker/history.py``); None: off
    history_dir: Optional[str] = None
    #: history recordings kept at most (``render/history.py``'s bound)
    history_kept: int = DEFAULT_KEPT
    #: seconds without progress after which the history thread counts as hung
    #: (``worker/stall.py``; the Plotter's ``hang_timeout``, as for the processes)
    hang_timeout: float = 60.0

    def with_sinks(self, sinks: Iterable[SinkSpec]) -> "WorkerConfig":
        """This configuration sending frames to ``sinks``, live exactly when one of them is."""
        sinks = tuple(sinks)
        return dataclasses.replace(self,
                                   sinks=sinks,
                                   live=wants_live(sinks),
                                   keeps_rollouts=records(sinks),
                                   shows=bool(sinks))

    def for_rollout(self) -> "WorkerConfig":
        """What the rollout process needs: everything but the sinks (their mode stays)."""
        return dataclasses.replace(self, sinks=())

    @property
    def records(self) -> bool:
        """Whether rollouts are kept (mp4 files, TensorBoard images): no step may be dropped,
        and ``close()`` waits for the final policy's."""
        return records(self.sinks)
