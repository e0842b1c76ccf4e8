"""A point on a plane in every form of action space the README names, for the plot worker to step:
Gymnasium's ``Box`` and ``Discrete``, gym 0.26's, and rllab-style duck-typed boxes whose bounds
are arrays, lists or scalars. Importable by name, so worker processes rebuild them; gym is
imported only by the forms that use it."""
import functools

import gymnasium
import numpy as np

from async_plotter import Serializable

#: every form: (env API, space package, space kind, bounds)
FORMS = {
    "gymnasium-box": ("gymnasium", "gymnasium", "box", "array"),
    "gymnasium-discrete": ("gymnasium", "gymnasium", "discrete", None),
    "gym-0.26-box": ("gym", "gym", "box", "array"),
    "gym-0.26-discrete": ("gym", "gym", "discrete", None),
    "rllab-box-array-bounds": ("rllab", "duck", "box", "array"),
    "rllab-box-list-bounds": ("rllab", "duck", "box", "list"),
    "rllab-box-scalar-bounds": ("rllab", "duck", "box", "scalar"),
}

#: the moves of the discrete forms: left, right, down, up
MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], np.float32)
#: the discrete forms' step, and the bound of the box forms' actions (smaller than the policy's)
STEP = 0.1


class DuckBox:
    """An rllab-era ``Box``: ``low``, ``high`` and ``shape`` as given, no ``dtype``."""

    def __init__(self, low, high, shape):
        self.low, self.high, self.shape = low, high, shape

    def __repr__(self):
        return f"DuckBox({self.low!r}, {self.high!r}, {self.shape})"


def _action_space(package, kind, bounds):
    if package == "gym":
        import gym.spaces as spaces
    else:
        spaces = gymnasium.spaces
    if kind == "discrete":
        return spaces.Discrete(len(MOVES))
    if package != "duck":
        return spaces.Box(-STEP, STEP, (2, ), np.float32)
    return DuckBox(
        *{
            "array": (np.full(2, -STEP), np.full(2, STEP)),
            "list": ([-STEP, -STEP], [STEP, STEP]),
            "scalar": (-STEP, STEP),
        }[bounds], (2, ))


class _Point:
    """The plane: the point starts at (-0.5, -0.5) and moves by its action (clipped by the worker
    to the box's bounds) or by one discrete move."""

    metadata = {"render_fps": 30, "render_modes": ["rgb_array"]}

    def __init__(self, form, render_mode=None):
        _, package, kind, bounds = FORMS[form]
        self.render_mode = render_mode
        self.kind = kind
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2, ), np.float32)
        self.action_space = _action_space(package, kind, bounds)
        self.position = np.zeros(2, np.float32)

    def _reset(self):
        self.position = np.array([-0.5, -0.5], np.float32)
        return self.position.copy()

    def _move(self, action):
        if self.kind == "discrete":
            if not isinstance(action, (int, np.integer)):
                raise TypeError(f"a discrete action is an int, got {action!r}")
            move = STEP * MOVES[action]
        else:
            move = np.asarray(action, np.float32)
            if move.shape != (2, ) or np.any(np.abs(move) > STEP + 1e-6):
                raise ValueError(f"action {action!r} is outside the box")
        self.position = np.clip(self.position + move, -1, 1)
        return self.position.copy(), -float(np.sum(self.position**2))

    def _frame(self):
        frame = np.zeros((48, 48, 3), np.uint8)
        x, y = ((self.position + 1) * 20).astype(int)
        frame[y:y + 8, x:x + 8] = (255, 255, 0)
        return frame


class GymnasiumPoint(_Point, gymnasium.Env):

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._reset(), {}

    def step(self, action):
        observation, reward = self._move(action)
        return observation, reward, False, False, {}

    def render(self):
        return self._frame()


class Gym026Point(_Point):
    """gym 0.26's API (``reset(seed=...) -> (obs, info)``, five values from ``step``, drawn in
    the ``render_mode`` it was built with) with gym's own spaces."""

    def reset(self, *, seed=None, options=None):
        return self._reset(), {}

    def step(self, action):
        observation, reward = self._move(action)
        return observation, reward, False, False, {}

    def render(self):
        return self._frame()


class RllabPoint(_Point):
    """rllab's API: ``reset() -> obs``, four values from ``step``, ``render(mode)``."""

    def reset(self):
        return self._reset()

    def step(self, action):
        observation, reward = self._move(action)
        return observation, reward, False, {}

    def render(self, mode="human"):
        return self._frame()


def build(form, render_mode=None):
    api = FORMS[form][0]
    cls = {"gymnasium": GymnasiumPoint, "gym": Gym026Point, "rllab": RllabPoint}[api]
    return cls(form, render_mode=render_mode)


def factory(form):
    """A zero-argument factory of the form's env (it takes ``render_mode`` too)."""
    return functools.partial(build, form)


class ConstantPolicy(Serializable):
    """Acts with its parameters, whatever it sees: a box's action, or a discrete space's logits."""

    def __init__(self, size):
        Serializable.quick_init(self, locals())
        self.values = np.zeros(size, np.float32)

    def get_param_values(self):
        return self.values.copy()

    def set_param_values(self, flat):
        self.values = np.asarray(flat, np.float32).copy()

    def get_action(self, observation):
        return self.values.copy(), {"mean": self.values.copy()}


def policy_for(form):
    """Moves the point right and up (a box: 0.5 a step, clipped to 0.1; discrete: "right")."""
    if FORMS[form][2] == "discrete":
        policy = ConstantPolicy(len(MOVES))
        policy.set_param_values(np.array([0, 1, 0, 0], np.float32))
    else:
        policy = ConstantPolicy(2)
        policy.set_param_values(np.array([0.5, 0.5], np.float32))
    return policy


class ListOnlyPoint(RllabPoint):
    """An env whose ``step`` rejects the action the worker gives it: it wants a Python list."""

    def __init__(self, render_mode=None):
        super().__init__("rllab-box-array-bounds", render_mode)

    def step(self, action):
        if not isinstance(action, list):
            raise TypeError(f"ListOnlyPoint.step takes a list of floats, got {type(action)}")
        return super().step(np.asarray(action))
