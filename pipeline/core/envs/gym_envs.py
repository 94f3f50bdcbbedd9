"""Gymnasium-native envs: MountainCar (classic control), CarRacing (Box2D) and the envs a user
brings from params.yaml (a gymnasium id or a factory)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit

from pipeline.core.env_registry import EnvInfo
from pipeline.core.errors import PipelineError


# MountainCar: the frame comes from the renderer; position and velocity are the whole state and
# what hybrid VLM-PPO's kinematic reward (eq. 1) and milestone prompts need.
def mountaincar_frame(env: gym.Env, obs: Any) -> np.ndarray:
    return env.render()  # (400, 600, 3)


def mountaincar_state(env: gym.Env, obs: Any) -> np.ndarray:
    return np.asarray(obs, dtype=np.float32)  # (2,): position, velocity


def mountaincar_context(env: gym.Env, obs: Any) -> dict[str, Any]:
    position, velocity = (float(v) for v in env.unwrapped.state)
    return {"position": position, "velocity": velocity}


def mountaincar_state_from_context(ctx: dict[str, Any]) -> np.ndarray:
    """`mountaincar_state` rebuilt from `mountaincar_context` (the env's own state, float32)."""
    return np.array([ctx["position"], ctx["velocity"]], dtype=np.float32)


# CarRacing: the native observation *is* the 96x96 agent-view frame; the dashboard quantities
# (speed, steering, yaw rate) are the context a driving prompt quotes (ERPv fig. 12: speed, yaw).
def carracing_frame(env: gym.Env, obs: Any) -> np.ndarray:
    return obs  # (96, 96, 3)


def carracing_context(env: gym.Env, obs: Any) -> dict[str, Any]:
    car = env.unwrapped.car
    if car is None:  # before the first reset
        return {"speed": 0.0, "steering": 0.0, "angular_velocity": 0.0}
    velocity = car.hull.linearVelocity
    return {
        "speed": float(np.hypot(velocity[0], velocity[1])),
        "steering": float(car.wheels[0].joint.angle),
        "angular_velocity": float(car.hull.angularVelocity),
    }


def carracing_state_from_context(ctx: dict[str, Any]) -> np.ndarray:
    return np.array([ctx["speed"], ctx["steering"], ctx["angular_velocity"]], dtype=np.float32)


def carracing_state(env: gym.Env, obs: Any) -> np.ndarray:
    return carracing_state_from_context(carracing_context(env, obs))


class CarRacingFrames:
    """CarRacing's frames drawn only when seen (`ActionRepeat`'s `DeferredFrames`). Its `step`
    draws the 96x96 observation (`_render("state_pixels")`: the road's polygons, one by one in
    Python, most of a step's time) and reads nothing of it back: reward, termination and physics
    come from the car and the track (gymnasium's box2d/car_racing.py). At action repeat 4, three
    of every four drawings were thrown away (benchmarks/carracing_frames.py)."""

    def __init__(self, env: gym.Env) -> None:
        self.car_racing = env.unwrapped
        if not callable(getattr(self.car_racing, "_render", None)):
            raise TypeError(
                f"{type(self.car_racing).__name__} has no _render(mode): this gymnasium's "
                "CarRacing draws its frames another way; build the env without CarRacingFrames"
            )

    @contextmanager
    def skipped(self) -> Iterator[None]:
        env = self.car_racing
        env._render = lambda mode: env.state.copy()  # the frame drawn last: a valid observation
        try:
            yield
        finally:
            del env._render  # the class's again

    def draw(self) -> np.ndarray:
        env = self.car_racing
        env.state = env._render("state_pixels")
        return env.state


def _headless_pygame() -> None:
    # pygame renders off-screen; without a display SDL would print a spurious error at init.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    # SDL turns SIGINT and SIGTERM into quit events nobody reads: `dvc` stopping a stage would
    # leave it running, writing into a DVC output
    os.environ.setdefault("SDL_NO_SIGNAL_HANDLERS", "1")


def make_gym_base(env_id: str, max_episode_steps: int | None) -> gym.Env:
    _headless_pygame()
    render_mode = "state_pixels" if env_id.startswith("CarRacing") else "rgb_array"
    kwargs: dict[str, Any] = {"render_mode": render_mode}
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    return gym.make(env_id, **kwargs)


# ---- brought envs (`env.<id>.make` in params.yaml) ---------------------------------------------


class BroughtEnvError(PipelineError, ValueError):
    """A brought env cannot be built or does not keep the observation contract."""


def make_brought_base(info: EnvInfo, max_episode_steps: int | None) -> gym.Env:
    """A gymnasium id (`family` gym) or a `module:function` factory (`factory`), as
    `env.<id>.make` names it, after importing its `package`."""
    _headless_pygame()
    where = f"env.{info.env_id}.make"
    assert info.target is not None  # set for every brought env by pipeline.core.config
    module, _, name = info.target.partition(":")  # a factory's `module:function`
    try:
        if info.package:
            importlib.import_module(info.package)
        if info.family == "gym":
            kwargs: dict[str, Any] = {"render_mode": "rgb_array", **info.kwargs}
            if max_episode_steps is not None:
                kwargs["max_episode_steps"] = max_episode_steps
            return gym.make(info.target, **kwargs)
        factory_module = importlib.import_module(module)
    except ImportError as exc:
        raise BroughtEnvError(
            f"{where}: cannot import {exc.name!r} ({exc}); install it in this environment"
        ) from None
    except gym.error.Error as exc:
        raise BroughtEnvError(
            f"{where}.gym: gymnasium cannot make {info.target!r}: {exc}; is `package` set to the "
            "module that registers it?"
        ) from None
    factory = getattr(factory_module, name, None)
    if factory is None:
        raise BroughtEnvError(f"{where}.factory: module {module!r} has no {name!r}")
    try:
        env = factory(**info.kwargs)
    except Exception as exc:  # the user's code: its error, named with the key that calls it
        raise BroughtEnvError(
            f"{where}.factory: {info.target}(**{where}.kwargs) raised {type(exc).__name__}: "
            f"{exc}; fix the factory or its kwargs"
        ) from exc
    if not isinstance(env, gym.Env):
        raise BroughtEnvError(
            f"{where}.factory: {info.target} returned {type(env).__name__}, not a gymnasium Env"
        )
    if max_episode_steps is not None:
        env = TimeLimit(env, max_episode_steps)
    return env


def brought_frame(env: gym.Env, obs: Any) -> np.ndarray:
    frame = env.render()
    if not (isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[-1] == 3):
        raise BroughtEnvError(
            f"{env.unwrapped.spec.id if env.unwrapped.spec else type(env.unwrapped).__name__}: "
            f"render() gave {type(frame).__name__} {getattr(frame, 'shape', '')}, not an RGB "
            "frame (H, W, 3); make the env with render_mode 'rgb_array'"
        )
    return np.asarray(frame, dtype=np.uint8)


def brought_state(env: gym.Env, obs: Any) -> np.ndarray:
    return np.asarray(obs, dtype=np.float32).ravel()


def brought_context(env: gym.Env, obs: Any) -> dict[str, Any]:
    """What a prompt of a brought env quotes: its native observation, flattened."""
    return {"observation": [float(v) for v in np.asarray(obs, dtype=np.float64).ravel()]}


def brought_state_from_context(ctx: dict[str, Any]) -> np.ndarray:
    return np.asarray(ctx["observation"], dtype=np.float32)
