"""The layers of an env: the stack its wrappers make, which attributes link a layer to the envs
it wraps, and whose a layer is (Gymnasium's, gym's or this library's, or the user's own). The
wrapper state that travels (``state.py``), the settings (``settings.py``) and the checks of the
worker's copy (``check.py``, ``carried_state.py``, ``drift.py``) all read an env through these.
"""
from typing import Any, Dict, List, Optional

#: the packages whose layers hold no state beyond what travels, and whose settings are their
#: constructor parameters alone
LIBRARY_PACKAGES = ("gymnasium", "gym", "async_plotter")
#: where a layer keeps the env it wraps: Gymnasium's and gym's wrappers, our old-gym adapter
#: and rllab's ProxyEnv
WRAPPED = ("env", "_wrapped_env", "wrapped_env")
#: attributes by which a layer holds the env(s) it wraps (a vector env's too): links, not the
#: layer's own data
LINKS = WRAPPED + ("envs", "env_fns")
_MAX_DEPTH = 64

#: Gymnasium's wrappers that only record or show what the env draws, and change nothing the
#: policy sees: the worker's copy leaves them out (a ``RecordVideo`` there would write the
#: worker's episodes into your folder, drawn in the rollout process; a ``HumanRendering``
#: would open a second window)
SHOWING_ONLY = ("RecordVideo", "HumanRendering", "RenderCollection")
#: set to True on a wrapper class of yours that only logs or shows the trainer's episodes (to a
#: CSV, to wandb): the worker's copy leaves it out too, so its episodes are not logged with them
LEAVE_OUT = "async_plotter_leave_out"


def shows_only(layer: Any) -> bool:
    """Whether the worker's copy leaves ``layer`` out: one of Gymnasium's ``SHOWING_ONLY``
    wrappers, or one whose class sets ``LEAVE_OUT``."""
    kind = type(layer)
    return getattr(kind, LEAVE_OUT, False) is True or (kind.__name__ in SHOWING_ONLY
                                                       and kind.__module__.startswith("gymnasium."))


def env_layers(env: Any) -> List[Any]:
    """``env`` and every env it wraps, outermost first."""
    layers = [env]
    while len(layers) < _MAX_DEPTH:
        inner = next((own(layers[-1])[link] for link in WRAPPED if link in own(layers[-1])), None)
        if inner is None or any(inner is seen for seen in layers):
            break
        layers.append(inner)
    return layers


def shown_env(layer: Any) -> Optional[Any]:
    """The first env of ``layer`` where it is a vector env that keeps its envs
    (``SyncVectorEnv``): the one the worker shows (``recipe.describe_vector_env``); else None."""
    envs = own(layer).get("envs")
    if isinstance(envs, (list, tuple)) and envs and hasattr(envs[0], "step"):
        return envs[0]
    return None


def from_a_library(layer: Any) -> bool:
    """Whether ``layer``'s class is Gymnasium's, gym's or this library's (not the user's)."""
    return type(layer).__module__.split(".")[0] in LIBRARY_PACKAGES


def own(layer: Any) -> Dict[str, Any]:
    """``layer``'s own attributes (none for a layer with slots): gym's old wrappers forward
    unknown attributes to the env inside them, so ``getattr`` would read another layer's."""
    return getattr(layer, "__dict__", {})
