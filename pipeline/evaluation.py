"""Stage two's `evaluate`: the trained agent alone, as at deployment (no teacher, no prototype
cache, no shaping): deterministic actions over N episodes on the env's native reward.
Also the comparison figure of every run's learning curve per env."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from pipeline.agents.checkpoint import read_meta
from pipeline.agents.load import Agent, load_agent
from pipeline.config import EnvConfig
from pipeline.dataset.stacking import FrameStacker
from pipeline.envs import PIXELS, env_info, make_env
from pipeline.io import atomic_write_bytes


@dataclass(frozen=True)
class Policy:
    """A deterministic policy over the pipeline's observation dict, and what it reads.
    `begin` is called with each episode's first observation (frame stacks restart there)."""

    act: Callable[[dict[str, np.ndarray]], Any]
    obs: str  # "state" or "pixels": the env is built to render frames only when needed
    meta: dict[str, Any]
    begin: Callable[[dict[str, np.ndarray]], None] = lambda obs: None


def load_policy(agent_dir: str | Path) -> Policy:
    """Any trained agent (`load_agent`) as deployed: deterministic actions on the observation dict,
    frames stacked as in training, no teacher, no prototypes, no masks."""
    return deployed(load_agent(agent_dir), read_meta(agent_dir))


def deployed(agent: Agent, meta: dict[str, Any] | None = None) -> Policy:
    """An agent as a deterministic policy over the env's observation dict (frames stacked as in
    training, restarting at each episode's first observation)."""
    stacker = FrameStacker(agent.frame_stack, agent.obs_kind)
    fresh = [True]  # the next observation starts an episode

    def begin(obs: dict[str, np.ndarray]) -> None:
        fresh[0] = True

    def act(obs: dict[str, np.ndarray]) -> Any:
        x = obs[agent.obs_kind]
        x = stacker.reset(x) if fresh[0] else stacker.step(x)
        fresh[0] = False
        return agent.act(x, deterministic=True)

    return Policy(act, agent.obs_kind, dict(meta or {}), begin)


@dataclass(frozen=True)
class EvalResult:
    episodes: int
    return_mean: float
    return_std: float
    length_mean: float
    success_rate: float | None  # None where the env defines no success
    returns: list[float]
    lengths: list[int]


def play_episodes(
    env: gym.Env, policy: Policy, episodes: int, seed: int, success_defined: bool = False
) -> EvalResult:
    """Run `episodes` episodes with seeds seed, seed+1, ...; native return and length of each.
    Success is termination before the time limit where the env defines it (MountainCar)."""
    returns, lengths, successes = [], [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        policy.begin(obs)
        total, length, done = 0.0, 0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
            total += float(reward)
            length += 1
            done = terminated or truncated
        returns.append(total)
        lengths.append(length)
        successes.append(bool(terminated))
    return EvalResult(
        episodes=episodes,
        return_mean=float(np.mean(returns)),
        return_std=float(np.std(returns)),
        length_mean=float(np.mean(lengths)),
        success_rate=float(np.mean(successes)) if success_defined else None,
        returns=returns,
        lengths=lengths,
    )


def evaluate_policy(
    policy: Policy, env_id: str, env_cfg: EnvConfig, episodes: int, seed: int
) -> EvalResult:
    """`play_episodes` in a fresh env of the pipeline's registry, rendering only if the policy
    reads frames."""
    env = make_env(env_id, env_cfg, pixels=policy.obs == PIXELS)
    try:
        return play_episodes(env, policy, episodes, seed, env_info(env_id).success_on_termination)
    finally:
        env.close()


def eval_metrics(result: EvalResult, meta: dict[str, Any]) -> dict[str, Any]:
    """The metrics JSON of one run (`dvc metrics show` reads the numbers)."""
    out = {k: v for k, v in asdict(result).items() if k not in ("returns", "lengths")}
    out = {k: v for k, v in out.items() if v is not None}
    return {**out, "env": meta["env"], "method": meta["method"], "train_steps": meta["steps"]}


def plot_curves(
    curves: dict[str, list[tuple[int, float]]], title: str, path: str | Path, window: int = 10
) -> None:
    """Learning curves of several runs in one PNG: each episode's return (faint) and its moving
    mean over `window` episodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for i, (name, curve) in enumerate(sorted(curves.items())):
        if not curve:
            continue
        steps, rets = np.asarray(curve, dtype=np.float64).T
        color = f"C{i}"
        ax.plot(steps, rets, color=color, alpha=0.2, linewidth=0.8)
        k = min(window, len(rets))
        smooth = np.convolve(rets, np.ones(k) / k, mode="valid")
        ax.plot(steps[k - 1 :], smooth, color=color, label=name)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return (native)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
