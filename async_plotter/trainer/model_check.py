"""The worker's MuJoCo model is the trainer's: a model changed after the env was made (heavier
bodies, another gravity or time step for a transfer experiment) does not travel, because the
worker builds its env afresh from the recipe, so its videos would show other physics than
training's, with no word. ``Plotter()`` compares the two models and names the difference.

An env that changes its own model (domain randomization at ``reset()``, in the env or a wrapper
that travels) is not compared: the worker's copy randomizes the same way, and the trainer's
model at this moment is one draw of many.
"""
import logging
from typing import Any, List, Optional

import numpy as np

from async_plotter.env.settings_check import difference
from async_plotter.errors import EnvMismatchError
from async_plotter.render.recording import model_to_mjb

logger = logging.getLogger("async_plotter")

#: differences named in the error at most
_NAMED = 3


def mujoco_model(env: Any) -> Any:
    """The ``mujoco.MjModel`` of ``env`` (under its wrappers), or None for an env without one."""
    unwrapped = getattr(env, "unwrapped", env)
    model = getattr(unwrapped, "model", None)
    return model if type(model).__name__ == "MjModel" else None


def check_same_model(trainer_env: Any, worker_env: Any, built: Optional[bytes], label: str) -> None:
    """Raise ``EnvMismatchError`` if ``trainer_env``'s MuJoCo model differs from the one
    ``worker_env`` was built with (``built``: its MJB then, before any reset), unless the
    worker's env changed its own model since (it randomizes it)."""
    trainer_model, worker_model = mujoco_model(trainer_env), mujoco_model(worker_env)
    if trainer_model is None or worker_model is None or built is None:
        return
    if model_to_mjb(worker_model) != built:
        logger.info(
            "Plotter: not comparing %s's MuJoCo model with yours: the env changes its own model "
            "(at reset: a randomized model), and the worker's copy does the same", label)
        return
    if model_to_mjb(trainer_model) == built:
        return
    differences = model_differences(trainer_model, worker_model)
    named = "; ".join(differences[:_NAMED]) + ("; ..." if len(differences) > _NAMED else "")
    raise EnvMismatchError(
        f"your env's MuJoCo model differs from the one the plot worker builds for {label} "
        f"({named or 'in its compiled form'}). It was changed after the env was made "
        "(env.unwrapped.model...), and the worker builds its env afresh, so its videos would "
        "show other physics than training's. Make the change where the env is built: pass "
        "Plotter a zero-argument function that makes the env and changes its model, or do it "
        "in a wrapper of yours (wrappers travel).")


def model_differences(ours: Any, theirs: Any) -> List[str]:
    """The fields in which two models differ, as ``name[index]: ours vs theirs`` (sizes first:
    models of other structures differ everywhere)."""
    found = []
    for owner, prefix in ((ours, ""), (ours.opt, "opt.")):
        other = theirs if owner is ours else theirs.opt
        for name in sorted(dir(owner)):
            if name.startswith("_"):
                continue
            try:
                mine, yours = getattr(owner, name), getattr(other, name)
            except Exception:  # noqa: BLE001 - a property MuJoCo computes and may refuse
                continue
            if isinstance(mine, (bool, int, float)) and isinstance(yours, (bool, int, float)):
                if mine != yours:
                    found.append(difference(prefix + name, mine, yours))
            elif isinstance(mine, np.ndarray) and isinstance(yours, np.ndarray):
                found.extend(_array_difference(prefix + name, mine, yours))
    sizes = [entry for entry in found if entry.startswith("n") and "[" not in entry]
    return sizes + [entry for entry in found if entry not in sizes]


def _array_difference(name: str, mine: np.ndarray, yours: np.ndarray) -> List[str]:
    if mine.shape != yours.shape:
        return [f"{name}: shape {mine.shape} in yours, {yours.shape} in the worker's"]
    if mine.dtype.kind not in "biuf" or np.array_equal(
            mine, yours, equal_nan=mine.dtype.kind == "f"):
        return []
    return [difference(name, mine, yours)]
