"""What an env warns of while it is built, said once on the trainer's terminal however many
sampler processes build it.

Each sampler builds its own env, and each printed Gymnasium's construction warnings ("Box low's
precision lowered" for a ``RescaleAction`` given float64 bounds) again, after the trainer's own
copy (the policy's spaces, the plotter's checks) had said them. A sampler now keeps them and
sends them with its "ready"; the trainer issues each as if raised where it was, so Python's own
once-per-place rule (and the user's warning filters) decide, as for a warning of the trainer's."""
import builtins
import sys
import warnings
from typing import Any, Callable, List, Tuple

#: a warning as sent: its text, its category's module and name, and the file and line it names
Said = Tuple[str, str, str, str, int]


def built_keeping_warnings(build: Callable[[], Any]) -> Tuple[Any, List[Said]]:
    """``build()``, and the warnings it gave instead of printing them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = build()
    said = []
    for warning in caught:
        entry = (str(warning.message), warning.category.__module__, warning.category.__qualname__,
                 warning.filename, warning.lineno)
        if entry not in said:
            said.append(entry)
    return built, said


def say_in_this_process(said: List[Said]) -> None:
    """Issue each warning as if raised where it was, in this process: one this process already
    showed (the trainer built the env too), or another sampler sent, is not shown again."""
    for text, module, name, filename, lineno in said:
        issuer = _module_of(filename)
        registry = vars(issuer).setdefault("__warningregistry__", {}) if issuer else None
        warnings.warn_explicit(text,
                               _category(module, name),
                               filename,
                               lineno,
                               module=issuer.__name__ if issuer else None,
                               registry=registry)


def _category(module: str, name: str) -> type:
    found = getattr(sys.modules.get(module, builtins), name, None)
    return found if isinstance(found, type) and issubclass(found, Warning) else UserWarning


def _module_of(filename: str) -> Any:
    """The module loaded here from ``filename`` (whose registry records what it warned of)."""
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == filename:
            return module
    return None
