"""Wrappers that give every shipped env the same observation contract.

Contract (what `make_env` returns):
- `obs["pixels"]`: uint8 RGB frame, (S, S, 3), S = `image_size`;
- `obs["state"]`: float32 low-dimensional state, only when `include_state`;
- `info["context"]`: a flat dict of JSON-serialisable proprioceptive fields that a prompt or a
  kinematic reward needs (e.g. MountainCar position and velocity).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from PIL import Image

PIXELS = "pixels"
STATE = "state"
CONTEXT = "context"

FrameFn = Callable[[gym.Env, Any], np.ndarray]
StateFn = Callable[[gym.Env, Any], np.ndarray]
ContextFn = Callable[[gym.Env, Any], dict[str, Any]]


def resize_frame(frame: np.ndarray, size: int) -> np.ndarray:
    """(H, W, 3) uint8 -> (size, size, 3) uint8; PIL's resize is antialiased when shrinking."""
    if frame.shape[0] == size and frame.shape[1] == size:
        return np.ascontiguousarray(frame)
    image = Image.fromarray(frame).resize((size, size), Image.Resampling.BILINEAR)
    return np.asarray(image)


class DeferredFrames(Protocol):
    """How an env that draws its observation inside every step (CarRacing) draws it only when it
    is seen: `skipped()` around a step whose observation is thrown away, `draw()` for the
    observation of the step just taken (the same pixels: the drawing reads only the state the
    step left)."""

    def skipped(self) -> AbstractContextManager[None]: ...

    def draw(self) -> Any: ...


class ActionRepeat(gym.Wrapper):
    """Repeat each action `repeat` times, summing rewards; stop early when the episode ends.

    Only the last repeated step's observation is returned. With `frames`, the steps before it
    skip drawing theirs, and a step that ends the episode early draws it afterwards: the same
    observations, rewards and ends, for one drawing per agent step instead of `repeat`."""

    def __init__(self, env: gym.Env, repeat: int, frames: DeferredFrames | None = None) -> None:
        if repeat < 1:
            raise ValueError(f"action repeat must be >= 1, got {repeat}")
        super().__init__(env)
        self.repeat = repeat
        self.frames = frames

    def step(self, action):
        total = 0.0
        for i in range(self.repeat):
            last = i == self.repeat - 1
            if last or self.frames is None:
                obs, reward, terminated, truncated, info = self.env.step(action)
            else:
                with self.frames.skipped():
                    obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                if not last and self.frames is not None:
                    obs = self.frames.draw()
                break
        return obs, total, terminated, truncated, info


class ObservationContract(gym.Wrapper):
    """Turn an env's native observation into {pixels, state?} and add `info["context"]`.

    The frame is taken once per agent step (outside ActionRepeat), so repeated steps render nothing.
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        image_size: int,
        include_state: bool,
        state_dim: int,
        pixels: bool = True,
        frame_fn: FrameFn,
        state_fn: StateFn,
        context_fn: ContextFn,
    ) -> None:
        super().__init__(env)
        self.image_size = image_size
        if not (pixels or include_state):
            raise ValueError("an observation needs pixels or state (both were turned off)")
        self.include_state, self.pixels = include_state, pixels
        self._frame_fn, self._state_fn, self._context_fn = frame_fn, state_fn, context_fn
        obs_spaces: dict[str, spaces.Space] = {}
        if pixels:
            obs_spaces[PIXELS] = spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)
        if include_state:
            obs_spaces[STATE] = spaces.Box(-np.inf, np.inf, (state_dim,), np.float32)
        self.observation_space = spaces.Dict(obs_spaces)

    def _convert(self, native_obs: Any, info: dict[str, Any]) -> tuple[dict, dict]:
        obs = {}
        if self.pixels:  # rendering is most of a step's cost: state-only agents skip it
            obs[PIXELS] = resize_frame(self._frame_fn(self.env, native_obs), self.image_size)
        if self.include_state:
            obs[STATE] = np.asarray(self._state_fn(self.env, native_obs), dtype=np.float32)
        info = dict(info)
        info[CONTEXT] = self._context_fn(self.env, native_obs)
        return obs, info

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        native_obs, info = self.env.reset(seed=seed, options=options)
        return self._convert(native_obs, info)

    def step(self, action):
        native_obs, reward, terminated, truncated, info = self.env.step(action)
        obs, info = self._convert(native_obs, info)
        return obs, reward, terminated, truncated, info


class ResizeFrames(gym.ObservationWrapper):
    """The contract's `pixels` resized to (size, size) by `resize_frame`: a run whose agent sees
    frames of its own size (`train.<run>.image_size`) beside the env's other runs."""

    def __init__(self, env: gym.Env, size: int) -> None:
        super().__init__(env)
        self.size = size
        space = env.observation_space
        if not isinstance(space, spaces.Dict) or PIXELS not in space.spaces:
            raise ValueError(f"ResizeFrames needs an observation with {PIXELS!r}, got {space}")
        self.observation_space = spaces.Dict(
            {**space.spaces, PIXELS: spaces.Box(0, 255, (size, size, 3), np.uint8)}
        )

    def observation(self, observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {**observation, PIXELS: resize_frame(observation[PIXELS], self.size)}
