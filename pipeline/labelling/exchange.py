"""Label tables out to a review tool and a person's corrections back in, as a teacher.

Export: Label Studio's JSON task import, one file per label task (`<task>.json`) with its
labelling config (`<task>.label_config.xml`): each queried (frame, task) is a task whose `data`
holds the frame (a PNG data URL: nothing to host), the teacher's raw answer, the context the
teacher got, and whose `predictions` pre-fill the controls with the parsed answer, so a reviewer
only changes what is wrong.

Import: Label Studio's JSON export of those tasks. Each annotated task becomes the answer of the
teacher `human:<reviewer>` to the very prompt the label stage would render for that frame and
task, written as the answer format the prompts ask for (parsed back before it is stored: a
correction that does not parse is refused, naming its task), and stored in the label cache under
that teacher's cache key. A label stage with `teacher: {backend: human, human: <reviewer>}` then
finds the corrections in the cache like any teacher's answers, and they flow into the datasets.
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

from pipeline.io import atomic_write_bytes, check_writable
from pipeline.labels.cache import LabelCache
from pipeline.labels.schema import label_schema
from pipeline.labels.tasks import answer_text, parse_answer, render_prompt
from pipeline.rollouts.reader import iter_rollouts, load_manifest
from pipeline.teachers.base import Reply
from pipeline.teachers.cached import prompt_cache_key, store_replies
from pipeline.teachers.human import HumanTeacher

JUDGE_CHOICES = ("reasonable", "unreasonable")


class ReviewImportError(ValueError):
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
) -> ExportSummary:
    """The queried rows of a label table (optionally only some tasks or parse statuses) as
    Label Studio tasks with the teacher's parsed answers as predictions; see the module doc."""
    manifest = load_manifest(rollout_dir)
    env_id, space = manifest["env_id"], manifest["action_space"]
    schema = label_schema(env_id)
    table = pl.read_parquet(labels_path).filter(pl.col("queried"))
    if tasks:
        table = table.filter(pl.col("task").is_in(tasks))
    if statuses:
        table = table.filter(pl.col("parse_status").is_in(statuses))
    out_dir = Path(out_dir)
    check_writable(out_dir)
    wanted = set(table["sample_key"])
    samples = {s.key: s for s in iter_rollouts(rollout_dir) if s.key in wanted}
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
                "teacher_answer": row["raw_text"] or "(no answer)",
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
    imported: Counter = field(default_factory=Counter)  # task -> corrections stored
    skipped: int = 0  # tasks with no (uncancelled) annotation
    unchanged: int = 0  # corrections imported before (the same answer already in the cache)


def import_label_studio(
    export_path: str | Path, rollout_dir: str | Path, cache_dir: str | Path, reviewer: str
) -> ImportSummary:
    """Store the annotations of a Label Studio JSON export as `human:<reviewer>`'s answers in the
    label cache at `cache_dir`; see the module doc. All tasks are checked before any is stored."""
    manifest = load_manifest(rollout_dir)
    env_id, space = manifest["env_id"], manifest["action_space"]
    schema = label_schema(env_id)
    teacher = HumanTeacher(reviewer)
    try:
        exported = json.loads(Path(export_path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ReviewImportError(f"{export_path}: not a Label Studio JSON export ({exc})") from None
    if not isinstance(exported, list):
        raise ReviewImportError(f"{export_path}: expected a JSON list of tasks (Label Studio's JSON export)")  # fmt: skip
    check_writable(cache_dir)
    summary = ImportSummary(teacher.teacher_id)
    wanted: list[tuple[str, str, Any]] = []  # (sample_key, task, value)
    for n, item in enumerate(exported):
        data = item.get("data", {})
        where = (
            f"{export_path} task {item.get('id', n)} ({data.get('sample_key')}, {data.get('task')})"
        )
        if data.get("env_id") != env_id:
            raise ReviewImportError(f"{where}: exported from {data.get('env_id')}, not {env_id}")
        annotations = [a for a in item.get("annotations", []) if not a.get("was_cancelled")]
        if not annotations:
            summary.skipped += 1
            continue
        task = data["task"]
        value = _value(task, annotations[-1].get("result", []), schema, space, where)
        text = answer_text(task, value, env_id, space)
        parsed = parse_answer(task, text, env_id, space)
        if not parsed.status.has_value:
            raise ReviewImportError(f"{where}: the correction {value!r} is not a valid {task} label: {parsed.detail}")  # fmt: skip
        wanted.append((data["sample_key"], task, text))
    keys = {k for k, _, _ in wanted}
    samples = {s.key: s for s in iter_rollouts(rollout_dir) if s.key in keys}
    missing = sorted(keys - set(samples))
    if missing:
        raise ReviewImportError(
            f"{export_path}: {len(missing)} frames are not in {rollout_dir} (first: {missing[0]}): "
            "import against the rollouts the export was made from"
        )
    cache = LabelCache(cache_dir)
    prompts, replies = [], []
    for key, task, text in wanted:
        sample = samples[key]
        prompt = render_prompt(
            task, env_id, space, sample.frame_png, sample.record["context"],
            stored_action=sample.record["action"] if task == "judge" else None,
        )  # fmt: skip
        stored = cache.get(prompt_cache_key(prompt, teacher))
        if stored is not None:  # the cache is content-addressed: an answer is never replaced
            if stored.raw_text != text:
                raise ReviewImportError(
                    f"{export_path}: {teacher.teacher_id} already answered ({key}, {task}) with "
                    f"{stored.raw_text!r}, not {text!r}: a cached answer is never replaced; "
                    f"import a second review under a new reviewer name (e.g. {reviewer}-2)"
                )
            summary.unchanged += 1
            continue
        prompts.append(prompt)
        replies.append(Reply(text=text))
        summary.imported[task] += 1
    if prompts:
        store_replies(cache, teacher, prompts, replies)  # one segment
    return summary
