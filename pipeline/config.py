"""Typed configuration: `params.yaml` is parsed once, here, into frozen pydantic models.

One section per stage (`collect`, ...) plus the env sections:

- `envs`: the list of env ids the pipeline runs (every DVC `foreach` iterates over it);
- `env`: per-env settings keyed by env id (observation size, action repeat, episode length).
  Settings for envs that are not listed in `envs` may stay in the file; they are validated but unused.

Unknown keys are errors that name the key and the allowed keys; bad values name the field and
the allowed range. Every field is documented beside it, with the paper's value where one exists.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.env_registry import KNOWN_ENVS

_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


class ConfigError(ValueError):
    """params.yaml (or a section of it) is malformed; the message names the key and the fix."""


class _Section(BaseModel):
    # Unknown keys are typos until proven otherwise; frozen so a stage cannot mutate its params.
    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())


class CarlaConfig(_Section):
    """How to reach a running CARLA server and which world to load (`env.<carla id>.carla`).
    Where the server runs does not change the data: host, port and timeout are left out of what
    fingerprints a collection; the map and weather are part of it."""

    host: str = Field(default="127.0.0.1", exclude=True, description="CARLA server host.")
    port: int = Field(default=2000, ge=1, le=65535, exclude=True, description="RPC port.")
    timeout_s: float = Field(
        default=10.0, gt=0, exclude=True, description="Seconds to wait for the server."
    )
    town: str = Field(
        default="Town04", description="Map: Town04 has the highway of #HW; #JW runs in town."
    )
    weather: str = Field(
        default="CloudyNoon", description="carla.WeatherParameters preset (table 5: Cloudy Noon)."
    )


class EnvConfig(_Section):
    """How one environment is built and observed (`env.<env_id>` in params.yaml)."""

    image_size: int = Field(
        ge=16,
        le=512,
        description="Side of the square RGB frame in pixels. ERPv C.2: 84 for DMControl and "
        "CarRacing; table 6: 128 for CARLA.",
    )
    action_repeat: int = Field(
        ge=1,
        le=16,
        description="Env steps per agent step; rewards are summed over the repeat. ERPv follows "
        "RAD: cartpole 8, walker 2, cheetah/ball_in_cup/reacher 4; table 6 (CARLA): 4.",
    )
    max_episode_steps: int | None = Field(
        ge=1,
        description="Episode length limit in env steps (before action repeat, as the papers count "
        "them); null keeps the env's own: 1000 for DMControl and CarRacing (ERPv C.2), 200 for "
        "MountainCar.",
    )
    include_state: bool = Field(
        description="Also return the low-dimensional `state` observation next to `pixels`."
    )
    carla: CarlaConfig | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # envs without it fingerprint as before
        description="CARLA ids only: the server and world (defaults: 127.0.0.1:2000, Town04).",
    )


class HFTeacherConfig(_Section):
    """A transformers VLM (`<teacher>.hf`: `label.teacher.hf`, `collect.<env>.teacher.hf`)."""

    model: str = Field(
        description="Local checkpoint path or hub id, e.g. Qwen/Qwen2-VL-2B-Instruct."
    )
    revision: str | None = Field(default=None, description="Hub revision (branch, tag or commit).")
    device: str = Field(default="cpu", description="torch device: cpu, cuda, cuda:1, ...")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        default="float32", description="Weights dtype; bfloat16 on GPUs."
    )
    max_new_tokens: int = Field(
        default=128, ge=1, le=4096, description="Generation limit per answer."
    )
    batch_size: int = Field(default=8, ge=1, le=512, description="Frames per generate() call.")


class OpenAITeacherConfig(_Section):
    """An OpenAI-compatible chat-completions server (`<teacher>.openai`)."""

    base_url: str = Field(description="Server URL up to /v1, e.g. http://127.0.0.1:8000/v1 (vLLM).")
    model: str = Field(description="Model name the server knows it by.")
    revision: str = Field(
        description="Which weights the server serves under `model` (a hub commit, a checkpoint "
        "hash, a deployment tag: your choice). Part of the teacher id, so answers of different "
        "weights served under one name never share cache entries."
    )
    api_key_env: str | None = Field(
        default=None, description="Environment variable holding the API key; null: no key."
    )
    timeout_s: float = Field(default=60.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(default=3, ge=0, le=10, description="Retries after the first attempt.")
    backoff_s: float = Field(
        default=1.0, ge=0, description="First retry delay; doubles each retry."
    )
    concurrency: int = Field(default=8, ge=1, le=256, description="Requests in flight at once.")
    max_tokens: int = Field(default=128, ge=1, le=4096, description="Generation limit per answer.")
    json_schema: bool = Field(
        default=False,
        description="Send a JSON-schema response_format (structured output; vLLM supports it).",
    )


class TeacherConfig(_Section):
    """A teacher: the one that labels (`label.teacher`) or the one that acts while collecting
    (`collect.<env>.teacher`)."""

    backend: Literal["scripted", "random", "constant", "hf", "openai", "human"] = Field(
        description="`scripted`: per-env reference scripts with injected failures, a stand-in for "
        "a VLM (offline default); `random`: ERPv table 4's Random Executor; `constant`: its Worst "
        "Model (all outputs 0); `hf`: a transformers VLM (section `hf`); `openai`: an "
        "OpenAI-compatible server (section `openai`); `human`: corrections a person made in a "
        "review tool, imported into the label cache (`python -m stages.review import`); prompts "
        "with none get status not_reviewed."
    )
    reliability: float = Field(
        ge=0.0,
        le=1.0,
        description="scripted only: probability that an answer is the script's reference answer; "
        "otherwise a failure of hybrid VLM-PPO table 1 is injected.",
    )
    seed: int = Field(ge=0, description="scripted / random: seed of the injected randomness.")
    hf: HFTeacherConfig | None = Field(default=None, description="Settings of backend `hf`.")
    openai: OpenAITeacherConfig | None = Field(default=None, description="Settings of `openai`.")
    human: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="backend human: the reviewer's name; the teacher id is `human:<name>`.",
    )

    @model_validator(mode="after")
    def _backend_has_settings(self) -> TeacherConfig:
        if self.backend == "hf" and self.hf is None:
            raise ValueError("backend 'hf' needs an `hf:` section with at least `model:`")
        if self.backend == "openai" and self.openai is None:
            raise ValueError(
                "backend 'openai' needs an `openai:` section with `base_url` and `model`"
            )
        if self.backend == "human" and self.human is None:
            raise ValueError("backend 'human' needs `human: <reviewer name>`")
        return self


Behaviour = Literal["random", "checkpoint", "teacher", "rae"]


class CollectConfig(_Section):
    """Rollout collection for one env (`collect.<env_id>` in params.yaml)."""

    behaviour: Behaviour = Field(
        description="Who acts: `random` samples the action space; `checkpoint` runs a saved actor "
        "(a torch.export program, see pipeline.rollouts.behaviours); `teacher` acts on the "
        "action answers of this section's `teacher`; `rae` alternates an explorer and the teacher (ERPv "
        "D.1, Random Alternating Exploration). Teacher answers go through the label cache."
    )
    episodes: int = Field(
        ge=1,
        description="Episodes to collect. Raising it extends an existing collection: episodes "
        "already on disk are kept and only the new ones are collected.",
    )
    seed: int = Field(ge=0, description="Base seed; episode i uses a seed derived from (seed, i).")
    shard_max_samples: int = Field(
        ge=1,
        description="A shard is closed at the first episode boundary after it holds this many "
        "samples. Shards always hold whole episodes, so resume works per shard.",
    )
    checkpoint: str | None = Field(
        default=None,
        description="Actor file for behaviour `checkpoint`; must be null for other behaviours.",
    )
    teacher_every_k: int = Field(
        default=10,
        ge=1,
        description="teacher / rae: ask the teacher at t % k == 0 (and when a teacher phase starts) "
        "and hold its action in between. ERPv C.4: 10.",
    )
    rae_switch_steps: tuple[int, int] = Field(
        default=(50, 400),
        description="rae: each episode draws T_switch ~ U[min, max] agent steps and alternates "
        "explorer and teacher phases of that length. ERPv D.1: U[50, 400].",
    )
    explorer: Literal["random", "checkpoint"] = Field(
        default="random",
        description="rae: the exploring actor (ERPv D.1 uses a pretrained visual RL actor: "
        "`checkpoint`, with `checkpoint:` set).",
    )
    teacher: TeacherConfig = Field(
        default_factory=lambda: TeacherConfig(backend="scripted", reliability=1.0, seed=0),
        description="teacher / rae: the teacher that ACTS during collection (ERPv D.1's teacher "
        "phases). Apart from `label.teacher`, the one that labels: relabelling the same frames "
        "with another teacher never recollects them. Default: the scripted reference.",
    )
    checkpoint_obs: Literal["state", "pixels"] = Field(
        default="state",
        description="Which observation the checkpoint actor reads: `state` (float32, (1, n)) "
        "or `pixels` (uint8, (1, 3, H, W)).",
    )

    @property
    def uses_checkpoint(self) -> bool:
        return self.behaviour == "checkpoint" or (
            self.behaviour == "rae" and self.explorer == "checkpoint"
        )

    @property
    def uses_teacher(self) -> bool:
        return self.behaviour in ("teacher", "rae")

    @model_validator(mode="after")
    def _checkpoint_matches_behaviour(self) -> CollectConfig:
        if self.uses_checkpoint and not self.checkpoint:
            raise ValueError(
                f"behaviour {self.behaviour!r} needs `checkpoint: <path to actor file>`"
            )
        if not self.uses_checkpoint and self.checkpoint is not None:
            raise ValueError(
                f"`checkpoint` is only read by behaviour 'checkpoint' or an rae checkpoint explorer "
                f"(got behaviour {self.behaviour!r}); set it to null or change the behaviour"
            )
        low, high = self.rae_switch_steps
        if not 1 <= low <= high:
            raise ValueError(
                f"rae_switch_steps must be [min, max] with 1 <= min <= max, got {list(self.rae_switch_steps)}"
            )
        return self


LabelTaskName = Literal["action", "milestone", "objects", "judge"]


class RayExecutorConfig(_Section):
    """Where and how `executor: ray` runs the teacher calls (`label.ray`): Ray Data's
    `map_batches` over an actor pool, each actor building its teacher once."""

    address: str | None = Field(
        default=None,
        description="Ray cluster to connect to (e.g. ray://head:10001 or auto); null: the "
        "RAY_ADDRESS environment variable if set, else a local cluster started for the stage.",
    )
    concurrency: int = Field(default=1, ge=1, description="Teacher actors (one model each).")
    num_gpus: float = Field(default=0.0, ge=0, description="GPUs per actor (1 for an hf VLM).")
    num_cpus: float = Field(default=1.0, gt=0, description="CPUs per actor.")
    batch_size: int = Field(
        default=64, ge=1, description="Prompts per actor call; each finished batch is cached."
    )
    object_store_mb: int | None = Field(
        default=None,
        ge=64,
        description="Object store of a local cluster (MB); small /dev/shm in containers needs it.",
    )


class LabelConfig(_Section):
    """The label stage (`label`): one teacher for all envs."""

    teacher: TeacherConfig
    tasks: dict[LabelTaskName, int] = Field(
        min_length=1,
        description="Task -> query every k-th frame of an episode (t % k == 0). Frames in between "
        "carry the last queried label, recorded as not queried (`judge` rows exist for queried "
        "frames only). ERPv C.4 queried every 10 frames.",
    )
    batch_size: int = Field(ge=1, le=4096, description="Prompts per teacher call.")
    max_transport_failure_rate: float = Field(
        ge=0.0,
        le=1.0,
        description="Fail the stage when more than this fraction of teacher calls got no answer "
        "(HTTP errors, timeouts). Failures are still written to the table, and are not cached.",
    )
    executor: Literal["local", "ray"] = Field(
        default="local",
        description="`local`: calls in this process; `ray`: the uncached prompts go through Ray "
        "Data (section `ray`; `pip install .[ray]`). The table is the same bytes either way.",
    )
    ray: RayExecutorConfig = Field(
        default_factory=RayExecutorConfig, description="Settings of executor ray."
    )

    @model_validator(mode="after")
    def _k_positive(self) -> LabelConfig:
        for task, k in self.tasks.items():
            if k < 1:
                raise ValueError(f"tasks.{task}: query interval must be >= 1, got {k}")
        return self


class ClipDenseConfig(_Section):
    """MaskCLIP-style dense masks on open_clip (`masks.clip_dense`)."""

    model: str = Field(description="open_clip model name, e.g. ViT-B-16 (a ViT tower).")
    pretrained: str | None = Field(
        description="open_clip pretrained tag (e.g. openai) or a checkpoint file; null: random."
    )
    device: str = Field(default="cpu", description="torch device.")
    cosine_threshold: float = Field(
        default=0.25,
        ge=-1.0,
        le=1.0,
        description="Mask = sigmoid(logit_scale * (cos - threshold)); our choice, not the paper's.",
    )
    model_config_file: str | None = Field(
        default=None, description="JSON of a custom open_clip architecture to register first."
    )


class ClipSegConfig(_Section):
    """transformers CLIPSeg (`masks.clipseg`)."""

    model: str = Field(description="Local path or hub id, e.g. CIDAS/clipseg-rd64-refined.")
    revision: str | None = Field(default=None, description="Hub revision.")
    device: str = Field(default="cpu", description="torch device.")


class MasksConfig(_Section):
    """The masks stage (`masks`): turn `objects` labels into one mask per phrase (Semore eq. 4)."""

    backend: Literal["scripted", "clip_dense", "clipseg"] = Field(
        description="`scripted`: colour keys / MuJoCo segmentation, no model (offline default); "
        "`clip_dense`: MaskCLIP-style open_clip similarity; `clipseg`: transformers CLIPSeg, the "
        "packaged CLIP-driven segmenter closest to Semore's CRIS."
    )
    batch_size: int = Field(ge=1, le=4096, description="Frames per back-end call.")
    clip_dense: ClipDenseConfig | None = Field(default=None, description="Settings of clip_dense.")
    clipseg: ClipSegConfig | None = Field(default=None, description="Settings of clipseg.")
    executor: Literal["local", "ray"] = Field(
        default="local",
        description="`local`: masks in this process; `ray`: the uncached frames go through Ray "
        "Data (section `ray`), each actor building the back end once. Same table bytes.",
    )
    ray: RayExecutorConfig = Field(
        default_factory=RayExecutorConfig, description="Settings of executor ray."
    )

    @model_validator(mode="after")
    def _backend_has_settings(self) -> MasksConfig:
        if self.backend != "scripted" and getattr(self, self.backend) is None:
            raise ValueError(f"backend {self.backend!r} needs a `{self.backend}:` section")
        return self


class DatasetConfig(_Section):
    """The dataset stage (`dataset`)."""

    shard_max_samples: int = Field(
        ge=1, description="A training shard closes at the first episode end past this many samples."
    )


class PPOParams(_Section):
    """PPO hyper-parameters (`ppo`; CleanRL's ppo.py defaults for classic control)."""

    num_envs: int = Field(ge=1, le=256, description="Vectorised envs stepped together.")
    rollout_steps: int = Field(ge=1, description="Steps per env between updates (CleanRL: 128).")
    gamma: float = Field(gt=0, le=1, description="Discount factor; also gamma of the PBRS term.")
    gae_lambda: float = Field(ge=0, le=1, description="GAE lambda (0.95).")
    update_epochs: int = Field(ge=1, description="Passes over each rollout (4).")
    minibatches: int = Field(ge=1, description="Minibatches per pass (4).")
    clip_coef: float = Field(gt=0, description="Surrogate clipping epsilon (0.2).")
    ent_coef: float = Field(ge=0, description="Entropy bonus weight (0.01).")
    vf_coef: float = Field(ge=0, description="Value loss weight (0.5).")
    max_grad_norm: float = Field(gt=0, description="Global gradient-norm clip (0.5).")
    learning_rate: float = Field(gt=0, description="Adam learning rate (2.5e-4).")
    anneal_lr: bool = Field(description="Anneal the learning rate linearly to 0.")
    hidden: int = Field(ge=1, description="Units of each of the two tanh layers (64).")
    normalize_obs: bool = Field(
        description="Standardise observations by running mean/std (SB3 VecNormalize, rl-zoo3's "
        "`normalize: true`); the statistics are saved with the agent and frozen at deployment. "
        "Off: rescale by the observation space's bounds."
    )
    normalize_reward: bool = Field(
        description="Divide rewards by the running std of the discounted return (VecNormalize)."
    )
    clip_obs: float = Field(default=10.0, gt=0, description="Clip of normalised observations.")
    clip_reward: float = Field(default=10.0, gt=0, description="Clip of normalised rewards.")
    checkpoint_every: int = Field(
        default=0,
        ge=0,
        description="Updates between resume states of `train` (0: never); a killed run goes on "
        "from the last one.",
    )

    @model_validator(mode="after")
    def _minibatches_fit(self) -> PPOParams:
        if (self.num_envs * self.rollout_steps) % self.minibatches:
            raise ValueError(
                f"num_envs * rollout_steps ({self.num_envs * self.rollout_steps}) must divide "
                f"into {self.minibatches} minibatches"
            )
        return self


class OpenClipEmbedderConfig(_Section):
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


class NetworkParams(_Section):
    """What the SAC-family networks read and how big they are (ERPv C.3, figures 8-11). The one
    definition: params.yaml's `sac.network` / `erpv.network`, the agents and their checkpoints
    all use it. Defaults are the paper's values."""

    obs: Literal["pixels", "state"] = Field(
        default="pixels",
        description="Which entry of the env's {pixels, state} dict the agent reads.",
    )
    frame_stack: int = Field(
        default=3,
        ge=1,
        le=16,
        description="Stacked frames (C.5 / table 6: 3); states are not stacked.",
    )
    feature_dim: int = Field(default=50, ge=1, description="Latent s_t = V(o_t) (figure 8: 50).")
    hidden_dim: int = Field(
        default=1024, ge=1, description="Actor / Q head width (figures 9-10: 1024)."
    )
    encoder_layers: int = Field(default=4, ge=1, le=8, description="Conv layers (SAC-AE / RAD: 4).")
    encoder_filters: int = Field(default=32, ge=1, description="Conv filters (SAC-AE / RAD: 32).")
    transition_hidden_dim: int = Field(
        default=512, ge=1, description="T_D and the reward head's width (figure 11: 512)."
    )
    transition_learn_sigma: bool = Field(
        default=False,
        description="Learn the transition model's sigma (eq. 12 in full); figure 11: false "
        "(deterministic, sigma = 1).",
    )
    log_std_min: float = Field(
        default=-10.0, description="Actor log-std lower bound (SAC-AE: -10)."
    )
    log_std_max: float = Field(default=2.0, description="Actor log-std upper bound (SAC-AE: 2).")


class SACParams(_Section):
    """SAC + DeepMDP (`sac`; ERPv table 6 where it gives a value, SAC-AE otherwise), plus the
    off-policy loop. The one config of the agent (pipeline.agents.sac takes it, checkpoints store
    it); `erpv` merges these (`<<: *sac`) and adds VPG / VER. Defaults are the paper's values."""

    network: NetworkParams = Field(default_factory=NetworkParams)
    batch_size: int = Field(default=128, ge=1, description="Batch size (table 6: 128).")
    gamma: float = Field(default=0.99, gt=0, le=1, description="Discount (SAC-AE: 0.99).")
    actor_lr: float = Field(default=1e-3, gt=0, description="Actor lr (table 6: 1e-3).")
    critic_lr: float = Field(
        default=1e-3, gt=0, description="Critic + visual encoder lr (table 6: 1e-3 each)."
    )
    alpha_lr: float = Field(default=1e-4, gt=0, description="Temperature lr (table 6: 1e-4).")
    model_lr: float = Field(
        default=1e-3, gt=0, description="Transition network + reward head lr (table 6: 1e-3)."
    )
    adam_betas: tuple[float, float] = Field(
        default=(0.9, 0.999), description="Adam betas (table 6: [0.9, 0.999])."
    )
    critic_tau: float = Field(
        default=0.01, ge=0, le=1, description="Polyak rate of the target Q heads (SAC-AE: 0.01)."
    )
    encoder_tau: float = Field(
        default=0.05, ge=0, le=1, description="Polyak rate of the target encoder (SAC-AE: 0.05)."
    )
    actor_update_freq: int = Field(
        default=2, ge=1, description="Critic updates per actor / alpha update (table 6: 2)."
    )
    target_update_freq: int = Field(
        default=2, ge=1, description="Updates per target update (table 6: 2)."
    )
    init_temperature: float = Field(default=0.1, gt=0, description="alpha_0 (table 6: 0.1).")
    aux_weight: float = Field(
        default=1.0,
        ge=0,
        description="DeepMDP transition + reward loss weight; 0 turns them off (plain SAC).",
    )
    start_steps: int = Field(
        default=1000, ge=0, description="Uniform random warm-up steps (table 6: 1000)."
    )
    update_every: int = Field(
        default=1, ge=1, description="Env steps between update bursts (1 update per step)."
    )
    offline_fraction: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of each batch drawn from the prefilled labelled dataset.",
    )
    replay_capacity: int = Field(
        default=100_000, ge=1, description="Online replay capacity (transitions)."
    )
    log_every: int = Field(
        default=1000, ge=1, description="Agent steps per row of training metrics."
    )
    checkpoint_every: int = Field(
        default=0,
        ge=0,
        description="Agent steps between resume checkpoints (taken at the next episode end, in "
        "the stage's resume directory): a killed run goes on from the last one, with the same "
        "final result. 0: none.",
    )
    eval_episodes: int = Field(
        default=1,
        ge=0,
        description="Deterministic episodes played in an env of their own at every metrics row "
        "(`eval_return`: a learning curve even when training episodes are long); 0: none.",
    )


class ERPvParams(SACParams):
    """ERPv (`erpv`): the SAC settings plus VPG (eq. 3-4) and VER (eq. 5-7)."""

    lambda_1: float = Field(default=10.0, ge=0, description="VPG weight in eq. 4 (sec. 4.1: 10).")
    lambda_2: float = Field(
        default=10.0, ge=0, description="VER weight in eq. 7 (sec. 4.1: 10); 0 turns VER off."
    )
    confidence_eps: float = Field(
        default=1e-6, gt=0, description="Floor of eq. 14's denominator (L_T): keeps G finite."
    )


class SemoreNetworkParams(NetworkParams):
    """Semore's networks (seed 001, "Feature Extraction", "Motion Enhancement and Interaction"):
    the SAC / ERPv network fields (`encoder_layers` / `encoder_filters` / `feature_dim` size each
    stream, `hidden_dim` the actor and Q heads, `transition_hidden_dim` the eq. 8 predictor and
    the eq. 9 reward head) plus the cross-attention of eq. 6-7. Pixels only."""

    attention_dim: int = Field(
        ge=1,
        description="Channels of the reduced maps F_v^, F_m^ that eq. 6 multiplies (not given in "
        "the paper; ours: 32).",
    )
    attention_stride: int = Field(
        ge=1,
        description="Kernel and stride of eq. 6's 'convolution layer for reducing the spatial "
        "complexity' (not given; ours: 5, so a 35x35 map at 84x84 frames becomes 7x7 = 49 tokens, "
        "a 25x25 map at 64x64 frames 5x5).",
    )

    @model_validator(mode="after")
    def _pixels_and_residuals(self) -> SemoreNetworkParams:
        if self.obs != "pixels":
            raise ValueError("Semore reads pixels: set `obs: pixels`")
        if self.frame_stack < 2:
            raise ValueError(
                "the motion stream reads residuals of adjacent frames: frame_stack must be >= 2 "
                "(the paper: 3 frames, 2 residuals)"
            )
        return self


SemoreVariant = Literal["sac", "m1", "m2", "m3", "m4"]


class SemoreParams(SACParams):
    """Semore (`semore`): the SAC settings (merged from `sac` with `<<: *sac`; `network` is a
    SemoreNetworkParams) plus eq. 5, 8, 9 and 12's weights, the similarity loss and the offline
    selective replay (pipeline.agents.semore). `aux_weight` is read by variant `sac` alone (the
    DeepMDP heads of the pixel SAC baseline); the Semore variants weigh eq. 8 and 9 apart."""

    network: SemoreNetworkParams
    variant: SemoreVariant = Field(
        description="Table 2's ablations: m1 semantic stream alone on the stacked frames, no "
        "similarity loss; m2 semantic (current frame) + motion (residuals) concatenated; m3 m2 + "
        "the eq. 5 similarity loss; m4 m3 + motion supervision (eq. 8) and the cross-attention "
        "(eq. 6-7): full Semore. `sac`: plain pixel SAC on the same encoder (the baseline)."
    )
    similarity_weight: float = Field(
        ge=0, description="Weight of the eq. 5 similarity loss in eq. 12 (not given; ours: 1)."
    )
    transition_weight: float = Field(
        ge=0, description="Weight of the eq. 8 transition constraint in eq. 12 (not given: 1)."
    )
    reward_weight: float = Field(
        ge=0, description="Weight of the eq. 9 reward head in eq. 12 (not given; DeepMDP: 1)."
    )
    ssim_alpha: float = Field(
        ge=0,
        le=1,
        description="Eq. 5 as Zhao et al. 2016's mix: alpha (1 - SSIM) + (1 - alpha) L1, "
        "single-scale (their value: 0.84).",
    )
    ssim_window: int = Field(
        ge=1,
        description="Side of SSIM's Gaussian window on the feature maps (Wang et al. 2004: 11); "
        "must not exceed the map side.",
    )
    ssim_sigma: float = Field(gt=0, description="Std of SSIM's Gaussian window (Zhao / Wang: 1.5).")
    selective_start: float = Field(
        ge=0,
        le=1,
        description="Selective replay: share of each batch drawn from judged-reasonable "
        "transitions at the first update (the paper's initial probability: 1).",
    )
    selective_end: float = Field(
        ge=0,
        le=1,
        description="Share reached after `selective_steps` updates, after which batches are drawn "
        "from all transitions (the paper stops selecting at 0.5).",
    )
    selective_steps: int = Field(
        ge=0,
        description="Updates over which the share decays linearly from start to end (not given "
        "in the paper); 0 turns selective replay off.",
    )

    @model_validator(mode="after")
    def _selective_decays(self) -> SemoreParams:
        if self.selective_end > self.selective_start:
            raise ValueError(
                f"selective_end ({self.selective_end}) must not exceed selective_start "
                f"({self.selective_start}): the probability decays"
            )
        return self


class CriticConfig(_Section):
    """pretrain_critic (`critic`): C_V by TD on each listed env's labelled RAE data, with the
    network and TD settings of `erpv` (the agent must be able to read what C_V reads)."""

    envs: list[str] = Field(description="Envs whose C_V is pre-trained (continuous actions).")
    steps: int = Field(ge=1, description="TD updates.")
    seed: int = Field(ge=0, description="Seed of the networks and the sampling.")


TrainMethod = Literal["ppo", "hybrid_ppo", "sac", "erpv", "semore"]
RewardTerm = Literal["env", "kinematic", "potential"]


class TrainRun(_Section):
    """One agent to train (`train.<run name>`): stages train@<name> and evaluate@<name>."""

    env: str = Field(description="Env id (must be listed in `envs`: the run reads its labels).")
    method: TrainMethod = Field(
        description="ppo (native reward, state) | hybrid_ppo (eq. 2 reward; state policy, frames "
        "feed Phi only) | sac | erpv (SAC + VPG + VER from the pre-trained C_V of `critic`) | "
        "semore (dual-stream pixels; the dataset's masks and judge labels)."
    )
    steps: int = Field(ge=1, description="Env steps of training (agent steps).")
    seed: int = Field(ge=0, description="Seed of the networks, the envs and the sampling.")
    reward_terms: list[RewardTerm] | None = Field(
        default=None,
        description="hybrid_ppo: the terms of eq. 2 that are on (default all: env, kinematic, "
        "potential); e.g. [env, kinematic] is the kinematic-only ablation.",
    )

    @model_validator(mode="after")
    def _terms_only_for_hybrid(self) -> TrainRun:
        if self.reward_terms is not None:
            if self.method != "hybrid_ppo":
                raise ValueError(f"reward_terms applies to method hybrid_ppo, not {self.method!r}")
            if not self.reward_terms:
                raise ValueError("reward_terms is empty: the agent would get no reward")
        return self


class EvaluateConfig(_Section):
    """The evaluate stage (`evaluate`): the agent alone, deterministic actions, as deployed."""

    episodes: int = Field(ge=1, description="Evaluation episodes per agent.")
    seed: int = Field(ge=0, description="Seed of the first evaluation episode (then +1 each).")


class Params(_Section):
    """The whole params.yaml."""

    envs: list[str] = Field(min_length=1, description="Env ids the pipeline runs, in order.")
    env: dict[str, EnvConfig] = Field(description="Per-env settings, keyed by env id.")
    collect: dict[str, CollectConfig] = Field(description="Per-env collection, keyed by env id.")
    label: LabelConfig | None = Field(default=None, description="The label stage.")
    masks: MasksConfig | None = Field(default=None, description="The masks stage.")
    dataset: DatasetConfig | None = Field(default=None, description="The dataset stage.")
    train: dict[str, TrainRun] | None = Field(
        default=None, description="Agents to train, keyed by run name (train@<name>)."
    )
    ppo: PPOParams | None = Field(default=None, description="PPO hyper-parameters.")
    hybrid_ppo: HybridPPOParams | None = Field(default=None, description="Hybrid VLM-PPO.")
    sac: SACParams | None = Field(default=None, description="SAC.")
    erpv: ERPvParams | None = Field(default=None, description="ERPv.")
    semore: SemoreParams | None = Field(
        default=None, description="Semore (and its ablations M1-M4, pixel SAC baseline)."
    )
    critic: CriticConfig | None = Field(default=None, description="The pretrain_critic stage.")
    evaluate: EvaluateConfig | None = Field(default=None, description="The evaluate stage.")

    @model_validator(mode="after")
    def _envs_are_known_and_configured(self) -> Params:
        """Every cross-section rule at once, one line per problem (key, bad value, the fix)."""
        problems: list[str] = []
        known = ", ".join(KNOWN_ENVS)
        for section in ("env", "collect"):
            for env_id in getattr(self, section):
                if env_id not in KNOWN_ENVS:
                    problems.append(f"{section}.{env_id}: unknown env id; known: {known}")
        if len(set(self.envs)) != len(self.envs):
            problems.append(f"envs lists an env twice: {self.envs}")
        for env_id in self.envs:
            if env_id not in KNOWN_ENVS:
                problems.append(f"envs: unknown env id {env_id!r}; known: {known}")
                continue
            for section in ("env", "collect"):
                if env_id not in getattr(self, section):
                    problems.append(
                        f"envs lists {env_id!r} but `{section}` has no entry for it; add "
                        f"`{section}.{env_id}` to params.yaml"
                    )
        critic_envs = self.critic.envs if self.critic is not None else []
        for env_id in critic_envs:
            if env_id not in self.envs:
                problems.append(
                    f"critic.envs: {env_id!r} is not listed in `envs`, so it has no labelled "
                    f"dataset to pre-train C_V on; add it to `envs` or remove it here "
                    f"(envs: {', '.join(self.envs)})"
                )
        for name, run in (self.train or {}).items():
            if not _RUN_NAME.fullmatch(name):
                problems.append(
                    f"train.{name}: a run name is a directory name: letters, digits, '-', '_' only"
                )
            if run.env not in self.envs:
                problems.append(
                    f"train.{name}.env: {run.env!r} is not listed in `envs` (its rollouts and "
                    f"labels must be built); add it there (envs: {', '.join(self.envs)})"
                )
            # each method reads its hyper-parameters from the section named after it
            if getattr(self, run.method) is None:
                problems.append(
                    f"train.{name}.method: {run.method!r} needs a `{run.method}:` section"
                )
            if run.method == "erpv" and run.env not in critic_envs:
                problems.append(
                    f"train.{name}: method erpv reads the pre-trained C_V of {run.env!r}, which "
                    f"`critic.envs` does not list; add {run.env!r} to critic.envs "
                    f"(now: {critic_envs})"
                )
        if problems:
            raise ValueError("\n  ".join(problems))
        return self


def _format_error(err: dict[str, Any], root: type[BaseModel]) -> str:
    loc = ".".join(str(part) for part in err["loc"])
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(root, err["loc"][:-1])
        return f"{loc}: unknown key; allowed keys: {', '.join(allowed)}"
    if err["type"] == "missing":
        return f"{loc}: missing required key"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{loc}: {msg} (got {err['input']!r})" if loc else msg


def _allowed_keys(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Walk the model tree along `loc` to the model whose keys were wrong."""
    model: Any = root
    for part in loc:
        if isinstance(part, str) and hasattr(model, "model_fields") and part in model.model_fields:
            annotation = model.model_fields[part].annotation
            # `X | None` -> X; `dict[str, X]` -> X (a dict key, e.g. an env id, is skipped below)
            candidates = [annotation, *getattr(annotation, "__args__", ())]
            model = next((c for c in candidates if hasattr(c, "model_fields")), annotation)
    return sorted(model.model_fields) if hasattr(model, "model_fields") else []


def parse_params(raw: Any, source: str = "params.yaml") -> Params:
    """Validate an already-loaded params mapping. Errors name every bad key at once."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of sections, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        lines = [_format_error(e, Params) for e in exc.errors()]
        raise ConfigError(f"{source} is invalid:\n  " + "\n  ".join(lines)) from None


def load_params(path: str | Path) -> Params:
    """Read and validate params.yaml."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such params file") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_params(raw, source=str(path))
