"""A mixin that lets an object be rebuilt in another process from its constructor arguments.

TensorFlow objects (variables, sessions, graphs) cannot be pickled, but the *recipe* that built
them can: the class and the arguments its constructor received. ``Serializable`` records that
recipe, and pickling a ``Serializable`` object stores only the recipe. Unpickling calls the
constructor again, so the copy is built fresh in whatever TensorFlow runtime (eager, or a graph
and session) is current in the receiving process. Parameters are not part of the recipe; they
travel separately as a flat vector (``get_param_values`` / ``set_param_values``).

Two ways to record the arguments, as in rllab::

    class MyPolicy(Serializable):
        def __init__(self, env_spec, hidden_sizes=(32, 32)):
            Serializable.quick_init(self, locals())   # rllab style
            ...

    class MyPolicy(Serializable):
        def __init__(self, env_spec, hidden_sizes=(32, 32)):
            super().__init__(env_spec, hidden_sizes=hidden_sizes)   # explicit
"""
import inspect
from typing import Any, Dict, Tuple

_ARGS = "_serializable_args"
_KWARGS = "_serializable_kwargs"


class Serializable:
    """Records constructor arguments so that pickling rebuilds the object by calling its
    constructor."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.__dict__[_ARGS] = args
        self.__dict__[_KWARGS] = kwargs

    def quick_init(self, locals_: Dict[str, Any]) -> None:
        """Record the arguments of the running ``__init__`` from its ``locals()``.

        Call it first thing in ``__init__``; later calls (from a base class) keep the first record,
        which belongs to the most derived class.
        """
        if getattr(self, _ARGS, None) is not None:
            return
        signature = inspect.signature(type(self).__init__)
        args = []
        kwargs = {}
        for name, param in list(signature.parameters.items())[1:]:  # skip self
            if param.kind is param.VAR_POSITIONAL:
                args.extend(locals_.get(name, ()))
            elif param.kind is param.VAR_KEYWORD:
                kwargs.update(locals_.get(name, {}))
            elif param.kind is param.KEYWORD_ONLY:
                kwargs[name] = locals_[name]
            else:
                args.append(locals_[name])
        Serializable.__init__(self, *args, **kwargs)

    def record_argument(self, name: str, value: Any) -> None:
        """Rebuild with ``value`` as the constructor's argument ``name`` (recorded by
        ``quick_init``): an equivalent that travels better, such as the spaces an env id
        named, which a process that never registered the id could not look up."""
        args, kwargs = self.constructor_args
        if name in kwargs:
            self.__dict__[_KWARGS] = {**kwargs, name: value}
            return
        names = [
            p.name for p in list(inspect.signature(type(self).__init__).parameters.values())[1:]
        ]
        if name in names and names.index(name) < len(args):
            index = names.index(name)
            self.__dict__[_ARGS] = (*args[:index], value, *args[index + 1:])

    @property
    def constructor_args(self) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        """The ``(args, kwargs)`` this object was built with."""
        if getattr(self, _ARGS, None) is None:
            raise TypeError(
                f"{type(self).__name__} derives from Serializable but its __init__ never "
                "recorded its arguments; call Serializable.quick_init(self, locals()) "
                "or super().__init__(*args, **kwargs) at the start of __init__")
        return self.__dict__[_ARGS], self.__dict__[_KWARGS]

    def __getstate__(self) -> Dict[str, Any]:
        args, kwargs = self.constructor_args
        return {"args": args, "kwargs": kwargs}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        # Build a fresh object with the recorded arguments and adopt its attributes: the constructor
        # creates variables in the runtime that is current here, not in the one that pickled us.
        fresh = type(self)(*state["args"], **state["kwargs"])
        self.__dict__.update(fresh.__dict__)

    @classmethod
    def clone(cls, obj: "Serializable", **overrides: Any) -> "Serializable":
        """A new object of ``obj``'s class built with its arguments, some of them replaced by
        name."""
        args, kwargs = obj.constructor_args
        signature = inspect.signature(type(obj).__init__)
        bound = signature.bind(obj, *args, **kwargs)
        bound.arguments.update(overrides)
        return type(obj)(*bound.args[1:], **bound.kwargs)
