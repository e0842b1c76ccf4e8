"""What ``async-plotter serve`` is told: plain, checked data (the command line checks it)."""
import dataclasses
from typing import Optional

from async_plotter.web.address import HttpConfig

DEFAULT_MAX_LIVE = 4
DEFAULT_GRACE = 10.0
DEFAULT_FPS = 20.0
DEFAULT_RECORD_BUDGET = 0.05
DEFAULT_RECORD_EVERY = 10


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """What to serve and how: checked by the caller (the command line checks its arguments).

    ``priority`` and ``budget`` are the live workers' (None: each trainer's own choice, as
    ``view``); recordings always run at low priority (nice 10) within ``record_budget``.
    """

    url: str
    http: HttpConfig
    secret: Optional[bytes]
    trust_unsigned: bool
    record_dir: Optional[str] = None
    max_live: int = DEFAULT_MAX_LIVE
    grace: float = DEFAULT_GRACE
    fps: float = DEFAULT_FPS
    record_budget: float = DEFAULT_RECORD_BUDGET
    record_every: int = DEFAULT_RECORD_EVERY
    priority: Optional[str] = None
    budget: Optional[float] = None
    max_restarts: int = 3
