"""The sections of the stages: collect, label, masks, dataset (stage one); critic, train, evaluate
(stage two). The agents' hyper-parameters are not here: each method's section is typed by the
method (pipeline.learn.methods).

Why one module of this length: one section class per stage, and most lines are the fields'
descriptions and paper values, which docs/params.md and the tests read from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from pipeline.core.config.base import Section
from pipeline.core.config.teachers import TeacherConfig
from pipeline.core.io import sha256_file

# `agent`: an agent of this pipeline acts (a labelling round's previous agent, which the round
# stage passes to collect); it cannot be chosen in `collect.<env>`
Behaviour = Literal["random", "checkpoint", "teacher", "rae", "agent"]


def untrusted_checkpoint_message(checkpoint: str, where: str = "") -> str:
    """Why a checkpoint file is refused without `trust_checkpoint_code`, and the two fixes (the
    second with the file's sha256 as it is now, which trusting it records)."""
    key = f"{where}.trust_checkpoint_code" if where else "trust_checkpoint_code"
    digest = sha256_file(checkpoint) if Path(checkpoint).is_file() else "<its sha256>"
    return (
        f"checkpoint {checkpoint} is a file (a torch.export program), and loading one can run code "
        f"from it; point `checkpoint` at an agent directory (models/<run>) or, for a file you "
        f"trust, set `{key}: {digest}` (its sha256 now: a changed file is refused)"
    )


class CollectConfig(Section):
    """Rollout collection for one env (`collect.<env_id>` in params.yaml)."""

    behaviour: Behaviour = Field(
        description="Who acts: `random` samples the action space; `checkpoint` runs a trained "
        "agent (`checkpoint:`, see pipeline.teach.rollouts.behaviours); `teacher` acts on the "
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
        description="Behaviour `checkpoint` (and an rae `checkpoint` explorer): an agent checkpoint "
        "directory (`models/<run>`, what train@<run> writes: safetensors weights and a known "
        "architecture, loaded without running anything from the files), or, only with "
        "`trust_checkpoint_code: <its sha256>`, a torch.export program file (`.pt2`). Must be "
        "null for other behaviours.",
    )
    trust_checkpoint_code: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="The sha256 of the torch.export program file (`.pt2`) that `checkpoint` may "
        "be: that file, those bytes, and no other. Loading one can run code from the file "
        "(torch's deserializer evaluates the program's symbolic sizes as Python expressions; "
        "torch documents torch.export.load as unsafe for untrusted files), so set it only for a "
        "file you made or trust; a file that changed at the trusted path is refused. Not needed "
        "for an agent directory; default null. It does not change the data, so it is not part "
        "of the collection's fingerprint.",
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
        description="Which observation a torch.export checkpoint reads: `state` (float32, "
        "(1, n)) or `pixels` (uint8, (1, 3, H, W)). An agent directory reads what it was trained "
        "on (its agent.json).",
    )

    @field_validator("trust_checkpoint_code", mode="before")
    @classmethod
    def _trust_by_hash(cls, value: Any, info: ValidationInfo) -> Any:
        if value is False:
            return None
        if value is True:  # a path alone is no trust: the file there may change
            checkpoint = info.data.get("checkpoint")
            digest = sha256_file(checkpoint) if checkpoint and Path(checkpoint).is_file() else None
            raise ValueError(
                "trust a checkpoint file by its sha256, not `true`: set `trust_checkpoint_code: "
                f"{digest or '<sha256 of the file>'}`"
                + (f" (the sha256 of {checkpoint} now)" if digest else "")
            )
        return value

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
                f"behaviour {self.behaviour!r} needs `checkpoint: <agent directory, models/<run>>`"
            )
        if not self.uses_checkpoint and self.checkpoint is not None:
            raise ValueError(
                f"`checkpoint` is only read by behaviour 'checkpoint' or an rae checkpoint explorer "
                f"(got behaviour {self.behaviour!r}); set it to null or change the behaviour"
            )
        if self.trust_checkpoint_code and not self.uses_checkpoint:
            raise ValueError(
                f"`trust_checkpoint_code` applies to a checkpoint file, which behaviour "
                f"{self.behaviour!r} does not read; remove it"
            )
        if self.checkpoint and Path(self.checkpoint).is_file() and not self.trust_checkpoint_code:
            # early, before DVC runs anything; collect refuses it again at load (a file made later)
            raise ValueError(untrusted_checkpoint_message(self.checkpoint))
        low, high = self.rae_switch_steps
        if not 1 <= low <= high:
            raise ValueError(
                f"rae_switch_steps must be [min, max] with 1 <= min <= max, got {list(self.rae_switch_steps)}"
            )
        return self


LabelTaskName = Literal["action", "milestone", "objects", "judge"]


class RayExecutorConfig(Section):
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


def _check_intervals(tasks: dict[str, int] | None) -> None:
    for task, k in (tasks or {}).items():
        if k < 1:
            raise ValueError(f"tasks.{task}: query interval must be >= 1, got {k}")


class LabelEnvConfig(Section):
    """One env's own label settings (`label.per_env.<env_id>`): the keys that differ from the
    `label` section's, for that env alone. `{}` keeps every shared setting."""

    teacher: TeacherConfig | None = Field(
        default=None,
        description="This env's labelling teacher instead of `label.teacher` (e.g. to compare two "
        "VLMs on one env): changing it relabels this env alone.",
    )
    tasks: dict[LabelTaskName, int] | None = Field(
        default=None,
        min_length=1,
        description="This env's query intervals instead of `label.tasks` (task -> every k-th frame).",
    )

    @model_validator(mode="after")
    def _k_positive(self) -> LabelEnvConfig:
        _check_intervals(self.tasks)
        return self


# The keys of `label` that decide the label table's bytes: label@<env> depends on these and on
# `label.per_env.<env>` (dvc.yaml; tests/core/test_config.py compares the two). `executor` and `ray`
# are not among them: they choose where the calls run, and the table is the same bytes either way;
# nor is `budget`, which only refuses a run before its first call.
LABEL_OUTPUT_KEYS = (
    "teacher", "tasks", "batch_size", "max_transport_failure_rate", "max_parse_failure_rate"
)  # fmt: skip


class LabelConfig(Section):
    """The label stage (`label`): the teacher, tasks and batching of every env, and per env what
    differs (`per_env`)."""

    teacher: TeacherConfig = Field(
        description="The teacher that labels every env's frames unless `per_env.<env>.teacher` "
        "names another (not the one that acts while collecting: `collect.<env>.teacher`)."
    )
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
    max_parse_failure_rate: float | dict[LabelTaskName, float] = Field(
        default=0.5,
        description="Fail the stage when more than this fraction of a task's answers (queried "
        "rows that got an answer) carries no label (format_collapse, invalid_choice, "
        "too_long, ...): a collapsed task (a prompt the model does not follow, a schema the "
        "parser cannot read) stops the pipeline instead of training on no labels. One rate for "
        "every task, or task -> rate (a task not listed: 0.5). The answers are cached: after a "
        "fix to the prompt or parser, the rerun pays only for new prompts.",
    )
    budget: int | None = Field(
        default=None,
        ge=0,
        description="At most this many prompts sent to the teacher in one run of label@<env> "
        "(those no cache answers): past it, the stage stops before its first call, naming the "
        "count (`python -m stages.label ... --estimate` prints it, with the cost at the recorded "
        "latency). null: no cap. Not a dependency of the label table (it changes no byte): "
        "after a refusal, raise it and `dvc repro` reruns the failed stage.",
    )
    executor: Literal["local", "ray"] = Field(
        default="local",
        description="`local`: calls in this process; `ray`: the uncached prompts go through Ray "
        "Data (section `ray`; `pip install .[ray]`). The table is the same bytes either way.",
    )
    ray: RayExecutorConfig = Field(
        default_factory=RayExecutorConfig, description="Settings of executor ray."
    )
    per_env: dict[str, LabelEnvConfig] = Field(
        default_factory=dict,
        description="Env id -> the settings that differ for that env (`{}`: none). label@<env> "
        "depends on `label.per_env.<env>`, so every env in `envs` needs an entry (DVC refuses a "
        "params key that is missing), and changing one relabels that env alone.",
    )

    @model_validator(mode="after")
    def _k_positive(self) -> LabelConfig:
        _check_intervals(self.tasks)
        rates = self.max_parse_failure_rate
        for task, rate in rates.items() if isinstance(rates, dict) else [("", rates)]:
            if not 0.0 <= rate <= 1.0:
                key = f"max_parse_failure_rate.{task}" if task else "max_parse_failure_rate"
                raise ValueError(f"{key}: {rate} is not a fraction in [0, 1]")
        return self

    def parse_failure_limit(self, task: str) -> float:
        """`max_parse_failure_rate` of `task`."""
        rates = self.max_parse_failure_rate
        return rates.get(task, 0.5) if isinstance(rates, dict) else rates  # type: ignore[call-overload]

    def teacher_path(self, env_id: str) -> str:
        """Where in params.yaml the teacher that labels `env_id` is configured (for messages)."""
        own = self.per_env.get(env_id)
        return f"label.per_env.{env_id}.teacher" if own and own.teacher else "label.teacher"

    def for_env(self, env_id: str) -> LabelConfig:
        """The settings that label `env_id`: the shared ones with its `per_env` entry applied
        (no entry: the shared ones); the result holds no `per_env`."""
        own = self.per_env.get(env_id, LabelEnvConfig())
        return self.model_copy(
            update={
                "teacher": own.teacher if own.teacher is not None else self.teacher,
                "tasks": own.tasks if own.tasks is not None else self.tasks,
                "per_env": {},
            }
        )


class ClipDenseConfig(Section):
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


class ClipSegConfig(Section):
    """transformers CLIPSeg (`masks.clipseg`)."""

    model: str = Field(description="Local path or hub id, e.g. CIDAS/clipseg-rd64-refined.")
    revision: str | None = Field(default=None, description="Hub revision.")
    device: str = Field(default="cpu", description="torch device.")


class MasksConfig(Section):
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


class DatasetConfig(Section):
    """The dataset stage (`dataset`)."""

    shard_max_samples: int = Field(
        ge=1, description="A training shard closes at the first episode end past this many samples."
    )


class CriticConfig(Section):
    """pretrain_critic (`critic`): C_V by TD on each listed env's labelled RAE data, with the
    network and TD settings of `erpv` (the agent must be able to read what C_V reads)."""

    envs: list[str] = Field(description="Envs whose C_V is pre-trained (continuous actions).")
    steps: int = Field(ge=1, description="TD updates.")
    seed: int = Field(ge=0, description="Seed of the networks and the sampling.")
    resume_every: int = Field(
        500,
        ge=0,
        description="TD updates between resume states of C_V's pre-training (in the stage's "
        "resume directory, `.resume/critic/<env>/`): a killed pre-training goes on from the last "
        "one to the same bytes as an uninterrupted one; 0: none.",
    )
    overrides: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per env, the erpv keys that env's C_V sets for itself, merged over `erpv` "
        "(e.g. `cartpole-swingup: {network: {obs: pixels}}` for the C_V of a pixel erpv run); "
        "only the keys C_V reads (pipeline.learn.methods.erpv.CRITIC_KEYS).",
    )
    variants: dict[str, dict[str, dict[str, Any]]] = Field(
        default_factory=dict,
        description="Per env, more C_V by name, each with the erpv keys it sets for itself, "
        "merged over `erpv` and the env's `overrides` (e.g. `cartpole-swingup: {pixels: "
        "{network: {obs: pixels}}}`); a run reads one with `critic_variant` in its erpv settings, "
        "so a state and a pixel erpv run share an env. Written to models/critic/<env>/erpv/variants/.",
    )


RewardTerm = Literal["env", "kinematic", "potential"]


class RoundConfig(Section):
    """One labelling round of a run (`rounds.<round name>`, stage round@<name>): the previous
    agent collects `episodes` episodes, the label teacher answers their frames in batch through
    the content-addressed cache, masks and a dataset part follow, and the agent trains `steps`
    more steps, warm-started from the previous one, on the static dataset plus every round's
    part so far. DVC cannot compute k-1, so each item names what it follows; check_params
    checks the chain and says the exact paths to write."""

    run: str = Field(description="The run (`train.<run>`) whose agent round 1 starts from.")
    env: str = Field(description="The run's env id (dvc.yaml's deps read it; must match).")
    method: str = Field(description="The run's method (dvc.yaml's params read it; must match).")
    round: int = Field(ge=1, description="k: round 1 follows the static run, k follows k-1.")
    previous_agent: str = Field(
        description="The agent this round starts from and collects with: `models/<run>` for "
        "round 1, `models/rounds/<round k-1>` after."
    )
    previous_data: str = Field(
        description="What this round's data extends: `data/datasets/<env>` for round 1, "
        "`data/rounds/<round k-1>` after (its dataset parts)."
    )
    episodes: int = Field(ge=1, description="Episodes the previous agent collects this round.")
    steps: int = Field(ge=1, description="Agent steps of this round's training.")
    seed: int = Field(ge=0, description="Seed of the round's collection (episode i: (seed, i)).")
    explore: Literal["sample", "deterministic"] = Field(
        default="sample",
        description="How the previous agent acts while collecting: `sample` draws from its "
        "policy (SAC's exploration), `deterministic` takes the mean action.",
    )


class TrainRun(Section):
    """One agent to train (`train.<run name>`): stages train@<name> and evaluate@<name>."""

    env: str = Field(description="Env id (must be listed in `envs`: the run reads its labels).")
    method: str = Field(
        description="A method of the method table (pipeline.learn.methods.table.METHOD_MODULES; "
        "pipeline/learn/methods/<method>.py says what it trains). Its hyper-parameters are the section "
        "of params.yaml named after it."
    )
    steps: int = Field(ge=1, description="Env steps of training (agent steps).")
    seed: int = Field(ge=0, description="Seed of the networks, the envs and the sampling.")
    reward_terms: list[RewardTerm] | None = Field(
        default=None,
        description="hybrid_ppo only: the terms of eq. 2 that are on (default all: env, "
        "kinematic, potential); e.g. [env, kinematic] is the kinematic-only ablation.",
    )
    image_size: int | None = Field(
        default=None,
        ge=16,
        le=512,
        exclude_if=lambda v: v is None,  # runs without one fingerprint as before
        description="SAC family, pixel runs: the frame side this run's agent sees. Its env's "
        "frames and the dataset's are resized to it (as the env resizes its render), in "
        "training and when the agent acts, so the env's own `image_size` and every other run "
        "stay as they are; null: `env.<id>.image_size`.",
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Keys of the method's section that this run sets for itself, merged over the "
        "section (mappings key by key): e.g. `{network: {obs: pixels}, image_pad: 4}` makes one "
        "run learn from frames beside state runs of the same method.",
    )

    @model_validator(mode="after")
    def _terms_not_empty(self) -> TrainRun:
        if self.reward_terms is not None and not self.reward_terms:
            raise ValueError("reward_terms is empty: the agent would get no reward")
        return self


# Where policy_teacher@<env> writes the env's policy teacher; a `policy` teacher that labels or
# acts for <env> reads it from there, so that DVC knows label@<env> depends on it.
POLICY_TEACHERS_DIR = "models/teachers"
# What policy_teacher@<env> writes there for an env that `policy_teachers` does not list.
NO_TEACHER = "no_teacher.json"


class PolicyTeacherRun(Section):
    """The agent that stage policy_teacher@<env> trains online as `<env>`'s `policy` teacher
    (`policy_teachers.<env>`): a teacher whose quality is dialled by its training (an expert, a
    half-trained agent) and its `reliability`, to measure what guidance is worth."""

    method: Literal["sac", "drq", "ppo"] = Field(
        description="A method that learns online without the cached data: sac, drq or ppo. Its "
        "hyper-parameters are its section of params.yaml, with `overrides` merged over; an "
        "off-policy teacher must keep `offline_fraction: 0`."
    )
    steps: int = Field(ge=1, description="Env steps of training (agent steps).")
    seed: int = Field(ge=0, description="Seed of the networks, the envs and the sampling.")
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Keys of the method's section that this teacher sets for itself, merged over "
        "the section (mappings key by key), as `train.<run>.overrides`.",
    )

    def train_run(self, env_id: str) -> TrainRun:
        """This teacher as a train run on `env_id` (what the method table trains)."""
        return TrainRun(
            env=env_id,
            method=self.method,
            steps=self.steps,
            seed=self.seed,
            overrides=self.overrides,
        )


class TeacherEvalConfig(Section):
    """The teacher_eval stage (`teacher_eval`): each env's labelling teacher ACTS alone (ERPv's
    "Only VLMs" / VBE row), beside uniform random actions on the same episode seeds."""

    episodes: int = Field(ge=1, description="Episodes per query interval (and of random actions).")
    seed: int = Field(ge=0, description="Seed of the first episode (then +1 each).")
    every_k: list[Annotated[int, Field(ge=1)]] = Field(
        min_length=1,
        description="Query intervals to measure: the teacher is asked at t % k == 0 and its "
        "answer held in between. 1: a fresh answer every agent step; 10: ERPv C.4's interval, how "
        "RAE acts and how labels are carried between queried frames.",
    )


class EvaluateConfig(Section):
    """The evaluate stage (`evaluate`): the agent alone, deterministic actions, as deployed."""

    episodes: int = Field(ge=1, description="Evaluation episodes per agent.")
    seed: int = Field(ge=0, description="Seed of the first evaluation episode (then +1 each).")
    # What the return hides (an agent that scores by leaving the camera): the first episodes as
    # GIFs beside the metrics, the same episodes the numbers come from (rl-zoo3 `record_video`).
    record_episodes: int = Field(
        default=1,
        ge=0,
        description="Evaluation episodes recorded as GIFs (which ones: `record_which`); 0: "
        "none. At most `episodes`. A state agent's recorded episodes render frames; its other "
        "episodes do not.",
    )
    record_which: Literal["median", "first"] = Field(
        default="median",
        description="`median`: the episodes whose returns are nearest the median return (the "
        "typical ones; for one, the median episode, the lower middle one of an even count), "
        "replayed from their seeds after the evaluation; `first`: the first episodes (seed, "
        "seed+1, ...). The first episode can be a lucky one (-2.9 against a mean of -1092.6).",
    )
    record_every: int = Field(
        default=1,
        ge=1,
        description="Keep every k-th agent step's frame (the first observation included): 2 "
        "halves a GIF's frames and bytes.",
    )
    record_max_frames: int = Field(
        default=250,
        ge=1,
        description="Frames per GIF at most; the rest of a longer episode is not recorded "
        "(250 x 84 x 84 frames: a few hundred kB).",
    )
    record_fps: float = Field(
        default=15.0,
        gt=0,
        le=100,
        description="Playback frames per second (GIF delays are whole 10 ms units).",
    )
    record_scale: int = Field(
        default=2,
        ge=1,
        le=8,
        description="Each frame's pixels enlarged k times (nearest neighbour): the env's "
        "`image_size` frames (84 px) are small on a screen.",
    )

    @model_validator(mode="after")
    def _records_what_it_plays(self) -> EvaluateConfig:
        if self.record_episodes > self.episodes:
            raise ValueError(
                f"record_episodes ({self.record_episodes}) is more than episodes "
                f"({self.episodes}): only played episodes can be recorded"
            )
        return self
