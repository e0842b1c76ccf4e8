"""The experiment an algorithm is running inside, if any (set by ``run_experiment_lite``).

``run_experiment_lite`` may receive an algorithm, or a function that builds *and runs* one itself;
either way its settings (``plot``, ``n_parallel``, ``seed``, where outputs go) must reach the
algorithm's training loop. They travel through this small, explicit stack instead of through
arguments the user's function would have to forward.
"""
import contextlib
import dataclasses
from typing import Any, Dict, Iterator, List, Optional


@dataclasses.dataclass
class ExperimentContext:
    """Settings that override an algorithm's own while it trains inside an experiment."""

    plot: bool
    n_parallel: int
    seed: Optional[int]
    plot_kwargs: Dict[str, Any]
    recorder: Any  # async_plotter.rl.logger.RunRecorder
    #: the snapshot the first algorithm to train resumes from (``rl/resume.py``), if any
    resume: Any = None
    trained: List[Any] = dataclasses.field(default_factory=list)  # algorithms that ran inside


_stack: List[ExperimentContext] = []


def current_context() -> Optional[ExperimentContext]:
    """The innermost active experiment, or None outside ``run_experiment_lite``."""
    return _stack[-1] if _stack else None


@contextlib.contextmanager
def activate(context: ExperimentContext) -> Iterator[ExperimentContext]:
    """Make ``context`` current for the duration of the ``with`` block."""
    _stack.append(context)
    try:
        yield context
    finally:
        _stack.remove(context)
