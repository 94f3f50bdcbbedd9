import gymnasium as gym
import numpy as np
import pytest
import torch

from pipeline.agents.ppo import gae, train_ppo
from tests.conftest import ppo_params


def test_gae_against_hand_computation():
    rewards = torch.tensor([[1.0], [0.0], [2.0]])
    values = torch.tensor([[0.5], [0.2], [0.1]])
    dones = torch.tensor([[0.0], [1.0], [0.0]])  # the episode ends after step 1
    next_value = torch.tensor([0.4])
    g, lam = 0.9, 0.8
    d2 = 2.0 + g * 0.4 - 0.1
    d1 = 0.0 - 0.2  # terminal: no bootstrap
    d0 = 1.0 + g * 0.2 - 0.5
    expected = [d0 + g * lam * d1, d1, d2]  # nothing flows back across the episode end
    np.testing.assert_allclose(
        gae(rewards, values, dones, next_value, g, lam)[:, 0].numpy(), expected, rtol=1e-6
    )


def test_ppo_learns_cartpole_and_is_deterministic():
    def make():
        return gym.make("CartPole-v1")

    agent, curve = train_ppo(make, ppo_params(num_envs=4), total_steps=30_000, seed=0)
    early = np.mean([r for _, r in curve[:20]])
    late = np.mean([r for _, r in curve[-10:]])
    assert late > 80 and late > 3 * early, (early, late)  # random play scores ~22
    with torch.no_grad():
        greedy = agent.sample(torch.zeros(1, 4), deterministic=True)
    assert greedy.shape == (1,)
    _, again = train_ppo(make, ppo_params(num_envs=4), total_steps=4096, seed=0)
    _, same = train_ppo(make, ppo_params(num_envs=4), total_steps=4096, seed=0)
    assert again == same


def test_rejects_continuous_actions():
    with pytest.raises(ValueError, match="for Discrete action spaces"):
        train_ppo(lambda: gym.make("MountainCarContinuous-v0"), ppo_params(num_envs=1), 128, seed=0)


def test_ppo_on_the_pipeline_observation_contract():
    """Dict observations ({pixels, state}) with truncation: the final observation is batched for
    obs_fn so that truncated episodes bootstrap from their value."""
    from pipeline.config import EnvConfig
    from pipeline.envs import make_env

    def make():
        return make_env(
            "MountainCar-v0",
            EnvConfig(image_size=16, action_repeat=1, max_episode_steps=50, include_state=True),
        )

    _, curve = train_ppo(
        make, ppo_params(num_envs=2, rollout_steps=64), 512, seed=0, obs_fn=lambda o: o["state"]
    )
    assert len(curve) >= 8 and all(
        r == -50.0 for _, r in curve
    )  # every episode truncated at 50 steps
