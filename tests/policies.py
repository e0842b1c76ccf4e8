"""Small policies and envs the tests share. Importable by name, so worker processes can rebuild them."""
import numpy as np

from async_plotter import Serializable


class LinearPolicy(Serializable):
    """A numpy policy with rllab's protocol: action = tanh(obs @ W).

    ``extra`` unused parameters pad the vector, to test large parameter counts on small envs.
    """

    def __init__(self, obs_dim: int, act_dim: int, dtype=np.float32, extra: int = 0):
        Serializable.quick_init(self, locals())
        self.w = np.zeros((obs_dim, act_dim), dtype)
        self.extra = np.zeros(extra, dtype)

    def fill(self, value):
        """Set every parameter to ``value``."""
        self.w.fill(value)
        self.extra.fill(value)

    def get_param_values(self):
        return np.concatenate([self.w.ravel(), self.extra])

    def set_param_values(self, flat):
        flat = np.asarray(flat, self.w.dtype)
        self.w = flat[:self.w.size].reshape(self.w.shape).copy()
        self.extra = flat[self.w.size:].copy()

    def get_action(self, obs):
        action = np.tanh(np.asarray(obs, self.w.dtype) @ self.w)
        return action, {"mean": action}


class NoisyLinearPolicy(LinearPolicy):
    """Samples its action (the mean plus noise from numpy's global generator), as
    ``async_plotter.rl``'s policies do, and reports the mean: a deterministic rollout of it
    repeats step for step, a sampled one does not."""

    def get_action(self, obs):
        mean, _ = super().get_action(obs)
        return mean + np.random.normal(0.0, 0.5, mean.shape).astype(mean.dtype), {"mean": mean}


class SlowLinearPolicy(LinearPolicy):
    """Takes ``delay`` seconds for every action: a rollout of a few hundred steps lasts seconds."""

    def __init__(self, obs_dim: int, act_dim: int, delay: float = 0.005):
        Serializable.quick_init(self, locals())
        super().__init__(obs_dim, act_dim)
        self.delay = delay

    def get_action(self, obs):
        import time

        time.sleep(self.delay)
        return super().get_action(obs)


class FailsInHistoryPolicy(LinearPolicy):
    """Raises at the ``fail_at``-th action of an episode in the plot worker's history thread
    once its parameters are all ``MARKER`` (a policy that fails mid-way through a history
    recording); acts as ``LinearPolicy`` everywhere else."""

    MARKER = 0.125

    def __init__(self, obs_dim: int, act_dim: int, fail_at: int = 20):
        Serializable.quick_init(self, locals())
        super().__init__(obs_dim, act_dim)
        self.fail_at = fail_at
        self._calls = 0

    def reset(self):
        self._calls = 0

    def get_action(self, obs):
        import threading

        self._calls += 1
        if (threading.current_thread().name == "async_plotter-history" and self.w.size
                and np.all(self.w == self.MARKER) and self._calls >= self.fail_at):
            raise RuntimeError("the policy failed in the history (test)")
        return super().get_action(obs)


class HangsInHistoryPolicy(FailsInHistoryPolicy):
    """Hangs, instead of raising, at the ``fail_at``-th action of an episode in the history
    thread once its parameters are all ``MARKER``: ``how="spins"`` loops for ever (a bug that
    burns CPU), ``how="waits"`` waits for ever (a lock nobody releases)."""

    def __init__(self, obs_dim: int, act_dim: int, fail_at: int = 20, how: str = "spins"):
        Serializable.quick_init(self, locals())
        super().__init__(obs_dim, act_dim, fail_at)
        self.how = how

    def get_action(self, obs):
        try:
            return super().get_action(obs)
        except RuntimeError:
            if self.how == "waits":
                import threading

                threading.Event().wait()
            while True:
                pass


class SpinsWhenMarked(LinearPolicy):
    """Loops for ever in ``get_action`` once its parameters are all ``MARKER`` (a policy or env
    that never returns, burning CPU); acts as ``LinearPolicy`` before."""

    MARKER = 0.375

    def get_action(self, obs):
        if self.w.size and np.all(self.w == self.MARKER):
            while True:
                pass
        return super().get_action(obs)


class UniformCheckPolicy(LinearPolicy):
    """Refuses any parameter vector whose entries differ: catches a torn (half-written) vector.

    The tests publish vectors filled with one value, so a mix of two values means the worker read
    one update half overwritten by the next.
    """

    def set_param_values(self, flat):
        flat = np.asarray(flat)
        if flat.size and not np.all(flat == flat[0]):
            values = np.unique(flat)
            raise AssertionError(
                f"torn parameter vector: {values.size} distinct values {values[:4]}")
        super().set_param_values(flat)


class FlakyEnvFactory:
    """Builds Swimmer-v5 whose step() raises once it has run ``fail_after`` steps (a broken env)
    in the plot worker. The env built in the process that made the factory (the trainer, whose
    check at ``Plotter()`` steps it once) does not fail: an env whose first step always fails
    is an ``EnvStepError`` there, and these tests are about failures in the worker."""

    def __init__(self, fail_after: int, first_reset_delay: float = 0.0):
        import os

        self.fail_after = fail_after
        # Seconds the first reset() waits: the render process is drawing by the time it fails.
        self.first_reset_delay = first_reset_delay
        self.trainer_pid = os.getpid()

    def __call__(self):
        import os

        import gymnasium

        env = gymnasium.make("Swimmer-v5")
        if os.getpid() == self.trainer_pid:
            return _FailingStep(env, float("inf"))
        return _FailingStep(env, self.fail_after, self.first_reset_delay)


class _FailingStep:

    def __init__(self, env, fail_after, first_reset_delay=0.0):
        import gymnasium

        self._env = env
        self._left = fail_after
        self._delay = first_reset_delay
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.unwrapped = env.unwrapped
        assert isinstance(env, gymnasium.Env)

    def reset(self, seed=None):
        if self._delay:
            import time

            time.sleep(self._delay)
            self._delay = 0.0
        return self._env.reset(seed=seed)

    def step(self, action):
        self._left -= 1
        if self._left < 0:
            raise RuntimeError("env.step exploded (test)")
        return self._env.step(action)


class OldGymPendulum:
    """An env written against the old gym API: reset() -> obs, step() -> 4-tuple, render(mode)."""

    def __init__(self):
        import gymnasium

        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2, ), np.float32)
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (1, ), np.float32)
        self.state = np.zeros(2, np.float32)
        self.t = 0

    def reset(self):
        self.state = np.array([1.0, 0.0], np.float32)
        self.t = 0
        return self.state.copy()

    def step(self, action):
        angle, speed = self.state
        speed = speed + 0.1 * (float(np.asarray(action).ravel()[0]) - np.sin(angle))
        self.state = np.array([angle + 0.1 * speed, speed], np.float32)
        self.t += 1
        return self.state.copy(), -float(angle**2), False, {}

    def render(self, mode="human"):
        assert mode == "rgb_array", mode
        frame = np.full((64, 96, 3), 255, np.uint8)
        x = int(48 + 40 * np.sin(self.state[0]))
        frame[20:44, max(x - 4, 0):x + 4] = (200, 30, 30)
        return frame


class ResettingPolicy(LinearPolicy):
    """Appends a line to ``log_path`` at every ``reset()``, as rllab's rollout() calls it before
    each episode (recurrent policies clear their state there)."""

    def __init__(self, obs_dim: int, act_dim: int, log_path: str):
        Serializable.quick_init(self, locals())
        super().__init__(obs_dim, act_dim)
        self.log_path = log_path

    def reset(self, dones=None):
        with open(self.log_path, "a") as log:
            log.write("reset\n")


class CloseRecordingEnvFactory:
    """Builds ``env_id`` whose ``close()`` appends the closing process's pid to ``marker``; with
    ``fail_after``, its ``step()`` raises once it has run that many steps (a broken env)."""

    def __init__(self, marker: str, env_id: str = "Swimmer-v5", fail_after=None):
        self.marker = marker
        self.env_id = env_id
        self.fail_after = fail_after

    def __call__(self, render_mode=None):
        import gymnasium

        factory = self

        class RecordsClose(gymnasium.Wrapper):
            steps = 0

            def step(self, action):
                self.steps += 1
                if factory.fail_after is not None and self.steps > factory.fail_after:
                    raise RuntimeError("env.step exploded (test)")
                return super().step(action)

            def close(self):
                import os

                with open(factory.marker, "a") as out:
                    out.write(f"{os.getpid()}\n")
                super().close()

        return RecordsClose(gymnasium.make(self.env_id, render_mode=render_mode))


SLED_XML = """
<mujoco model="sled">
  <option timestep="0.02"/>
  <worldbody>
    <light pos="0 0 4" dir="0 0 -1"/>
    <geom name="floor" type="plane" size="40 40 0.1" rgba="0.75 0.75 0.75 1"/>
    <body name="sled" pos="0 0 0.2">
      <joint name="x" type="slide" axis="1 0 0" damping="4"/>
      <geom type="box" size="0.3 0.2 0.15" mass="2" rgba="0.9 0.3 0.1 1"/>
    </body>
  </worldbody>
  <actuator><motor joint="x" gear="4" ctrlrange="-1 1"/></actuator>
</mujoco>
"""


def make_sled(render_mode=None):
    """A box on a slide joint: its action pushes it along x, so a policy visibly moves it one
    way or the other. Its only observation is a constant 1, so ``LinearPolicy(1, 1)`` filled
    with ``w`` pushes with ``tanh(w)`` at every step."""
    import os
    import tempfile

    import gymnasium
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

    class SledEnv(MujocoEnv):
        metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

        def __init__(self, render_mode=None):
            handle, path = tempfile.mkstemp(suffix=".xml")
            with os.fdopen(handle, "w") as file:
                file.write(SLED_XML)
            try:
                MujocoEnv.__init__(self,
                                   path,
                                   1,
                                   observation_space=gymnasium.spaces.Box(-2, 2, (1, )),
                                   render_mode=render_mode,
                                   width=320,
                                   height=240)
            finally:
                os.remove(path)

        def step(self, action):
            self.do_simulation(action, self.frame_skip)
            return np.ones(1, np.float32), float(self.data.qvel[0]), False, False, {}

        def reset_model(self):
            self.set_state(self.init_qpos, self.init_qvel)
            return np.ones(1, np.float32)

    return SledEnv(render_mode=render_mode)
