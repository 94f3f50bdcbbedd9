"""What the audit page lets a reviewer look at, as plain data (what the tests check, and what the
page embeds): one episode's labels over time, every answer with the facets to filter it by, and
two teachers' answers on the same frames side by side.

The page filters and draws in the browser; the data here is computed once, in Python, so that
what the page shows and what a test or a notebook reads are the same numbers.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from PIL import Image

from pipeline.core.errors import PipelineError
from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.status import LABELLED_STATUSES
from pipeline.teach.labels.tasks import render_prompt

TASK_ORDER = ("action", "milestone", "judge", "objects")
FACETS = ("task", "parse_status", "episode", "teacher_id")
THUMBNAIL_SIDE = 64  # frames embedded in the page are JPEG thumbnails of at most this side
# A continuous action agrees with another when the mean per-dimension gap is under a quarter of
# the action range (the scripted judge and the audit's reference agreement use the same rule).
ACTION_AGREEMENT_TOLERANCE = 0.25
VALUE_COLUMNS = ("action", "action_index", "milestone", "objects", "judge")
# The page's row arrays, in this order (task, teacher, status: indices into their lists).
BROWSE_COLUMNS = (
    "sample_key", "episode", "t", "task", "teacher", "status", "queried", "source_key", "value",
    "detail", "raw", "prompt", "agrees", "round", "agrees_b",
)  # fmt: skip
# `agrees`: the answer against the audit's reference (the fully reliable scripted teacher);
# `agrees_b`: against a second teacher's answer to the same frame and task (`--against`)
AGREES, DISAGREES, NO_REFERENCE = 1, 0, -1


# What one row may put on a page or in an export, whatever the size of one answer: a 5 MB
# correction must not make a 250 MB page. The label table keeps every character.
RAW_CHARS_SHOWN = 2_000
VALUE_CHARS_SHOWN = 300


def clip(text: str | None, limit: int) -> str | None:
    """`text` cut to `limit` characters, saying how many more there were."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters in the label table)"


def value_text(row: dict[str, Any]) -> str:
    """A row's parsed value as one short string ('-' when it has none)."""
    for column in VALUE_COLUMNS:
        if row.get(column) is not None:
            value = row[column]
            if column == "action":
                text = ", ".join(f"{v:.2f}" for v in value)
            elif column == "objects":
                text = ", ".join(value)
            else:
                text = str(value)
            return clip(text, VALUE_CHARS_SHOWN) or ""
    return "-"


def thumbnail(png: bytes, side: int = THUMBNAIL_SIDE) -> str:
    """A frame as a small JPEG data URL (the page embeds thousands of them)."""
    with Image.open(io.BytesIO(png)) as image:
        image = image.convert("RGB")
        image.thumbnail((side, side))
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


class AuditError(PipelineError, ValueError):
    """The audit cannot be built from what it was given; the message says which input."""


# ---- one episode over time -------------------------------------------------------------------


def timeline(table: pl.DataFrame, episode: int) -> dict[str, Any]:
    """The labels of `episode` over t, per task: the value each step carries (queried or carried
    from the last queried frame), whether the frame was queried, and the parse status. Continuous
    actions give one series per dimension; milestones give the label and its potential."""
    rows = table.filter(pl.col("episode") == episode).sort("t")
    if rows.is_empty():
        raise ValueError(f"episode {episode} has no label rows")
    steps = sorted(set(rows["t"]))
    index = {t: i for i, t in enumerate(steps)}
    keys = [""] * len(steps)
    tasks: dict[str, dict[str, Any]] = {}
    for task in [t for t in TASK_ORDER if t in set(rows["task"])]:
        lane: dict[str, Any] = {
            "queried": [False] * len(steps),
            "status": [None] * len(steps),
            "value": [None] * len(steps),
        }
        if task == "milestone":
            lane["potential"] = [None] * len(steps)
        for row in rows.filter(pl.col("task") == task).iter_rows(named=True):
            i = index[row["t"]]
            keys[i] = row["sample_key"]
            lane["queried"][i] = row["queried"]
            lane["status"][i] = row["parse_status"]
            labelled = row["parse_status"] in LABELLED_STATUSES
            if task == "action":
                value = row["action"] if row["action"] is not None else row["action_index"]
                lane["value"][i] = value if labelled else None
            elif task == "milestone":
                lane["value"][i] = row["milestone"] if labelled else None
                lane["potential"][i] = row["potential"] if labelled else None
            elif task == "judge":
                lane["value"][i] = row["judge"] if labelled else None
            else:
                lane["value"][i] = row["objects"] if labelled else None
        tasks[task] = lane
    return {"episode": episode, "t": steps, "sample_keys": keys, "tasks": tasks}


def episode_timelines(table: pl.DataFrame) -> dict[int, dict[str, Any]]:
    return {int(e): timeline(table, int(e)) for e in sorted(set(table["episode"]))}


# ---- every answer, and what to filter it by --------------------------------------------------


def facets(table: pl.DataFrame) -> dict[str, list[tuple[Any, int]]]:
    """For each filter of the page, its values and how many rows each selects."""
    out = {}
    for column in FACETS:
        counts = table.group_by(column).len().sort(column)
        out[column] = [(value, n) for value, n in counts.iter_rows()]
    return out


def filter_rows(
    table: pl.DataFrame,
    *,
    task: str | None = None,
    status: str | None = None,
    episode: int | None = None,
    teacher: str | None = None,
    queried_only: bool = False,
    selection: Collection[tuple[str, str]] | None = None,
) -> pl.DataFrame:
    """The rows the page lists for a choice of filters (None: any); the page applies the same
    conditions to the same rows in the browser. `selection`: (sample_key, task) pairs, as the
    page's "export this selection" writes them."""
    conditions = [
        pl.col(column) == value
        for column, value in (
            ("task", task), ("parse_status", status), ("episode", episode), ("teacher_id", teacher)
        )
        if value is not None
    ]  # fmt: skip
    if queried_only:
        conditions.append(pl.col("queried"))
    if selection is not None:
        chosen = pl.DataFrame(
            list(selection), schema={"sample_key": pl.String, "task": pl.String}, orient="row"
        )
        table = table.join(chosen.unique(), on=["sample_key", "task"], how="semi")
    return table.filter(*conditions) if conditions else table


def read_selection(path: str | Path) -> list[tuple[str, str]]:
    """The (sample_key, task) pairs of a selection file the audit page exported: a JSON list of
    {"sample_key": ..., "task": ...}. A malformed file is named with what was expected."""
    try:
        entries = json.loads(Path(path).read_text())
        pairs = [(str(e["sample_key"]), str(e["task"])) for e in entries]
    except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
        raise PipelineError(
            f"{path}: not a selection the audit page exports (a JSON list of objects with "
            f"`sample_key` and `task`): {type(exc).__name__}: {exc}. Export it again with the "
            'page\'s "export this selection" button.'
        ) from None
    return pairs


def browse_rows(
    table: pl.DataFrame,
    env_id: str,
    space: dict[str, Any],
    samples: dict[str, Any],
    max_frames: int,
    agreement: Mapping[tuple[str, str], bool] | None = None,
    second: Mapping[tuple[str, str], bool] | None = None,
) -> dict[str, Any]:
    """Every label row, compactly (strings that repeat are indices into lists), with the frames,
    contexts and exact prompts of up to `max_frames` frames spread evenly over the table (all of
    them when the table has that few). Rows of other frames still show their answer, status,
    detail and context; the page says how many frames it embeds. `agreement`: (sample_key, task)
    -> whether the answer agrees with the reference (`agrees` column; NO_REFERENCE elsewhere).
    `round`: the labelling round of the row (the table's `round` column; 0 without one).
    `second`: the same for a second teacher's answers (`agrees_b`; compare_teachers' pairs)."""
    agreement, second = agreement or {}, second or {}
    table = table.sort("episode", "t", "task")
    frame_keys = sorted(set(table["sample_key"]))
    step = max(1, -(-len(frame_keys) // max_frames)) if max_frames else len(frame_keys) + 1
    embedded = set(frame_keys[::step][:max_frames]) if max_frames else set()
    teachers = sorted(set(table["teacher_id"]))
    statuses = sorted(set(table["parse_status"]))
    tasks = [t for t in TASK_ORDER if t in set(table["task"])]
    prompts: list[str] = []
    prompt_index: dict[str, int] = {}
    rows = []
    for row in table.iter_rows(named=True):
        key = row["sample_key"]
        prompt = -1
        if row["queried"] and key in embedded:
            sample = samples[key]
            rendered = render_prompt(
                row["task"], env_id, space, sample.frame_png, sample.record["context"],
                stored_action=sample.record["action"] if row["task"] == "judge" else None,
            )  # fmt: skip
            text = f"[system]\n{rendered.system}\n\n[user]\n{rendered.user}"
            prompt = prompt_index.setdefault(text, len(prompts))
            if prompt == len(prompts):
                prompts.append(text)
        rows.append(
            [
                key, row["episode"], row["t"], tasks.index(row["task"]),
                teachers.index(row["teacher_id"]), statuses.index(row["parse_status"]),
                int(row["queried"]), row["source_key"], value_text(row),
                clip(row["parse_detail"], VALUE_CHARS_SHOWN), clip(row["raw_text"], RAW_CHARS_SHOWN),
                prompt, _agrees_code(agreement.get((key, row["task"]))), row.get("round", 0),
                _agrees_code(second.get((key, row["task"]))),
            ]
        )  # fmt: skip
    return {
        "columns": list(BROWSE_COLUMNS),
        "tasks": tasks,
        "teachers": teachers,
        "statuses": statuses,
        "rows": rows,
        "prompts": prompts,
        "frames": {k: thumbnail(samples[k].frame_png) for k in sorted(embedded)},
        "contexts": {k: samples[k].record["context"] for k in frame_keys},
        "frames_total": len(frame_keys),
    }


def _agrees_code(agrees: bool | None) -> int:
    return NO_REFERENCE if agrees is None else AGREES if agrees else DISAGREES


# ---- two teachers on the same frames ---------------------------------------------------------


def _parsed(table: pl.DataFrame) -> pl.DataFrame:
    return table.filter(pl.col("queried") & pl.col("parse_status").is_in(LABELLED_STATUSES))


def compare_teachers(
    a: pl.DataFrame, b: pl.DataFrame, env_id: str, space: dict[str, Any], top: int = 12
) -> dict[str, Any]:
    """Per task, over the (frame, task) pairs both tables queried and parsed: how often the two
    teachers agree, the milestone confusion (rows: `a`, columns: `b`), the distribution of the
    per-dimension action differences (b - a), and the `top` pairs where they differ most
    (actions: mean gap over the range; milestones: potential gap; judge and objects: mismatch).
    `pairs`: (sample_key, task) -> whether they agree, for every pair compared."""
    if a.is_empty() or b.is_empty():
        raise AuditError(
            "--against: both label tables must have rows to compare two teachers (one is empty)"
        )
    name_a, name_b = _teacher_name(a), _teacher_name(b)
    schema = label_schema(env_id)
    joined = _parsed(a).join(_parsed(b), on=["sample_key", "task"], suffix="_b")
    out: dict[str, Any] = {"a": name_a, "b": name_b, "tasks": {}, "pairs": {}}
    for task in [t for t in TASK_ORDER if t in set(joined["task"])]:
        rows = joined.filter(pl.col("task") == task).sort("episode", "t")
        gaps, agree = [], []
        for row in rows.iter_rows(named=True):
            gap = _gap(task, row, schema, space)
            gaps.append(gap)
            if task == "action":
                agree.append(gap < ACTION_AGREEMENT_TOLERANCE)
            elif task == "milestone":
                agree.append(row["milestone"] == row["milestone_b"])
            else:
                agree.append(gap == 0.0)
        out["pairs"] |= {(k, task): bool(x) for k, x in zip(rows["sample_key"], agree, strict=True)}
        result: dict[str, Any] = {
            "n": rows.height,
            "agree": int(sum(agree)),
            "rate": float(np.mean(agree)),
        }
        if task == "milestone":
            labels = list(schema.milestones)
            confusion = np.zeros((len(labels), len(labels)), dtype=int)
            for x, y in rows.select("milestone", "milestone_b").iter_rows():
                confusion[labels.index(x), labels.index(y)] += 1
            result["labels"], result["confusion"] = labels, confusion.tolist()
        if task == "action":
            if schema.action_choices is not None:
                diffs = (rows["action_index_b"] - rows["action_index"]).to_numpy()[:, None]
                names = list(schema.action_names)
                lows, highs = [-(space["n"] - 1)], [space["n"] - 1]
            else:
                diffs = np.asarray(rows["action_b"].to_list()) - np.asarray(
                    rows["action"].to_list()
                )
                names = list(schema.action_names)
                span = np.asarray(space["high"]) - np.asarray(space["low"])
                lows, highs = (-span).tolist(), span.tolist()
            result["differences"] = [
                {
                    "name": name,
                    "mean": float(diffs[:, d].mean()),
                    "mean_abs": float(np.abs(diffs[:, d]).mean()),
                    "hist": np.histogram(diffs[:, d], bins=20, range=(lows[d], highs[d]))[
                        0
                    ].tolist(),
                    "range": [lows[d], highs[d]],
                }
                for d, name in enumerate(names)
            ]
        order = np.argsort(-np.asarray(gaps), kind="stable")[:top]
        result["worst"] = [
            {
                "sample_key": rows["sample_key"][int(i)],
                "gap": float(gaps[int(i)]),
                "a": value_text(rows.row(int(i), named=True)),
                "b": value_text(_suffixed(rows.row(int(i), named=True))),
                "raw_a": rows["raw_text"][int(i)],
                "raw_b": rows["raw_text_b"][int(i)],
            }
            for i in order
            if gaps[int(i)] > 0
        ]
        out["tasks"][task] = result
    return out


def _teacher_name(table: pl.DataFrame) -> str:
    return ", ".join(sorted(set(table.filter(pl.col("queried"))["teacher_id"]))) or "(none)"


def _suffixed(row: dict[str, Any]) -> dict[str, Any]:
    return {c: row.get(f"{c}_b") for c in VALUE_COLUMNS}


def _gap(task: str, row: dict[str, Any], schema: Any, space: dict[str, Any]) -> float:
    if task == "action":
        if schema.action_choices is not None:
            return float(row["action_index"] != row["action_index_b"])
        span = np.asarray(space["high"]) - np.asarray(space["low"])
        return float(
            np.mean(np.abs(np.asarray(row["action"]) - np.asarray(row["action_b"])) / span)
        )
    if task == "milestone":  # by potential; two labels of equal potential still differ a little
        differs = row["milestone"] != row["milestone_b"]
        return abs(float(row["potential"]) - float(row["potential_b"])) + 1e-3 * differs
    if task == "judge":
        return float(row["judge"] != row["judge_b"])
    return float(set(row["objects"]) != set(row["objects_b"]))


def to_json(value: Any) -> str:
    """JSON for a `<script type="application/json">` block: no `<` at all, so `</script>` or `<!--` in an answer cannot end the block."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True).replace("<", "\\u003c")
