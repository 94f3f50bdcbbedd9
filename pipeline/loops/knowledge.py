"""The `knowledge` report: per env, what the labelling teacher knows (acting alone, beside random
actions), what its labels cost, and each agent's evaluation with the label tasks it read: the
two questions a user of the pipeline comes with, on one page after `dvc repro`.

It joins metrics the stages already wrote (`teacher_eval@<env>`, `label@<env>`, `audit@<env>`,
`evaluate@<run>`, `round@<name>`, `evaluate_round@<name>`); it computes no new number but the label cost. It does
not say that the labels caused a return: every run here is one training seed, and a causal claim
needs the controls of a benchmark table (the same data without labels, a known-bad teacher's
labels, seeds), which the page names."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.core.config import Params
from pipeline.core.errors import PipelineError
from pipeline.learn.methods.table import get_method
from pipeline.teach.labels.cost import ERPV_SECONDS_PER_CALL, constant_tasks, read_label_cost

TITLE = "# Does the teacher's knowledge reach the agents, and what did it cost?"


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise PipelineError(f"{path}: missing ({what}); run `dvc repro` to build it") from exc
    except json.JSONDecodeError as exc:
        raise PipelineError(f"{path}: not JSON ({exc}); `dvc repro --force` rebuilds it") from exc


def return_text(row: Mapping[str, Any]) -> str:
    """A metrics row's return as `mean +- std (rate success)` (the std and the rate where the row
    has them): the cell of this page and of the sweep report's teacher table."""
    std = row.get("return_std")
    text = f"{row['return_mean']:.1f}" + ("" if std is None else f" +- {std:.1f}")
    rate = row.get("success_rate")
    return text + ("" if rate is None else f" ({rate:.0%} success)")


def prompts_text(cost: Mapping[str, Any]) -> str:
    """`label_cost`'s prompts by task, `action 207, judge 198` (`none` for none)."""
    return ", ".join(f"{task} {n:,}" for task, n in cost["prompts"].items()) or "none"


def share_text(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}"


def _teacher_lines(teacher: Mapping[str, Any]) -> list[str]:
    """The teacher acting alone, each query interval a row, random actions the last."""
    lines = [
        f"Teacher `{teacher['teacher_id']}` acting alone (`teacher_eval`: {teacher['episodes']} "
        f"episodes from seed {teacher['seed']}, std ddof {teacher.get('std_ddof', 1)}; asked "
        "every k-th agent step, its answer held in between):",
        "",
        "| policy | return | Welch p vs random (n episodes each) | prompts (fresh build) |",
        "|---|---|---|---|",
    ]
    n = teacher["episodes"]
    few = "; too few to test" if n < 3 else ""
    for row in teacher["teacher_rows"]:
        p = row.get("welch_p_vs_random")
        p_text = "" if p is None else f"{p:.2g} (n = {n} vs {n}{few})"
        lines.append(
            f"| {row['policy']} | {return_text(row)} | {p_text} | "
            f"{row.get('prompts_paid_on_a_fresh_build', '')} |"
        )
    lines.append(f"| uniform random actions | {return_text(teacher['random'])} | | 0 |")
    return lines


def _cost_line(cost: Mapping[str, Any]) -> str:
    parsed = (
        "" if cost["parsed"] is None else f"; {share_text(cost['parsed'])} of the answers parsed"
    )
    judged = cost.get("reasonable")
    judged = (
        "" if judged is None else f"; {share_text(judged)} of the judged pairs judged reasonable"
    )
    distinct = cost.get("distinct_answers") or {}
    kinds = (
        "; distinct parsed answers by task: "
        + ", ".join(f"{task} {n:,}" for task, n in distinct.items())
        if distinct
        else ""
    )
    by_task = cost.get("parsed_by_task") or {}
    per_task = (
        " (" + ", ".join(f"{task} {share_text(s)}" for task, s in by_task.items()) + ")"
        if by_task and parsed
        else ""
    )
    calls = cost.get("calls")
    price = ""
    if calls is not None:
        n = sum(calls.values())
        price = (
            f" A build without the cache sends {n:,} of them to the teacher (a frame asked one "
            f"question twice is answered once): at ERPv table 14's {ERPV_SECONDS_PER_CALL} s per "
            f"Qwen2-VL-7B call, {n * ERPV_SECONDS_PER_CALL / 60:,.1f} min of VLM time."
        )
    line = (
        f"Its labels of the dataset (`label`): prompts by task {prompts_text(cost)}{parsed}"
        f"{per_task}{judged}{kinds}.{price} The seconds and tokens they cost on this machine: "
        "`dvc metrics show costs/label` (machine-dependent, so not on this page)."
    )
    unlabelled = [task for task, share in by_task.items() if share < 0.5]
    if unlabelled:
        line += (
            f" **Mostly unlabelled**: under half of the {', '.join(f'`{t}`' for t in unlabelled)}"
            " answers carry a label (a prompt the model does not follow, or a schema the parser "
            "cannot read: `label.max_parse_failure_rate` stops the stage past its rate)."
        )
    constant = constant_tasks(cost)
    if constant:
        line += (
            f" **Constant teacher**: every parsed {', '.join(f'`{t}`' for t in constant)} answer "
            "is the same one (the Worst Model's signature), however well its answers parse."
        )
    return line


def _agreement_line(audit: Mapping[str, Any]) -> str:
    """The labels against the scripted reference (audit@<env>'s metrics), n per task: how often
    the teacher says what a competent script says, or that no reference exists for the env."""
    if not audit["has_reference"]:
        return ("Agreement with a reference: none for this env (no reference script); compare "
                "two teachers on its frames with `python -m stages.audit ... --against`.")  # fmt: skip
    parts = [
        f"{task} {stats['rate']:.1%} (n = {stats['n']:,})"
        for task, stats in audit["agreement"].items()
    ]
    return (
        "Agreement with the scripted reference at reliability 1.0 (`audit`; answers that parsed, "
        f"per task): {', '.join(parts) or 'no answer to compare'}. Where it is low, the "
        "labels are not what a competent policy would answer."
    )


def _reads(method: str) -> str:
    tasks = get_method(method).teacher_tasks
    return ", ".join(f"`{t}`" for t in tasks) if tasks else "no label"


def env_section(
    params: Params,
    env_id: str,
    teacher_dir: Path,
    labels_dir: Path,
    eval_dir: Path,
    rounds_dir: Path,
    audit_dir: Path,
) -> list[str]:
    """The report's section of `env_id`: the teacher, its labels' cost and agreement with the
    reference, the agents."""
    lines = [f"## {env_id}", ""]
    teacher = _read(teacher_dir / f"{env_id}.json", f"teacher_eval@{env_id}'s metrics")
    lines += [*_teacher_lines(teacher), ""]
    labels = labels_dir / f"{env_id}.parquet"
    if not labels.is_file():
        raise PipelineError(f"{labels}: missing (label@{env_id}'s table); run `dvc repro`")
    try:
        cost = read_label_cost(labels)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise PipelineError(
            f"{labels}: unreadable ({exc}); `dvc repro --force label@{env_id}` rebuilds it"
        ) from exc
    lines += [_cost_line(cost), ""]
    audit = _read(audit_dir / f"{env_id}.json", f"audit@{env_id}'s metrics")
    lines += [_agreement_line(audit), ""]
    runs = {name: run for name, run in (params.train or {}).items() if run.env == env_id}
    rounds = {name: r for name, r in params.rounds.items() if r.env == env_id}
    if not runs:
        return [*lines, "No agent is trained on this env (`train`)."]
    lines += [
        "| agent | method | reads from the teacher | train steps | evaluation return "
        "(`evaluate`) | episodes |",
        "|---|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        ev = _read(eval_dir / f"{name}.json", f"evaluate@{name}'s metrics")
        lines.append(
            f"| {name} | {run.method} | {_reads(run.method)} | {ev['train_steps']:,} | "
            f"{return_text(ev)} | {ev['episodes']} |"
        )
    for name, spec in sorted(rounds.items(), key=lambda item: (item[1].run, item[1].round)):
        ev = _read(eval_dir / "rounds" / f"{name}.json", f"evaluate_round@{name}'s metrics")
        cost = _read(rounds_dir / f"{name}.json", f"round@{name}'s metrics")["costs"]
        lines.append(
            f"| {name} (round {spec.round} of {spec.run}: +{cost['teacher_calls']:,} teacher "
            f"calls) | {spec.method} | {_reads(spec.method)} | +{ev['train_steps']:,} | "
            f"{return_text(ev)} | {ev['episodes']} |"
        )
    return lines


def knowledge_report(
    params: Params,
    teacher_dir: Path,
    labels_dir: Path,
    eval_dir: Path,
    rounds_dir: Path,
    audit_dir: Path,
) -> str:
    """The page: a section per env of `params.envs`, then how to read it."""
    lines = [
        TITLE,
        "",
        "Written by `dvc repro` (stage `knowledge`) from the metrics the other stages wrote. "
        "Every std is the sample std over episodes (ddof 1); returns are in the env's units.",
        "",
    ]
    for env_id in params.envs:
        section = env_section(
            params, env_id, teacher_dir, labels_dir, eval_dir, rounds_dir, audit_dir
        )
        lines += [*section, ""]
    lines += [
        "## How to read it",
        "",
        "- The teacher's row at k = 1 is its competence as a policy (ERPv's \"Only VLMs\" "
        "row), the ruler for its labels: a teacher at or near random actions has little to give. "
        "Rows at k > 1 hold each answer for k steps, as a label carried between queries is.",
        '- "no label" is not "no teacher": a run that reads the dataset (`offline_fraction` '
        "> 0) reads the episodes the teacher acted in where collection was RAE "
        "(`collect.<env>.behaviour`).",
        "- Each agent is one training seed. A return beside the teacher's does not show that "
        "the labels caused it: that needs the same data without labels (`sac` with "
        "`offline_fraction`), a known-bad teacher's labels (the `constant` backend, ERPv's "
        "Worst Model, or `random`) and several seeds, which a benchmark table runs "
        "(`docs/benchmarks.md`).",
        "- The prompts are what a fresh build pays; a rebuild answers from the label caches.",
    ]
    return "\n".join(lines) + "\n"
