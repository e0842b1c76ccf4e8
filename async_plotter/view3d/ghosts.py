"""``Ghosts``: other policies' bodies in the 3D scene, translucent and tinted, beside the one
mjviser draws, each world (the one shown and every ghost) labelled with its policy and return.

mjviser draws one copy of the model in its own materials (``num_envs`` copies would all be
opaque and alike: its batched meshes have no per-copy opacity). Each moving body gets one batched
mesh of its own here, with one instance per ghost slot, tinted per slot and translucent;
unused slots are scaled to nothing. They hang under mjviser's ``/fixed_bodies`` frame, which
moves the world so that the shown policy's tracked body stays at the origin: so they are posed
in world coordinates, and follow it.

``arrays`` is the one place the ghosts' poses are computed: the public path (``apply``, through
viser's handles) and the fast path (``view3d/poses.py``, which encodes the same arrays) both
take them from here.
"""
from typing import Any, List, Sequence, Tuple

import numpy as np

#: ghosts shown at most beside the shown policy
MAX_GHOSTS = 3
#: their tints, one per slot (RGB), and how opaque they are
TINTS = ((40, 110, 230), (30, 160, 70), (150, 60, 200))
OPACITY = 0.35
# Where mjviser's frame puts the world (see the module's docstring).
_ROOT = "/fixed_bodies/ghosts"
# MuJoCo's geom groups that mjviser shows by default (0-2).
_SHOWN_GROUPS = 3


class Ghosts:
    """``MAX_GHOSTS`` slots of translucent copies of ``model``'s moving bodies on ``server``,
    and a label per world (0: the shown policy, then each slot)."""

    def __init__(self, server: Any, model: Any, slots: int = MAX_GHOSTS) -> None:
        from mjviser.conversions import is_fixed_body, merge_geoms

        self.slots = slots
        self.active = 0
        #: the body each label follows (mjviser's rule for the tracked body: the first that
        #: moves)
        self.tracked = next((body for body in range(model.nbody) if not is_fixed_body(model, body)),
                            0)
        #: (handle, body id): one batched mesh per moving body with something to show
        self.nodes: List[Tuple[Any, int]] = []
        hidden = np.zeros(slots, np.float32)
        for body in range(model.nbody):
            if is_fixed_body(model, body):
                continue
            geoms = [
                geom for geom in range(model.ngeom) if model.geom_bodyid[geom] == body
                and model.geom_rgba[geom, 3] > 0 and model.geom_group[geom] < _SHOWN_GROUPS
            ]
            if not geoms:
                continue
            mesh = merge_geoms(model, geoms)
            handle = server.scene.add_batched_meshes_simple(
                f"{_ROOT}/body{body}",
                np.asarray(mesh.vertices, np.float32),
                np.asarray(mesh.faces, np.uint32),
                batched_wxyzs=np.tile(np.array([1.0, 0.0, 0.0, 0.0], np.float32), (slots, 1)),
                batched_positions=np.zeros((slots, 3), np.float32),
                batched_scales=hidden,
                batched_colors=np.array(TINTS[:slots], np.uint8),
                opacity=OPACITY,
                cast_shadow=False,
                receive_shadow=False,
                visible=False)
            self.nodes.append((handle, body))
        #: above the tracked body by the height of what moves above it at the model's first
        #: pose, one row per world, so that labels of bodies at one place (a shared start) do
        #: not cover each other
        self.lift = _height_above(model, self.tracked) + 0.05
        self._row = 0.1
        self.labels = [
            server.scene.add_label(f"{_ROOT}/label{world}",
                                   "",
                                   visible=False,
                                   anchor="bottom-center",
                                   font_screen_scale=0.9) for world in range(slots + 1)
        ]

    def show(self, texts: Sequence[str]) -> None:
        """Label the worlds shown: ``texts[0]`` the policy shown, then one per ghost (at most
        ``slots``); the slots beyond them are hidden."""
        active = min(len(texts) - 1, self.slots)
        if active != self.active:
            scales = np.zeros(self.slots, np.float32)
            scales[:active] = 1.0
            for handle, _ in self.nodes:
                handle.batched_scales = scales
                handle.visible = active > 0
            self.active = active
        for world, label in enumerate(self.labels):
            text = texts[world] if world < len(texts) and world <= self.slots else ""
            if label.text != text:
                label.text = text or " "
            if label.visible != bool(text):
                label.visible = bool(text)

    def arrays(self, ghosts: Sequence[Any]) -> List[Tuple[Any, np.ndarray, np.ndarray]]:
        """``(handle, positions (slots, 3), orientations (slots, 4) wxyz)`` of every ghost
        mesh, from the ``MjData`` of each ghost (``mj_forward`` done; slots beyond them keep
        the identity, scaled to nothing)."""
        found = []
        for handle, body in self.nodes:
            positions = np.zeros((self.slots, 3), np.float32)
            orientations = np.zeros((self.slots, 4), np.float32)
            orientations[:, 0] = 1.0
            for slot, data in enumerate(ghosts[:self.slots]):
                positions[slot] = data.xpos[body]
                orientations[slot] = data.xquat[body]
            found.append((handle, positions, orientations))
        return found

    def label_positions(self, worlds: Sequence[Any]) -> List[Tuple[Any, np.ndarray]]:
        """``(label, position)`` of each world's label (``worlds[0]`` the shown policy's
        ``MjData``, then the ghosts'), in world coordinates; labels beyond them stay put."""
        found = []
        for world, (label, data) in enumerate(zip(self.labels, worlds[:self.slots + 1])):
            position = np.array(data.xpos[self.tracked], np.float64)
            position[2] += self.lift + world * self._row
            found.append((label, position))
        return found

    def apply(self, worlds: Sequence[Any]) -> None:
        """Pose every ghost and label through viser's handles (the public path; call inside
        ``server.atomic()``)."""
        for handle, positions, orientations in self.arrays(worlds[1:]):
            handle.batched_positions = positions
            handle.batched_wxyzs = orientations
        for label, position in self.label_positions(worlds):
            label.position = position


def _height_above(model: Any, tracked: int) -> float:
    """How far the moving bodies' geoms reach above ``tracked`` at the model's first pose."""
    import mujoco
    from mjviser.conversions import is_fixed_body

    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    top = [
        data.geom_xpos[geom][2] + model.geom_rbound[geom] for geom in range(model.ngeom)
        if not is_fixed_body(model, model.geom_bodyid[geom])
    ]
    return float(max(top, default=data.xpos[tracked][2]) - data.xpos[tracked][2])
