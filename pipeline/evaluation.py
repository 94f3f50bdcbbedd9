"""Stage two's `evaluate`: the trained agent alone, as at deployment (no teacher, no prototype
cache, no shaping): deterministic actions over N episodes on the env's native reward. What every
agent offers at deployment is `Agent`; `pipeline.methods.table.load_agent` rebuilds any saved one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from pipeline.config import EnvConfig
from pipeline.dataset.stacking import FrameStacker
from pipeline.envs import PIXELS, env_info, make_env
from pipeline.errors import PipelineError


class EvaluationError(PipelineError, ValueError):
    """An agent cannot be evaluated on the env asked for; the message says why and the fix."""


class Agent(Protocol):
    """What every agent offers at deployment. `act` takes the agent's input for one step: the
    `obs_kind` entry of the env's observation dict, stacked over `frame_stack` frames
    (`pipeline.dataset.stacking.FrameStacker`)."""

    obs_kind: str
    frame_stack: int

    def act(self, obs: np.ndarray, deterministic: bool = False) -> Any: ...

    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> None: ...


@dataclass(frozen=True)
class Policy:
    """A deterministic policy over the pipeline's observation dict, and what it reads.
    `begin` is called with each episode's first observation (frame stacks restart there)."""

    act: Callable[[dict[str, np.ndarray]], Any]
    obs: str  # "state" or "pixels": the env is built to render frames only when needed
    meta: dict[str, Any]
    begin: Callable[[dict[str, np.ndarray]], None] = lambda obs: None


def deployed(
    agent: Agent, meta: dict[str, Any] | None = None, *, deterministic: bool = True
) -> Policy:
    """An agent as a policy over the env's observation dict (frames stacked as in training,
    restarting at each episode's first observation): deterministic, as deployed, or sampling
    from the agent's policy (a labelling round's collection)."""
    stacker = FrameStacker(agent.frame_stack, agent.obs_kind)
    fresh = [True]  # the next observation starts an episode

    def begin(obs: dict[str, np.ndarray]) -> None:
        fresh[0] = True

    def act(obs: dict[str, np.ndarray]) -> Any:
        x = obs[agent.obs_kind]
        x = stacker.reset(x) if fresh[0] else stacker.step(x)
        fresh[0] = False
        return agent.act(x, deterministic=deterministic)

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
    env: gym.Env,
    policy: Policy,
    episodes: int,
    seed: int,
    success_defined: bool = False,
    progress: str | None = None,
) -> EvalResult:
    """Run `episodes` episodes with seeds seed, seed+1, ...; native return and length of each.
    Success is termination before the time limit where the env defines it (MountainCar).
    `progress`: a bar with this description, one tick per episode, the running mean beside it."""
    returns, lengths, successes = [], [], []
    bar = tqdm(range(episodes), desc=progress, unit="episode", disable=progress is None)
    for i in bar:
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
        bar.set_postfix(return_mean=f"{np.mean(returns):.1f}")
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
    policy: Policy,
    env_id: str,
    env_cfg: EnvConfig,
    episodes: int,
    seed: int,
    progress: str | None = None,
) -> EvalResult:
    """`play_episodes` in a fresh env of the pipeline's registry, rendering only if the policy
    reads frames."""
    env = make_env(env_id, env_cfg, pixels=policy.obs == PIXELS)
    success = env_info(env_id).success_on_termination
    try:
        check_fits(policy.meta, env.action_space, env_id)
        return play_episodes(env, policy, episodes, seed, success, progress)
    finally:
        env.close()


def check_fits(meta: dict[str, Any], space: gym.Space, env_id: str) -> None:
    """An agent's recorded env and action bounds (agent.json) are `env_id`'s: a checkpoint made
    for another env, or whose bounds were edited, would otherwise act with the wrong scale."""
    saved = meta.get("env")
    if isinstance(saved, str) and saved != env_id:
        raise EvaluationError(f"the agent was trained on {saved}, not {env_id}")
    if isinstance(space, gym.spaces.Box) and "action_low" in meta:
        low, high = np.asarray(meta["action_low"]), np.asarray(meta["action_high"])
        if low.shape != space.low.shape or not (
            np.allclose(low, space.low) and np.allclose(high, space.high)
        ):
            raise EvaluationError(
                f"agent.json's action bounds [{low.tolist()}, {high.tolist()}] are not {env_id}'s "
                f"[{space.low.tolist()}, {space.high.tolist()}]: the checkpoint was edited or made "
                "for another env; restore it with `dvc checkout` or retrain it (`dvc repro`)"
            )


def eval_metrics(result: EvalResult, meta: dict[str, Any]) -> dict[str, Any]:
    """The metrics JSON of one run (`dvc metrics show` reads the numbers)."""
    out = {k: v for k, v in asdict(result).items() if k not in ("returns", "lengths")}
    out = {k: v for k, v in out.items() if v is not None}
    return {**out, "env": meta["env"], "method": meta["method"], "train_steps": meta["steps"]}
