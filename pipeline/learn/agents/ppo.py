"""PPO for discrete actions on state observations, after CleanRL's ppo.py (Huang et al. 2022,
"The 37 implementation details of PPO"): vectorised envs, GAE, clipped surrogate, value loss,
entropy bonus, advantage normalisation, orthogonal init, global-norm clipping, annealed lr.

Hybrid VLM-PPO (seed 000, sec. 4) uses it on MountainCar-v0 with state observations; its shaped
reward comes from pipeline.learn.shaping, applied by an env wrapper, so this file knows nothing of it.

Why one module of this length: after CleanRL's single-file ppo.py, the implementation details
above read in one place, in the order they run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn
from torch.distributions import Categorical
from tqdm import tqdm

from pipeline.core.config import Section, threads_field
from pipeline.learn.agents import env_state
from pipeline.learn.agents.checkpoint import (
    CheckpointError,
    load_module,
    read_checkpoint,
    weights_path,
    write_checkpoint,
)
from pipeline.learn.agents.resume import Resume

ARCHITECTURE = "ppo_actor_critic"


class PPOParams(Section):
    """PPO hyper-parameters (`ppo`). Defaults: rl-zoo3's tuned MountainCar-v0 preset (SB3 PPO
    with `normalize: true`), the setting hybrid VLM-PPO's table 2 is reproduced with; CleanRL's
    classic-control values are in parentheses where they differ."""

    num_envs: int = Field(
        default=16,
        ge=1,
        le=256,
        description="Vectorised envs stepped together (rl-zoo3: 16; CleanRL: 8).",
    )
    rollout_steps: int = Field(
        default=16, ge=1, description="Steps per env between updates (rl-zoo3: 16; CleanRL: 128)."
    )
    gamma: float = Field(
        default=0.99, gt=0, le=1, description="Discount factor; also gamma of the PBRS term."
    )
    gae_lambda: float = Field(
        default=0.98, ge=0, le=1, description="GAE lambda (rl-zoo3: 0.98; CleanRL: 0.95)."
    )
    update_epochs: int = Field(default=4, ge=1, description="Passes over each rollout (4).")
    minibatches: int = Field(default=4, ge=1, description="Minibatches per pass (4).")
    clip_coef: float = Field(default=0.2, gt=0, description="Surrogate clipping epsilon (0.2).")
    ent_coef: float = Field(
        default=0.0, ge=0, description="Entropy bonus weight (rl-zoo3: 0; CleanRL: 0.01)."
    )
    vf_coef: float = Field(default=0.5, ge=0, description="Value loss weight (0.5).")
    max_grad_norm: float = Field(default=0.5, gt=0, description="Global gradient-norm clip (0.5).")
    learning_rate: float = Field(
        default=3e-4, gt=0, description="Adam learning rate (rl-zoo3: 3e-4; CleanRL: 2.5e-4)."
    )
    anneal_lr: bool = Field(
        default=False,
        description="Anneal the learning rate linearly to 0 (rl-zoo3: no; CleanRL: yes).",
    )
    hidden: int = Field(default=64, ge=1, description="Units of each of the two tanh layers (64).")
    normalize_obs: bool = Field(
        default=True,
        description="Standardise observations by running mean/std (SB3 VecNormalize, rl-zoo3's "
        "`normalize: true`); the statistics are saved with the agent and frozen at deployment. "
        "Off: rescale by the observation space's bounds.",
    )
    normalize_reward: bool = Field(
        default=True,
        description="Divide rewards by the running std of the discounted return (VecNormalize).",
    )
    clip_obs: float = Field(default=10.0, gt=0, description="Clip of normalised observations.")
    clip_reward: float = Field(default=10.0, gt=0, description="Clip of normalised rewards.")
    resume_every: int = Field(
        default=0,
        ge=0,
        description="Updates between resume states of `train` (0: never); a killed run goes on "
        "from the last one.",
    )
    threads: int = threads_field()

    @model_validator(mode="after")
    def _minibatches_fit(self) -> PPOParams:
        if (self.num_envs * self.rollout_steps) % self.minibatches:
            raise ValueError(
                f"num_envs * rollout_steps ({self.num_envs * self.rollout_steps}) must divide "
                f"into {self.minibatches} minibatches"
            )
        return self


def _layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)  # CleanRL detail: orthogonal init, scaled heads
    nn.init.constant_(layer.bias, 0.0)
    return layer


class RunningMeanStd:
    """Running mean and variance over batches (Chan et al.'s parallel update), as in
    Stable-Baselines3's VecNormalize: mean 0, var 1 and a count of 1e-4 before any data."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 1e-4

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, np.float64)
        b_mean, b_var, b_count = batch.mean(0), batch.var(0), batch.shape[0]
        delta, total = b_mean - self.mean, self.count + b_count
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.mean, self.var, self.count = self.mean + delta * b_count / total, m2 / total, total


class ActorCritic(nn.Module):
    """Separate tanh MLPs for the policy and the value. The policy input is the observation
    either rescaled to [-1, 1] by `obs_low` / `obs_high` (MountainCar's velocity spans +-0.07, its
    position 1.8) or, with `normalize_obs`, standardised by running statistics and clipped to
    +-`clip_obs` (SB3's VecNormalize, rl-zoo3's `normalize: true`). Bounds and statistics are
    buffers: a checkpoint carries them, and deployment uses them frozen."""

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        hidden: int,
        obs_low: np.ndarray | None = None,
        obs_high: np.ndarray | None = None,
        normalize_obs: bool = False,
        clip_obs: float = 10.0,
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
        self.register_buffer("obs_mean", torch.zeros(obs_dim))
        self.register_buffer("obs_var", torch.ones(obs_dim))
        self.obs_dim, self.n_actions, self.hidden = obs_dim, n_actions, hidden
        self.normalize_obs, self.clip_obs = normalize_obs, clip_obs
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

    def set_obs_stats(self, stats: RunningMeanStd) -> None:
        self.obs_mean.copy_(torch.as_tensor(stats.mean, dtype=torch.float32))
        self.obs_var.copy_(torch.as_tensor(stats.var, dtype=torch.float32))

    def policy_input(self, obs: torch.Tensor) -> torch.Tensor:
        """Raw observations (B, D) -> what the networks read (B, D)."""
        if self.normalize_obs:
            x = (obs - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8)
            return x.clamp(-self.clip_obs, self.clip_obs)
        return (obs - self.obs_center) / self.obs_half_range

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.policy_input(obs)).squeeze(-1)  # (B,)

    def sample(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Actions of a batch of raw observations (B, D) -> (B,): sampled, or the argmax."""
        logits = self.actor(self.policy_input(obs))
        return logits.argmax(-1) if deterministic else Categorical(logits=logits).sample()

    # --- the agent interface shared with the SAC family (pipeline.learn.agents.load) --------------
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
        """The agents' checkpoint layout (pipeline.learn.agents.checkpoint): the weights, the shapes to
        rebuild the network, and `meta`."""
        shapes = {
            "obs_dim": self.obs_dim,
            "n_actions": self.n_actions,
            "hidden": self.hidden,
            "normalize_obs": self.normalize_obs,
            "clip_obs": self.clip_obs,
        }
        write_checkpoint(
            directory, self.tensors(), {**(meta or {}), "architecture": ARCHITECTURE, **shapes}
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}

    @classmethod
    def load(cls, directory: str | Path) -> ActorCritic:
        meta, tensors = read_checkpoint(directory)
        if meta.get("architecture") != ARCHITECTURE:
            raise CheckpointError(
                f"{directory}: a {meta.get('architecture')!r} checkpoint, not PPO's"
            )
        agent = cls(
            meta["obs_dim"],
            meta["n_actions"],
            meta["hidden"],
            normalize_obs=meta.get("normalize_obs", False),
            clip_obs=meta.get("clip_obs", 10.0),
        )
        load_module(agent, tensors, weights_path(directory))
        return agent.eval()

    def evaluate_input(
        self, x: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probabilities, entropies and values from policy inputs (already normalised)."""
        dist = Categorical(logits=self.actor(x))
        return dist.log_prob(actions), dist.entropy(), self.critic(x).squeeze(-1)


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
    resume: Resume | None = None,
) -> tuple[ActorCritic, list[tuple[int, float]]]:
    """Train for `total_steps` env steps; return the agent and (step, episode return) pairs of
    every finished episode, from the env's RecordEpisodeStatistics. If `make_env` already puts
    one in its wrapper chain, that one is read: put it below a reward-shaping wrapper to record
    the native return rather than the shaped one. `obs_fn` maps a batch of observations to the
    policy input (B, D), e.g. `lambda o: o["state"]` for the pipeline's {pixels, state} contract;
    `obs_bounds` (low, high) rescale that input to [-1, 1] inside the agent unless
    `cfg.normalize_obs` standardises it by running statistics.

    `cfg.normalize_reward` divides rewards by the running standard deviation of the discounted
    return and clips them (SB3's VecNormalize): only what PPO learns from changes, the recorded
    curve stays the env's return.

    With `resume`, the whole loop state is saved every `resume.every` updates: networks,
    optimiser, normalisation statistics, the torch RNG, counters, the curve so far, and the
    vector env's envs themselves (mid-episode, as plain values, pipeline.learn.agents.env_state: cart
    states, time limits, episode statistics, their RNGs, the hybrid wrapper's lock). A run that
    finds a saved state goes on from it, to the uninterrupted run's result bit for bit on CPU."""
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
    raw = np.asarray(obs_fn(obs), dtype=np.float32)  # (N, obs_dim)
    low, high = obs_bounds if obs_bounds is not None else (None, None)
    agent = ActorCritic(
        raw.shape[1],
        int(envs.single_action_space.n),
        cfg.hidden,
        low,
        high,
        normalize_obs=cfg.normalize_obs,
        clip_obs=cfg.clip_obs,
    )
    obs_stats, return_stats = RunningMeanStd((raw.shape[1],)), RunningMeanStd()
    discounted = np.zeros(cfg.num_envs)  # running discounted return, for reward normalisation

    def policy_input(raw_obs: np.ndarray, update: bool) -> torch.Tensor:
        if cfg.normalize_obs and update:
            obs_stats.update(raw_obs)
            agent.set_obs_stats(obs_stats)
        return agent.policy_input(torch.as_tensor(raw_obs, dtype=torch.float32))

    x_t = policy_input(raw, update=True)
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate, eps=1e-5)
    n, t_steps = cfg.num_envs, cfg.rollout_steps
    batch = n * t_steps
    updates = max(1, total_steps // batch)
    curve: list[tuple[int, float]] = []
    buf_x = torch.zeros((t_steps, n, raw.shape[1]))
    buf_act = torch.zeros((t_steps, n), dtype=torch.long)
    buf_logp, buf_rew, buf_done, buf_val = (torch.zeros((t_steps, n)) for _ in range(4))
    step, first = 0, 0
    if resume is not None:
        try:  # fail now, not at the first save
            env_state.capture(envs.envs)
        except TypeError as exc:
            envs.close()
            raise ValueError(
                f"resumable PPO saves its envs mid-episode as plain values, and these hold "
                f"something that has none ({exc}); set resume_every: 0 (or, for hybrid_ppo on "
                f"MountainCar, position_table_spacing, which renders no frames)"
            ) from exc
    saved = resume.load() if resume is not None else None
    if saved is not None:
        first, step, curve = saved["update"], saved["step"], saved["curve"]
        agent.load_state_dict(saved["agent"])
        optimizer.load_state_dict(saved["optimizer"])
        obs_stats.mean, obs_stats.var, obs_stats.count = saved["obs_stats"]
        return_stats.mean, return_stats.var, return_stats.count = saved["return_stats"]
        discounted, x_t = saved["discounted"], saved["x_t"]
        env_state.restore(envs.envs, saved["envs"])  # into the envs just built, in place
        torch.set_rng_state(saved["torch_rng"])
    bar = tqdm(total=updates * batch, initial=step, desc="ppo", unit="step", disable=not progress)
    for update in range(first, updates):
        if resume is not None and update > first and update % resume.every == 0:
            resume.save(
                {
                    "update": update, "step": step, "curve": list(curve),
                    "agent": agent.state_dict(), "optimizer": optimizer.state_dict(),
                    "obs_stats": (obs_stats.mean, obs_stats.var, obs_stats.count),
                    "return_stats": (return_stats.mean, return_stats.var, return_stats.count),
                    "discounted": discounted.copy(), "x_t": x_t.clone(),
                    "envs": env_state.capture(envs.envs), "torch_rng": torch.get_rng_state(),
                }
            )  # fmt: skip
        if cfg.anneal_lr:
            optimizer.param_groups[0]["lr"] = cfg.learning_rate * (1.0 - update / updates)
        for t in range(t_steps):
            with torch.no_grad():
                logits = agent.actor(x_t)
                action = Categorical(logits=logits).sample()
                logp, _, value = agent.evaluate_input(x_t, action)
            buf_x[t], buf_act[t], buf_logp[t], buf_val[t] = x_t, action, logp, value
            obs, reward, terminated, truncated, info = envs.step(action.numpy())
            step += n
            reward = np.asarray(reward, dtype=np.float64)
            done = terminated | truncated
            if cfg.normalize_reward:
                discounted = discounted * cfg.gamma + reward
                return_stats.update(discounted[:, None])
                reward = np.clip(
                    reward / np.sqrt(return_stats.var + 1e-8), -cfg.clip_reward, cfg.clip_reward
                )
                discounted[done] = 0.0
            reward = reward.astype(np.float32)
            # Truncation bootstraps from the final observation's value (CleanRL treats it as done;
            # with same-step autoreset the final obs is in info["final_obs"]).
            if truncated.any() and "final_obs" in info:
                for i in np.nonzero(truncated & ~terminated)[0]:
                    final_obs = info["final_obs"][i]  # one env's observation: batch it for obs_fn
                    one = (
                        {k: v[None] for k, v in final_obs.items()}
                        if isinstance(final_obs, dict)
                        else final_obs[None]
                    )
                    final = policy_input(np.asarray(obs_fn(one), dtype=np.float32), update=False)
                    with torch.no_grad():
                        reward[i] += cfg.gamma * agent.critic(final).item()
            buf_rew[t] = torch.as_tensor(reward)
            buf_done[t] = torch.as_tensor(done, dtype=torch.float32)
            finished = info.get("final_info", {})  # same-step autoreset: stats of ended episodes
            if "episode" in finished:
                for i in np.nonzero(finished["_episode"])[0]:
                    curve.append((step, float(finished["episode"]["r"][i])))
            x_t = policy_input(np.asarray(obs_fn(obs), dtype=np.float32), update=True)
        bar.update(batch)
        if curve:
            bar.set_postfix(last_return=f"{curve[-1][1]:.1f}")
        with torch.no_grad():
            advantages = gae(
                buf_rew, buf_val, buf_done, agent.critic(x_t).squeeze(-1), cfg.gamma, cfg.gae_lambda
            )
            returns = advantages + buf_val
        b_x, b_act = buf_x.reshape(batch, -1), buf_act.reshape(batch)
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
                logp, entropy, value = agent.evaluate_input(b_x[idx], b_act[idx])
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
    return agent.eval(), curve
