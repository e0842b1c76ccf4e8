"""A viewer's stand-in for the rollout process: the trainer's live episode, read from Redis.

``async-plotter view --states`` runs the same worker a ``Plotter`` runs (``WorkerSupervisor``:
the render process and every output it has: mp4s, the MJPEG and 3D pages, a window, TensorBoard),
but the process that feeds the render process runs no env and no policy: it subscribes to the
experiment's live channel (``channel/redis/live.py``; the subscription is the viewer's watching
mark, so the trainer publishes while it runs), verifies each message, and passes it on as the
trainer's rollout process sent it. It reports to the supervisor as a rollout process does
(ready, each update applied, each episode), so stats, budgets and restarts work unchanged. It
imports neither TensorFlow nor the policy's code, and unpickles nothing from the network.
"""
import dataclasses
import logging
import pickle
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any, Optional

import numpy as np

from async_plotter.channel.redis.link import (Backoff, close_quietly, connect, connection_errors,
                                              probe, read_exact)
from async_plotter.channel.redis.live import live_channel, open_live
from async_plotter.channel.redis.signing import PayloadRejected, Verifier
from async_plotter.channel.redis.sealed import MAX_MODEL_BYTES, inflate_model, open_sealed
from async_plotter.channel.redis.states import StateKeys
from async_plotter.display import offscreen_gl_backend
from async_plotter.env.recipe import EnvRecipe
from async_plotter.policy.recipe import PolicyRecipe
from async_plotter.processes import become_background_child, resend_lost_stops
from async_plotter.render.stream import EpisodeEnd, StreamKind
from async_plotter.worker.config import WorkerConfig
from async_plotter.worker.parameters import ParameterLayout
from async_plotter.worker.status import StatusKind, StatusSender

logger = logging.getLogger("async_plotter")

#: seconds between two beats while nothing arrives (the supervisor's hang rule)
_IDLE_SECONDS = 0.5


def source_config(experiment: str, fps: float) -> WorkerConfig:
    """A worker configuration with nothing to rebuild: the recipes only name the experiment
    (the render process titles its outputs with the env the trainer's scene names, else with
    it); no outputs or CPU settings yet."""
    return WorkerConfig(env=EnvRecipe("states", b"", experiment),
                        policy=PolicyRecipe("states", b"", False, "the trainer's live states"),
                        max_path_length=1,
                        fps=fps,
                        deterministic=True,
                        quality="auto",
                        priority=None,
                        frame_size=None,
                        mujoco_gl=offscreen_gl_backend(),
                        seed=None,
                        parameters=ParameterLayout(0, np.dtype(np.float32)))


@dataclasses.dataclass(frozen=True)
class LiveAddress:
    """Where a viewer's source reads: picklable, checked by the command line."""

    url: str
    experiment: str
    secret: Optional[bytes]
    trust_unsigned: bool


class _Stopped(SystemExit):
    """SIGTERM from the supervisor."""


class ModelChanged(RuntimeError):
    """The trainer restarted with another model: the worker starts again with it."""


def _raise_stopped(signum: int, frame: Any) -> None:
    raise _Stopped(0)


def main(config: Any, address: LiveAddress, frames_out: Connection,
         status_connection: Connection) -> None:
    """Entry point (started by the supervisor with ``spawn``, in the rollout process's place)."""
    become_background_child()
    signal.signal(signal.SIGTERM, _raise_stopped)
    resend_lost_stops(_Stopped)
    status = StatusSender(status_connection, "rollout")
    status.offer_stacks()
    try:
        _Source(address, frames_out, status).run()
    except (_Stopped, BrokenPipeError):
        pass
    except BaseException:  # noqa: BLE001 - report everything else
        status.error("rollout")
        sys.exit(1)


class _Source:
    """The subscription and what it passes on."""

    def __init__(self, address: LiveAddress, frames_out: Connection, status: StatusSender) -> None:
        self._address = address
        self._out = frames_out
        self._status = status
        self._verifier = Verifier(address.secret, address.trust_unsigned)
        self._run: Optional[int] = None
        self._mjb: Optional[bytes] = None
        self._episode_open = False
        self._applied: Optional[int] = None
        self._refused = 0

    def run(self) -> None:
        backoff = Backoff()
        while True:
            client = pubsub = None
            try:
                client = connect(self._address.url)
                pubsub = client.pubsub()
                pubsub.subscribe(live_channel(self._address.experiment))
                backoff.reset()
                while True:
                    self._status.beat()
                    message = pubsub.get_message(timeout=_IDLE_SECONDS)
                    if message is not None and message.get("type") == "message":
                        self._handle(client, message["data"])
            except connection_errors() as error:
                logger.debug("live view of %r: %s", self._address.experiment, error)
                self._end_open_episode()
                deadline = time.monotonic() + backoff.next_delay()
                while time.monotonic() < deadline:
                    self._status.beat()
                    time.sleep(_IDLE_SECONDS)
            finally:
                close_quietly(pubsub, client)

    def _handle(self, client: Any, value: bytes) -> None:
        experiment = self._address.experiment
        try:
            sealed, kind, body = open_live(value, self._verifier, experiment)
            if kind is StreamKind.SCENE:
                self._on_scene(client, sealed.run_id, body)
                return
        except PayloadRejected as error:
            self._refuse(error)
            return
        if self._mjb is None or sealed.run_id != self._run:
            return  # an episode of a run whose scene this viewer has not seen yet
        if kind is StreamKind.BEGIN:
            self._end_open_episode()
            self._episode_open = True
            if self._applied != body.update:
                self._applied = body.update
                self._status.send(StatusKind.APPLIED, update=body.update, iteration=body.iteration)
        elif not self._episode_open:
            return
        self._out.send((kind, body))
        if kind is StreamKind.END:
            self._episode_open = False
            self._status.send(StatusKind.EPISODE,
                              update=self._applied,
                              steps=body.steps,
                              reward=body.total_reward,
                              completed=body.completed,
                              part=0,
                              iteration=sealed.iteration,
                              nonfinite_actions=0)

    def _on_scene(self, client: Any, run_id: int, scene: Any) -> None:
        """Each episode comes after its scene: the first one opens the render process's scene,
        with the run's model; a new run with another model restarts the worker."""
        if run_id == self._run:
            return
        mjb = self._read_model(client, run_id)
        if self._mjb is not None:
            if mjb != self._mjb:
                raise ModelChanged("the trainer restarted with another model")
            self._run = run_id
            return
        from async_plotter.render.recording import model_from_mjb

        self._run, self._mjb = run_id, mjb
        # A pickle this process makes of a model it built from numbers: nothing from the network
        # is unpickled (the render process takes the scene as the rollout process gives it).
        model = pickle.dumps(model_from_mjb(mjb))
        self._out.send((StreamKind.SCENE, dataclasses.replace(scene, model=model)))
        self._status.send(StatusKind.READY,
                          scene=scene.kind,
                          env=scene.label or self._address.experiment,
                          policy_call=None,
                          env_rate=scene.env_rate,
                          frame_stride=scene.stride,
                          video_fps=scene.fps)

    def _read_model(self, client: Any, run_id: int) -> bytes:
        key = StateKeys(self._address.experiment).model
        length, _ = probe(client, key, 0)
        if not 0 < length <= MAX_MODEL_BYTES:
            raise PayloadRejected(f"the model is {length} bytes (0: not published yet)")
        sealed = open_sealed(read_exact(client, key, length, "model"), self._verifier, b"model",
                             self._address.experiment)
        if sealed.run_id != run_id:
            raise PayloadRejected("the model is of another run than the live episode")
        return inflate_model(sealed.payload)

    def _end_open_episode(self) -> None:
        """An episode whose end will not come (the link went, a newer one began): it ends here,
        cut short, so the render process's outputs close it."""
        if self._episode_open:
            self._episode_open = False
            self._out.send((StreamKind.END, EpisodeEnd(0, 0.0, completed=False)))

    def _refuse(self, error: Exception) -> None:
        self._refused += 1
        log = logger.warning if self._refused == 1 else logger.debug
        log("live view of %r: a message was refused: %s", self._address.experiment, error)
