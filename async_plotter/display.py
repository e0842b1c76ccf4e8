"""Is there a display a window could open on?

Opening a GLFW window without a display aborts the whole process (SIGABRT inside GLFW, not an
exception), so this check connects to the X server's socket itself instead of asking a GL library.
"""
import contextlib
import os
import socket
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
    """A private, empty ``XDG_RUNTIME_DIR`` for the block's length, where none is set.

    The trainer-side check draws one frame of a self-drawing env (CartPole's ``rgb_array``
    through pygame); SDL's video start-up then asks libwayland for a compositor, which prints
    ``error: XDG_RUNTIME_DIR is invalid or not set in the environment.`` on every ``Plotter()``
    where the variable is missing (servers, containers, ``sudo``). With an empty directory there
    is nothing to find and nothing to print; SDL goes on to the driver it would have used. The
    user's environment is as it was after the block."""
    current = os.environ.get("XDG_RUNTIME_DIR")
    if current and os.path.isdir(current):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="async_plotter_runtime_") as private:
        os.chmod(private, 0o700)
        os.environ["XDG_RUNTIME_DIR"] = private
        try:
            yield
        finally:
            if current is None:
                os.environ.pop("XDG_RUNTIME_DIR", None)
            else:
                os.environ["XDG_RUNTIME_DIR"] = current


def offscreen_gl_backend() -> str:
    """The offscreen GL backend for MuJoCo in the render process: ``$MUJOCO_GL`` if it names an
    offscreen one (``egl`` or ``osmesa``), else ``egl`` (Mesa's llvmpipe or a GPU's driver)."""
    requested = os.environ.get("MUJOCO_GL", "").lower()
    return requested if requested in ("egl", "osmesa") else "egl"
