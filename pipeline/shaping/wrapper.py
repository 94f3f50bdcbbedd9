"""The hybrid reward as a gymnasium wrapper over an env with the pipeline's observation contract:
R_env is replaced by eq. 2's R_total, the terms kept in `info` for logging. The potential reads
only the frame (through the prototype cache), the kinematic term only the context position."""

from __future__ import annotations

import gymnasium as gym

from pipeline.envs import CONTEXT, PIXELS
from pipeline.shaping.potential import HysteresisPotential
from pipeline.shaping.prototypes import Embedder
from pipeline.shaping.reward import HybridReward, kinematic_reward


class HybridRewardWrapper(gym.Wrapper):
    def __init__(
        self,
        env: gym.Env,
        potential: HysteresisPotential | None,
        embedder: Embedder | None,
        reward: HybridReward,
    ) -> None:
        super().__init__(env)
        if reward.use_potential and (potential is None or embedder is None):
            raise ValueError("the potential term is on: a potential and an embedder are needed")
        self.potential, self.embedder, self.reward = potential, embedder, reward
        self._phi = 0.0

    def _phi_of(self, obs) -> float:
        return self.potential(self.embedder.embed(obs[PIXELS][None])[0])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        if self.potential is not None:
            self.potential.reset()  # the hysteresis lock lives within an episode
        self._phi = self._phi_of(obs) if self.reward.use_potential else 0.0
        return obs, info

    def step(self, action):
        obs, r_env, terminated, truncated, info = self.env.step(action)
        phi_next = self._phi_of(obs) if self.reward.use_potential else 0.0
        if terminated:
            phi_next = (
                0.0  # Phi of a terminal state is 0, or shaping could change the optimal policy
            )
        position = info[CONTEXT]["position"]
        total = self.reward(float(r_env), position, self._phi, phi_next)
        info = {
            **info,
            "r_env": float(r_env),
            "r_kinematic": kinematic_reward(position),
            "phi": phi_next,
        }
        self._phi = phi_next
        return obs, total, terminated, truncated, info
