"""Is there a display a window could open on?

Opening a GLFW window without a display aborts the whole process (SIGABRT inside GLFW, not an
exception), so this check connects to the X server's socket itself instead of asking a GL library.
"""
import os
import socket
from typing import Optional


def x_display_available(display: Optional[str] = None, timeout: float = 0.5) -> bool:
    """True if an X server accepts connections at ``display`` (default: ``$DISPLAY``)."""
    display = os.environ.get("DISPLAY", "") if display is None else display
    if not display:
        return False
    host, _, rest = display.rpartition(":")
    number = rest.split(".", 1)[0]
    if not number.isdigit():
        return False
    if host in ("", "unix"):
        return _can_connect_unix(f"/tmp/.X11-unix/X{number}", timeout) or _can_connect_unix(
            f"\0/tmp/.X11-unix/X{number}", timeout)
    try:
        with socket.create_connection((host, 6000 + int(number)), timeout=timeout):
            return True
    except OSError:
        return False


def _can_connect_unix(path: str, timeout: float) -> bool:
    if not path.startswith("\0") and not os.path.exists(path):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            return True
        except OSError:
            return False


def offscreen_gl_backend() -> str:
    """The offscreen GL backend for MuJoCo in the render process: ``$MUJOCO_GL`` if it names an
    offscreen one (``egl`` or ``osmesa``), else ``egl`` (Mesa's llvmpipe or a GPU's driver)."""
    requested = os.environ.get("MUJOCO_GL", "").lower()
    return requested if requested in ("egl", "osmesa") else "egl"
