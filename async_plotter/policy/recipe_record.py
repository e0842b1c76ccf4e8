"""``PolicyRecipe``, the record alone: what ``policy/recipe.py`` makes of the trainer's policy and
``PolicyRuntime`` rebuilds. It imports none of the adapters, so that a process that only carries
a recipe (the render process unpickles its ``WorkerConfig``, and runs no policy) need not."""
import dataclasses
from typing import Any, Dict, Optional


@dataclasses.dataclass(frozen=True)
class PolicyRecipe:
    """Everything a worker needs to rebuild a policy; parameters are sent separately."""

    kind: str  # "protocol" | "keras" | "module" | "numpy" (a copy acting in numpy)
    payload: bytes
    graph_mode: bool
    description: str
    #: the trainer's Keras settings that differ from Keras's defaults
    #: (``keras_support.trainer_settings``), applied in the worker before the policy is rebuilt;
    #: None where there are none (the worker imports Keras only for a Keras policy then)
    keras_settings: Optional[Dict[str, Any]] = None
