"""The hybrid reward as a gymnasium wrapper over an env with the pipeline's observation contract:
R_env is replaced by eq. 2's R_total, the terms kept in `info` for logging. The potential reads
only the frame (through the prototype cache, or a table of the frames' potentials by position),
the kinematic term only the context position."""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym

from pipeline.core.envs import CONTEXT, PIXELS
from pipeline.learn.shaping.potential import HysteresisPotential
from pipeline.learn.shaping.prototypes import Embedder
from pipeline.learn.shaping.reward import HybridReward, kinematic_reward
from pipeline.learn.shaping.tabulated import PositionPotentialTable


class PotentialSource(Protocol):
    needs_pixels: bool

    def __call__(self, obs: dict[str, Any], info: dict[str, Any]) -> tuple[float, float]:
        """(nearest prototype level, Phi_rbf) of the observation's frame."""
        ...


class FramePotential:
    """Embeds the rendered frame and reads the prototype cache (any env)."""

    needs_pixels = True

    def __init__(self, potential: HysteresisPotential, embedder: Embedder) -> None:
        self.cache, self.embedder = potential.cache, embedder

    def __call__(self, obs: dict[str, Any], info: dict[str, Any]) -> tuple[float, float]:
        e = self.embedder.embed(obs[PIXELS][None])[0]
        return self.cache.nearest_potential(e), self.cache.potential(e)


class TablePotential:
    """Looks the frame's potential up by cart position (MountainCar: pipeline.learn.shaping.tabulated)."""

    needs_pixels = False

    def __init__(self, table: PositionPotentialTable) -> None:
        self.table = table

    def __call__(self, obs: dict[str, Any], info: dict[str, Any]) -> tuple[float, float]:
        return self.table.lookup(info[CONTEXT]["position"])


class HybridRewardWrapper(gym.Wrapper):
    def __init__(
        self,
        env: gym.Env,
        potential: HysteresisPotential | None,
        embedder: Embedder | None,
        reward: HybridReward,
        source: PotentialSource | None = None,
    ) -> None:
        """`source` gives each frame's (level, Phi_rbf); by default the frame is embedded."""
        super().__init__(env)
        if reward.use_potential and potential is None:
            raise ValueError("the potential term is on: a hysteresis potential is needed")
        if reward.use_potential and source is None:
            if embedder is None:
                raise ValueError("the potential term is on: an embedder or a source is needed")
            source = FramePotential(potential, embedder)
        self.potential, self.source, self.reward = potential, source, reward
        self._phi, self._position = 0.0, 0.0

    def _phi_of(self, obs, info) -> float:
        assert self.potential is not None and self.source is not None
        return self.potential.update(*self.source(obs, info))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        if self.potential is not None:
            self.potential.reset()  # the hysteresis lock lives within an episode
        self._phi = self._phi_of(obs, info) if self.reward.use_potential else 0.0
        self._position = info[CONTEXT]["position"]
        return obs, info

    def step(self, action):
        obs, r_env, terminated, truncated, info = self.env.step(action)
        phi_next = self._phi_of(obs, info) if self.reward.use_potential else 0.0
        if terminated:
            phi_next = 0.0  # Phi of a terminal state is 0, or shaping could change the optimum
        position = info[CONTEXT]["position"]
        total = self.reward(
            float(r_env), position, self._phi, phi_next, self._position, bool(terminated)
        )
        info = {
            **info,
            "r_env": float(r_env),
            "r_kinematic": kinematic_reward(position),
            "phi": phi_next,
        }
        self._phi, self._position = phi_next, position
        return obs, total, terminated, truncated, info
