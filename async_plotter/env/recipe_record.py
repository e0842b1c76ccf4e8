"""``EnvRecipe``, the record alone: what ``env/recipe.py`` makes from the trainer's env argument
and ``build_env`` builds again. It imports no Gymnasium, so that a process that only carries a
recipe (the render process unpickles its ``WorkerConfig``, and builds no env) need not import it
(~40 ms of CPU at every start)."""
import dataclasses


@dataclasses.dataclass(frozen=True)
class EnvRecipe:
    """How to build the environment again in another process."""

    kind: str  # "spec" | "factory" | "copy" | "chain"
    payload: bytes
    label: str
