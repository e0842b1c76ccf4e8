"""The few GL calls the render process makes itself (the renderer's name, a texture's filter),
bound with ctypes to the GL library that PyOpenGL's platform already loaded for MuJoCo's context
(``libOpenGL`` for EGL, ``libOSMesa``, ``libGL`` for GLX). Importing PyOpenGL's ``OpenGL.GL``
for them cost 60-100 ms of CPU at every start of the render process: it wraps ~1000 functions.
Each call needs a current context."""
import ctypes
from typing import Any, Callable, Optional

GL_RENDERER = 0x1F01
GL_TEXTURE_2D = 0x0DE1
GL_TEXTURE_CUBE_MAP = 0x8513
GL_TEXTURE_MIN_FILTER = 0x2801
GL_LINEAR_MIPMAP_NEAREST = 0x2701


def _library() -> Any:
    from OpenGL import platform  # loaded already by MuJoCo's EGL and OSMesa contexts

    return platform.PLATFORM.GL


def _function(name: str, restype: Any, *argtypes: Any) -> Callable[..., Any]:
    # A function object of our own: the library's attribute is shared with whoever else
    # looked it up, and its types are not ours to set.
    return ctypes.CFUNCTYPE(restype, *argtypes)((name, _library()))


def renderer_name() -> Optional[str]:
    """``GL_RENDERER`` of the current context (``llvmpipe (LLVM 15.0.6, 256 bits)``); None where
    the driver gives none."""
    name = _function("glGetString", ctypes.c_char_p, ctypes.c_uint)(GL_RENDERER)
    return name.decode(errors="replace") if name else None


def sample_one_mipmap_level(texture: int, flat: bool) -> None:
    """Make ``texture`` (a 2D texture if ``flat``, else a cube map) sample the nearest mipmap
    level when minified."""
    target = GL_TEXTURE_2D if flat else GL_TEXTURE_CUBE_MAP
    bind = _function("glBindTexture", None, ctypes.c_uint, ctypes.c_uint)
    parameter = _function("glTexParameteri", None, ctypes.c_uint, ctypes.c_uint, ctypes.c_int)
    bind(target, texture)
    parameter(target, GL_TEXTURE_MIN_FILTER, GL_LINEAR_MIPMAP_NEAREST)
    bind(target, 0)
