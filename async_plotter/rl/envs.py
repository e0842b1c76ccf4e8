"""Picklable descriptions of environments: what a policy needs to know, and how to build one.

A policy is rebuilt in other processes from its constructor arguments (see
:class:`async_plotter.policy.serializable.Serializable`), so those arguments must be small and
picklable. A live environment is neither (a MuJoCo env holds a simulator, maybe a window), so
policies take an :class:`EnvSpec` (the two spaces) or a gymnasium id, and samplers take an
:class:`EnvMaker` recipe and build their own environments where they run.
"""
import dataclasses
from typing import Any, Callable, Dict, List, Optional, Union

import gymnasium as gym
import numpy as np

from async_plotter.env.recipe import factory_label, travelling_spec

EnvLike = Union[str, gym.Env, Callable[[], gym.Env], "EnvMaker"]


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """The observation and action spaces of an environment (and its id when it has one)."""

    observation_space: gym.spaces.Space
    action_space: gym.spaces.Space
    id: Optional[str] = None

    @classmethod
    def from_env(cls, env: gym.Env) -> "EnvSpec":
        """The spec of a live environment."""
        env_id = env.spec.id if env.spec is not None else None
        return cls(env.observation_space, env.action_space, env_id)

    @classmethod
    def from_id(cls, env_id: str, **kwargs: Any) -> "EnvSpec":
        """Build the registered environment once, read its spaces, and close it."""
        env = gym.make(env_id, **kwargs)
        try:
            return cls(env.observation_space, env.action_space, env_id)
        finally:
            env.close()

    @property
    def observation_dim(self) -> int:
        """Length of the flat observation vector."""
        return int(gym.spaces.flatdim(self.observation_space))

    @property
    def action_dim(self) -> int:
        """Length of the action vector (Box) or the number of actions (Discrete)."""
        return int(gym.spaces.flatdim(self.action_space))


def as_env_spec(env_spec: Any) -> EnvSpec:
    """Accept an :class:`EnvSpec`, a gymnasium id, a gymnasium ``EnvSpec`` or a factory (built
    once to read its spaces); reject live envs."""
    if isinstance(env_spec, EnvSpec):
        return env_spec
    if isinstance(env_spec, str):
        return EnvSpec.from_id(env_spec)
    if isinstance(env_spec, gym.envs.registration.EnvSpec):
        env = gym.make(env_spec)
        try:
            return EnvSpec(env.observation_space, env.action_space, env_spec.id)
        finally:
            env.close()
    if isinstance(env_spec, gym.Env):
        raise TypeError("a policy needs picklable constructor arguments (it is rebuilt in other "
                        "processes), not a live environment; pass env.spec.id, env.spec or "
                        "EnvSpec.from_env(env)")
    if callable(env_spec):  # a factory, as the algorithms take: built once for its spaces
        env = env_spec()
        try:
            if not isinstance(env, gym.Env):
                raise TypeError(
                    f"env_spec {factory_label(env_spec)}() returned {type(env).__name__}, not "
                    f"a gymnasium Env: pass a factory of one, an id or an EnvSpec")
            return EnvSpec.from_env(env)
        finally:
            getattr(env, "close", lambda: None)()
    raise TypeError(f"env_spec must be an EnvSpec, a gymnasium id, a gymnasium EnvSpec or a "
                    f"zero-argument factory of an env, got {type(env_spec).__name__}")


@dataclasses.dataclass(frozen=True)
class EnvMaker:
    """A picklable recipe for an environment: a registered id plus keyword arguments, or a factory.

    Calling it builds a fresh environment. Samplers and the plotter call it in their own processes,
    so nothing of the trainer's environment (simulator state, windows) is shared.
    """

    env_id: Optional[str] = None
    kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)
    factory: Optional[Callable[[], gym.Env]] = None
    #: ``env_id``'s registration, read where the maker is made: the processes that call it never
    #: ran the script (or imported the package) that registered the id
    registration: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if (self.env_id is None) == (self.factory is None):
            raise ValueError("EnvMaker needs exactly one of env_id or factory")
        if self.env_id is not None and self.registration is None:
            object.__setattr__(self, "registration", travelling_spec(gym.spec(self.env_id)))

    def __call__(self) -> gym.Env:
        if self.factory is not None:
            return self.factory()
        return gym.make(self.registration, **self.kwargs)

    @classmethod
    def from_env(cls, env: EnvLike) -> "EnvMaker":
        """A recipe from an id, a factory, an existing recipe, or a live registered env.

        A live env is rebuilt from its registration (``env.spec``): wrappers the user added by hand
        are not part of that record, so pass a factory when they matter.
        """
        if isinstance(env, EnvMaker):
            return env
        if isinstance(env, str):
            return cls(env_id=env)
        if isinstance(env, gym.Env):
            if env.spec is None:
                raise ValueError(f"cannot rebuild {env!r} in another process: it was not made with "
                                 "gymnasium.make; pass its id or a zero-argument factory instead")
            kwargs = dict(env.spec.kwargs)
            kwargs.pop("render_mode", None)  # samplers never render; a "human" window would abort
            return cls(env_id=env.spec.id, kwargs=kwargs)
        if callable(env):
            return cls(factory=env)
        raise TypeError(f"env must be a gymnasium id, a gymnasium.Env or a zero-argument factory, "
                        f"got {type(env).__name__}")

    @property
    def plotter_env(self) -> Any:
        """What to hand to the plotter: the id when there is one (it rebuilds the env itself),
        the user's factory (its name labels the plotter's lines)."""
        if self.env_id is not None and not self.kwargs:
            return self.env_id
        return self.factory or self

    @property
    def label(self) -> str:
        """The env's id, or its factory's name."""
        return self.env_id or factory_label(self.factory)


def added_wrappers(env: Any) -> List[str]:
    """The names of the wrappers added to a live env after ``gymnasium.make`` (its spec records
    them), which a rebuild from its registration leaves out."""
    spec = getattr(env, "spec", None) if isinstance(env, gym.Env) else None
    return [wrapper.name for wrapper in getattr(spec, "additional_wrappers", ())]


def flatten_observation(space: gym.spaces.Space, observation: Any) -> np.ndarray:
    """The observation as the flat float32 vector the policies consume."""
    if isinstance(space, gym.spaces.Box):
        return np.asarray(observation, dtype=np.float32).reshape(-1)
    return np.asarray(gym.spaces.flatten(space, observation), dtype=np.float32)
