"""Typed configuration: `params.yaml` is parsed once into frozen pydantic models, one module per
concern:

- `envs`: per-env settings (`env.<env_id>`);
- `teachers`: the teachers' back ends;
- `stages`: one section per stage (`collect`, `label`, `masks`, `dataset`, `critic`, `train`,
  `evaluate`);
- each method's hyper-parameters (`ppo:`, `sac:`, `erpv:`, ...) belong to the method: its module
  in pipeline.learn.methods types the section, and the method table says which sections exist.

`envs` lists the env ids the pipeline runs (every DVC `foreach` iterates over it); settings for
envs that are not listed may stay in the file: they are validated but unused.

Unknown keys are errors that name the key and the allowed keys; bad values name the field and
the allowed range. Every field is documented beside it, with the paper's value where one exists
(tests/core/test_config.py fails on a field without a description). Defaults policy: where a paper
gives a value, it is the field's default in code, and params.yaml overrides it; settings that
are the user's choice (budgets, seeds, which envs) have no default.

Why one module of this length: `Params` holds the checks that span sections (an env listed
without its collect entry, a run whose method or round does not exist); each is short, and they
read together as the contract of params.yaml.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ConfigDict, Field, ValidationError, model_validator

from pipeline.core.config.base import (
    ConfigError,
    Section,
    format_error,
    merge_settings,
    threads_field,
    validate_section,
)
from pipeline.core.config.envs import CarlaConfig, EnvConfig, EnvLabelsConfig, EnvMakeConfig
from pipeline.core.config.stages import (
    LABEL_OUTPUT_KEYS,
    NO_TEACHER,
    POLICY_TEACHERS_DIR,
    Behaviour,
    ClipDenseConfig,
    ClipSegConfig,
    CollectConfig,
    CriticConfig,
    DatasetConfig,
    EvaluateConfig,
    LabelConfig,
    LabelEnvConfig,
    LabelTaskName,
    MasksConfig,
    PolicyTeacherRun,
    RayExecutorConfig,
    RewardTerm,
    RoundConfig,
    TeacherEvalConfig,
    TrainRun,
)
from pipeline.core.config.teachers import (
    POLICY_TASKS,
    HFTeacherConfig,
    OpenAITeacherConfig,
    PolicyTeacherConfig,
    TeacherConfig,
)
from pipeline.core.env_registry import KNOWN_ENVS, EnvInfo, EnvLabelSchema, register_env

__all__ = [
    "LABEL_OUTPUT_KEYS", "NO_TEACHER", "POLICY_TEACHERS_DIR", "Behaviour", "CarlaConfig",
    "ClipDenseConfig", "ClipSegConfig", "CollectConfig", "ConfigError", "CriticConfig",
    "DatasetConfig", "EnvConfig", "EnvLabelsConfig", "EnvMakeConfig", "EvaluateConfig",
    "HFTeacherConfig", "LabelConfig", "LabelEnvConfig", "LabelTaskName", "MasksConfig",
    "OpenAITeacherConfig", "Params", "PolicyTeacherConfig", "PolicyTeacherRun",
    "RayExecutorConfig", "RewardTerm", "RoundConfig", "Section",
    "TeacherConfig", "TeacherEvalConfig", "TrainRun", "load_params", "merge_settings",
    "parse_params", "register_brought_envs", "round_inputs", "threads_field", "validate_section",
]  # fmt: skip

_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


# an env id or run name: one path part of the outputs it names (no "/", "..", newline)
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class Params(Section):
    """The whole params.yaml. Stage and env sections are typed here; every other top-level key is
    a method's hyper-parameters (`ppo:`, `sac:`, `erpv:`, ...): a mapping kept as written
    (`section(name)`) and typed by the method that reads it. Which of those keys are methods and
    whether each section is valid is the method table's check (pipeline.learn.methods.table.
    check_params), which the check_params stage and stage two run."""

    model_config = ConfigDict(
        extra="allow", frozen=True, protected_namespaces=(), allow_inf_nan=False
    )

    envs: list[str] = Field(min_length=1, description="Env ids the pipeline runs, in order.")
    env: dict[str, EnvConfig] = Field(description="Per-env settings, keyed by env id.")
    collect: dict[str, CollectConfig] = Field(description="Per-env collection, keyed by env id.")
    label: LabelConfig | None = Field(default=None, description="The label stage.")
    masks: MasksConfig | None = Field(default=None, description="The masks stage.")
    dataset: DatasetConfig | None = Field(default=None, description="The dataset stage.")
    train: dict[str, TrainRun] | None = Field(
        default=None, description="Agents to train, keyed by run name (train@<name>)."
    )
    critic: CriticConfig | None = Field(default=None, description="The pretrain_critic stage.")
    rounds: dict[str, RoundConfig] = Field(
        default_factory=dict,
        description="Labelling rounds (round@<name>): the agent's own frames labelled in batch "
        "between rounds of training; see RoundConfig.",
    )
    evaluate: EvaluateConfig | None = Field(default=None, description="The evaluate stage.")
    teacher_eval: TeacherEvalConfig | None = Field(
        default=None, description="The teacher_eval stage: each env's labelling teacher acting."
    )
    policy_teachers: dict[str, PolicyTeacherRun] = Field(
        default_factory=dict,
        description="Per env, the agent that stage policy_teacher@<env> trains online as that "
        "env's `policy` teacher, written to models/teachers/<env> (an env not listed gets a "
        "marker); see PolicyTeacherRun.",
    )

    def section(self, name: str) -> Any:
        """A method's section as written in params.yaml (None when absent)."""
        return (self.model_extra or {}).get(name)

    def teachers(self) -> list[tuple[str, TeacherConfig]]:
        """Every teacher params.yaml configures, with its path: `label.teacher`, each
        `label.per_env.<env>.teacher` and each acting `collect.<env>.teacher`."""
        found: list[tuple[str, TeacherConfig]] = []
        if self.label is not None:
            found.append(("label.teacher", self.label.teacher))
            found += [
                (f"label.per_env.{env}.teacher", own.teacher)
                for env, own in self.label.per_env.items()
                if own.teacher is not None
            ]
        found += [
            (f"collect.{env}.teacher", c.teacher) for env, c in self.collect.items() if c.teacher
        ]
        return found

    def policy_teacher_problems(self) -> list[str]:
        """A `policy` teacher that labels or acts for an env must read the checkpoint DVC knows
        about: `models/teachers/<env>`, which policy_teacher@<env> trains from
        `policy_teachers.<env>` and label@<env>, teacher_eval@<env>, collect@<env> and the env's
        rounds depend on. Any other path would label with an agent DVC neither builds nor
        tracks. The DVC gate (stages.check_params) and stage two check it; parse_params does not,
        so that a library user may point a teacher anywhere."""
        problems = []
        for env_id in self.envs:
            found: list[tuple[str, TeacherConfig]] = []
            if self.label is not None:
                own = self.label.per_env.get(env_id)
                where = (
                    f"label.per_env.{env_id}.teacher"
                    if own is not None and own.teacher is not None
                    else "label.teacher"
                )
                found.append((where, self.label.for_env(env_id).teacher))
            collect = self.collect.get(env_id)
            if collect is not None and collect.uses_teacher and collect.teacher is not None:
                found.append((f"collect.{env_id}.teacher", collect.teacher))
            expected = f"{POLICY_TEACHERS_DIR}/{env_id}"
            for where, teacher in found:
                if teacher.backend != "policy" or teacher.policy is None:
                    continue
                given = Path(teacher.policy.checkpoint).as_posix()
                if given != expected:
                    problems.append(
                        f"{where}.policy.checkpoint: {teacher.policy.checkpoint!r} is not a "
                        f"dependency DVC knows for {env_id}; train the teacher with "
                        f"`policy_teachers.{env_id}` (stage policy_teacher@{env_id}) and set "
                        f"checkpoint: {expected}"
                    )
                elif env_id not in self.policy_teachers:
                    problems.append(
                        f"{where}: reads {expected}, which policy_teacher@{env_id} trains only "
                        f"when `policy_teachers.{env_id}` is set; add it (method, steps, seed)"
                    )
        return problems

    @property
    def other_sections(self) -> dict[str, Any]:
        """Every top-level key that is not a stage or env section: the methods' sections."""
        return dict(self.model_extra or {})

    @model_validator(mode="after")
    def _envs_are_known_and_configured(self) -> Params:
        """Every cross-section rule at once, one line per problem (key, bad value, the fix)."""
        problems: list[str] = []
        known = ", ".join(KNOWN_ENVS)
        bring = "or bring your own with `env.<id>.make` and `env.<id>.labels` (docs/own-env.md)"
        per_env = {} if self.label is None else self.label.per_env
        named = [("env", k) for k in self.env] + [("envs", k) for k in self.envs]
        named += [("train", k) for k in self.train or {}]
        named += [("rounds", k) for k in getattr(self, "rounds", None) or {}]
        for section, name in named:
            if not SAFE_NAME.fullmatch(name) or ".." in name:
                problems.append(
                    f"{section}: {name[:80]!r} names folders (data/rollouts/<env>, models/<run>, "
                    "...): use letters, digits, '.', '_' and '-', starting with a letter or digit"
                )
        for env_id, cfg in self.env.items():
            problems += _env_entry_problems(env_id, cfg)
        brought = {env_id for env_id, cfg in self.env.items() if cfg.make is not None}
        for section, entries in (("collect", self.collect), ("label.per_env", per_env)):
            for env_id in entries:
                if env_id not in KNOWN_ENVS and env_id not in brought:
                    problems.append(f"{section}.{env_id}: unknown env id; known: {known}; {bring}")
        if len(set(self.envs)) != len(self.envs):
            problems.append(f"envs lists an env twice: {self.envs}")
        for env_id in self.envs:
            if env_id not in KNOWN_ENVS and env_id not in brought:
                problems.append(f"envs: unknown env id {env_id!r}; known: {known}; {bring}")
                continue
            if env_id in brought:
                problems += self._scripted_teacher_problems(env_id)
            for section in ("env", "collect"):
                if env_id not in getattr(self, section):
                    problems.append(
                        f"envs lists {env_id!r} but `{section}` has no entry for it; add "
                        f"`{section}.{env_id}` to params.yaml"
                    )
            if self.label is not None and env_id not in per_env:
                problems.append(
                    f"envs lists {env_id!r} but `label.per_env` has no entry for it (label@<env> "
                    f"reads `label.per_env.<env>`); add `{env_id}: {{}}` under `label.per_env` "
                    "(its own teacher or tasks, or none)"
                )
        if self.label is not None:
            problems += _policy_task_problems(self.label)
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
        for env_id in self.policy_teachers:
            if env_id not in self.envs:
                problems.append(
                    f"policy_teachers.{env_id}: {env_id!r} is not listed in `envs`, so no stage "
                    f"trains its teacher; add it there or remove it here "
                    f"(envs: {', '.join(self.envs)})"
                )
        for env_id, collect in self.collect.items():
            if collect.behaviour == "agent":
                problems.append(
                    f"collect.{env_id}.behaviour: 'agent' is a labelling round's previous agent "
                    "(`rounds:`); here choose random, checkpoint, teacher or rae"
                )
        problems += self._round_problems()
        for key, value in (self.model_extra or {}).items():
            if not isinstance(value, dict):
                stages = ", ".join(type(self).model_fields)
                problems.append(
                    f"{key}: not a section of params.yaml (sections: {stages}, and one mapping "
                    f"per method's hyper-parameters), got {type(value).__name__}"
                )
        if problems:
            raise ValueError("\n  ".join(problems))
        return self

    def _scripted_teacher_problems(self, env_id: str) -> list[str]:
        """A brought env has no scripted teacher: every teacher that would answer for it must be
        another back end."""
        found = []
        if self.label is not None:
            own = self.label.per_env.get(env_id)
            if own is not None and own.teacher is not None:
                found.append((f"label.per_env.{env_id}.teacher", own.teacher))
            else:
                found.append(("label.teacher", self.label.teacher))
        collect = self.collect.get(env_id)
        if collect is not None and collect.uses_teacher and collect.teacher is not None:
            found.append((f"collect.{env_id}.teacher", collect.teacher))
        return [
            f"{where}: backend scripted has no script for the brought env {env_id}; give "
            f"{env_id} a teacher of its own (openai, hf or policy; random or constant as "
            f"controls)" + ("" if where != "label.teacher" else f" under label.per_env.{env_id}")
            for where, teacher in found
            if teacher.backend == "scripted"
        ]

    def register_envs(self) -> None:
        """Register every brought env (`env.<id>.make`) with its label schema in this process,
        as `gymnasium.register` does: `make_env`, `label_schema` and the stages then treat it as
        a shipped one. `parse_params` calls it."""
        for env_id, cfg in self.env.items():
            register_brought_env(env_id, cfg)

    def _round_problems(self) -> list[str]:
        """The round chain: each round follows its run (k = 1) or the round k-1 of that run,
        and names exactly the paths dvc.yaml depends on."""
        problems = []
        by_run: dict[tuple[str, int], list[str]] = {}
        for name, r in self.rounds.items():
            by_run.setdefault((r.run, r.round), []).append(name)
        for name, r in self.rounds.items():
            where = f"rounds.{name}"
            if not _RUN_NAME.fullmatch(name):
                problems.append(
                    f"{where}: a round name is a directory name (letters, digits, -, _)"
                )
            run = (self.train or {}).get(r.run)
            if run is None:
                problems.append(f"{where}.run: no run train.{r.run} to start from")
                continue
            for key in ("env", "method"):
                if getattr(r, key) != getattr(run, key):
                    problems.append(f"{where}.{key}: {getattr(r, key)!r}, but train.{r.run}'s "
                                    f"is {getattr(run, key)!r}")  # fmt: skip
            if len(by_run[(r.run, r.round)]) > 1:
                problems.append(f"{where}: rounds {sorted(by_run[(r.run, r.round)])} are all "
                                f"round {r.round} of {r.run}; one chain per run")  # fmt: skip
            if r.round == 1:
                agent, data = round_inputs(r.run, run.env, None)
            else:
                before = by_run.get((r.run, r.round - 1), [])
                if len(before) != 1:
                    problems.append(f"{where}: round {r.round} of {r.run} needs one round "
                                    f"{r.round - 1} of it before (found {before})")  # fmt: skip
                    continue
                agent, data = round_inputs(r.run, run.env, before[0])
            for key, want in (("previous_agent", agent), ("previous_data", data)):
                if getattr(r, key) != want:
                    problems.append(f"{where}.{key}: {getattr(r, key)!r}; round {r.round} of "
                                    f"{r.run} follows {want!r}: write that")  # fmt: skip
        return problems


def round_inputs(run: str, env_id: str, previous_round: str | None) -> tuple[str, str]:
    """(previous_agent, previous_data) of a labelling round of train run `run` on `env_id`:
    round 1 follows the run's agent and the env's dataset, round k the agent and data of round
    k - 1 (`previous_round`, its name)."""
    if previous_round is None:
        return f"models/{run}", f"data/datasets/{env_id}"
    return f"models/rounds/{previous_round}", f"data/rounds/{previous_round}"


def _env_entry_problems(env_id: str, cfg: EnvConfig) -> list[str]:
    """`env.<id>`: a shipped id has fixed builders and labels; any other id brings both."""
    where = f"env.{env_id}"
    if env_id in KNOWN_ENVS:
        return [
            f"{where}.{key}: {env_id} ships with the pipeline, so its builder and labels are "
            f"fixed; remove `{key}` (or bring the env under another id)"
            for key in ("make", "labels")
            if getattr(cfg, key) is not None
        ]
    if cfg.make is None:
        return [
            f"{where}: unknown env id; known: {', '.join(KNOWN_ENVS)}; to bring your own env, "
            f"give `{where}.make` (gym, dm_control or factory) and `{where}.labels` "
            "(docs/own-env.md)"
        ]
    problems = []
    if cfg.labels is None:
        problems.append(
            f"{where}.labels: missing; a brought env needs its label schema "
            "(task_description, action_names, milestones, objects)"
        )
    if cfg.carla is not None:
        problems.append(f"{where}.carla: for the shipped CARLA ids only")
    return problems


def _policy_task_problems(label: LabelConfig) -> list[str]:
    """A policy teacher (a trained agent) answers `action` and `judge` only: an env whose label
    settings ask it for a milestone or objects is refused here, before any stage runs."""
    problems = []
    for env_id, own in label.per_env.items():
        teacher = own.teacher if own.teacher is not None else label.teacher
        tasks = own.tasks if own.tasks is not None else label.tasks
        extra = [task for task in tasks if task not in POLICY_TASKS]
        if teacher.backend != "policy" or not extra:
            continue
        where = f"label.per_env.{env_id}"
        tasks_key = f"{where}.tasks" if own.tasks is not None else "label.tasks"
        teacher_key = f"{where}.teacher" if own.teacher is not None else "label.teacher"
        problems.append(
            f"{tasks_key}: asks {env_id}'s teacher ({teacher_key}, backend policy) for "
            f"{', '.join(extra)}, but a policy checkpoint answers only {' and '.join(POLICY_TASKS)};"
            f" set `{where}.tasks` to those tasks alone"
        )
    return problems


def register_brought_env(env_id: str, cfg: EnvConfig, source: str = "params.yaml") -> bool:
    """Register `env_id` in this process when `cfg` brings it (`make` and `labels`), as
    `gymnasium.register` does; False for a shipped env. `source`: where `cfg` came from."""
    if cfg.make is None or cfg.labels is None:
        return False
    make, labels = cfg.make, cfg.labels
    info = EnvInfo(
        env_id,
        make.family,
        cfg.action_repeat,
        f"brought from {source}: env.{env_id}.make",
        make.success_on_termination,
        target=make.target,
        kwargs=dict(make.kwargs),
        package=make.package,
    )
    schema = EnvLabelSchema(
        env_id,
        "common",
        tuple(labels.action_names),
        None if labels.action_choices is None else tuple(labels.action_choices),
        dict(labels.milestones),
        tuple(labels.objects),
        labels.task_description,
        prompts=dict(labels.prompts),
    )
    register_env(info, schema)
    return True


def register_brought_envs(path: str | Path) -> None:
    """Load `path` for its brought envs (`env.<id>.make`), so that a tool that reads data alone
    (the audit page, the review export) knows their label schemas. A missing file registers
    nothing: a shipped env needs no params there."""
    if Path(path).exists():
        load_params(path)


def parse_params(raw: Any, source: str = "params.yaml") -> Params:
    """Validate an already-loaded params mapping. Errors name every bad key at once."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of sections, got {type(raw).__name__}")
    try:
        params = Params.model_validate(raw)
    except ValidationError as exc:
        lines = [format_error(e, Params) for e in exc.errors()]
        raise ConfigError(f"{source} is invalid:\n  " + "\n  ".join(lines)) from None
    params.register_envs()
    return params


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
