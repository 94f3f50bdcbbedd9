"""Hybrid VLM-PPO reward shaping (seed 000, sec. 3.2-3.4): milestone potentials from cached labels,
RBF-smoothed over a visual prototype cache, locked by hysteresis, fused with a kinematic reward by
potential-based reward shaping. The agent reads the prototype cache; it never calls a teacher."""
