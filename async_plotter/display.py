"""Is there a display a window could open on?

Opening a GLFW window without a display aborts the whole process (SIGABRT inside GLFW, not an
exception), so this check connects to the X server's socket itself instead of asking a GL library.
"""
import contextlib
import os
import socket
import stat
import tempfile
from typing import Iterator, Optional


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


@contextlib.contextmanager
def private_runtime_dir() -> Iterator[None]:
    """``use_private_runtime_dir()`` for the block's length (the trainer-side check draws a
    self-drawing env's frame); the user's environment is as it was after."""
    previous = os.environ.get("XDG_RUNTIME_DIR")
    use_private_runtime_dir()
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = previous


def use_private_runtime_dir() -> bool:
    """Point ``XDG_RUNTIME_DIR`` at an empty folder only this user may enter where it names no
    folder (servers, containers, ``sudo``); whether it did. SDL's video start-up (pygame:
    CartPole's frames, the pixel window) asks libwayland for a compositor, which otherwise
    prints ``error: XDG_RUNTIME_DIR is invalid or not set in the environment.``; in an empty
    folder it finds none and SDL goes on to the driver it would have used."""
    current = os.environ.get("XDG_RUNTIME_DIR")
    if (current and os.path.isdir(current)) or not hasattr(os, "getuid"):
        return False
    path = os.path.join(tempfile.gettempdir(), f"async_plotter_runtime_{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or not stat.S_ISDIR(info.st_mode):
        return False  # somebody else's, or open to others: not ours to use
    os.environ["XDG_RUNTIME_DIR"] = path
    return True


def offscreen_gl_backend() -> str:
    """The offscreen GL backend for MuJoCo in the render process: ``$MUJOCO_GL`` if it names an
    offscreen one (``egl`` or ``osmesa``), else ``egl`` (Mesa's llvmpipe or a GPU's driver)."""
    requested = os.environ.get("MUJOCO_GL", "").lower()
    return requested if requested in ("egl", "osmesa") else "egl"


def osmesa_fallback_allowed() -> bool:
    """Whether a render process that gets no EGL context may draw with OSMesa instead: EGL was
    this library's default (``$MUJOCO_GL`` names no offscreen backend) and Mesa's OSMesa
    library is installed. Whoever set ``MUJOCO_GL=egl`` keeps it, and its error."""
    import ctypes.util

    chosen = os.environ.get("MUJOCO_GL", "").lower() in ("egl", "osmesa")
    return not chosen and ctypes.util.find_library("OSMesa") is not None
