"""Stage two's `train`: one run of params.yaml's `train.<name>` -> an agent checkpoint and its
learning curve. The agent reads cached labels only (the prototype cache built from the label
table); nothing here, nor anything it imports, imports a teacher (tests/test_training.py checks).

Learning curves go through dvclive (pipeline.curves): `return` is the env's native return of each
finished episode, whatever reward the agent was trained on.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from pipeline.agents.erpv import ERPvAgent, VLMCritic, pretrain_vlm_critic
from pipeline.agents.ppo import train_ppo
from pipeline.agents.replay import ReplayBuffer
from pipeline.agents.sac import SACAgent, env_obs_shape, train_off_policy
from pipeline.agents.semore import (
    SemoreAgent,
    reasonable_indices,
    selective_probability,
    selective_sample,
)
from pipeline.config import (
    ERPvParams,
    HybridPPOParams,
    Params,
    PPOParams,
    SACParams,
    SemoreParams,
    TrainRun,
)
from pipeline.curves import write_training_log
from pipeline.dataset.layout import dataset_action_space, dataset_hashes
from pipeline.dataset.transitions import OfflineTransitions, load_offline_transitions
from pipeline.envs import STATE, make_env
from pipeline.evaluation import deployed, play_episodes
from pipeline.io import atomic_write_bytes, atomic_write_json, sha256_file
from pipeline.rollouts.format import MANIFEST_NAME
from pipeline.shaping.potential import HysteresisPotential
from pipeline.shaping.prototypes import GreyEmbedder, OpenClipEmbedder, PrototypeCache
from pipeline.shaping.reward import HybridReward
from pipeline.shaping.tabulated import PositionPotentialTable
from pipeline.shaping.wrapper import HybridRewardWrapper, TablePotential

log = logging.getLogger(__name__)

ALL_REWARD_TERMS = ("env", "kinematic", "potential")
NO_CRITIC = "no_critic.json"  # pretrain_critic's output for an env without C_V
TRAIN_EVAL_SEED = 10_000  # seeds of the evaluation episodes played during training


class TrainError(ValueError):
    """A run cannot start: missing inputs or settings that do not fit the env."""


@dataclass(frozen=True)
class TrainInputs:
    """The data a run may read (DVC deps of train@<run>): the env's rollouts and label table
    (hybrid_ppo's prototypes), its labelled dataset (the SAC family's offline replay) and the
    directory of pre-trained VLM critics, one sub-directory per env (erpv)."""

    rollouts: Path
    labels: Path
    dataset: Path | None = None
    critics: Path | None = None

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

    def dataset_hashes(self) -> dict[str, str]:
        if self.dataset is None:
            raise TrainError("no dataset was given (--dataset)")
        try:
            return dataset_hashes(self.dataset)
        except FileNotFoundError as exc:
            raise TrainError(str(exc)) from None


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
    run: TrainRun, params: Params, inputs: TrainInputs | None, table_cache: Path | None = None
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

    hp = params.hybrid_ppo
    assert hp is not None  # config validation guarantees the section
    terms = set(run.reward_terms or ALL_REWARD_TERMS)
    reward = HybridReward(
        gamma=hp.gamma,
        alpha=hp.alpha,
        use_env="env" in terms,
        use_kinematic="kinematic" in terms,
        use_potential="potential" in terms,
        kinematic=hp.kinematic,
    )
    table = None
    if reward.use_potential:
        if inputs is None:
            raise TrainError("the potential term needs the env's rollouts and label table")
        embedder, cache = build_prototypes(hp, inputs, table_cache)
        if hp.position_table_spacing is not None:
            if not run.env.startswith("MountainCar-") or cache.positions is None:
                raise TrainError(
                    f"hybrid_ppo.position_table_spacing applies to MountainCar-v0 (its frame is "
                    f"a function of the cart position), not {run.env}: set it to null"
                )
            args = (cache, embedder, env_cfg, hp.position_table_spacing, cache.positions)
            table = (
                PositionPotentialTable.cached(table_cache, *args)
                if table_cache is not None
                else PositionPotentialTable.build(*args)
            )
    else:
        embedder, cache = None, None

    def make() -> gym.Env:
        env = gym.wrappers.RecordEpisodeStatistics(
            make_env(run.env, env_cfg, pixels=reward.use_potential and table is None)
        )
        potential = HysteresisPotential(cache, hp.confirm_steps) if cache is not None else None
        source = TablePotential(table) if table is not None else None
        return HybridRewardWrapper(env, potential, embedder, reward, source)

    return make


def build_prototypes(hp: HybridPPOParams, inputs: TrainInputs, keep_in: Path | None = None):
    """The visual prototype cache of the labelled frames (hybrid VLM-PPO 3.2). With `keep_in`,
    it is kept there under a hash of the rollouts' manifest, the label table and the embedding,
    so that later runs (a benchmark's) read neither the frames nor the labels again."""
    if hp.embedder == "grey":
        embedder = GreyEmbedder(hp.grey_size)
    else:
        assert hp.open_clip is not None
        embedder = OpenClipEmbedder(
            hp.open_clip.model, hp.open_clip.pretrained, hp.open_clip.device
        )
    kept = None
    if keep_in is not None:
        key = json.dumps([inputs.hashes(), embedder.embedder_id, hp.bandwidth]).encode()
        kept = keep_in / f"prototypes-{hashlib.sha256(key).hexdigest()[:16]}.npz"
    if kept is not None and kept.exists():
        cache = PrototypeCache.load(kept)
    else:
        cache = PrototypeCache.from_labels(inputs.rollouts, inputs.labels, embedder, hp.bandwidth)
        if kept is not None:
            cache.save(kept)
    log.info(
        "prototype cache: %d labelled frames, potentials %s",
        len(cache.potentials),
        sorted({float(p) for p in cache.potentials}),
    )
    return embedder, cache


def train_ppo_run(
    name: str,
    run: TrainRun,
    params: Params,
    inputs: TrainInputs,
    progress: bool = True,
    table_cache: Path | None = None,
    resume_dir: str | Path | None = None,
) -> tuple[Any, list[tuple[int, float]], dict[str, Any]]:
    """Train one ppo / hybrid_ppo run; return (agent, curve, checkpoint metadata).
    `table_cache` keeps hybrid_ppo's position tables between runs (benchmarks); with
    `resume_dir` and `checkpoint_every`, a killed run goes on from its last resume state."""
    hp: PPOParams | None = params.ppo if run.method == "ppo" else params.hybrid_ppo
    assert hp is not None
    make = ppo_env_factory(run, params, inputs if run.method == "hybrid_ppo" else None, table_cache)
    probe = make()
    bounds = native_state_bounds(probe)
    probe.close()
    data = inputs.hashes() if run.method == "hybrid_ppo" else {}
    resume = None
    if resume_dir is not None and hp.checkpoint_every:
        fingerprint = run_fingerprint(name, run, hp, params.env[run.env], data)
        resume = ResumeFile(resume_dir, fingerprint, hp.checkpoint_every)
    agent, curve = train_ppo(
        make,
        hp,
        run.steps,
        run.seed,
        obs_fn=lambda obs: obs[STATE],
        progress=progress,
        obs_bounds=bounds,
        checkpoint=resume,
    )
    if resume is not None:
        resume.clear()  # finished: nothing to resume
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
        "config": hp.model_dump(mode="json"),
        "data": data,
    }
    return agent, curve, meta


def critic_dir(critics: Path, env_id: str) -> Path:
    return critics / env_id


def write_no_critic(out_dir: str | Path, env_id: str) -> None:
    """The pretrain_critic output of an env that `critic.envs` does not list: a marker (and no
    earlier critic left behind), so that the runs on that env depend on something stable."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    atomic_write_json(
        out_dir / NO_CRITIC, {"env": env_id, "critic": None, "why": "not listed in critic.envs"}
    )


def pretrain_critic(
    env_id: str, params: Params, dataset: Path, out_dir: Path, progress: bool = True
) -> list[dict[str, float]]:
    """ERPv's C_V for `env_id`: TD on the labelled RAE dataset, next-state actions from the cached
    labels (the VLM policy evaluated without calling the VLM); saved frozen with the data hashes."""
    if params.critic is None or params.erpv is None:
        raise TrainError("params.yaml needs `critic` and `erpv` sections to pre-train C_V")
    if env_id not in params.critic.envs:
        raise TrainError(f"{env_id} is not listed in critic.envs ({params.critic.envs})")
    cfg = params.erpv
    data = load_offline_transitions(dataset, cfg.network.obs)
    labelled = int(data.has_next_label.sum())
    if labelled == 0:
        raise TrainError(
            f"{dataset}: no transition has a labelled next state; C_V has nothing to learn from "
            f"(check the label table's `action` task)"
        )
    critic, logs = pretrain_vlm_critic(
        data,
        dataset_action_space(dataset),
        cfg,
        params.critic.steps,
        params.critic.seed,
        log_every=max(1, params.critic.steps // 20),
        progress=progress,
    )
    critic.save(out_dir, data_hashes=dataset_hashes(dataset))
    log.info(
        "C_V of %s: %d transitions, %d with a labelled next state", env_id, len(data), labelled
    )
    return logs


class ResumeFile:
    """A training loop's resume state in `directory` (outside the stage's DVC outputs, which
    DVC deletes before a rerun), tagged with a fingerprint of everything the run depends on: a
    changed run never resumes another's state. Written atomically; removed when the run ends."""

    STATE = "state.pt"

    def __init__(self, directory: str | Path, fingerprint: str, every: int) -> None:
        self.directory, self.fingerprint, self.every = Path(directory), fingerprint, every

    def load(self) -> dict[str, Any] | None:
        path = self.directory / self.STATE
        if not path.exists():
            return None
        state = torch.load(io.BytesIO(path.read_bytes()), weights_only=False)  # our own file
        if state.get("fingerprint") != self.fingerprint:
            log.warning("%s belongs to other settings or data: starting over", path)
            return None
        log.info("resuming %s from step %d", self.directory, state["step"])
        return state

    def save(self, state: dict[str, Any]) -> None:
        buffer = io.BytesIO()
        torch.save({**state, "fingerprint": self.fingerprint}, buffer)
        atomic_write_bytes(self.directory / self.STATE, buffer.getvalue())

    def clear(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def run_fingerprint(name: str, run: TrainRun, hp: Any, env_cfg: Any, data: dict) -> str:
    material = {
        "run": name,
        "train": run.model_dump(mode="json"),
        "hyperparameters": hp.model_dump(mode="json"),
        "env": env_cfg.model_dump(mode="json"),
        "data": data,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def selective_pool(hp: SemoreParams, offline: OfflineTransitions):
    """Semore's selective replay, offline: the offline rows of update i come from the
    transitions the teacher judged reasonable with probability `selective_probability(i)`
    (1 -> `selective_end` over `selective_steps` updates, then all transitions). The paper
    filters what enters its buffer online; here the judgements exist for dataset rows only."""
    assert offline.semantics is not None
    everything = np.arange(len(offline))
    reasonable = reasonable_indices(offline.semantics.judge)
    if hp.selective_steps == 0 or len(reasonable) == 0:
        return None

    def pool(update: int, rng: np.random.Generator) -> np.ndarray | None:
        p = selective_probability(update, hp.selective_start, hp.selective_end, hp.selective_steps)
        if p == 0.0:
            return None
        return selective_sample(rng, everything, reasonable, hp.batch_size, p)

    return pool


def train_sac_run(
    name: str,
    run: TrainRun,
    params: Params,
    inputs: TrainInputs,
    progress: bool = True,
    resume_dir: str | Path | None = None,
) -> tuple[Any, list[tuple[int, float]], list[dict[str, float]], dict[str, Any]]:
    """Train one sac / erpv run; return (agent, curve, metric rows, checkpoint metadata). The
    replay's offline part is the env's labelled dataset; ERPv's guidance reads its labels. With
    `resume_dir` and `checkpoint_every`, a killed run goes on from its last resume state."""
    hp: SACParams | None = getattr(params, run.method)  # sac, erpv or semore
    assert hp is not None
    obs = hp.network.obs
    env_cfg = params.env[run.env]
    if obs == STATE and not env_cfg.include_state:
        raise TrainError(
            f"train.{name}: the agent reads the state; set env.{run.env}.include_state"
        )
    env = make_env(run.env, env_cfg, pixels=obs != STATE)
    eval_env = make_env(run.env, env_cfg, pixels=obs != STATE) if hp.eval_episodes else None

    def eval_fn(agent: SACAgent) -> dict[str, float]:
        """The deployed policy on fixed seeds (a separate env: training episodes go on)."""
        assert eval_env is not None
        result = play_episodes(eval_env, deployed(agent), hp.eval_episodes, TRAIN_EVAL_SEED)
        return {"eval_return": result.return_mean}

    data_hashes: dict[str, Any] = {}
    offline = None
    semantics = run.method == "semore"  # Semore reads the dataset's masks and judge labels
    if hp.offline_fraction > 0 or run.method in ("erpv", "semore"):
        if inputs.dataset is None:
            raise TrainError(f"train.{name}: the labelled dataset is needed (--dataset)")
        offline = load_offline_transitions(inputs.dataset, obs, semantics=semantics)
        data_hashes = inputs.dataset_hashes()
    offline_pool_fn = None
    if run.method == "erpv":
        assert isinstance(hp, ERPvParams)
        if inputs.critics is None:
            raise TrainError(f"train.{name}: erpv needs the pre-trained critics (--critics)")
        path = critic_dir(inputs.critics, run.env)
        if (path / NO_CRITIC).exists():
            raise TrainError(
                f"train.{name}: erpv needs the pre-trained C_V of {run.env}; add {run.env} to "
                f"critic.envs in params.yaml"
            )
        if not path.exists():
            raise TrainError(f"{path} does not exist: run pretrain_critic@{run.env} first")
        critic = VLMCritic.load(path)
        data_hashes["critic"] = critic.data_hashes
        agent: Any = ERPvAgent.for_env(env, hp, critic, seed=run.seed)
    elif run.method == "semore":
        assert isinstance(hp, SemoreParams) and offline is not None
        agent = SemoreAgent(env_obs_shape(env, hp.network), env.action_space, hp, seed=run.seed)
        offline_pool_fn = selective_pool(hp, offline)
    else:
        agent = SACAgent.for_env(env, hp, seed=run.seed)
    buffer = ReplayBuffer(
        obs,
        env_obs_shape(env, hp.network),
        int(np.prod(env.action_space.shape)),
        hp.replay_capacity,
        frame_stack=hp.network.frame_stack,
        offline=offline,
        semantics=semantics,
    )
    resume = None
    if resume_dir is not None and hp.checkpoint_every:
        fingerprint = run_fingerprint(name, run, hp, env_cfg, data_hashes)
        resume = ResumeFile(resume_dir, fingerprint, hp.checkpoint_every)
    try:
        curve, logs = train_off_policy(
            env,
            agent,
            buffer,
            run.steps,
            run.seed,
            offline_fraction=hp.offline_fraction,
            start_steps=hp.start_steps,
            update_every=hp.update_every,
            log_every=hp.log_every,
            eval_fn=eval_fn if eval_env is not None else None,
            progress=progress,
            checkpoint=resume,
            offline_pool_fn=offline_pool_fn,
        )
    finally:
        env.close()
        if eval_env is not None:
            eval_env.close()
    if resume is not None:
        resume.clear()  # finished: nothing to resume
    meta = {
        "run": name,
        "env": run.env,
        "method": run.method,
        "obs": obs,
        "steps": run.steps,
        "seed": run.seed,
        "data": data_hashes,
    }
    return agent, curve, logs, meta


def train_run(
    name: str,
    params: Params,
    inputs: TrainInputs,
    out_dir: str | Path,
    log_dir: str | Path,
    summary_path: str | Path,
    resume_dir: str | Path | None = None,
) -> list[tuple[int, float]]:
    """Train `train.<name>` of params.yaml; write the checkpoint to `out_dir`, and the learning
    curve with (SAC family) the training metrics through dvclive to `log_dir` + `summary_path`."""
    if params.train is None or name not in params.train:
        known = ", ".join(params.train or {}) or "none"
        raise TrainError(f"params.yaml has no run train.{name} (runs: {known})")
    run = params.train[name]
    if run.method in ("ppo", "hybrid_ppo"):
        agent, curve, meta = train_ppo_run(name, run, params, inputs, resume_dir=resume_dir)
        logs: list[dict[str, float]] = []
    else:
        agent, curve, logs, meta = train_sac_run(name, run, params, inputs, resume_dir=resume_dir)
    agent.save(out_dir, meta)
    write_training_log(log_dir, summary_path, curve, logs)
    return curve
