"""The reward of hybrid VLM-PPO, each term a switch so that ablations are one param away."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


def kinematic_reward(position: float) -> float:
    """Hybrid VLM-PPO eq. 1: R_kinematic = max(0, 2.0 * (x + 0.4)) from the cart position x."""
    return max(0.0, 2.0 * (position + 0.4))


def shaping_term(phi: float, phi_next: float, gamma: float) -> float:
    """The PBRS term gamma * Phi(s') - Phi(s) (Ng et al. 1999): its discounted sum telescopes."""
    return gamma * phi_next - phi


@dataclass(frozen=True)
class HybridReward:
    gamma: float  # the agent's discount factor
    alpha: float  # shaping scale
    use_env: bool = True
    use_kinematic: bool = True
    use_potential: bool = True
    # "reward": eq. 1 as printed, a per-step reward (pays for hovering below the flag: reaching
    # the goal ends a positive stream). "potential" (ours, not the paper's): eq. 1's value as a
    # potential in its own PBRS term, gamma R_kin(s') - R_kin(s): the same pull up the hill,
    # telescoping, so it cannot change which policy is optimal (Ng et al. 1999).
    kinematic: Literal["reward", "potential"] = "reward"

    def __call__(
        self,
        r_env: float,
        position: float,
        phi: float,
        phi_next: float,
        position_prev: float | None = None,
        terminated: bool = False,
    ) -> float:
        """Hybrid VLM-PPO eq. 2: R_total = R_env + R_kinematic + alpha (gamma Phi(s') - Phi(s)).
        `position` is the cart's after the step, `position_prev` before it (needed by the
        potential form of the kinematic term, whose terminal potential is 0)."""
        total = r_env if self.use_env else 0.0
        if self.use_kinematic:
            if self.kinematic == "reward":
                total += kinematic_reward(position)
            else:
                if position_prev is None:
                    raise ValueError("the potential form of eq. 1 needs the previous position")
                following = 0.0 if terminated else kinematic_reward(position)
                total += shaping_term(kinematic_reward(position_prev), following, self.gamma)
        if self.use_potential:
            total += self.alpha * shaping_term(phi, phi_next, self.gamma)
        return total
