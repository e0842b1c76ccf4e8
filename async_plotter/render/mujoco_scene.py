"""Draws MuJoCo physics states offscreen, with a visual preset chosen from the GL renderer.

Software GL (Mesa llvmpipe) spends most of a frame on shadows and reflections: measured ~60-110 ms
per 480x480 frame with default visuals against ~9-18 ms with shadows, reflections and skybox off,
and half of what is left on multisampling (4 samples by default), which the cheap preset also
turns off.
The cheap preset also draws floors in coarser grids (Swimmer's took 45% of its frame) and round
geoms with half MuJoCo's default slices and stacks (a fifth to a third of what was left), and
samples textures from one mipmap level instead of blending two (a seventh to a fifth of what was
left after that). On a real GPU the full visuals cost ~3 ms. So ``quality="auto"`` turns them
off only on software.
"""
import logging
import os
import pickle
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

logger = logging.getLogger(__name__)

_SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "software", "mesa offscreen")
#: the cheap preset's frame size, relative to the env's own (unless the user chose a size):
#: 320x320 for Gymnasium's 480x480, ~2.2x fewer pixels to draw and encode (measured on llvmpipe:
#: Swimmer 5.5 ms a frame instead of 8.0 ms, HalfCheetah 2.5 ms instead of 4.8 ms)
CHEAP_SCALE = 2 / 3
#: the cheap preset's tessellation of spheres, capsules and cylinders (``numslices``,
#: ``numstacks``; MuJoCo's defaults are 28 and 16): measured on llvmpipe at 320x320, 17-35% less
#: CPU a frame drawn (six envs, Swimmer to Humanoid), the pictures 0.07-0.35 of a colour level
#: apart on average, under 1% of pixels (along the bodies' outlines) more than 8 levels
#: (``benchmarks/frame_cost.py --compare detail``)
CHEAP_TESSELLATION: Tuple[int, int] = (14, 8)


class OffscreenGLError(RuntimeError):
    """No offscreen GL context could be made through ``backend`` (``egl`` or ``osmesa``)."""

    def __init__(self, backend: str, reason: Union[BaseException, str]) -> None:
        self.backend = backend
        self.reason = reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}"
        super().__init__(f"no offscreen GL context through MUJOCO_GL={backend} ({self.reason}); "
                         "install Mesa's EGL driver (libegl-mesa0) or OSMesa (libosmesa6), or "
                         "set MUJOCO_GL to the one that works here")

    def __reduce__(self) -> Tuple[Any, Tuple[str, str]]:
        # Raised in a drawing process of ``async-plotter render --jobs``, read in its parent.
        return OffscreenGLError, (self.backend, self.reason)


class MujocoScene:
    """Owns a copy of the model, an ``MjData`` to pose, and an offscreen renderer."""

    def __init__(self,
                 model_bytes: bytes,
                 camera: Optional[Dict[str, Any]],
                 camera_id: int,
                 width: int,
                 height: int,
                 quality: str,
                 size_chosen: bool = False,
                 gl: bool = True) -> None:
        import mujoco

        self._mujoco = mujoco
        #: the model as the rollout process sent it (a state recording keeps it unchanged)
        self.source_model = pickle.loads(model_bytes)
        self.model = pickle.loads(model_bytes)
        #: the camera plan this scene was framed with (``render/camera.py``)
        self.camera_plan = dict(camera or {})
        self.data = mujoco.MjData(self.model)
        self._state_spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        #: the arguments that decide the frames (a state recording keeps them to re-render)
        self.quality, self.size_chosen = quality, size_chosen
        self.requested_size = (width, height)
        self._renderer: Any = None
        self.gl_renderer = "none (nothing drawn here yet)"
        self.preset = "n/a"
        self.width, self.height = width, height
        self.camera = self._make_camera(self.camera_plan, camera_id)
        if gl:
            self._open_renderer()

    def _open_renderer(self) -> None:
        """The GL context and the visual preset; only when pixels are wanted (a 3D view alone
        draws in the browser and needs no GL here)."""
        mujoco = self._mujoco
        width, height = self.requested_size
        # The offscreen buffer must hold the frame; the model's default is often 640x480.
        self.model.vis.global_.offwidth = max(self.model.vis.global_.offwidth, width)
        self.model.vis.global_.offheight = max(self.model.vis.global_.offheight, height)
        # The preset depends on the GL renderer, and multisampling is fixed when the renderer's
        # offscreen buffer is made: ask a throwaway 1x1 context first rather than build the
        # renderer twice (measured on llvmpipe: the second one cost 0.2 CPU-s of start-up).
        self.gl_renderer = _gl_renderer_name(mujoco)
        software = any(name in self.gl_renderer.lower() for name in _SOFTWARE_RENDERERS)
        quality = self.quality
        self.preset = ("cheap" if software else "full") if quality == "auto" else quality
        if self.preset == "cheap":
            # Half the CPU of every frame (measured on llvmpipe, Swimmer 480x480 without
            # shadows: 10.4 ms instead of 21.2 ms with the default 4 samples).
            self.model.vis.quality.offsamples = 0
            # No shadows are drawn, so no shadow map is made: MuJoCo's default 4096x4096 one
            # held ~67 MB of the render process on llvmpipe and took ~30 ms to make.
            self.model.vis.quality.shadowsize = 0
            _coarsen_floor_grids(mujoco, self.model)
            _coarsen_round_geoms(self.model)
            if not self.size_chosen:
                width, height = _even(width * CHEAP_SCALE), _even(height * CHEAP_SCALE)
        self._renderer = mujoco.Renderer(self.model, height=height, width=width)
        if self.preset == "cheap":
            flags = self._renderer.scene.flags
            for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION,
                         mujoco.mjtRndFlag.mjRND_SKYBOX):
                flags[flag] = 0
            _sample_one_mipmap_level(self._renderer)
        self.width, self.height = width, height

    def _make_camera(self, plan: Dict[str, Any], camera_id: int) -> Any:
        # Not mjv_defaultFreeCamera: it frames scenes with a large floor badly (see camera.py).
        from async_plotter.render.camera import make_camera

        return make_camera(self.model, self.data, plan, camera_id)

    def set_state(self, state: np.ndarray) -> None:
        """Pose the model from a full physics state (``mjSTATE_FULLPHYSICS``, as the rollout
        process sends it)."""
        self._mujoco.mj_setState(self.model, self.data, state, self._state_spec)
        self._mujoco.mj_forward(self.model, self.data)

    def render(self) -> np.ndarray:
        """The current pose as an RGB ``uint8`` array of shape (height, width, 3)."""
        if self._renderer is None:
            self._open_renderer()
        self._renderer.update_scene(self.data, camera=self.camera)
        return self._renderer.render()

    def close(self) -> None:
        """Free the GL context."""
        if self._renderer is not None:
            self._renderer.close()


#: the cheap preset draws a plane in at most this many grid cells a side
FLOOR_GRID_CELLS = 40


def _coarsen_floor_grids(mujoco: Any, model: Any) -> None:
    """Draw finite planes in coarser grids. A plane's third size is only the spacing of the quads
    it is drawn with (lighting is computed at their corners); Swimmer's 0.1 over 80 m makes an
    800x800 grid that took 45% of each frame on llvmpipe (measured: 5.4 ms a 320x320 frame
    against 3.0 ms at 40x40), and the frames differ by under 0.003 of a colour level."""
    for geom in range(model.ngeom):
        if model.geom_type[geom] != mujoco.mjtGeom.mjGEOM_PLANE:
            continue
        half_x, half_y, spacing = model.geom_size[geom]
        if half_x > 0 and half_y > 0 and spacing > 0:
            coarse = 2 * max(half_x, half_y) / FLOOR_GRID_CELLS
            model.geom_size[geom][2] = max(spacing, coarse)


def _coarsen_round_geoms(model: Any) -> None:
    """Fewer slices and stacks for round geoms, where the model asks for more
    (``CHEAP_TESSELLATION``); read when the renderer's GL context is made."""
    quality = model.vis.quality
    slices, stacks = CHEAP_TESSELLATION
    quality.numslices = min(int(quality.numslices), slices)
    quality.numstacks = min(int(quality.numstacks), stacks)


def _sample_one_mipmap_level(renderer: Any) -> None:
    """Make the uploaded textures sample the nearest mipmap level (``GL_LINEAR_MIPMAP_NEAREST``)
    instead of blending the two nearest (MuJoCo's ``GL_LINEAR_MIPMAP_LINEAR``): on llvmpipe the
    checkered floor's trilinear filtering was 13-22% of a frame's CPU (Swimmer to HalfCheetah,
    320x320), and the frames differ only along the far checker edges (measured by
    ``benchmarks/frame_cost.py --compare texture``). The filter is a property of each texture
    object, set once here while the renderer's context is current; MuJoCo does not set it again
    unless a texture is uploaded anew."""
    # mujoco.Renderer keeps its MjrContext private; without it the frames stay trilinear.
    context = getattr(renderer, "_mjr_context", None)
    if context is None:
        logger.debug("textures keep trilinear filtering: this mujoco.Renderer has no context")
        return
    try:
        from async_plotter.render.gl_calls import sample_one_mipmap_level

        for index in range(int(context.ntexture)):
            flat = int(context.textureType[index]) == 0  # mjTEXTURE_2D, else a cube or skybox
            sample_one_mipmap_level(int(context.texture[index]), flat)
    except Exception as error:  # noqa: BLE001 - a cheaper filter is worth no failed video
        logger.debug("textures keep trilinear filtering: %s", error)


def check_offscreen_gl() -> str:
    """Make a throwaway offscreen GL context through ``MUJOCO_GL`` (set it first): the GL
    renderer's name, or ``OffscreenGLError`` where none can be made. For a command that draws
    later and wants to know now (PyOpenGL keeps the platform it was first imported with)."""
    import mujoco

    return _gl_renderer_name(mujoco)


def _gl_renderer_name(mujoco: Any) -> str:
    """The name of the GL renderer this process gets, e.g. ``llvmpipe (LLVM 15.0.6, 256 bits)``
    for Mesa's software one; ``"unknown"`` when it cannot be asked. ``OffscreenGLError`` when
    no context can be made at all (no EGL driver, say): nothing could be drawn."""
    try:
        context = mujoco.GLContext(1, 1)
        context.make_current()
    except Exception as error:  # noqa: BLE001 - MuJoCo raises ImportError, PyOpenGL its own
        raise OffscreenGLError(os.environ.get("MUJOCO_GL", "egl"), error) from error
    try:
        from async_plotter.render.gl_calls import renderer_name

        return renderer_name() or "unknown"
    except Exception:  # noqa: BLE001 - the name is only for choosing a preset and logging
        return "unknown"
    finally:
        context.free()


def _even(value: float) -> int:
    return max(2, int(round(value / 2)) * 2)
