"""What a label table paid its teacher (read by the sweep report and the `knowledge` stage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from pipeline.labels.status import LABELLED_STATUSES

LABEL_COST_COLUMNS = ("task", "queried", "parse_status", "judge")  # `judge`: where judged


def label_cost(labels: pl.DataFrame) -> dict[str, Any]:
    """What a label table paid its teacher: its rows, the prompts asked per task (queried frames
    x tasks, what a fresh build pays a VLM for; the other rows carry a queried answer), the
    share of those answers that parsed to a label and, where the table has `judge` rows (Semore's
    selective replay), the share of them judged reasonable: the pool the judge lets through."""
    queried = labels.filter(pl.col("queried"))
    labelled = pl.col("parse_status").is_in(LABELLED_STATUSES)
    prompts = dict(queried.group_by("task").len().sort("task").iter_rows())
    parsed = queried.filter(labelled).height
    cost = {
        "rows": labels.height,
        "prompts": {str(k): int(v) for k, v in prompts.items()},
        "parsed": parsed / queried.height if queried.height else None,
    }
    judged = labels.filter(pl.col("task") == "judge")
    if judged.height and "judge" in labels.columns:  # a table without the column judged none
        cost["reasonable"] = judged.filter(labelled & pl.col("judge")).height / judged.height
    return cost


def read_label_cost(source: str | Path | Any) -> dict[str, Any]:
    """`label_cost` of a label table (a path or an open binary file), reading its cost columns
    alone (the table also holds every raw answer)."""
    names = pl.read_parquet_schema(source)
    if hasattr(source, "seek"):
        source.seek(0)
    return label_cost(
        pl.read_parquet(source, columns=[c for c in LABEL_COST_COLUMNS if c in names])
    )
