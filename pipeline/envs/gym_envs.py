"""Gymnasium-native envs: MountainCar (classic control) and CarRacing (Box2D)."""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np


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


def make_gym_base(env_id: str, max_episode_steps: int | None) -> gym.Env:
    # pygame renders off-screen; without a display SDL would print a spurious error at init.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    # SDL turns SIGINT and SIGTERM into quit events nobody reads: `dvc` stopping a stage would
    # leave it running, writing into a DVC output
    os.environ.setdefault("SDL_NO_SIGNAL_HANDLERS", "1")
    render_mode = "state_pixels" if env_id.startswith("CarRacing") else "rgb_array"
    kwargs: dict[str, Any] = {"render_mode": render_mode}
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    return gym.make(env_id, **kwargs)
