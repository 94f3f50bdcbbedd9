"""What a label table paid its teacher (read by the sweep report and the `knowledge` stage)."""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.core.tables import read_label_table
from pipeline.teach.labels.cache import open_telemetry
from pipeline.teach.labels.status import LABELLED_STATUSES

# `judge`: where judged; `cache_key`: one per distinct prompt (what a build without the cache sends)
LABEL_COST_COLUMNS = ("task", "queried", "parse_status", "judge", "cache_key")
# each task's answer column (the column named after the task), read for answer diversity
ANSWER_COLUMNS = ("action", "action_index", "milestone", "objects", "judge")
# the tasks whose answer is a decision about the frame: one answer for every frame is a constant
# teacher (`objects` names a scene's key objects, which may rightly be the same every frame)
DECISION_TASKS = ("action", "milestone", "judge")


# ERPv table 14: seconds per Qwen2-VL-7B call, the paper's price of one answer
ERPV_SECONDS_PER_CALL = 6.95


def label_cost(labels: pl.DataFrame) -> dict[str, Any]:
    """What a label table paid its teacher: its rows, the prompts asked per task (queried frames
    x tasks; the other rows carry a queried answer), the
    share of those answers that parsed to a label (overall, and by task: `parsed_by_task`) and,
    where the table has `judge` rows (Semore's
    selective replay), the share of them judged reasonable: the pool the judge lets through; per
    task, how many distinct answers parsed (`distinct_answers`: 1 is a constant teacher); where
    the table has `cache_key`, the teacher calls per task a build without the cache makes
    (`calls`: distinct prompts; a frame asked one question twice is answered once)."""
    queried = labels.filter(pl.col("queried"))
    labelled = pl.col("parse_status").is_in(LABELLED_STATUSES)
    prompts = dict(queried.group_by("task").len().sort("task").iter_rows())
    parsed = queried.filter(labelled).height
    cost = {
        "rows": labels.height,
        "prompts": {str(k): int(v) for k, v in prompts.items()},
        "parsed": parsed / queried.height if queried.height else None,
        # per task: a task that collapsed hides behind a good overall share
        "parsed_by_task": {
            str(task): rows.filter(labelled).height / rows.height
            for (task,), rows in queried.sort("task").group_by("task", maintain_order=True)
        },
    }
    if "cache_key" in labels.columns:
        calls = queried.group_by("task").agg(pl.col("cache_key").n_unique()).sort("task")
        cost["calls"] = {str(task): int(n) for task, n in calls.iter_rows()}
    judged = labels.filter(pl.col("task") == "judge")
    if judged.height and "judge" in labels.columns:  # a table without the column judged none
        cost["reasonable"] = judged.filter(labelled & pl.col("judge")).height / judged.height
    distinct = {}
    for task in sorted(prompts):
        rows = queried.filter(labelled & (pl.col("task") == task))
        column = task
        discrete = "action_index" in labels.columns and task == "action"
        if discrete and rows.get_column("action_index").drop_nulls().len():
            column = "action_index"  # a discrete action's answer
        if column in labels.columns:  # the task's answers as parsed, queried rows only
            answers = rows.get_column(column)
            distinct[str(task)] = answers.n_unique() if len(answers) else 0
    cost["distinct_answers"] = distinct
    return cost


def constant_tasks(cost: dict[str, Any]) -> list[str]:
    """The tasks whose parsed answers are all one answer, over two prompts or more: a constant
    teacher (the Worst Model's signature), however well its answers parse."""
    prompts, distinct = cost.get("prompts", {}), cost.get("distinct_answers", {})
    return [
        task for task, n in distinct.items()
        if task in DECISION_TASKS and n == 1 and prompts.get(task, 0) >= 2
    ]  # fmt: skip


def read_label_cost(source: str | Path | Any) -> dict[str, Any]:
    """`label_cost` of a label table (a path or an open binary file), reading its cost columns
    alone (the table also holds every raw answer)."""
    names = pl.read_parquet_schema(source)
    if hasattr(source, "seek"):
        source.seek(0)
    wanted = dict.fromkeys((*LABEL_COST_COLUMNS, *ANSWER_COLUMNS))
    return label_cost(pl.read_parquet(source, columns=[c for c in wanted if c in names]))


def _percentiles(values: pl.Series) -> dict[str, float]:
    if values.is_empty():
        return {}
    return {f"p{q}": float(values.quantile(q / 100, interpolation="linear")) for q in (50, 90, 99)}


def _summed(rows: list[dict[str, Any]], keys: int) -> dict[str, Any]:
    """Telemetry `rows` of the calls that answered `keys` keys (a key without a row has no
    record: `unrecorded`): seconds summed per request, tokens where the server reported usage."""
    usage = [r for r in rows if r.get("prompt_tokens") is not None]
    return {
        "calls": len(rows),
        "unrecorded": keys - len(rows),
        "seconds": float(sum(r["latency_s"] for r in rows)),  # concurrent calls overlap
        "prompt_tokens": sum(r["prompt_tokens"] for r in usage),
        "completion_tokens": sum(r["completion_tokens"] or 0 for r in usage),
        "calls_with_usage": len(usage),
    }


def recorded_cost(keys: Collection[str], telemetry_dir: str | Path) -> dict[str, Any]:
    """What the calls that answered `keys` (cache keys) cost as the telemetry store at
    `telemetry_dir` recorded them (an answer pulled from a shared cache has no record), with
    the seconds per recorded call."""
    store = open_telemetry(telemetry_dir)
    cost = _summed([r for r in (store.get(k) for k in keys) if r is not None], len(keys))
    cost["seconds_per_call"] = cost["seconds"] / cost["calls"] if cost["calls"] else None
    return cost


def call_latency(labels_path: str | Path, telemetry_dir: str | Path) -> dict[str, Any]:
    """Latency percentiles per task over the calls that produced the table's answers (each
    answer's own call, once), from the telemetry store that the label and collect stages append
    to; answers with no record there (e.g. pulled from a shared cache) are counted apart."""
    queried = read_label_table(labels_path).filter(pl.col("queried"))
    store = open_telemetry(telemetry_dir)
    out: dict[str, Any] = {}
    for (task,), group in queried.group_by("task", maintain_order=True):
        keys = group["cache_key"].unique().to_list()
        rows = [r for r in (store.get(k) for k in keys) if r is not None]
        latency = pl.Series([r["latency_s"] for r in rows], dtype=pl.Float64)
        out[task] = {**_percentiles(latency), **_summed(rows, len(keys))}
    return out


def estimate_cost(calls: int, metrics: str | Path | None, budget: int | None) -> str:
    """What `calls` teacher calls would cost, for `stages.label --estimate`: at the latency this
    teacher's earlier calls recorded (`metrics`: costs/label/<env>.json, where it exists), at
    ERPv table 14's 6.95 s per call, and against `label.budget`."""
    prices = [
        f"{calls * ERPV_SECONDS_PER_CALL:,.0f} s at ERPv table 14's {ERPV_SECONDS_PER_CALL} s per call"
    ]
    if metrics is not None and Path(metrics).is_file():
        recorded = json.loads(Path(metrics).read_text()).get("recorded") or {}
        per_call = recorded.get("seconds_per_call")
        if per_call is not None:
            prices.insert(0, f"{calls * per_call:,.1f} s at the {per_call:.3f} s per call "
                             f"recorded in {metrics}")  # fmt: skip
    line = "cost: " + "; ".join(prices)
    if budget is None:
        return line + "; no label.budget"
    if calls <= budget:
        return line + f"; within label.budget ({budget})"
    return line + f"; over label.budget ({budget}): the run would stop before its first call"
