"""The reward of hybrid VLM-PPO, each term a switch so that ablations are one param away."""

from __future__ import annotations

from dataclasses import dataclass


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

    def __call__(self, r_env: float, position: float, phi: float, phi_next: float) -> float:
        """Hybrid VLM-PPO eq. 2: R_total = R_env + R_kinematic + alpha (gamma Phi(s') - Phi(s))."""
        total = r_env if self.use_env else 0.0
        if self.use_kinematic:
            total += kinematic_reward(position)
        if self.use_potential:
            total += self.alpha * shaping_term(phi, phi_next, self.gamma)
        return total
