"""Turning a trainer's policy into something a worker can rebuild (``describe_policy``), and
rebuilding it there (``PolicyRuntime``); what differs between kinds of policy is in
``adapters``. Graph-mode policies (TF1-style, in a ``tf.compat.v1.Session``) are rebuilt inside
the worker's own ``tf.Graph`` and session.
"""
import io
import pickle
import sys
from typing import Any, Callable, Optional, Tuple

import cloudpickle
import numpy as np

from async_plotter.errors import PolicyNotRebuildableError
from async_plotter.policy.adapters import NumpyCopyAdapter, PolicyAdapter, adapter_named
from async_plotter.policy.recipe_record import PolicyRecipe


def describe_policy(policy: Any,
                    adapter: PolicyAdapter,
                    factory: Optional[Callable[[], Any]] = None) -> PolicyRecipe:
    """Build the recipe for ``policy`` (of ``adapter``'s kind) in the trainer, raising a named
    error if it cannot travel."""
    kind = adapter.kind
    graph_mode = _trainer_in_graph_mode()
    description = f"{type(policy).__module__}.{type(policy).__qualname__} ({kind})"
    settings = None
    if "keras" in sys.modules:
        from async_plotter.policy.keras_support import trainer_settings

        settings = trainer_settings() or None
    if factory is not None:
        if not callable(factory):
            raise PolicyNotRebuildableError(
                f"policy_factory must be a zero-argument callable, got {type(factory).__name__}")
        adapter.check_built(policy)
        payload = _dumps(("factory", factory), factory)
        return PolicyRecipe(kind, payload, graph_mode, description, settings)
    # A model that is not built, or not one numpy computes, has no copy: structure() says
    # what is wrong with one that cannot travel either.
    copy = None if graph_mode else adapter.numpy_copy(policy)
    if copy is not None:
        # Acts in numpy in the worker: no TensorFlow (nor the trainer's Keras settings) there.
        return PolicyRecipe(NumpyCopyAdapter.kind, _dumps(("object", copy), copy), False,
                            f"{description}, acting as its numpy copy", None)
    return PolicyRecipe(kind, _dumps(adapter.structure(policy), policy), graph_mode, description,
                        settings)


def _dumps(recipe: Tuple[str, Any], obj: Any) -> bytes:
    try:
        return cloudpickle.dumps(recipe)
    except Exception as error:  # pickling raises TypeError, PicklingError, AttributeError, ...
        culprit = _find_unpicklable(obj)
        where = f" (the attribute {culprit})" if culprit else ""
        raise PolicyNotRebuildableError(
            f"the policy {type(obj).__qualname__} cannot be sent to the plot worker: pickling it "
            f"failed{where}: {error}. Make its class derive from async_plotter.Serializable "
            "(it then travels as its constructor arguments), or pass "
            "policy_factory=<zero-argument function that builds the same policy>.") from error


def _find_unpicklable(obj: Any, path: str = "", depth: int = 0) -> Optional[str]:
    """The dotted path of the first attribute that does not pickle, to name it in the error."""
    attributes = getattr(obj, "__dict__", None)
    if not isinstance(attributes, dict) or depth > 3:
        return None
    for name, value in attributes.items():
        try:
            cloudpickle.dump(value, io.BytesIO())
        except Exception:  # noqa: BLE001 - any failure means "this one"
            deeper = _find_unpicklable(value, f"{path}.{name}", depth + 1)
            return deeper or f"{path}.{name}".lstrip(".") + f" of type {type(value).__qualname__}"
    return None


def _trainer_in_graph_mode() -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and not tf.executing_eagerly()


# ----------------------------------------------------------------------------- worker side


class PolicyRuntime:
    """The rebuilt policy in the worker: applies flat parameters and picks actions."""

    def __init__(self, recipe: PolicyRecipe, deterministic: bool) -> None:
        self.adapter = adapter_named(recipe.kind)
        self.deterministic = deterministic
        self._session = None
        self._contexts = []
        if recipe.keras_settings is not None:
            from async_plotter.policy.keras_support import apply_settings

            apply_settings(recipe.keras_settings)
        if recipe.graph_mode:
            self._enter_own_graph_and_session()
        how, value = pickle.loads(recipe.payload)
        self.policy = value() if how == "factory" else self.adapter.rebuild(how, value)
        if self._session is not None:
            import tensorflow as tf

            self._session.run(tf.compat.v1.global_variables_initializer())

    def _enter_own_graph_and_session(self) -> None:
        import tensorflow as tf

        graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=graph,
                                             config=tf.compat.v1.ConfigProto(
                                                 intra_op_parallelism_threads=1,
                                                 inter_op_parallelism_threads=1))
        # Entered for the worker's lifetime: every policy call runs in this graph and session.
        for context in (graph.as_default(), self._session.as_default()):
            context.__enter__()
            self._contexts.append(context)

    def set_params(self, flat: np.ndarray) -> None:
        """Apply a flat parameter vector."""
        self.adapter.set_flat(self.policy, flat)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The action for one observation (the mean, if deterministic and the policy reports
        one)."""
        return self.adapter.act(self.policy, observation, self.deterministic)

    def warm_up(self, observation: np.ndarray) -> str:
        """Act once on ``observation`` so that tracing happens now rather than in the first
        video's first step; returns ``call_path``."""
        self.act(observation)
        return self.call_path

    @property
    def call_path(self) -> str:
        """How the policy is called per step: what the policy says (``plot_call_path``: the RL
        host's numpy copies say ``"numpy"``), else ``PolicyAdapter.call_path``."""
        return getattr(self.policy, "plot_call_path", None) or self.adapter.call_path()

    def close(self) -> None:
        """Leave the graph and session contexts; calling it again does nothing."""
        for context in reversed(self._contexts):
            context.__exit__(None, None, None)
        self._contexts = []
        if self._session is not None:
            self._session.close()
            self._session = None
