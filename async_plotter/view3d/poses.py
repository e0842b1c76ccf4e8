"""``PoseSender``: one frame's body poses as one ready-to-send WebSocket message in viser's wire
format, with as little Python per frame as that format allows.

mjviser builds the scene (geometry, materials, one batched mesh handle per group of bodies that
share a geometry) and can pose it (``update_from_mjdata``); but that assigns each handle's
positions and orientations separately through viser's validated property setters, and viser's
event loop then serializes and sends each batch: for HalfCheetah 15 messages and ~2.9 ms of CPU
a frame (measured with a browser connected, on a loaded 2-core machine), nearly all of it
viser's per-property Python and its asyncio machinery, twice what drawing costs on a GPU.

Here each handle gets one update carrying both arrays, built with numpy from ``MjData`` (body
orientations straight from ``xquat``), plus the world's offset that keeps the tracked body at
the origin as mjviser's tracking does (8 messages for HalfCheetah), encoded once per frame as
viser's producer would (msgpack with the arrays as aligned binary buffers, zstd level 1) and
handed to the live page's front, which sends the same bytes to every 3D viewer. viser's own
server is not involved per frame: it serves the scene, the panel and the replay of both to a
browser that connects. The handles' server-side state is kept in step, so that replay holds
the newest poses.

This uses viser's message types and wire format, which is why the extra pins viser's minor
version; ``tests/test_view3d_browser.py`` checks a real browser follows the poses.
"""
import time
from typing import Any, List, Optional, Tuple

import numpy as np


class PoseSender:
    """Poses the handles of a ``mjviser.ViserMujocoScene`` built without its GUI."""

    def __init__(self, server: Any, mj_scene: Any) -> None:
        from viser import _messages

        import msgspec
        import zstandard
        from viser.infra._infra import _append_aligned_buffers

        self._msgpack = msgspec.msgpack.encode
        self._align = _append_aligned_buffers
        self._messages = _messages
        self._owner = server.scene._owner_id
        self._zstd = zstandard.ZstdCompressor(level=1)
        self._tracked: Optional[int] = mj_scene._tracked_body_id
        self._frame = mj_scene.fixed_bodies_frame
        #: (handle, body ids, mocap ids or None)
        self._groups: List[Tuple[Any, np.ndarray, Optional[np.ndarray]]] = []
        for group in mj_scene._mesh_groups:
            if group.handle.visible:
                self._groups.append((group.handle, np.asarray(group.body_ids), group.mocap_ids))
        for (body_id, _), handle in mj_scene.site_handles_by_group.items():
            if handle.visible:
                self._groups.append((handle, np.asarray([body_id]), None))
        self._template = self._message_template()

    def encode(self, data: Any) -> bytes:
        """The poses in ``data`` (after ``mj_forward``) as one message for viser's client."""
        if self._tracked is not None:
            offset = -np.asarray(data.xpos[self._tracked], dtype=np.float64)
        else:
            offset = np.zeros(3)
        self._frame._impl.position[:] = offset
        self._template[0]["position"] = tuple(float(value) for value in offset)
        xpos, xquat = data.xpos, data.xquat
        buffers: List[memoryview] = []
        for handle, ids, mocap in self._groups:
            if mocap is not None:
                positions = np.asarray(data.mocap_pos[mocap] + offset, dtype=np.float32)
                orientations = np.asarray(data.mocap_quat[mocap], dtype=np.float32)
            else:
                positions = np.asarray(xpos[ids] + offset, dtype=np.float32)
                orientations = np.asarray(xquat[ids], dtype=np.float32)
            props = handle._impl.props
            if props.batched_positions.shape == positions.shape:
                props.batched_positions[:] = positions
                props.batched_wxyzs[:] = orientations
            buffers.append(memoryview(positions).cast("B"))
            buffers.append(memoryview(orientations).cast("B"))
        inner = self._msgpack({
            "messages": self._template,
            "timestampSec": time.perf_counter(),
            "binaryBufferLengths": tuple(buffer.nbytes for buffer in buffers),
        })
        compressed = self._zstd.compress(inner)
        parts: List[Any] = [
            len(inner).to_bytes(8, "little"),
            len(compressed).to_bytes(8, "little"), compressed
        ]
        self._align(parts, buffers, 16 + len(compressed))
        return b"".join(parts)

    def _message_template(self) -> List[dict]:
        """The frame's messages as viser serializes them, the arrays as placeholders numbered
        in the order ``encode`` appends them; only the offset changes per frame."""
        messages = self._messages
        placeholders: List[memoryview] = []
        offset = messages.SetPositionMessage(self._frame.name, (0.0, 0.0, 0.0))
        template = [offset]
        for handle, ids, _ in self._groups:
            zeros = np.zeros((len(ids), 3), np.float32)
            template.append(
                messages.SceneNodeUpdateMessage(handle.name, {
                    "batched_positions": zeros,
                    "batched_wxyzs": np.zeros((len(ids), 4), np.float32)
                }))
        serialized = []
        for message in template:
            message.owner = self._owner
            serialized.append(message.as_serializable_dict(placeholders))
        return serialized
