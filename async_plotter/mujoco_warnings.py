"""Where MuJoCo's warnings go when the plotter's own copies of an env make MuJoCo warn: DEBUG
records of the ``async_plotter.mujoco`` logger, not stdout and ``MUJOCO_LOG.TXT`` in the user's
folder (what the user's own env says, it says in the user's process; docs/design.md). A child
process calls ``route_to_log()`` first thing; the trainer-side check runs inside
``kept_to_log()``, which puts the handler in force back after (and, where ``mujoco`` is not
imported yet, hands it the handler the moment it is, so a trainer that never uses MuJoCo does not
import it).
"""
import contextlib
import importlib.abc
import logging
import sys
import threading
from typing import Any, Iterator, Optional

_logger = logging.getLogger("async_plotter.mujoco")


def _log(message: str) -> None:
    _logger.debug("MuJoCo: %s", message)


def route_to_log() -> None:
    """This process's MuJoCo warnings become DEBUG records (imports mujoco, if installed)."""
    try:
        import mujoco
    except ImportError:
        return
    mujoco.set_mju_user_warning(_log)


class _Borrowed:
    """The handler borrowed by ``kept_to_log`` blocks (several threads' checks may overlap: the
    first in installs ours, the last out puts the user's back)."""

    lock = threading.Lock()
    depth = 0
    previous: Any = None
    finder: Optional["_WhenImported"] = None


@contextlib.contextmanager
def kept_to_log() -> Iterator[None]:
    """MuJoCo's warnings while the block runs become DEBUG records, not lines on the terminal
    and in ``MUJOCO_LOG.TXT``; the handler in force before is put back after."""
    with _Borrowed.lock:
        if _Borrowed.depth == 0:
            _borrow()
        _Borrowed.depth += 1
    try:
        yield
    finally:
        with _Borrowed.lock:
            _Borrowed.depth -= 1
            if _Borrowed.depth == 0:
                _give_back()


def _borrow() -> None:
    mujoco = sys.modules.get("mujoco")
    if mujoco is not None:
        _Borrowed.previous = mujoco.get_mju_user_warning()
        mujoco.set_mju_user_warning(_log)
    else:
        _Borrowed.previous = None  # MuJoCo's default, once it is imported
        _Borrowed.finder = _WhenImported("mujoco", lambda module: module.set_mju_user_warning(_log))
        sys.meta_path.insert(0, _Borrowed.finder)


def _give_back() -> None:
    if _Borrowed.finder is not None:
        if _Borrowed.finder in sys.meta_path:
            sys.meta_path.remove(_Borrowed.finder)
        _Borrowed.finder = None
    mujoco = sys.modules.get("mujoco")
    if mujoco is not None and mujoco.get_mju_user_warning() is _log:
        mujoco.set_mju_user_warning(_Borrowed.previous)
    _Borrowed.previous = None


class _WhenImported(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` right after ``name`` is imported, before the importer uses it. It
    finds the module through the other finders and only wraps its loader for that one import;
    the module keeps its own loader."""

    def __init__(self, name: str, then: Any) -> None:
        self._name = name
        self._then = then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self._name:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenLoader(spec.loader, self._then)
                return spec
        return None


class _ThenLoader(importlib.abc.Loader):

    def __init__(self, loader: Any, then: Any) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        # The module keeps the loader it would have had; only this call went through here.
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._then(module)
