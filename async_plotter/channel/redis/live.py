"""The live episode over Redis, sent only while somebody watches, and read with neither
TensorFlow nor the policy's code.

A trainer that publishes has its rollout process play the newest policy for viewers elsewhere
(``worker/rollout_process.py``): the same stream of messages it sends its render process
(``render/stream.py``: the scene, each episode's beginning, its shown steps in chunks of a
quarter of a second, its end), each sealed as the parameters are and published on the
experiment's channel ``async_plotter:E:live``. A viewer's subscription to that channel is its
"watching" mark: the trainer asks the server how many there are (``PUBSUB NUMSUB``) once a
second and publishes nothing while there are none, so a viewer writes nothing and holds no key,
and no copy of a chunk stays in Redis. The model (MJB) is the history's model key
(``states.py``); a viewer reads it once per run.

A message is a sealed value (``sealed.seal``, kind ``live``: a recording cannot pass for a live
chunk): a JSON head (its kind, its fields, the arrays' shapes), then the arrays' bytes. Nothing
is unpickled; the lengths are checked against the shapes before any array is read.
"""
import dataclasses
import json
import logging
import queue
import struct
import threading
import time
from typing import Any, Optional, Tuple

import numpy as np

from async_plotter.channel.redis.link import close_quietly, connect, connection_errors
from async_plotter.channel.redis.signing import PayloadRejected, Verifier
from async_plotter.channel.redis.sealed import RunTarget, open_sealed, seal, seal_model
from async_plotter.channel.redis.states import StateKeys, put_dropping_oldest
from async_plotter.channel.redis.wire import KEY_PREFIX
from async_plotter.render.stream import (EpisodeEnd, EpisodeInfo, SceneInfo, StateChunk, StreamKind)

logger = logging.getLogger("async_plotter")

KIND = b"live"
#: seconds between two counts of the channel's subscribers (the watching marks)
WATCH_POLL_SECONDS = 1.0
#: messages waiting for the sender thread; past this the oldest go (a live view wants now)
_QUEUE_LENGTH = 64
#: one message's head, as JSON, at most (a forged one is refused before it is parsed)
_MAX_HEAD_BYTES = 64 * 1024
_HEAD_LENGTH = struct.Struct("<I")
#: the stream kinds that travel; frames of envs that draw themselves do not (pixels, not states)
_SENT = (StreamKind.SCENE, StreamKind.BEGIN, StreamKind.STATES, StreamKind.END)


def live_channel(experiment: str) -> str:
    """The pub/sub channel of ``experiment``'s live episode."""
    return f"{KEY_PREFIX}:{experiment}:live"


# ------------------------------------------------------------------------------------ format


def encode(kind: StreamKind, body: Any) -> bytes:
    """One stream message as a payload: JSON head, then the arrays' bytes."""
    arrays: Tuple[np.ndarray, ...] = ()
    if kind is StreamKind.SCENE:
        fields = {k: v for k, v in dataclasses.asdict(body).items() if k != "model"}
    elif kind is StreamKind.STATES:
        arrays = (np.ascontiguousarray(body.states,
                                       np.float64), np.ascontiguousarray(body.actions, np.float32),
                  np.ascontiguousarray(body.rewards, np.float64))
        fields = {"starts_episode": bool(body.starts_episode)}
    else:
        fields = dataclasses.asdict(body)
    head = json.dumps(
        {
            "kind": kind.value,
            "fields": fields,
            "shapes": [list(a.shape) for a in arrays]
        },
        separators=(",", ":"),
        allow_nan=False).encode()
    return b"".join([_HEAD_LENGTH.pack(len(head)), head] + [a.tobytes() for a in arrays])


def decode(payload: bytes) -> Tuple[StreamKind, Any]:
    """The stream message a payload holds; ``PayloadRejected`` naming what is wrong. A SCENE's
    ``model`` is None: the model travels once, apart (``read_model``)."""
    try:
        (length, ) = _HEAD_LENGTH.unpack_from(payload)
        if length > min(_MAX_HEAD_BYTES, len(payload) - _HEAD_LENGTH.size):
            raise ValueError(f"a head of {length} bytes")
        head = json.loads(payload[_HEAD_LENGTH.size:_HEAD_LENGTH.size + length])
        kind = StreamKind(head["kind"])
        if kind not in _SENT:
            raise ValueError(f"a {kind.value} message")
        fields = dict(head["fields"])
        if kind is StreamKind.SCENE:
            return kind, SceneInfo(**dict(fields, model=None))
        if kind is StreamKind.BEGIN:
            return kind, EpisodeInfo(**fields)
        if kind is StreamKind.END:
            return kind, EpisodeEnd(**fields)
        states, actions, rewards = _arrays(
            memoryview(payload)[_HEAD_LENGTH.size + length:], head["shapes"])
        return kind, StateChunk(states, actions, rewards, bool(fields["starts_episode"]))
    except PayloadRejected:
        raise
    except (struct.error, ValueError, KeyError, TypeError) as error:
        raise PayloadRejected(f"the live message is malformed ({error})") from error


def _arrays(rest: memoryview, shapes: Any) -> Tuple[np.ndarray, ...]:
    """The chunk's states (float64), actions (float32) and rewards (float64), each shape checked
    against the bytes there before it is read."""
    dtypes = (np.float64, np.float32, np.float64)
    if not isinstance(shapes, list) or len(shapes) != 3:
        raise ValueError("a chunk needs three arrays")
    arrays, offset = [], 0
    for shape, dtype in zip(shapes, dtypes):
        if not (isinstance(shape, list) and all(isinstance(n, int) and n >= 0 for n in shape)):
            raise ValueError(f"the shape {shape!r}")
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if offset + size > len(rest):
            raise ValueError("the arrays are cut short")
        arrays.append(np.frombuffer(rest[offset:offset + size], dtype=dtype).reshape(shape))
        offset += size
    if offset != len(rest) or not (len(arrays[0]) == len(arrays[1]) == len(arrays[2])):
        raise ValueError("the arrays do not agree in length")
    return tuple(arrays)


# ------------------------------------------------------------------------ trainer's side


class LivePublisher:
    """The rollout process's live stream to Redis: ``send((kind, body))`` as to its render
    process, never blocking and never raising (a thread of its own publishes); ``watched`` is
    whether a viewer is subscribed, counted once a second. While nobody watches, what is sent is
    dropped here."""

    def __init__(self, target: RunTarget) -> None:
        self._target = target
        self._channel = live_channel(target.experiment)
        self._queue: "queue.Queue[Optional[Tuple[StreamKind, Any]]]" = queue.Queue()
        self._scene: Optional[SceneInfo] = None
        self._model_sent = False
        self._in_episode = False
        self._catching_up = False
        self._update: Tuple[int, Optional[int]] = (0, None)
        self._warned = False
        #: a viewer was subscribed at the last count
        self.watched = False
        #: messages published, and dropped (nobody watching, a full queue, a server away)
        self.published = 0
        self.dropped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run,
                                        name="async_plotter-redis-live",
                                        daemon=True)
        self._thread.start()

    def send(self, message: Tuple[StreamKind, Any]) -> None:
        """Publish one stream message soon, if somebody watches."""
        kind, body = message
        if kind is StreamKind.SCENE:
            self._scene = body  # sent again before every episode, for viewers who join
            return
        if self._skip_catch_up(kind, body):
            self.dropped += 1
            return
        if self._in_episode and not self.watched:
            self._in_episode = False  # the last viewer left: the rest of this episode stays here
        if kind is StreamKind.BEGIN:
            self._in_episode = self.watched and self._scene is not None
            if self._in_episode:
                self._queue.put((StreamKind.SCENE, self._scene))
        # A viewer gets whole episodes from their beginning; the rest of one it was not
        # watching at the start is not sent.
        if kind not in _SENT or not self._in_episode:
            self.dropped += 1
            return
        if kind is StreamKind.END:
            self._in_episode = False
        self.dropped += put_dropping_oldest(self._queue, message, _QUEUE_LENGTH)

    def _skip_catch_up(self, kind: StreamKind, body: Any) -> bool:
        """A catch-up (``worker/video_chain.py``) finishes a short video for the recordings
        only: a live view does not see it. Its episode ends for the viewer where the catch-up
        begins, and what follows up to the chain's last ``END`` is not sent."""
        if kind is StreamKind.CATCH_UP:
            if self._in_episode:
                self._in_episode = False
                self._queue.put((StreamKind.END, body or EpisodeEnd(0, 0.0, completed=False)))
            self._catching_up = True
            return True
        if self._catching_up:
            if kind is StreamKind.END and not body.continued:
                self._catching_up = False
            return True
        return False

    def close(self, timeout: float = 1.0) -> None:
        """Stop publishing (what is queued gets ``timeout`` s)."""
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        client = None
        counted = 0.0
        while not self._stop.is_set():
            try:
                if client is None:
                    client = connect(self._target.url)
                if time.monotonic() - counted >= WATCH_POLL_SECONDS:
                    counted = time.monotonic()
                    self.watched = self._count(client) > 0
                try:
                    item = self._queue.get(timeout=WATCH_POLL_SECONDS)
                except queue.Empty:
                    continue
                if item is None:
                    return
                self._publish(client, *item)
            except connection_errors() as error:
                self._warn(error)
                close_quietly(client)
                # A server that comes back may have lost the model: it goes again.
                client, self.watched, self._model_sent = None, False, False
                self._stop.wait(WATCH_POLL_SECONDS)
            except Exception as error:  # noqa: BLE001 - a refusal (ACL), a bug: never the trainer's
                self._warn(error)
                self._stop.wait(WATCH_POLL_SECONDS)
        close_quietly(client)

    def _count(self, client: Any) -> int:
        counts = client.pubsub_numsub(self._channel)
        return int(counts[0][1]) if counts else 0

    def _publish(self, client: Any, kind: StreamKind, body: Any) -> None:
        target = self._target
        if kind is StreamKind.SCENE and not self._model_sent:
            self._publish_model(client, body.model)
        if kind is StreamKind.BEGIN:
            self._update = (body.update, body.iteration)
        number, iteration = self._update
        value = seal(target.secret, KIND, target.experiment, target.run, number, iteration,
                     encode(kind, body))
        client.publish(self._channel, value)
        self.published += 1

    def _publish_model(self, client: Any, pickled: bytes) -> None:
        """The model under the history's key (the same value its publisher puts there), once per
        connection: a viewer reads it once per run."""
        import pickle

        from async_plotter.render.recording import model_to_mjb

        target = self._target
        # The pickled MjModel comes from this process's own env, never from the network.
        model = seal_model(target, model_to_mjb(pickle.loads(pickled)))
        client.set(StateKeys(target.experiment).model, model, px=target.ttl_ms)
        self._model_sent = True

    def _warn(self, error: BaseException) -> None:
        log = logger.debug if self._warned else logger.warning
        self._warned = True
        log(
            "experiment %r: the live episode cannot be published (%s: %s); a viewer sees the "
            "history meanwhile", self._target.experiment,
            type(error).__name__, error)


# ------------------------------------------------------------------------- viewer's side


def open_live(value: bytes, verifier: Verifier, experiment: str) -> Tuple[Any, StreamKind, Any]:
    """A published live value, verified: ``(sealed, kind, body)``."""
    sealed = open_sealed(value, verifier, KIND, experiment)
    kind, body = decode(sealed.payload)
    return sealed, kind, body
