"""PPO for discrete actions on state observations, after CleanRL's ppo.py (Huang et al. 2022,
"The 37 implementation details of PPO"): vectorised envs, GAE, clipped surrogate, value loss,
entropy bonus, advantage normalisation, orthogonal init, global-norm clipping, annealed lr.

Hybrid VLM-PPO (seed 000, sec. 4) uses it on MountainCar-v0 with state observations; its shaped
reward comes from pipeline.shaping, applied by an env wrapper, so this file knows nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical
from tqdm import tqdm

from pipeline.agents.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from pipeline.config import PPOParams

ARCHITECTURE = "ppo_actor_critic"


def _layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)  # CleanRL detail: orthogonal init, scaled heads
    nn.init.constant_(layer.bias, 0.0)
    return layer


class ActorCritic(nn.Module):
    """Separate tanh MLPs for the policy and the value. Observations are rescaled to [-1, 1] by
    `obs_low` / `obs_high` when given (MountainCar's velocity spans +-0.07, its position 1.8);
    the bounds are buffers, so a checkpoint carries them."""

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        hidden: int,
        obs_low: np.ndarray | None = None,
        obs_high: np.ndarray | None = None,
    ) -> None:
        super().__init__()
        low = torch.as_tensor(
            obs_low if obs_low is not None else -np.ones(obs_dim), dtype=torch.float32
        )
        high = torch.as_tensor(
            obs_high if obs_high is not None else np.ones(obs_dim), dtype=torch.float32
        )
        if low.shape != (obs_dim,) or high.shape != (obs_dim,) or not bool((high > low).all()):
            raise ValueError(f"obs bounds must be ({obs_dim},) with high > low; got {low}, {high}")
        self.register_buffer("obs_center", (high + low) / 2)
        self.register_buffer("obs_half_range", (high - low) / 2)
        self.obs_dim, self.n_actions, self.hidden = obs_dim, n_actions, hidden
        self.critic = nn.Sequential(
            _layer(obs_dim, hidden),
            nn.Tanh(),
            _layer(hidden, hidden),
            nn.Tanh(),
            _layer(hidden, 1, 1.0),
        )
        self.actor = nn.Sequential(
            _layer(obs_dim, hidden),
            nn.Tanh(),
            _layer(hidden, hidden),
            nn.Tanh(),
            _layer(hidden, n_actions, 0.01),
        )

    def _scale(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs - self.obs_center) / self.obs_half_range

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self._scale(obs)).squeeze(-1)  # (B,)

    def sample(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Actions of a batch of observations (B, D) -> (B,): sampled, or the argmax."""
        logits = self.actor(self._scale(obs))
        return logits.argmax(-1) if deterministic else Categorical(logits=logits).sample()

    # --- the agent interface shared with the SAC family (pipeline.agents.load) --------------
    obs_kind = "state"  # the policy reads the state observation
    frame_stack = 1

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> int:
        """One observation (D,) -> an action index."""
        x = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
        if tuple(x.shape) != (self.obs_dim,):
            raise ValueError(
                f"act() expects one observation of shape ({self.obs_dim},), got {tuple(x.shape)}"
            )
        return int(self.sample(x[None], deterministic).item())

    def save(self, directory: str | Path, meta: dict[str, Any] | None = None) -> None:
        """The agents' checkpoint layout (pipeline.agents.checkpoint): the weights, the shapes to
        rebuild the network, and `meta`."""
        shapes = {"obs_dim": self.obs_dim, "n_actions": self.n_actions, "hidden": self.hidden}
        tensors = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        write_checkpoint(
            directory, tensors, {**(meta or {}), "architecture": ARCHITECTURE, **shapes}
        )

    @classmethod
    def load(cls, directory: str | Path) -> ActorCritic:
        meta, tensors = read_checkpoint(directory)
        if meta.get("architecture") != ARCHITECTURE:
            raise CheckpointError(
                f"{directory}: a {meta.get('architecture')!r} checkpoint, not PPO's"
            )
        agent = cls(meta["obs_dim"], meta["n_actions"], meta["hidden"])
        agent.load_state_dict(tensors)
        return agent.eval()

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist = Categorical(logits=self.actor(self._scale(obs)))
        return dist.log_prob(actions), dist.entropy(), self.value(obs)


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Generalised advantage estimation (Schulman et al. 2016) over (T, N) buffers; `dones[t]`
    means the episode ended at step t, so nothing flows back across it."""
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        not_done = 1.0 - dones[t]
        following = next_value if t == rewards.shape[0] - 1 else values[t + 1]
        delta = rewards[t] + gamma * following * not_done - values[t]
        last = delta + gamma * lam * not_done * last
        advantages[t] = last
    return advantages


def _records_episodes(env: gym.Env) -> bool:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.RecordEpisodeStatistics):
            return True
        env = env.env
    return False


def _with_episode_stats(make_env: Callable[[], gym.Env]) -> gym.Env:
    env = make_env()
    return env if _records_episodes(env) else gym.wrappers.RecordEpisodeStatistics(env)


def train_ppo(
    make_env: Callable[[], gym.Env],
    cfg: PPOParams,
    total_steps: int,
    seed: int,
    obs_fn: Callable[[object], np.ndarray] = lambda obs: obs,
    progress: bool = False,
    obs_bounds: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[ActorCritic, list[tuple[int, float]]]:
    """Train for `total_steps` env steps; return the agent and (step, episode return) pairs of
    every finished episode, from the env's RecordEpisodeStatistics. If `make_env` already puts
    one in its wrapper chain, that one is read: put it below a reward-shaping wrapper to record
    the native return rather than the shaped one. `obs_fn` maps a batch of observations to the
    policy input (B, D), e.g. `lambda o: o["state"]` for the pipeline's {pixels, state} contract;
    `obs_bounds` (low, high) rescale that input to [-1, 1] inside the agent."""
    torch.manual_seed(seed)
    envs = gym.vector.SyncVectorEnv(
        [lambda: _with_episode_stats(make_env) for _ in range(cfg.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    if not isinstance(envs.single_action_space, gym.spaces.Discrete):
        envs.close()
        raise ValueError(
            f"this PPO is for Discrete action spaces (hybrid VLM-PPO's MountainCar-v0); got "
            f"{envs.single_action_space}"
        )
    obs, _ = envs.reset(seed=seed)
    obs_t = torch.as_tensor(obs_fn(obs), dtype=torch.float32)  # (N, obs_dim)
    low, high = obs_bounds if obs_bounds is not None else (None, None)
    agent = ActorCritic(obs_t.shape[1], int(envs.single_action_space.n), cfg.hidden, low, high)
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate, eps=1e-5)
    n, t_steps = cfg.num_envs, cfg.rollout_steps
    batch = n * t_steps
    updates = max(1, total_steps // batch)
    curve: list[tuple[int, float]] = []
    buf_obs = torch.zeros((t_steps, n, obs_t.shape[1]))
    buf_act = torch.zeros((t_steps, n), dtype=torch.long)
    buf_logp, buf_rew, buf_done, buf_val = (torch.zeros((t_steps, n)) for _ in range(4))
    step = 0
    bar = tqdm(total=updates * batch, desc="ppo", unit="step", disable=not progress)
    for update in range(updates):
        if cfg.anneal_lr:
            optimizer.param_groups[0]["lr"] = cfg.learning_rate * (1.0 - update / updates)
        for t in range(t_steps):
            with torch.no_grad():
                action = agent.sample(obs_t)
                logp, _, value = agent.evaluate(obs_t, action)
            buf_obs[t], buf_act[t], buf_logp[t], buf_val[t] = obs_t, action, logp, value
            obs, reward, terminated, truncated, info = envs.step(action.numpy())
            step += n
            # Truncation bootstraps from the final observation's value (CleanRL treats it as done;
            # with same-step autoreset the final obs is in info["final_obs"]).
            reward = np.asarray(reward, dtype=np.float32)
            if truncated.any() and "final_obs" in info:
                for i in np.nonzero(truncated & ~terminated)[0]:
                    final_obs = info["final_obs"][i]  # one env's observation: batch it for obs_fn
                    one = (
                        {k: v[None] for k, v in final_obs.items()}
                        if isinstance(final_obs, dict)
                        else final_obs[None]
                    )
                    final = torch.as_tensor(obs_fn(one), dtype=torch.float32)
                    with torch.no_grad():
                        reward[i] += cfg.gamma * agent.value(final).item()
            buf_rew[t] = torch.as_tensor(reward)
            buf_done[t] = torch.as_tensor(terminated | truncated, dtype=torch.float32)
            finished = info.get("final_info", {})  # same-step autoreset: stats of ended episodes
            if "episode" in finished:
                for i in np.nonzero(finished["_episode"])[0]:
                    curve.append((step, float(finished["episode"]["r"][i])))
            obs_t = torch.as_tensor(obs_fn(obs), dtype=torch.float32)
        bar.update(batch)
        if curve:
            bar.set_postfix(last_return=f"{curve[-1][1]:.1f}")
        with torch.no_grad():
            advantages = gae(
                buf_rew, buf_val, buf_done, agent.value(obs_t), cfg.gamma, cfg.gae_lambda
            )
            returns = advantages + buf_val
        b_obs, b_act = buf_obs.reshape(batch, -1), buf_act.reshape(batch)
        b_logp, b_adv, b_ret = (
            buf_logp.reshape(batch),
            advantages.reshape(batch),
            returns.reshape(batch),
        )
        mb = batch // cfg.minibatches
        for _ in range(cfg.update_epochs):
            order = torch.randperm(batch)
            for start in range(0, batch, mb):
                idx = order[start : start + mb]
                logp, entropy, value = agent.evaluate(b_obs[idx], b_act[idx])
                ratio = (logp - b_logp[idx]).exp()
                adv = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
                pg_loss = torch.max(
                    -adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)
                ).mean()
                v_loss = 0.5 * ((value - b_ret[idx]) ** 2).mean()
                loss = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy.mean()
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
                optimizer.step()
    bar.close()
    envs.close()
    return agent, curve
