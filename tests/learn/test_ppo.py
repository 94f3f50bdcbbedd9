import gymnasium as gym
import numpy as np
import pytest
import torch

from pipeline.learn.agents.ppo import gae, train_ppo
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


def _cartpole():
    return gym.make("CartPole-v1")


@pytest.mark.slow  # 30,000 steps of learning; that a run is deterministic stays fast, below
def test_ppo_learns_cartpole():
    agent, curve = train_ppo(_cartpole, ppo_params(num_envs=4), total_steps=30_000, seed=0)
    early = np.mean([r for _, r in curve[:20]])
    late = np.mean([r for _, r in curve[-10:]])
    assert late > 80 and late > 3 * early, (early, late)  # random play scores ~22
    with torch.no_grad():
        greedy = agent.sample(torch.zeros(1, 4), deterministic=True)
    assert greedy.shape == (1,)


def test_ppo_on_cartpole_is_deterministic():
    _, again = train_ppo(_cartpole, ppo_params(num_envs=4), total_steps=4096, seed=0)
    _, same = train_ppo(_cartpole, ppo_params(num_envs=4), total_steps=4096, seed=0)
    assert again == same


def test_rejects_continuous_actions():
    with pytest.raises(ValueError, match="for Discrete action spaces"):
        train_ppo(lambda: gym.make("MountainCarContinuous-v0"), ppo_params(num_envs=1), 128, seed=0)


def test_ppo_on_the_pipeline_observation_contract():
    """Dict observations ({pixels, state}) with truncation: the final observation is batched for
    obs_fn so that truncated episodes bootstrap from their value."""
    from pipeline.core.config import EnvConfig
    from pipeline.core.envs import make_env

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


def test_running_mean_std_matches_numpy_over_batches():
    from pipeline.learn.agents.ppo import RunningMeanStd

    rng = np.random.default_rng(0)
    data = rng.normal([3.0, -1.0], [0.01, 5.0], (1000, 2))
    stats = RunningMeanStd((2,))
    for chunk in np.array_split(data, 37):
        stats.update(chunk)
    np.testing.assert_allclose(stats.mean, data.mean(0), rtol=1e-5, atol=1e-6)
    # the prior (mean 0, var 1, count 1e-4) adds (1 + 3**2) * 1e-4 / 1000 = 1e-6 to var[0]
    np.testing.assert_allclose(stats.var, data.var(0), rtol=1e-5, atol=1.5e-6)


def test_normalised_ppo_saves_its_statistics_and_deploys_them_frozen(tmp_path):
    """With normalize_obs the policy reads (obs - mean) / std of what training saw: the
    statistics are checkpoint buffers, acting never moves them, and a reloaded agent acts alike."""
    from pipeline.learn.methods.table import load_agent

    def make():
        return gym.make("MountainCar-v0", max_episode_steps=50)

    cfg = ppo_params(num_envs=2, rollout_steps=32, normalize_obs=True, normalize_reward=True)
    agent, curve = train_ppo(make, cfg, 512, seed=0)
    assert curve and all(r == -50.0 for _, r in curve)  # the recorded return stays the env's
    mean, var = agent.obs_mean.clone(), agent.obs_var.clone()
    assert abs(mean[0] + 0.5) < 0.2 and var[1] < 1e-3  # position near the valley, tiny velocity
    obs = np.array([-0.5, 0.01], np.float32)
    x = agent.policy_input(torch.as_tensor(obs)[None])
    np.testing.assert_allclose(
        x[0].numpy(), ((obs - mean.numpy()) / np.sqrt(var.numpy() + 1e-8)).clip(-10, 10), rtol=1e-5
    )
    actions = [
        agent.act(o, deterministic=True)
        for o in np.random.default_rng(0)
        .uniform([-1.2, -0.07], [0.6, 0.07], (50, 2))
        .astype(np.float32)
    ]
    assert torch.equal(agent.obs_mean, mean)  # acting does not update the statistics
    agent.save(tmp_path / "agent", {"run": "t", "method": "ppo"})  # load_agent reads `method`
    loaded = load_agent(tmp_path / "agent")
    assert torch.equal(loaded.obs_mean, mean) and loaded.normalize_obs
    again = [
        loaded.act(o, deterministic=True)
        for o in np.random.default_rng(0)
        .uniform([-1.2, -0.07], [0.6, 0.07], (50, 2))
        .astype(np.float32)
    ]
    assert actions == again


def test_reward_normalisation_changes_learning_not_the_curve():
    def make():
        return gym.make("CartPole-v1")

    plain, curve_plain = train_ppo(make, ppo_params(num_envs=2, rollout_steps=64), 1024, seed=0)
    scaled, curve_scaled = train_ppo(
        make, ppo_params(num_envs=2, rollout_steps=64, normalize_reward=True), 1024, seed=0
    )
    # the same first episodes (the same seeds, the same initial policy) ...
    assert curve_plain[:2] == curve_scaled[:2]
    # ... but different updates: the value head learns a differently scaled return
    assert not torch.equal(plain.critic[-1].weight, scaled.critic[-1].weight)
