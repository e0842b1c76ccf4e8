"""The 3D live view: the viewer's browser draws the scene (three.js, through ``viser`` and
``mjviser``), the render process only poses its copy of the model and sends body poses.

An optional extra (``pip install -e .[view3d]``); nothing here is imported unless
``view="3d"`` is asked for. ``scene.py`` owns viser's server, which only ever listens on
loopback behind a secret header (``guard.py``), and poses it through mjviser's public path or
the fast path ``poses.py`` detects (the one module that reads viser's and mjviser's private
names); the browser reaches it through a page's server and ``front.py``, behind the same access
rules as every page (``web/access.py``); ``replay.py`` plays a state recording in it.
"""
import importlib.util
import sys
from typing import List

#: how to get what the 3D view needs
INSTALL_HINT = "pip install -e .[view3d]"
_MODULES = ("viser", "mjviser")


def missing_modules() -> List[str]:
    """The modules the 3D view needs that are not installed (none: it can run). Imports
    nothing."""
    return [name for name in _MODULES if not _installed(name)]


def _installed(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None  # None: its import is blocked
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
