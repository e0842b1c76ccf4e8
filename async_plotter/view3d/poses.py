"""The fast path for the 3D view's poses: one frame's body poses as one ready-to-send WebSocket
message in viser's wire format, with as little Python per frame as that format allows. The only
module that reads viser's or mjviser's private names or viser's framing.

The public path (``Scene3D``) is mjviser's ``update_from_mjdata`` inside ``server.atomic()``: it
assigns each handle's positions and orientations separately through viser's validated property
setters, and viser's event loop then serializes and sends each batch (HalfCheetah: 15 messages
a frame, ~2.5 ms of CPU). Here each handle gets one update carrying both arrays, built with
numpy from ``MjData``, plus the world's offset that keeps the tracked body at the origin (8
messages), encoded once per frame as viser's producer would (msgpack with the arrays as aligned
binary buffers, zstd level 1); the live page's front sends the same bytes to every 3D viewer.
The handles' server-side state is kept in step, so that viser's replay to a new browser holds
the newest poses. With ``Ghosts`` (other policies beside the shown one, ``view3d/ghosts.py``),
their meshes' arrays and their labels' positions ride in the same message, as computed there.

``fast_poses`` turns it on only where it still speaks viser's language: the private names it
reads exist, and a self-check finds its message for a posed frame equal, field by field, to the
updates viser itself records for the public path on the same frame (``get_scene_serializer``).
Otherwise the caller keeps the public path, and the reason is logged.
"""
import logging
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

logger = logging.getLogger(__name__)

#: (message type, node name, owner, field) -> value, what a batch of messages sets
Updates = Dict[Tuple[str, str, str, str], Any]
# A gap inserted into viser's recording between its snapshot of the scene and the public path's
# updates, so that the latter can be told apart.
_MARK_SECONDS = 1.0


def fast_poses(server: Any, mj_scene: Any, data: Any, ghosts: Any = None) -> Optional["PoseSender"]:
    """A ``PoseSender`` for ``mj_scene`` (a ``mjviser.ViserMujocoScene`` on ``server``) and
    ``ghosts`` (``view3d/ghosts.py``'s, or None), or None if this viser or mjviser is not what it
    was written for. ``data``: an ``MjData`` after ``mj_forward``, posed by the public path in
    the self-check (the scene shows it after)."""
    try:
        sender = PoseSender(server, mj_scene, ghosts)
        problem = sender.self_check(mj_scene, data)
    except Exception as error:  # pylint: disable=broad-except - any failure means: not this one
        problem = f"{type(error).__name__}: {error}"
    if problem:
        logger.warning(
            "3D view: poses go through mjviser's update_from_mjdata (the fast path is "
            "off: %s)", problem)
        return None
    return sender


def replay_done(message: bytes) -> bool:
    """Whether a message from viser ends its replay of the scene to a new client (it carries
    ``ReplayDoneMessage``); poses sent before would name nodes the browser does not have yet."""
    try:
        meta, _ = _decode_live(message)
        return any(
            isinstance(item, dict) and item.get("type") == "ReplayDoneMessage"
            for item in meta.get("messages", ()))
    except Exception:  # pylint: disable=broad-except - not a batch of viser's: not the end
        return False


class PoseSender:
    """Poses the handles of a ``mjviser.ViserMujocoScene`` built without its GUI, and those of
    its ``Ghosts`` if it has some."""

    def __init__(self, server: Any, mj_scene: Any, ghosts: Any = None) -> None:
        from viser import _messages

        import msgspec
        import zstandard
        from viser.infra._infra import _append_aligned_buffers

        self._server = server
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
        self._ghosts = ghosts
        self._template = self._message_template()

    def encode(self, data: Any, others: Sequence[Any] = ()) -> bytes:
        """The poses in ``data`` (after ``mj_forward``), and in ``others`` for the ghosts, as
        one message for viser's client."""
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
            _hold(handle, positions, orientations)
            buffers.append(memoryview(positions).cast("B"))
            buffers.append(memoryview(orientations).cast("B"))
        if self._ghosts is not None:
            for handle, positions, orientations in self._ghosts.arrays(others):
                _hold(handle, positions, orientations)
                buffers.append(memoryview(positions).cast("B"))
                buffers.append(memoryview(orientations).cast("B"))
            first = 1 + len(self._groups) + len(self._ghosts.nodes)
            labels = self._ghosts.label_positions([data, *others])
            for index, (label, position) in enumerate(labels, first):
                label._impl.position[:] = position
                self._template[index]["position"] = tuple(float(value) for value in position)
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

    def self_check(self, mj_scene: Any, data: Any) -> str:
        """Why this encoder does not say what the public path says for ``data`` (``""``: it
        does): each field its message sets as viser records the public path's update of it,
        or, where that sends nothing (unchanged), as the handle holds it; and none missing."""
        # viser sends only what changes: first every body elsewhere (public too), so that the
        # frame's update sets (nearly) every field.
        rng = np.random.default_rng(0)
        turn = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
        mocap_quat = rng.normal(size=(1, ) + data.mocap_quat.shape)
        mj_scene.update_from_arrays(data.xpos[None] + rng.normal(size=data.xpos.shape),
                                    turn @ data.xmat.reshape(-1, 3, 3)[None],
                                    data.mocap_pos[None] + 1.0,
                                    mocap_quat / np.linalg.norm(mocap_quat, axis=-1, keepdims=True))
        ghosts = self._ghosts
        others = []
        if ghosts is not None:  # each ghost elsewhere, and then (checked) elsewhere again
            others = [_moved(data, rng) for _ in range(ghosts.slots)]
            with self._server.atomic():
                ghosts.apply([_moved(data, rng) for _ in range(ghosts.slots + 1)])
        recorder = self._server.get_scene_serializer()
        recorder.insert_sleep(_MARK_SECONDS)
        with self._server.atomic():
            mj_scene.update_from_mjdata(data)
            if ghosts is not None:
                ghosts.apply([data, *others])
        public = _updates(*_decode_recording(recorder.serialize()), after=_MARK_SECONDS)
        nodes = {handle.name: handle for handle, _, _ in self._groups}
        nodes[self._frame.name] = self._frame
        if ghosts is not None:
            nodes.update((handle.name, handle) for handle, _ in ghosts.nodes)
            nodes.update((label.name, label) for label in ghosts.labels)
        held = {
            (name, field): np.array(getattr(node, field, np.nan), float)
            for name, node in nodes.items()
            for field in ("position", "batched_positions", "batched_wxyzs") if hasattr(node, field)
        }
        meta, buffers = _decode_live(self.encode(data, others))
        fast = _updates([(0.0, item) for item in meta["messages"]], buffers)
        missing = sorted(set(public) - set(fast))
        if missing or not public:
            return f"its messages do not set {missing[:3] or 'what the public path does'}"
        for key, value in fast.items():
            expected = public.get(key, held.get(key[1::2]))
            if expected is None or not _same(key[3], value, expected):
                return f"{key} differs from the public path's"
        return ""

    def _message_template(self) -> List[dict]:
        """The frame's messages as viser serializes them, the arrays as placeholders numbered
        in the order ``encode`` appends them; only the offset changes per frame."""
        messages = self._messages
        placeholders: List[memoryview] = []
        offset = messages.SetPositionMessage(self._frame.name, (0.0, 0.0, 0.0))
        template = [offset]
        batched = [(handle, len(ids)) for handle, ids, _ in self._groups]
        if self._ghosts is not None:
            batched += [(handle, self._ghosts.slots) for handle, _ in self._ghosts.nodes]
        for handle, count in batched:
            template.append(
                messages.SceneNodeUpdateMessage(
                    handle.name, {
                        "batched_positions": np.zeros((count, 3), np.float32),
                        "batched_wxyzs": np.zeros((count, 4), np.float32)
                    }))
        if self._ghosts is not None:
            for label in self._ghosts.labels:
                template.append(
                    messages.SetPositionMessage(label.name,
                                                tuple(float(value) for value in label.position)))
        serialized = []
        for message in template:
            message.owner = self._owner
            serialized.append(message.as_serializable_dict(placeholders))
        return serialized


def _hold(handle: Any, positions: np.ndarray, orientations: np.ndarray) -> None:
    """Keep a batched handle's server-side arrays at what was sent (viser replays them to a new
    browser)."""
    props = handle._impl.props
    if props.batched_positions.shape == positions.shape:
        props.batched_positions[:] = positions
        props.batched_wxyzs[:] = orientations


def _moved(data: Any, rng: Any) -> Any:
    """A copy of ``data`` with every body elsewhere and turned (for the self-check)."""
    import copy

    moved = copy.copy(data)
    moved.xpos[:] += rng.normal(size=moved.xpos.shape)
    turns = rng.normal(size=moved.xquat.shape)
    moved.xquat[:] = turns / np.linalg.norm(turns, axis=-1, keepdims=True)
    return moved


def _same(field: str, value: Any, expected: Any) -> bool:
    """Whether two values of ``field`` show the same (a quaternion and its negative do)."""
    value, expected = np.asarray(value, float).ravel(), np.asarray(expected, float).ravel()
    if value.shape != expected.shape:
        return False
    if field.endswith("wxyzs"):
        value, expected = value.reshape(-1, 4), expected.reshape(-1, 4)
        value = value * np.where(np.sum(value * expected, axis=1) < 0, -1.0, 1.0)[:, None]
    return bool(np.allclose(value, expected, atol=1e-5))


def _decode_live(message: bytes) -> Tuple[dict, List[bytes]]:
    """A batch as viser's producer frames it: ``(its msgpack part, its binary buffers)``."""
    import msgspec
    import zstandard

    inner_size = int.from_bytes(message[:8], "little")
    compressed_size = int.from_bytes(message[8:16], "little")
    meta = msgspec.msgpack.decode(zstandard.ZstdDecompressor().decompress(
        message[16:16 + compressed_size], max_output_size=inner_size))
    return meta, _buffers(message, 16 + compressed_size, meta["binaryBufferLengths"])


def _decode_recording(recording: bytes) -> Tuple[List[Tuple[float, dict]], List[bytes]]:
    """A recording as ``get_scene_serializer().serialize()`` frames it: ``(its messages as
    (time, message), its binary buffers)``."""
    import msgspec
    import zstandard

    inner = zstandard.ZstdDecompressor().decompress(recording[8:],
                                                    max_output_size=int.from_bytes(
                                                        recording[:8], "little"))
    size = int.from_bytes(inner[:8], "little")
    meta = msgspec.msgpack.decode(inner[8:8 + size])
    return meta["messages"], _buffers(inner, 8 + size, meta["binaryBufferLengths"])


def _buffers(blob: bytes, offset: int, lengths: List[int]) -> List[bytes]:
    """The binary buffers after ``offset``, each 8-byte aligned."""
    found = []
    for length in lengths:
        offset += (8 - offset % 8) % 8
        found.append(blob[offset:offset + length])
        offset += length
    return found


def _updates(messages: List[Tuple[float, dict]],
             buffers: List[bytes],
             after: float = 0.0) -> Updates:
    """What the messages from time ``after`` on set, the newest value of each field."""
    found: Updates = {}
    for at, message in messages:
        if at < after:
            continue
        fields = dict(message)
        kind, name, owner = fields.pop("type", ""), fields.pop("name", ""), fields.pop("owner", "")
        fields.update(fields.pop("updates", None) or {})
        for field, value in fields.items():
            if isinstance(value, dict) and "__binary_index" in value:
                value = np.frombuffer(buffers[value["__binary_index"]], value["dtype"])
            found[(kind, name, owner, field)] = value
    return found
