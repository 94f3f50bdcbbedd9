"""Phi(s) with the hysteresis lock of hybrid VLM-PPO 3.2: "once a higher-potential semantic
milestone is confirmed, the baseline potential is irreversibly locked" (within an episode)."""

from __future__ import annotations

import numpy as np

from pipeline.learn.shaping.prototypes import PrototypeCache


class HysteresisPotential:
    """Phi(s_t) = max(locked, Phi_rbf(s_t)). A milestone level is confirmed when the nearest
    prototype shows it for `confirm_steps` consecutive steps; the lock then rises to it and never
    falls until `reset()` (a new episode). Confirmation over several steps filters the VLM's
    flickering classifications, which the paper's lock exists to absorb."""

    def __init__(self, cache: PrototypeCache, confirm_steps: int = 3) -> None:
        if confirm_steps < 1:
            raise ValueError(f"confirm_steps must be >= 1, got {confirm_steps}")
        self.cache, self.confirm_steps = cache, confirm_steps
        self.reset()

    def reset(self) -> None:
        self.locked = 0.0
        self._candidate, self._streak = None, 0

    def __call__(self, embedding: np.ndarray) -> float:
        return self.update(self.cache.nearest_potential(embedding), self.cache.potential(embedding))

    def update(self, level: float, phi_rbf: float) -> float:
        """One step given the nearest prototype's level and the RBF potential of the frame."""
        if level == self._candidate:
            self._streak += 1
        else:
            self._candidate, self._streak = level, 1
        if self._streak >= self.confirm_steps and level > self.locked:
            self.locked = level
        return max(self.locked, phi_rbf)
