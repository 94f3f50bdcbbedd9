"""Stage two's `train`: one run of params.yaml's `train.<name>` -> an agent checkpoint and its
learning curve. The agent reads cached labels only (the prototype cache built from the label
table); nothing here, nor anything it imports, imports a teacher (tests/test_training.py checks).

Learning curves are CSV (`step,return`: the env's native return of each finished episode, whatever
reward the agent was trained on), the format `dvc plots` reads.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from pipeline.config import HybridPPOParams, Params, PPOParams, TrainRun
from pipeline.envs import STATE, make_env
from pipeline.io import atomic_write_bytes, sha256_file
from pipeline.rollouts.format import MANIFEST_NAME

log = logging.getLogger(__name__)

ALL_REWARD_TERMS = ("env", "kinematic", "potential")


class TrainError(ValueError):
    """A run cannot start: missing inputs or settings that do not fit the env."""


@dataclass(frozen=True)
class TrainInputs:
    """The data a run may read: the env's rollouts and label table (DVC deps of train@<run>)."""

    rollouts: Path
    labels: Path

    def hashes(self) -> dict[str, str]:
        """Content hashes of what the agent learned from, recorded in its checkpoint."""
        manifest = self.rollouts / MANIFEST_NAME
        for path in (manifest, self.labels):
            if not path.exists():
                raise TrainError(f"{path} does not exist: run `dvc repro` to build it first")
        return {
            "rollouts_manifest_sha256": sha256_file(manifest),
            "labels_sha256": sha256_file(self.labels),
        }


def native_state_bounds(env: gym.Env) -> tuple[np.ndarray, np.ndarray] | None:
    """The native observation space's bounds when the state is that observation with finite
    bounds (MountainCar), to rescale the policy input; None otherwise."""
    space = env.unwrapped.observation_space
    state_space = env.observation_space[STATE]
    if (
        isinstance(space, gym.spaces.Box)
        and space.shape == state_space.shape
        and np.isfinite(space.low).all()
        and np.isfinite(space.high).all()
    ):
        return space.low.astype(np.float32), space.high.astype(np.float32)
    return None


def ppo_env_factory(
    run: TrainRun, params: Params, inputs: TrainInputs | None
) -> Callable[[], gym.Env]:
    """Env builder for the PPO family. Native reward is recorded below the shaping wrapper, so the
    learning curve shows the return of the task, comparable across methods. Frames are rendered
    only when the potential term needs them (the policy reads the state, as in the paper)."""
    env_cfg = params.env[run.env]
    if not env_cfg.include_state:
        raise TrainError(
            f"train.{run.env}: PPO reads the state observation; set env.{run.env}.include_state"
        )
    if run.method == "ppo":
        return lambda: gym.wrappers.RecordEpisodeStatistics(
            make_env(run.env, env_cfg, pixels=False)
        )

    from pipeline.shaping.potential import HysteresisPotential
    from pipeline.shaping.reward import HybridReward
    from pipeline.shaping.wrapper import HybridRewardWrapper

    hp = params.hybrid_ppo
    assert hp is not None  # config validation guarantees the section
    terms = set(run.reward_terms or ALL_REWARD_TERMS)
    reward = HybridReward(
        gamma=hp.gamma,
        alpha=hp.alpha,
        use_env="env" in terms,
        use_kinematic="kinematic" in terms,
        use_potential="potential" in terms,
    )
    if reward.use_potential:
        if inputs is None:
            raise TrainError("the potential term needs the env's rollouts and label table")
        embedder, cache = build_prototypes(hp, inputs)
    else:
        embedder, cache = None, None

    def make() -> gym.Env:
        env = gym.wrappers.RecordEpisodeStatistics(
            make_env(run.env, env_cfg, pixels=reward.use_potential)
        )
        potential = HysteresisPotential(cache, hp.confirm_steps) if cache is not None else None
        return HybridRewardWrapper(env, potential, embedder, reward)

    return make


def build_prototypes(hp: HybridPPOParams, inputs: TrainInputs):
    """The visual prototype cache of the labelled frames (hybrid VLM-PPO 3.2)."""
    from pipeline.shaping.prototypes import GreyEmbedder, OpenClipEmbedder, PrototypeCache

    if hp.embedder == "grey":
        embedder = GreyEmbedder(hp.grey_size)
    else:
        assert hp.open_clip is not None
        embedder = OpenClipEmbedder(
            hp.open_clip.model, hp.open_clip.pretrained, hp.open_clip.device
        )
    cache = PrototypeCache.from_labels(inputs.rollouts, inputs.labels, embedder, hp.bandwidth)
    log.info(
        "prototype cache: %d labelled frames, potentials %s",
        len(cache.potentials),
        sorted({float(p) for p in cache.potentials}),
    )
    return embedder, cache


def train_ppo_run(
    name: str, run: TrainRun, params: Params, inputs: TrainInputs, progress: bool = True
) -> tuple[Any, list[tuple[int, float]], dict[str, Any]]:
    """Train one ppo / hybrid_ppo run; return (agent, curve, checkpoint metadata)."""
    from pipeline.agents.ppo import train_ppo

    hp: PPOParams | None = params.ppo if run.method == "ppo" else params.hybrid_ppo
    assert hp is not None
    make = ppo_env_factory(run, params, inputs if run.method == "hybrid_ppo" else None)
    probe = make()
    bounds = native_state_bounds(probe)
    probe.close()
    agent, curve = train_ppo(
        make,
        hp,
        run.steps,
        run.seed,
        obs_fn=lambda obs: obs[STATE],
        progress=progress,
        obs_bounds=bounds,
    )
    meta = {
        "run": name,
        "env": run.env,
        "method": run.method,
        "obs": STATE,
        "reward_terms": sorted(run.reward_terms or ALL_REWARD_TERMS)
        if run.method == "hybrid_ppo"
        else ["env"],
        "steps": run.steps,
        "seed": run.seed,
        "hyperparameters": hp.model_dump(),
        "data": inputs.hashes() if run.method == "hybrid_ppo" else {},
    }
    return agent, curve, meta


def write_curve(path: str | Path, curve: list[tuple[int, float]]) -> None:
    """`step,return` CSV, one row per finished training episode (dvc plots' table format)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["step", "return"])
    writer.writerows((step, f"{ret:.4f}") for step, ret in curve)
    atomic_write_bytes(path, buffer.getvalue().encode())


def read_curve(path: str | Path) -> list[tuple[int, float]]:
    with open(path, newline="") as f:
        return [(int(row["step"]), float(row["return"])) for row in csv.DictReader(f)]


def train_run(
    name: str, params: Params, inputs: TrainInputs, out_dir: str | Path, curve_path: str | Path
) -> list[tuple[int, float]]:
    """Train `train.<name>` of params.yaml; write the checkpoint to `out_dir` and the curve."""
    if params.train is None or name not in params.train:
        known = ", ".join(params.train or {}) or "none"
        raise TrainError(f"params.yaml has no run train.{name} (runs: {known})")
    run = params.train[name]
    if run.method in ("ppo", "hybrid_ppo"):
        from pipeline.agents.ppo import save_actor_critic

        agent, curve, meta = train_ppo_run(name, run, params, inputs)
        save_actor_critic(agent, out_dir, meta)
    else:  # pragma: no cover - config validation allows only the methods above
        raise TrainError(f"train.{name}: unknown method {run.method!r}")
    write_curve(curve_path, curve)
    return curve
