"""Where MuJoCo's warnings go when the plotter's own copies of an env make MuJoCo warn.

Without a handler MuJoCo prints each warning on stdout and appends it to ``MUJOCO_LOG.TXT`` in the
working directory, the user's folder. The plotter's copies of the env (the one the trainer-side
check builds once, and the rollout and render processes') warn about what the user's own env
warns about in the user's process: HalfCheetah's XML uses the deprecated ``settotalmass``, and a
policy's NaN controls make every copy say "Nan, Inf or huge value in CTRL". So their warnings
are DEBUG records of the ``async_plotter.mujoco`` logger; what the plotter must tell a user it
says itself, by name (actions that are not finite: ``supervision/supervisor.py``).

* A child process calls ``route_to_log()`` once, first thing: the handler is its own.
* The trainer-side check runs inside ``kept_to_log()``, which puts back whatever handler was in
  force (the user's own, or MuJoCo's default) when it ends. Where ``mujoco`` is not imported yet
  (``Plotter("HalfCheetah-v5", ...)`` first thing in a script), it is given the handler the
  moment the check's env imports it, so the trainer that never uses MuJoCo does not pay for its
  import (~0.1 s).
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
