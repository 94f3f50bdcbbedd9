"""Tiny envs with the pipeline's observation contract ({"state": ...}), cheap enough for agents
to learn in seconds."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class PointMass(gym.Env):
    """x in [-2, 2], start x ~ U[-1, 1]; action a in [-1, 1] moves x by 0.25 a; reward -|x|;
    20 steps (truncated). Moving to 0 and staying there scores about -2; random play about -15."""

    def __init__(self, horizon: int = 20) -> None:
        self.horizon = horizon
        self.observation_space = gym.spaces.Dict(
            {"state": gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)}
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self._x, self._t = 0.0, 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"state": np.array([self._x], dtype=np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._x, self._t = float(self.np_random.uniform(-1.0, 1.0)), 0
        return self._obs(), {}

    def step(self, action):
        a = float(np.clip(np.asarray(action, dtype=np.float64).ravel()[0], -1.0, 1.0))
        self._x = float(np.clip(self._x + 0.25 * a, -2.0, 2.0))
        self._t += 1
        return self._obs(), -abs(self._x), False, self._t >= self.horizon, {}


class DrawnPointMass(PointMass):
    """PointMass as a user's own env: a flat Box observation and a drawn frame (a bar at x), for
    the `module:function` factory of `env.<id>.make`."""

    def __init__(self, horizon: int = 20) -> None:
        super().__init__(horizon)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.render_mode = "rgb_array"

    def _obs(self) -> np.ndarray:  # type: ignore[override]
        return np.array([self._x], dtype=np.float32)

    def render(self) -> np.ndarray:
        frame = np.zeros((32, 48, 3), np.uint8)
        column = round((self._x + 2.0) / 4.0 * 47)
        frame[:, column] = 255
        return frame


def make_drawn_point_mass(horizon: int = 20) -> DrawnPointMass:
    return DrawnPointMass(horizon)
