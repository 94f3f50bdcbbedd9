"""Phi without rendering: MountainCar's frame is a function of the cart position alone (its
renderer draws the static track and flag and the car at `state[0]`; velocity is not drawn), so
the milestone potential is too. Render the frames of a grid of positions once, embed them in one
batch, and look the potential up at each step instead of rendering 600x400, resizing and
embedding every frame (the per-step cost that made hybrid PPO ~8x slower than PPO).

The labelled frames' own positions are entries of the table, so their potentials are exactly
those of their frames; between grid points the nearest entry stands in (the error is measured by
`max_error`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.core.config import EnvConfig
from pipeline.core.envs.gym_envs import make_gym_base
from pipeline.core.envs.wrappers import resize_frame
from pipeline.learn.shaping.prototypes import Embedder, PrototypeCache

POSITION_RANGE = (-1.2, 0.6)  # MountainCar-v0's min_position and max_position


def mountaincar_frames_at(positions: Sequence[float], image_size: int) -> np.ndarray:
    """The env's own frames (rendered, resized as the observation contract does) of the cart at
    each position: (len(positions), image_size, image_size, 3) uint8."""
    env = make_gym_base("MountainCar-v0", None)
    env.reset(seed=0)
    frames = []
    for position in positions:
        env.unwrapped.state = np.array([position, 0.0])
        frames.append(resize_frame(env.unwrapped.render(), image_size))
    env.close()
    return np.stack(frames)


@dataclass(frozen=True)
class PositionPotentialTable:
    positions: np.ndarray  # (M,) sorted
    levels: np.ndarray  # (M,) nearest prototype's milestone potential (the lock's confirmation)
    phis: np.ndarray  # (M,) Phi_rbf of the frame at that position

    @classmethod
    def build(
        cls,
        cache: PrototypeCache,
        embedder: Embedder,
        env_cfg: EnvConfig,
        spacing: float,
        exact_positions: Sequence[float] = (),
    ) -> PositionPotentialTable:
        if spacing <= 0:
            raise ValueError(f"position spacing must be > 0, got {spacing}")
        low, high = POSITION_RANGE
        grid = np.arange(low, high + spacing / 2, spacing)
        positions = np.unique(np.concatenate([grid, np.asarray(exact_positions, np.float64)]))
        levels, phis = _potentials(cache, embedder, positions, env_cfg.image_size)
        return cls(positions, levels, phis)

    def lookup(self, position: float) -> tuple[float, float]:
        """(nearest prototype level, Phi_rbf) of the frame at `position`."""
        i = int(np.searchsorted(self.positions, position))
        if i == len(self.positions) or (
            i > 0 and position - self.positions[i - 1] <= self.positions[i] - position
        ):
            i -= 1
        return float(self.levels[i]), float(self.phis[i])

    def max_error(
        self, cache: PrototypeCache, embedder: Embedder, image_size: int, samples: int, seed: int
    ) -> float:
        """Largest |Phi_table - Phi_rendered| over uniformly drawn positions."""
        positions = np.random.default_rng(seed).uniform(*POSITION_RANGE, samples)
        _, exact = _potentials(cache, embedder, positions, image_size)
        table = np.array([self.lookup(p)[1] for p in positions])
        return float(np.abs(table - exact).max())


def _potentials(
    cache: PrototypeCache, embedder: Embedder, positions: np.ndarray, image_size: int
) -> tuple[np.ndarray, np.ndarray]:
    levels, phis = [], []
    for start in range(0, len(positions), 512):
        frames = mountaincar_frames_at(positions[start : start + 512], image_size)
        for e in embedder.embed(frames):
            levels.append(cache.nearest_potential(e))
            phis.append(cache.potential(e))
    return np.asarray(levels, np.float32), np.asarray(phis, np.float32)
