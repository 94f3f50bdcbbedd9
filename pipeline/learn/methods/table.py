"""The method table: every training method by name. Config validation (`check_params`), the
train stage (`get_method`), `load_agent` and the tests read it; a new method is one module of
this package, one entry here and one params.yaml section.

A method's module is imported when the method is first used, not with the table: loading an
agent imports its method alone, and a run's result comes from its own method's code, so that
dvc.yaml's train@<run> depends on its own method's module, not the others'
(tests/test_dvc_deps.py). `check_params` types every method's section and so imports each; what it
decides is the check_params stage's, which every stage depends on."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core.config import ConfigError, Params, TrainRun
from pipeline.learn.agents.checkpoint import CheckpointError, read_meta
from pipeline.learn.evaluation import Agent, Policy
from pipeline.learn.methods.base import Method

if TYPE_CHECKING:
    import torch

# name -> "module:attribute" of its `Method`, in the order messages list them
METHOD_MODULES: dict[str, str] = {
    "ppo": "pipeline.learn.methods.ppo:METHOD",
    "hybrid_ppo": "pipeline.learn.methods.hybrid_ppo:METHOD",
    "sac": "pipeline.learn.methods.sac:METHOD",
    "drq": "pipeline.learn.methods.drq:METHOD",
    "erpv": "pipeline.learn.methods.erpv:METHOD",
    "semore": "pipeline.learn.methods.semore:METHOD",
}


class MethodTable(Mapping[str, Method]):
    """The methods by name; a method's module is imported on its first look-up (`in` and
    iteration over the names import nothing)."""

    def __init__(self, modules: dict[str, str]) -> None:
        self.modules = modules
        self.loaded: dict[str, Method] = {}

    def __getitem__(self, name: str) -> Method:
        if name not in self.loaded:
            module, attribute = self.modules[name].split(":")  # KeyError: not a method
            method = getattr(importlib.import_module(module), attribute)
            if method.name != name:
                raise TypeError(f"{self.modules[name]} is method {method.name!r}, not {name!r}")
            self.loaded[name] = method
        return self.loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self.modules

    def __iter__(self) -> Iterator[str]:
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)


METHODS = MethodTable(METHOD_MODULES)

COMMON_RUN_FIELDS = {"env", "method", "steps", "seed", "overrides"}  # every method reads these


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    return METHODS[name]


def check_params(params: Params) -> None:
    """What parse_params cannot see: every method section typed by its method, every run's
    method known with a section, its options and cross-section rules. One line per problem."""
    problems: list[str] = []
    for key in params.other_sections:
        if key not in METHODS:
            problems.append(
                f"{key}: not a stage's section nor a method's (methods: {', '.join(METHODS)}; "
                f"stages: {', '.join(type(params).model_fields)})"
            )
            continue
        try:
            METHODS[key].params(params)
        except ConfigError as exc:
            problems.append(str(exc).split("\n", 1)[-1].strip())
    option_fields = set(TrainRun.model_fields) - COMMON_RUN_FIELDS
    for name, run in (params.train or {}).items():
        if run.method not in METHODS:
            problems.append(
                f"train.{name}.method: unknown method {run.method!r}; known: {', '.join(METHODS)}"
            )
            continue
        method = METHODS[run.method]
        if params.section(run.method) is None:
            problems.append(f"train.{name}.method: {run.method!r} needs a `{run.method}:` section")
        for option in sorted(option_fields - method.run_options):
            if getattr(run, option) is not None:
                users = [m for m in METHODS.values() if option in m.run_options]
                problems.append(
                    f"train.{name}.{option}: applies to method "
                    f"{', '.join(m.name for m in users)}, not {run.method!r}"
                )
        if run.overrides and params.section(run.method) is not None:
            try:
                method.params(params, run)
            except ConfigError as exc:  # name the run's overrides, not the section
                for line in str(exc).split("\n")[1:]:
                    problems.append(f"train.{name}.overrides: {line.strip()}")
                continue
        problems += method.check_run(name, run, params)
    if params.critic is not None:  # C_V's section: erpv pre-trains and reads it
        problems += METHODS["erpv"].check_critic(params)
    problems += _round_problems(params)
    problems += params.policy_teacher_problems()
    problems += _policy_teacher_run_problems(params)
    if problems:
        raise ConfigError("params.yaml is invalid:\n  " + "\n  ".join(problems))


def _policy_teacher_run_problems(params: Params) -> list[str]:
    """A policy teacher trains online (policy_teacher@<env>): its method's section and overrides
    must parse, and an off-policy teacher must read no offline data."""
    problems = []
    for env_id, teacher in params.policy_teachers.items():
        run = teacher.train_run(env_id)
        if params.section(run.method) is None:
            problems.append(
                f"policy_teachers.{env_id}.method: {run.method!r} needs a `{run.method}:` section"
            )
            continue
        try:
            hp = METHODS[run.method].params(params, run)
        except ConfigError as exc:
            for line in str(exc).split("\n")[1:]:
                problems.append(f"policy_teachers.{env_id}.overrides: {line.strip()}")
            continue
        if getattr(hp, "offline_fraction", 0.0) > 0:
            problems.append(
                f"policy_teachers.{env_id}: offline_fraction is {hp.offline_fraction} "
                f"({run.method} section or overrides); a teacher learns online and must not read "
                f"the labels it will give: set `overrides: {{offline_fraction: 0.0}}`"
            )
    return problems


def policy_teacher_spec(params: Params, env_id: str) -> dict[str, Any]:
    """What policy_teacher@<env> trains, resolved: `policy_teachers.<env>` with its method's
    hyper-parameters (the section with the teacher's overrides merged over); `teacher: None`
    for an env with no teacher. The DVC gate writes it per env (data/policy_teachers/<env>.json)
    and the teacher's stage depends on that file, so a change of the `sac` section retrains the
    sac teachers alone. Call after check_params."""
    teacher = params.policy_teachers.get(env_id)
    if teacher is None:
        return {"env": env_id, "teacher": None}
    run = teacher.train_run(env_id)
    hp = METHODS[run.method].params(params, run)
    return {
        "env": env_id,
        "teacher": teacher.model_dump(mode="json"),
        "hyper_params": hp.model_dump(mode="json"),
    }


def _round_problems(params: Params) -> list[str]:
    """A labelling round resumes its run's training state: only the SAC family keeps one, and
    only with `save_training_state` (parse_params checks the chain of rounds itself)."""
    problems = []
    for name, r in params.rounds.items():
        run = (params.train or {}).get(r.run)
        if run is None or r.round != 1 or run.method not in METHODS:
            continue
        method = METHODS[run.method]
        if not method.extends_replay:
            family = ", ".join(n for n, m in METHODS.items() if m.extends_replay)
            problems.append(
                f"rounds.{name}: run {r.run} trains with {run.method}; labelling rounds extend "
                f"the replay of the SAC family ({family})"
            )
        elif params.section(run.method) is not None:
            try:
                keeps = method.params(params, run).save_training_state
            except ConfigError:
                continue  # reported above
            if not keeps:
                problems.append(
                    f"rounds.{name}: round 1 goes on from train.{r.run}'s optimisers and replay; "
                    f"set `save_training_state: true` in train.{r.run}.overrides"
                )
    return problems


def load_agent(directory: str | Path, device: torch.device | str = "cpu") -> Agent:
    """Rebuild the agent saved in `directory`, by the method its `agent.json` names (ERPv and DrQ
    agents come back as the SAC networks they deploy: C_V is a training-time guide only)."""
    meta = read_meta(directory)
    name = meta.get("method", meta.get("algorithm"))
    if name not in METHODS:
        raise CheckpointError(
            f"{Path(directory) / 'agent.json'}: unknown method {name!r} (known: "
            f"{', '.join(METHODS)})"
        )
    try:
        return METHODS[name].load(directory, device)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # an agent.json edited by hand
        raise CheckpointError(
            f"{Path(directory) / 'agent.json'}: the {name} agent it describes cannot be rebuilt "
            f"({type(exc).__name__}: {exc}); restore it with `dvc checkout {directory}` or "
            "retrain it (`dvc repro`)"
        ) from exc


def load_policy(directory: str | Path, deterministic: bool = True) -> Policy:
    """The agent in `directory` as a deployed policy (`pipeline.core.policy.PolicyLoader`): what a
    stage gives stage one's `policy` teacher and `checkpoint` behaviour, which act with agents
    but never import this wing."""
    from pipeline.learn.evaluation import deployed

    return deployed(load_agent(directory), read_meta(directory), deterministic=deterministic)
