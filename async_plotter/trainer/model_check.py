"""The worker's MuJoCo model is the trainer's. Its physics parameters travel with every update,
as the env's settings do (``env/settings.py``: options, masses, friction, damping, gains); its
geometry and looks do not, because the render process draws with its own copy of the model,
built afresh from the recipe. A change of those after the env was made (a longer limb, another
colour) would have the worker show another body than training's, with no word: ``Plotter()``
compares the two models and names the difference, and ``ModelWatch`` refuses an ``update_plot``
after such a change.

An env that changes its own model (domain randomization at ``reset()``, in the env or a wrapper
that travels) is not compared: the worker's copy randomizes the same way, and the trainer's
model at this moment is one draw of many.
"""
import copy
import logging
import time
from typing import Any, List, Optional

import numpy as np

from async_plotter.env.layers import shown_env
from async_plotter.env.settings import MODEL_PHYSICS
from async_plotter.env.settings_check import difference
from async_plotter.errors import EnvMismatchError
from async_plotter.render.recording import model_to_mjb

logger = logging.getLogger("async_plotter")

#: differences named in the error at most
_NAMED = 3
#: a check at ``update_plot`` waits this many times its own length after the one before (an
#: MJB of the model, ~60-70 us for a Gymnasium MuJoCo env): at most 1% of the trainer's time
_SPACING = 100.0
_TRAVELS = ("Of the model, its physics parameters travel to the worker with every update (the "
            "options such as gravity, masses, inertias, friction, damping, stiffness, actuator "
            "gains); its geometry and looks are drawn from the worker's own copy, built afresh.")


def mujoco_model(env: Any) -> Any:
    """The ``mujoco.MjModel`` of ``env`` (under its wrappers; of a ``SyncVectorEnv``, its first
    env's: the one the worker shows), or None for an env without one."""
    unwrapped = getattr(env, "unwrapped", env)
    model = getattr(unwrapped, "model", None)
    if type(model).__name__ == "MjModel":
        return model
    shown = shown_env(unwrapped)
    return mujoco_model(shown) if shown is not None else None


def check_same_model(trainer_env: Any, worker_env: Any, built: Optional[bytes], label: str) -> bool:
    """Raise ``EnvMismatchError`` if ``trainer_env``'s MuJoCo model differs from the one
    ``worker_env`` has been given (``built``: its MJB with what travels, before any reset),
    unless the worker's env changed its own model since (it randomizes it). Whether the models
    were compared: False for an env without one, or one that randomizes it."""
    trainer_model, worker_model = mujoco_model(trainer_env), mujoco_model(worker_env)
    if trainer_model is None or worker_model is None or built is None:
        return False
    if model_to_mjb(worker_model) != built:
        logger.info(
            "Plotter: not comparing %s's MuJoCo model with yours: the env changes its own model "
            "(at reset: a randomized model), and the worker's copy does the same", label)
        return False
    if model_to_mjb(trainer_model) == built:
        return True
    differences = model_differences(trainer_model, worker_model)
    raise EnvMismatchError(
        f"your env's MuJoCo model differs from the one the plot worker builds for {label} "
        f"({_named(differences) or 'in its compiled form'}). It was changed after the env was "
        f"made (env.unwrapped.model...), and its videos would show another body than "
        f"training's. {_TRAVELS} Make the change where the env is built: pass Plotter a "
        "zero-argument function that makes the env and changes its model.")


class ModelWatch:
    """The trainer's MuJoCo model at each ``update_plot``: a change of what does not travel
    since ``Plotter()`` refuses the update (an MJB of the model compared with the one seen,
    field by field only where it changed)."""

    def __init__(self, model: Any, label: str) -> None:
        self._model, self._label = model, label
        self._seen = model_to_mjb(model)
        self._as_checked = copy.deepcopy(model)  # what Plotter() compared with the worker's
        self._next_check = 0.0

    @classmethod
    def of(cls, trainer_env: Any, label: str) -> Optional["ModelWatch"]:
        """A watch of ``trainer_env``'s model, or None where it has none."""
        model = mujoco_model(trainer_env) if trainer_env is not None else None
        return cls(model, label) if model is not None else None

    def check(self) -> None:
        """Raise ``EnvMismatchError`` if the model changed since ``Plotter()`` in what does not
        travel."""
        started = time.perf_counter()
        if started < self._next_check:
            return
        seen = model_to_mjb(self._model)
        if seen != self._seen:
            differences = model_differences(self._model, self._as_checked, travelling=False)
            if differences:
                raise EnvMismatchError(
                    f"since Plotter() was built, your env's MuJoCo model changed in what does "
                    f"not travel to the plot worker ({_named(differences)}), and its videos "
                    f"would show another body than training's. {_TRAVELS} To show the "
                    "changed body, close this Plotter and start one for an env that is made "
                    "with it (a zero-argument function that makes the env and changes its "
                    "model).")
            self._seen = seen  # only what travels changed
        self._next_check = started + _SPACING * (time.perf_counter() - started)


def _named(differences: List[str]) -> str:
    return "; ".join(differences[:_NAMED]) + ("; ..." if len(differences) > _NAMED else "")


def model_differences(ours: Any, theirs: Any, travelling: bool = True) -> List[str]:
    """The fields in which two models differ, as ``name[index]: ours vs theirs`` (sizes first:
    models of other structures differ everywhere); without ``travelling``, leaving out those
    that travel with every update (``env/settings.py``'s model settings)."""
    found = []
    owners = ((ours, ""), (ours.opt, "opt.")) if travelling else ((ours, ""), )
    for owner, prefix in owners:
        other = theirs if owner is ours else theirs.opt
        for name in sorted(dir(owner)):
            if name.startswith("_") or (not travelling and name in MODEL_PHYSICS):
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
