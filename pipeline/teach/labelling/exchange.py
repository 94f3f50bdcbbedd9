"""Label tables out to a review tool and a person's corrections back in, as a teacher.

Export: Label Studio's JSON task import, one file per label task (`<task>.json`) with its
labelling config (`<task>.label_config.xml`): each queried (frame, task) is a task whose `data`
holds the frame (a PNG data URL: nothing to host), the teacher's raw answer, the context the
teacher got, and whose `predictions` pre-fill the controls with the parsed answer, so a reviewer
only changes what is wrong.

Import: Label Studio's JSON export of those tasks. Each annotated task becomes a correction by
`human:<reviewer>` of that frame and task, written as the answer format the prompts ask for
(parsed back before it is stored: a correction that does not parse is refused, naming its task),
in the env's corrections file (`corrections/<env>.jsonl`, pipeline.teach.labelling.corrections). The
label stage overlays the corrections on the base teacher's answers: unreviewed prompts keep them.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import polars as pl
from pydantic import BaseModel, ConfigDict, ValidationError

from pipeline.core.errors import PipelineError
from pipeline.core.io import atomic_write_bytes, check_writable
from pipeline.core.tables import read_label_table
from pipeline.teach.labelling.corrections import (
    HUMAN_PREFIX,
    Correction,
    CorrectionsError,
    check_reviewer,
    corrections_path,
    merge_corrections,
)
from pipeline.teach.labelling.review import RAW_CHARS_SHOWN, clip, filter_rows
from pipeline.teach.labels.cache import frame_sha256
from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.tasks import TASKS, answer_text, parse_answer
from pipeline.teach.rollouts.reader import iter_rollouts, load_manifest

JUDGE_CHOICES = ("reasonable", "unreasonable")


class ExportError(PipelineError, ValueError):
    """An export that would write no task (no row passes its filters) or lacks the frames."""


class ReviewImportError(PipelineError, ValueError):
    pass


def label_config(task: str, env_id: str, space: dict[str, Any]) -> str:
    """Label Studio's labelling config (XML) for one label task of `env_id`."""
    schema = label_schema(env_id)
    head = [
        "<View>",
        '  <Image name="image" value="$image" zoom="true"/>',
        '  <Header value="$sample_key"/>',
        '  <Text name="teacher_answer" value="$teacher_answer"/>',
        '  <Text name="context" value="$context"/>',
    ]
    if task == "judge":
        head.append('  <Text name="stored_action" value="$stored_action"/>')
    controls = []
    if task == "action" and schema.action_choices is not None:
        controls.append(_choices(schema.action_names[0], schema.action_choices))
    elif task == "action":
        for d, name in enumerate(schema.action_names):
            low, high = space["low"][d], space["high"][d]
            # a Number box shows no name of its own: a header says which dimension it is
            controls.append(f"  <Header value={quoteattr(f'{name} in [{low}, {high}]')}/>")
            controls.append(
                f'  <Number name={quoteattr(name)} toName="image" min="{low}" max="{high}" '
                f'step="0.01" required="true"/>'
            )
    elif task == "milestone":
        controls.append(_choices("milestone", tuple(schema.milestones)))
    elif task == "judge":
        controls.append(_choices("judge", JUDGE_CHOICES))
    elif task == "objects":
        controls.append(
            '  <TextArea name="objects" toName="image" editable="true" maxSubmissions="1" '
            'placeholder="comma-separated object phrases"/>'
        )
    else:
        raise ValueError(f"unknown task {task!r}")
    return "\n".join([*head, *controls, "</View>", ""])


def _choices(name: str, values: tuple[str, ...]) -> str:
    inner = "".join(f"<Choice value={quoteattr(v)}/>" for v in values)
    return (
        f'  <Choices name="{name}" toName="image" choice="single" required="true">{inner}</Choices>'
    )


def _result(task: str, value: Any, schema: Any, space: dict[str, Any]) -> list[dict[str, Any]]:
    """A parsed value as Label Studio result items (what pre-fills the controls)."""

    def item(name: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"from_name": name, "to_name": "image", "type": kind, "value": payload}

    if task == "action" and schema.action_choices is not None:
        return [item(schema.action_names[0], "choices", {"choices": [schema.action_choices[value - space["start"]]]})]  # fmt: skip
    if task == "action":
        return [
            item(n, "number", {"number": round(float(v), 4)})
            for n, v in zip(schema.action_names, value, strict=True)
        ]
    if task == "milestone":
        return [item("milestone", "choices", {"choices": [value[0] if isinstance(value, (tuple, list)) else value]})]  # fmt: skip
    if task == "judge":
        return [item("judge", "choices", {"choices": [JUDGE_CHOICES[0] if value else JUDGE_CHOICES[1]]})]  # fmt: skip
    return [item("objects", "textarea", {"text": [", ".join(value)]})]


def _value(
    task: str, result: list[dict[str, Any]], schema: Any, space: dict[str, Any], where: str
) -> Any:
    """A Label Studio annotation's result as a label value; names `where` when it lacks one."""
    by_name = {r.get("from_name"): r.get("value", {}) for r in result}

    def need(name: str, kind: str) -> Any:
        if name not in by_name or kind not in by_name[name]:
            raise ReviewImportError(
                f"{where}: the annotation has no {kind} for {name!r} (controls present: "
                f"{sorted(k for k in by_name if k)}): finish or skip the task in the tool"
            )
        return by_name[name][kind]

    if task == "action" and schema.action_choices is not None:
        (choice,) = need(schema.action_names[0], "choices")
        return schema.action_choices.index(choice) + space["start"]
    if task == "action":
        return [float(need(n, "number")) for n in schema.action_names]
    if task == "milestone":
        (choice,) = need("milestone", "choices")
        return choice
    if task == "judge":
        (choice,) = need("judge", "choices")
        return choice == JUDGE_CHOICES[0]
    text = need("objects", "text")
    joined = ", ".join(text) if isinstance(text, list) else str(text)
    return [p.strip() for p in joined.replace("\n", ",").split(",") if p.strip()]


class _Exported(BaseModel):
    """What the import reads of one exported Label Studio task (the rest is Label Studio's)."""

    model_config = ConfigDict(extra="ignore")


class _ResultItem(_Exported):
    from_name: str | None = None
    value: dict[str, Any] = {}


class _Annotation(_Exported):
    was_cancelled: bool = False
    result: list[_ResultItem] = []


class _TaskData(_Exported):
    sample_key: str
    task: str
    env_id: str


class _Task(_Exported):
    id: int | str | None = None
    data: _TaskData
    annotations: list[_Annotation] = []


def _task(item: Any, n: int, export_path: str | Path) -> _Task:
    """Exported task `n`, checked for the fields the import reads (a hand-edited or hostile export
    is named, not a traceback)."""
    try:
        return _Task.model_validate(item)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the task"
        raise ReviewImportError(
            f"{export_path} task #{n}: {where}: {first['msg']}; export it again from Label Studio "
            "(JSON) or fix the file"
        ) from None


def _data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


@dataclass
class ExportSummary:
    tasks: Counter = field(default_factory=Counter)
    files: list[Path] = field(default_factory=list)


def export_label_studio(
    rollout_dir: str | Path,
    labels_path: str | Path,
    out_dir: str | Path,
    *,
    tasks: list[str] | None = None,
    statuses: list[str] | None = None,
    selection: list[tuple[str, str]] | None = None,
) -> ExportSummary:
    """The queried rows of a label table (optionally only some tasks or parse statuses, or the
    (sample_key, task) pairs of a `selection` the audit page exported) as Label Studio tasks with
    the teacher's parsed answers as predictions; see the module doc."""
    manifest = load_manifest(rollout_dir)
    env_id, space = manifest["env_id"], manifest["action_space"]
    schema = label_schema(env_id)
    table = read_label_table(labels_path).filter(pl.col("queried"))
    kept = [f"{labels_path} holds {table.height} queried rows"]
    if tasks:
        table = table.filter(pl.col("task").is_in(tasks))
        kept.append(f"--tasks {' '.join(tasks)} keeps {table.height}")
    if statuses:
        table = table.filter(pl.col("parse_status").is_in(statuses))
        kept.append(f"--statuses {' '.join(statuses)} keeps {table.height}")
    if selection is not None:
        before, table = table, filter_rows(table, selection=selection)
        kept.append(
            f"the selection's {len(selection)} (sample_key, task) pairs match {table.height}"
        )
        if table.height == 0 and selection:
            known = set(before["sample_key"]) & {key for key, _ in selection}
            kept.append(
                f"{len(known)} of its sample keys are in the table under other tasks or statuses"
                if known
                else "none of its sample keys is in this table: a selection "
                "saved on a labelling round's audit page names that round's frames; give that "
                "round's --labels (data/rounds/<round>/labels.parquet) and the rollouts it labelled"
            )
    if table.height == 0:
        raise ExportError(f"nothing to export, nothing written: {'; '.join(kept)}")
    out_dir = Path(out_dir)
    check_writable(out_dir)
    wanted = set(table["sample_key"])
    samples = {s.key: s for s in iter_rollouts(rollout_dir) if s.key in wanted}
    if wanted - set(samples):
        missing = sorted(wanted - set(samples))
        raise ExportError(
            f"{len(missing)} of the {len(wanted)} frames to export are not in {rollout_dir} "
            f"(e.g. {missing[:3]}): give the rollouts that {labels_path} labelled; nothing written"
        )
    summary = ExportSummary()
    for (task,), rows in table.sort("episode", "t").group_by("task", maintain_order=True):
        items = []
        for row in rows.iter_rows(named=True):
            sample = samples[row["sample_key"]]
            parsed = parse_answer(task, row["raw_text"], env_id, space)
            data = {
                "image": _data_url(sample.frame_png),
                "sample_key": row["sample_key"],
                "task": task,
                "env_id": env_id,
                "teacher_id": row["teacher_id"],
                "teacher_answer": clip(row["raw_text"], RAW_CHARS_SHOWN) or "(no answer)",
                "parse_status": row["parse_status"],
                "context": json.dumps(sample.record["context"], sort_keys=True),
            }
            if task == "judge":
                data["stored_action"] = json.dumps(sample.record["action"])
            item: dict[str, Any] = {"data": data}
            if parsed.status.has_value:
                item["predictions"] = [
                    {
                        "model_version": row["teacher_id"],
                        "result": _result(task, parsed.value, schema, space),
                    }
                ]
            items.append(item)
        path = out_dir / f"{task}.json"
        atomic_write_bytes(path, json.dumps(items, indent=1).encode())
        config = out_dir / f"{task}.label_config.xml"
        atomic_write_bytes(config, label_config(task, env_id, space).encode())
        summary.tasks[task] = len(items)
        summary.files += [path, config]
    return summary


@dataclass
class ImportSummary:
    teacher_id: str
    path: Path  # the corrections file written
    imported: Counter = field(default_factory=Counter)  # task -> corrections added or replaced
    skipped: int = 0  # tasks with no (uncancelled) annotation
    replaced: int = 0  # corrections of a (frame, task) corrected before, now replaced
    unchanged: int = 0  # corrections imported before (the same answer already in the file)


def import_label_studio(
    export_path: str | Path,
    rollout_dir: str | Path,
    reviewer: str,
    corrections: str | Path | None = None,
) -> ImportSummary:
    """Add the annotations of a Label Studio JSON export to the env's corrections file
    (`corrections`, default `corrections/<env>.jsonl`) as `human:<reviewer>`'s answers; see the
    module doc. Every task is checked before anything is written."""
    manifest = load_manifest(rollout_dir)
    env_id, space = manifest["env_id"], manifest["action_space"]
    schema = label_schema(env_id)
    try:
        check_reviewer(reviewer)
    except CorrectionsError as exc:
        raise ReviewImportError(str(exc)) from None
    path = Path(corrections) if corrections is not None else corrections_path(env_id)
    try:
        exported = json.loads(Path(export_path).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ReviewImportError(f"{export_path}: not a Label Studio JSON export ({exc})") from None
    if not isinstance(exported, list):
        raise ReviewImportError(f"{export_path}: expected a JSON list of tasks (Label Studio's JSON export)")  # fmt: skip
    check_writable(path.parent)
    summary = ImportSummary(f"{HUMAN_PREFIX}{reviewer}", path)
    wanted: list[tuple[str, str, str]] = []  # (sample_key, task, answer text)
    for n, item in enumerate(exported):
        exported_task = _task(item, n, export_path)
        data = exported_task.data
        where = f"{export_path} task {exported_task.id or n} ({data.sample_key}, {data.task})"
        if data.env_id != env_id:
            raise ReviewImportError(f"{where}: exported from {data.env_id}, not {env_id}")
        if data.task not in TASKS:
            raise ReviewImportError(f"{where}: unknown task; known: {sorted(TASKS)}")
        annotations = [a for a in exported_task.annotations if not a.was_cancelled]
        if not annotations:
            summary.skipped += 1
            continue
        task = data.task
        result = [r.model_dump() for r in annotations[-1].result]
        try:
            value = _value(task, result, schema, space, where)
            text = answer_text(task, value, env_id, space)
        except (ValueError, TypeError, IndexError, OverflowError) as exc:
            if isinstance(exc, PipelineError):
                raise
            raise ReviewImportError(
                f"{where}: the annotation is not a {task} answer ({type(exc).__name__}: {exc}); "
                "correct it in the tool and export again"
            ) from None
        parsed = parse_answer(task, text, env_id, space)
        if not parsed.status.has_value:
            raise ReviewImportError(f"{where}: the correction {value!r} is not a valid {task} label: {parsed.detail}")  # fmt: skip
        wanted.append((data.sample_key, task, text))
    keys = {k for k, _, _ in wanted}
    frames = {s.key: frame_sha256(s.frame_png) for s in iter_rollouts(rollout_dir) if s.key in keys}
    missing = sorted(keys - set(frames))
    if missing:
        raise ReviewImportError(
            f"{export_path}: {len(missing)} frames are not in {rollout_dir} (first: {missing[0]}): "
            "import against the rollouts the export was made from"
        )
    new = [Correction(key, task, frames[key], text, reviewer) for key, task, text in wanted]
    try:
        merged = merge_corrections(path, new)
    except CorrectionsError as exc:
        raise ReviewImportError(str(exc)) from None
    summary.replaced, summary.unchanged = merged.replaced, merged.unchanged
    summary.imported = Counter(c.task for c in merged.changed)
    return summary
