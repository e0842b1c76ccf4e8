"""The rollout process's shown steps on their way to the render process, a chunk at a time
(docs/design.md, "A chunk of steps per wakeup"): a live view's next ``CHUNK_SECONDS`` of motion
are computed at once and sent when the first step is due, so the process wakes a few times a
second instead of at every frame; a newer policy's steps are sent at once (``drop``). Recorded
videos are not paced (the pipe's back-pressure holds them). Envs that draw their own frames send
one frame per message.
"""
from multiprocessing.connection import Connection
from typing import Any, Optional

import numpy as np

from async_plotter.render.stream import SceneInfo, StateChunk, StreamKind
from async_plotter.render.timeline import Timeline

#: how much motion one message carries to a live view: a few wakeups a second, and a newer
#: policy on screen within a quarter of a second
CHUNK_SECONDS = 0.25
#: steps per message of a recorded video (not paced; only fewer messages)
VIDEO_CHUNK_STEPS = 16


class ShownSteps:
    """Collects an episode's shown steps and sends them in chunks (``flush`` at its end)."""

    def __init__(self, env: Any, scene: SceneInfo, frames_out: Connection, live: bool,
                 fps: float) -> None:
        self._env = env
        self._scene = scene
        self._out = frames_out
        self._live = live
        # Real time for live viewers: steps sent faster than the render process shows them
        # would queue in the pipe and delay the newest policy by seconds.
        self._timeline = Timeline(1.0 / fps)
        self._count = 0
        self._starts_episode = False
        #: the steps finish a short video for the recordings only: sent at once, unpaced
        self._catching_up = False
        self._mujoco: Any = None
        if scene.kind != "mujoco":
            return
        import mujoco

        self._mujoco = mujoco
        self._spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        unwrapped = env.unwrapped
        self._model, self._data = unwrapped.model, unwrapped.data
        self._live_chunk = max(1, round(CHUNK_SECONDS * fps))
        self._chunk = self._live_chunk if live else VIDEO_CHUNK_STEPS
        size = max(self._live_chunk, VIDEO_CHUNK_STEPS)  # room for either, if the mode changes
        self._states = np.empty((size, mujoco.mj_stateSize(self._model, self._spec)))
        self._actions: Optional[np.ndarray] = None
        self._rewards = np.zeros(size)

    def add(self, action: Any = None, reward: float = 0.0) -> None:
        """The env's current state is shown next (``action`` led to it; None: a reset)."""
        if self._mujoco is None:
            self._send_frame()
            return
        index = self._count
        if index == 0:
            self._starts_episode = action is None
        self._mujoco.mj_getState(self._model, self._data, self._states[index], self._spec)
        if action is not None:
            flat = np.asarray(action, dtype=np.float32).reshape(-1)
            if self._actions is None or self._actions.shape[1] != flat.size:
                self._actions = np.zeros((len(self._states), flat.size), np.float32)
            self._actions[index] = flat
        elif self._actions is not None:
            self._actions[index] = 0.0
        self._rewards[index] = reward
        self._count += 1
        if self._count >= self._chunk:
            self.flush()

    def flush(self) -> None:
        """Send what was collected (at the end of an episode, and when a chunk is full)."""
        count = self._count
        if count == 0:
            return
        self._count = 0
        if self._live and not self._catching_up:
            self._timeline.pace(count)
        actions = (self._actions[:count].copy() if self._actions is not None else np.zeros(
            (count, 0), np.float32))
        self._out.send((StreamKind.STATES,
                        StateChunk(self._states[:count].copy(), actions,
                                   self._rewards[:count].copy(), self._starts_episode)))

    def set_live(self, live: bool) -> None:
        """Between episodes: paced for a live view from now on, or not (a viewer elsewhere came
        or left, ``rollout_process._RemoteView``)."""
        self.flush()
        self._live = live
        if self._mujoco is not None:
            self._chunk = self._live_chunk if live else VIDEO_CHUNK_STEPS
        self._timeline.anchor()

    def catch_up(self, on: bool) -> None:
        """From now on, send steps unpaced (``on``: they finish a short video; see
        ``worker/video_chain.py``), or paced again for the live view."""
        self._catching_up = on

    def drop(self) -> None:
        """Forget what was collected and not sent: a newer policy is to be shown at once, so
        its steps are sent from now on, not after those of the old one still being shown (the
        render process skips what it has left of those)."""
        self._count = 0
        self._timeline.anchor()

    def _send_frame(self) -> None:
        frame = self._env.render()
        if frame is None:
            raise RuntimeError(f"env {self._scene.label} returned no frame from render(); build "
                               "it with render_mode='rgb_array' (a factory may accept render_mode)")
        if self._live and not self._catching_up:
            self._timeline.pace(1)
        self._out.send((StreamKind.FRAME, np.ascontiguousarray(frame, dtype=np.uint8)))
