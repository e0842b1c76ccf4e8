"""Draws MuJoCo physics states offscreen, with a visual preset chosen from the GL renderer.

Software GL (Mesa llvmpipe) spends most of a frame on shadows and reflections: measured ~60-110 ms
per 480x480 frame with default visuals against ~9-18 ms with shadows, reflections and skybox off.
On a real GPU the full visuals cost ~3 ms. So ``quality="auto"`` turns them off only on software.
"""
import logging
import pickle
from typing import Any, Dict, Optional

import numpy as np

logger = logging.getLogger(__name__)

_SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "software", "mesa offscreen")


class MujocoScene:
    """Owns a copy of the model, an ``MjData`` to pose, and an offscreen renderer."""

    def __init__(self, model_bytes: bytes, camera: Optional[Dict[str, Any]], camera_id: int,
                 width: int, height: int, quality: str) -> None:
        import mujoco

        self._mujoco = mujoco
        self.model = pickle.loads(model_bytes)
        # The offscreen buffer must hold the frame; the model's default is often 640x480.
        self.model.vis.global_.offwidth = max(self.model.vis.global_.offwidth, width)
        self.model.vis.global_.offheight = max(self.model.vis.global_.offheight, height)
        self.data = mujoco.MjData(self.model)
        self._state_spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        self._renderer = mujoco.Renderer(self.model, height=height, width=width)
        self.camera = self._make_camera(camera or {}, camera_id)
        self.gl_renderer = self._gl_renderer_name()
        software = any(name in self.gl_renderer.lower() for name in _SOFTWARE_RENDERERS)
        self.preset = ("cheap" if software else "full") if quality == "auto" else quality
        if self.preset == "cheap":
            flags = self._renderer.scene.flags
            for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION,
                         mujoco.mjtRndFlag.mjRND_SKYBOX):
                flags[flag] = 0

    def _make_camera(self, config: Dict[str, Any], camera_id: int) -> Any:
        mujoco = self._mujoco
        camera = mujoco.MjvCamera()
        if camera_id >= 0:
            camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
            camera.fixedcamid = camera_id
            return camera
        mujoco.mj_forward(self.model, self.data)
        mujoco.mjv_defaultFreeCamera(self.model, camera)
        for key, value in config.items():
            if isinstance(value, np.ndarray) or isinstance(value, (list, tuple)):
                getattr(camera, key)[:] = value
            else:
                setattr(camera, key, value)
        return camera

    def _gl_renderer_name(self) -> str:
        try:
            from OpenGL import GL

            self._renderer._gl_context.make_current()  # pylint: disable=protected-access
            name = GL.glGetString(GL.GL_RENDERER)
            return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # noqa: BLE001 - the name is only for choosing a preset and logging
            return "unknown"

    def set_state(self, state: np.ndarray) -> None:
        """Pose the model from a full physics state sent by the rollout process."""
        self._mujoco.mj_setState(self.model, self.data, state, self._state_spec)
        self._mujoco.mj_forward(self.model, self.data)

    def render(self) -> np.ndarray:
        """The current pose as an RGB ``uint8`` array of shape (height, width, 3)."""
        self._renderer.update_scene(self.data, camera=self.camera)
        return self._renderer.render()

    def close(self) -> None:
        """Free the GL context."""
        self._renderer.close()
