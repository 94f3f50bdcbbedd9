"""The method table: every training method by name. Config validation (`check_params`), the
train stage (`get_method`), `load_agent` and the tests read it; a new method is one module of
this package, one entry here and one params.yaml section."""

from __future__ import annotations

from pathlib import Path

import torch

from pipeline.agents.checkpoint import CheckpointError, read_meta
from pipeline.config import ConfigError, Params, TrainRun
from pipeline.evaluation import Agent
from pipeline.methods import drq, erpv, hybrid_ppo, ppo, sac, semore
from pipeline.methods.base import Method
from pipeline.methods.off_policy import OffPolicyMethod

METHODS: dict[str, Method] = {
    m.name: m
    for m in (ppo.METHOD, hybrid_ppo.METHOD, sac.METHOD, drq.METHOD, erpv.METHOD, semore.METHOD)
}

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
    problems += erpv.check_critic(params)
    problems += _round_problems(params)
    if problems:
        raise ConfigError("params.yaml is invalid:\n  " + "\n  ".join(problems))


def _round_problems(params: Params) -> list[str]:
    """A labelling round resumes its run's training state: only the SAC family keeps one, and
    only with `save_training_state` (parse_params checks the chain of rounds itself)."""
    problems = []
    for name, r in params.rounds.items():
        run = (params.train or {}).get(r.run)
        if run is None or r.round != 1 or run.method not in METHODS:
            continue
        method = METHODS[run.method]
        if not isinstance(method, OffPolicyMethod):
            problems.append(
                f"rounds.{name}: run {r.run} trains with {run.method}; labelling rounds extend "
                "the replay of the SAC family (sac, drq, erpv, semore)"
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
