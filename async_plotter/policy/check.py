"""The one rule, checked in the trainer: the worker's copy of the policy acts like the trainer's.

A different policy shown without a word is the worst thing a plotter can do, and the ways it
happens are many (a config that rebuilds another model, an adapted ``Normalization``'s mean,
the trainer's Keras settings, constants a trace captured). So ``check_worker_copy`` does what the
worker will do, from what travels: rebuild the policy from the pickled recipe (``PolicyRuntime``),
apply the trainer's parameters and compare its deterministic output on the env's first observation
with the trainer's policy's; then apply a changed vector to both and compare again. A policy whose
output changes from call to call is rebuilt and run but not compared (one log line). A difference
is a ``PolicyMismatchError``; the tolerance and costs are in docs/design.md ("the worker's copy
acts like yours").
"""
import contextlib
import logging
import re
import sys
from typing import Any, Optional

import numpy as np

from async_plotter.errors import PlotterError, PolicyMismatchError, PolicyNotRebuildableError
from async_plotter.policy.compiled_call import without_xla
from async_plotter.policy.adapters import KerasAdapter, PolicyAdapter
from async_plotter.policy.recipe import PolicyRecipe, PolicyRuntime
from async_plotter.policy.random_state import random_state_kept

logger = logging.getLogger("async_plotter")

_RTOL = 1e-2
_ATOL_OF_SCALE = 5e-3


def check_worker_copy(recipe: PolicyRecipe,
                      policy: Any,
                      adapter: PolicyAdapter,
                      observation: Any,
                      label: str,
                      on_cpu: bool = True) -> None:
    """Raise a named error unless the worker's copy of ``policy`` acts like it. ``on_cpu``: the
    worker's TensorFlow sees no GPU, so its copy is checked on the CPU here too."""
    if recipe.graph_mode:
        logger.info("Plotter: not comparing the worker's copy of the policy with the trainer's "
                    "(TensorFlow runs in graph mode here); the worker rebuilds it in its own graph")
        return
    flat = adapter.flat(policy)
    with random_state_kept(policy), _device(on_cpu), without_xla():
        expected = _output(adapter, policy, observation, reference=True)
        if not _repeatable(expected, _output(adapter, policy, observation, reference=True)):
            logger.info(
                "Plotter: not comparing the worker's copy of the policy with the trainer's: the "
                "policy's output for one observation changes from call to call (it keeps state "
                "between calls without reset(), or samples without reporting its distribution)")
            expected = None
        runtime = _rebuild(recipe, adapter)
        try:
            _compare(runtime, expected, flat, observation, label, "its parameters", policy, adapter)
            if expected is not None:
                _compare_changed(runtime, policy, adapter, flat, observation, label)
        finally:
            runtime.close()


def _compare_changed(runtime: PolicyRuntime, policy: Any, adapter: PolicyAdapter, flat: np.ndarray,
                     observation: Any, label: str) -> None:
    """The same comparison with changed parameters; the trainer's policy gets ``flat`` back."""
    changed = _changed(flat)
    try:
        adapter.set_flat(policy, changed)
    except Exception as error:  # noqa: BLE001 - the policy's own checks refuse the vector
        logger.info(
            "Plotter: not comparing the copy with changed parameters: the policy "
            "refused them (%s: %s)",
            type(error).__name__, brief_error(error))
        adapter.set_flat(policy, flat)
        return
    try:  # the trainer's policy holds the changed vector until the diagnosis is made
        expected = _output(adapter, policy, observation, reference=True)
        _compare(runtime, expected, changed, observation, label,
                 "changed parameters (as after an update_plot())", policy, adapter)
    finally:
        adapter.set_flat(policy, flat)


def _output(adapter: PolicyAdapter, policy: Any, observation: Any,
            reference: bool) -> Optional[np.ndarray]:
    """What two copies must agree on, from the start of an episode (``reset()`` first, as the
    worker's rollouts do, where the policy has one)."""
    reset = getattr(policy, "reset", None)
    if callable(reset):
        reset()
    return adapter.comparable_output(policy, observation, reference=reference)


def _repeatable(first: Optional[np.ndarray], second: Optional[np.ndarray]) -> bool:
    if first is None or second is None:
        return first is None and second is None
    return np.array_equal(np.asarray(first), np.asarray(second), equal_nan=True)


def _device(on_cpu: bool) -> Any:
    # A policy that is not TensorFlow's leaves TensorFlow unimported: importing it here for a
    # device guard cost a numpy policy's Plotter() 4-40 s (and TensorFlow's log lines).
    tf = sys.modules.get("tensorflow")
    if not on_cpu or tf is None:
        return contextlib.nullcontext()
    return tf.device("/CPU:0")


def _rebuild(recipe: PolicyRecipe, adapter: PolicyAdapter) -> PolicyRuntime:
    try:
        return PolicyRuntime(recipe, deterministic=True)
    except Exception as error:  # noqa: BLE001 - the user's classes and Keras raise anything
        raise PolicyNotRebuildableError(
            f"the plot worker could not rebuild the policy {recipe.description} from what is "
            f"sent to it: {type(error).__name__}: {brief_error(error)}. {adapter.rebuild_advice()}."
        ) from error


def _compare(runtime: PolicyRuntime, expected: Optional[np.ndarray], flat: np.ndarray,
             observation: Any, label: str, which: str, policy: Any, adapter: PolicyAdapter) -> None:
    """Give the copy ``flat`` and compare what it does with ``expected``, the trainer's policy's
    output with ``flat`` (None: nothing to compare, but the copy must still take the parameters
    and act)."""
    name = type(runtime.policy).__qualname__
    try:
        runtime.set_params(flat)
    except Exception as error:  # noqa: BLE001
        raise PolicyMismatchError(
            f"the plot worker's copy of the policy ({name}) does not take the trainer's "
            f"{flat.size} parameters: {type(error).__name__}: {brief_error(error)}. Its rebuilt "
            f"structure differs from the trainer's; {adapter.rebuild_advice()}.") from error
    try:
        actual = _output(runtime.adapter, runtime.policy, observation, reference=False)
    except PlotterError:
        raise
    except Exception as error:  # noqa: BLE001 - the rebuilt copy's own code
        raise PolicyNotRebuildableError(
            f"the plot worker's copy of the policy ({name}) rebuilds but fails when it acts: "
            f"{type(error).__name__}: {brief_error(error)}. {adapter.rebuild_advice()}.") from error
    if expected is None or _close(expected, actual):
        return
    if actual is None:
        raise PolicyMismatchError(
            f"the plot worker's copy of the policy ({name}) reports no distribution in "
            "get_action()'s info where the trainer's does: its rebuilt structure differs. "
            f"{adapter.rebuild_advice()}.")
    raise PolicyMismatchError(
        f"the plot worker's copy of the policy would not act like the trainer's: on {label}'s "
        f"first observation, with {which}, the trainer's policy gives {_show(expected)} and the "
        f"worker's copy {_show(actual)}, so the videos would show another policy than the one "
        f"being trained. {_why(policy, runtime, adapter, observation)}")


def _why(policy: Any, runtime: PolicyRuntime, adapter: PolicyAdapter, observation: Any) -> str:
    if isinstance(adapter, KerasAdapter) and isinstance(runtime.adapter, KerasAdapter):
        from async_plotter.policy.keras_support import first_layer_that_differs

        batch = np.asarray(observation, np.float32)[None]
        layer = first_layer_that_differs(policy, runtime.policy, batch)
        if layer is not None:
            kind = type(policy.get_layer(layer)).__name__
            return (f"Layer {layer!r} ({kind}) holds state that is neither in get_weights() nor "
                    "in its config, or computes it from its weights once and not again: keep "
                    "it in weights (add_weight) or in get_config(), or pass "
                    "policy_factory=<zero-argument function that builds the model with that "
                    "state>.")
    return ("Something the policy holds is neither in its parameters nor rebuilt with its "
            "structure, or is computed from the parameters once and not again: keep it in the "
            "parameters, or pass policy_factory=<zero-argument function that builds the same "
            "policy, with that state>.")


def _changed(flat: np.ndarray) -> np.ndarray:
    """Another parameter vector of the same shape: every value 10% larger (signs, and variances,
    stay as they are; a vector of equal values stays one), zeros 0.01."""
    if not np.issubdtype(flat.dtype, np.floating):
        return flat.copy()
    return np.where(flat == 0, 0.01, flat * 1.1).astype(flat.dtype)


def _close(expected: np.ndarray, actual: np.ndarray) -> bool:
    expected = np.asarray(expected, np.float64)
    actual = np.asarray(actual, np.float64)
    if expected.shape != actual.shape:
        return False
    finite = np.abs(expected[np.isfinite(expected)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    return bool(
        np.allclose(actual, expected, rtol=_RTOL, atol=_ATOL_OF_SCALE * scale, equal_nan=True))


def _show(values: np.ndarray) -> str:
    return np.array2string(np.asarray(values, np.float64).ravel()[:6], precision=4)


def brief_error(error: BaseException) -> str:
    """An error's message without Keras's colour codes and its echo of the call's arguments."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).split("Arguments received")[0]
    return " ".join(text.split())[:600]
