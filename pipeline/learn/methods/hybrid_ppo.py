"""Method `hybrid_ppo` (seed 000): PPO on the state, trained on eq. 2's reward: the env's reward,
eq. 1's kinematic term and the PBRS potential of the milestone labels (visual prototype cache
with RBF smoothing and hysteresis, pipeline.learn.shaping). The policy never reads a frame; frames feed
Phi only, and not even that with MountainCar's position table."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

import gymnasium as gym
from pydantic import Field, model_validator

from pipeline.core.config import Params, Section, TrainRun
from pipeline.core.envs import make_env
from pipeline.learn.agents.ppo import PPOParams
from pipeline.learn.methods.base import TrainError, TrainInputs
from pipeline.learn.methods.ppo import PPO
from pipeline.learn.shaping.potential import HysteresisPotential
from pipeline.learn.shaping.prototypes import GreyEmbedder, OpenClipEmbedder, PrototypeCache
from pipeline.learn.shaping.reward import HybridReward
from pipeline.learn.shaping.tabulated import PositionPotentialTable
from pipeline.learn.shaping.wrapper import HybridRewardWrapper, TablePotential

log = logging.getLogger(__name__)

ALL_REWARD_TERMS = ("env", "kinematic", "potential")


class OpenClipEmbedderConfig(Section):
    """open_clip image features as prototype embeddings (real weights: tag or file)."""

    model: str = Field(description="open_clip model name, e.g. ViT-B-32.")
    pretrained: str | None = Field(description="Pretrained tag (e.g. openai) or a local file.")
    device: str = Field(default="cpu", description="torch device.")


class HybridPPOParams(PPOParams):
    """Hybrid VLM-PPO (`hybrid_ppo`: the PPO fields, usually merged from `ppo` with `<<: *ppo`,
    plus the shaping of seed 000 sec. 3.2-3.4)."""

    alpha: float = Field(ge=0, description="PBRS scale alpha of eq. 2 (not given in the paper).")
    bandwidth: float = Field(
        gt=0, description="RBF sigma over prototype embedding distances (3.2's smoothing)."
    )
    confirm_steps: int = Field(
        ge=1, description="Consecutive steps a milestone must be seen before the lock rises to it."
    )
    embedder: Literal["grey", "open_clip"] = Field(
        description="Prototype embedding: grey (offline, downsampled grey frame) or open_clip."
    )
    grey_size: int = Field(default=16, ge=2, le=128, description="Side of the grey embedding.")
    kinematic: Literal["reward", "potential"] = Field(
        default="reward",
        description="Eq. 1's form: 'reward' as printed (a per-step reward, which pays for "
        "hovering below the flag) or 'potential' (ours: R_kin as a PBRS potential).",
    )
    position_table_spacing: float | None = Field(
        default=None,
        gt=0,
        description="MountainCar only: look Phi up in a table of the frames' potentials by cart "
        "position at this spacing (labelled positions exact) instead of rendering every step; "
        "None renders and embeds each frame.",
    )
    open_clip: OpenClipEmbedderConfig | None = Field(
        default=None, description="Settings of embedder open_clip."
    )

    @model_validator(mode="after")
    def _embedder_has_settings(self) -> HybridPPOParams:
        if self.embedder == "open_clip" and self.open_clip is None:
            raise ValueError("embedder 'open_clip' needs an `open_clip:` section")
        return self


def build_prototypes(
    hp: HybridPPOParams, inputs: TrainInputs
) -> tuple[GreyEmbedder | OpenClipEmbedder, PrototypeCache]:
    """The visual prototype cache of the labelled frames (hybrid VLM-PPO 3.2)."""
    if hp.embedder == "grey":
        embedder: GreyEmbedder | OpenClipEmbedder = GreyEmbedder(hp.grey_size)
    else:
        assert hp.open_clip is not None  # HybridPPOParams validation guarantees it
        embedder = OpenClipEmbedder(
            hp.open_clip.model, hp.open_clip.pretrained, hp.open_clip.device
        )
    if inputs.dataset is None:
        raise TrainError("hybrid_ppo builds its prototypes from the env's dataset: give --dataset")
    cache = PrototypeCache.from_dataset(inputs.dataset, embedder, hp.bandwidth)
    log.info(
        "prototype cache: %d labelled frames, potentials %s",
        len(cache.potentials),
        sorted({float(p) for p in cache.potentials}),
    )
    return embedder, cache


class HybridPPO(PPO):
    name = "hybrid_ppo"
    params_class = HybridPPOParams
    run_options = frozenset({"reward_terms"})
    teacher_tasks = ("milestone",)  # the prototype cache of the milestone labels

    def env_factory(
        self, run: TrainRun, hp: HybridPPOParams, params: Params, inputs: TrainInputs
    ) -> Callable[[], gym.Env]:
        """Native reward recorded below the shaping wrapper, so the learning curve shows the
        return of the task, comparable across methods. Frames are rendered only when the
        potential term needs them and no position table stands in for them."""
        env_cfg = params.env[run.env]
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
        embedder, cache = None, None
        if reward.use_potential:
            embedder, cache = build_prototypes(hp, inputs)
            if hp.position_table_spacing is not None:
                if not run.env.startswith("MountainCar-") or cache.positions is None:
                    raise TrainError(
                        f"hybrid_ppo.position_table_spacing applies to MountainCar-v0 (its frame "
                        f"is a function of the cart position), not {run.env}: set it to null"
                    )
                table = PositionPotentialTable.build(
                    cache, embedder, env_cfg, hp.position_table_spacing, cache.positions
                )

        def make() -> gym.Env:
            env = gym.wrappers.RecordEpisodeStatistics(
                make_env(run.env, env_cfg, pixels=reward.use_potential and table is None)
            )
            potential = HysteresisPotential(cache, hp.confirm_steps) if cache is not None else None
            source = TablePotential(table) if table is not None else None
            return HybridRewardWrapper(env, potential, embedder, reward, source)

        return make

    def data_hashes(self, inputs: TrainInputs) -> dict[str, str]:
        """The dataset's (the prototypes are built from its milestone labels)."""
        return inputs.dataset_hashes()

    def reward_terms(self, run: TrainRun) -> list[str]:
        return sorted(run.reward_terms or ALL_REWARD_TERMS)


METHOD = HybridPPO()
