"""The label audit: a static HTML report per env and teacher, computed with polars.

What a user checks before trusting (or paying for more of) a teacher's labels: counts and
distributions, the parse-status breakdown by taxonomy, latency percentiles (from the call
telemetry, in a side file: wall-clock values stay out of the DVC output), agreement with the
scripted reference answers, and frames beside the raw answers for failures and disagreements.

Why one module of this length: it is one page, computed and rendered here; `build_audit` computes
its sections (one helper each: parse status, distributions, agreement, failures) and gathers
them in the order the page shows them, so that a number and the table it lands in stay together.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from jinja2 import Environment, select_autoescape
from PIL import Image

from pipeline.core.io import atomic_write_bytes
from pipeline.core.tables import read_label_table, read_mask_table
from pipeline.teach.labelling.review import (
    ACTION_AGREEMENT_TOLERANCE,
    VALUE_CHARS_SHOWN,
    browse_rows,
    clip,
    compare_teachers,
    episode_timelines,
    to_json,
    value_text,
)
from pipeline.teach.labels.cost import ERPV_SECONDS_PER_CALL, call_latency
from pipeline.teach.labels.parsers import ParseResult
from pipeline.teach.labels.schema import EnvLabelSchema, label_schema
from pipeline.teach.labels.status import LABELLED_STATUSES, ParseStatus
from pipeline.teach.labels.tasks import parse_answer, render_prompt
from pipeline.teach.masks.base import decode_mask
from pipeline.teach.rollouts.reader import iter_rollouts, load_manifest
from pipeline.teach.teachers.scripted import ScriptedTeacher, has_script

TELEMETRY_JS_SUFFIX = ".telemetry.js"  # beside the page, not a DVC output
EXAMPLES_PER_KIND = 6  # thumbnails shown per (task, status) failure kind and per disagreement task
MASK_EXAMPLES = 6  # frames shown with their masks, spread over the data
RAW_TEXT_CHARS = 400
MAX_EMBEDDED_FRAMES = 3000  # the browser embeds frames (thumbnails) of at most this many frames
# one colour per phrase mask (tab10), cycled
PHRASE_COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
                  (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]  # fmt: skip


def _reference(
    env_id: str, space: dict[str, Any], queried: pl.DataFrame, samples: dict[str, Any]
) -> dict:
    """Parsed answers of the fully reliable scripted teacher for the queried (sample, task) rows;
    none for an env that has no script (CARLA, a brought env)."""
    if not has_script(env_id):
        return {}
    reference = ScriptedTeacher(reliability=1.0, seed=0)
    out: dict[tuple[str, str], ParseResult] = {}
    for key, task in queried.select("sample_key", "task").iter_rows():
        if task == "objects":
            continue  # phrases have no single right answer to agree with
        sample = samples[key]
        prompt = render_prompt(
            task, env_id, space, sample.frame_png, sample.record["context"],
            stored_action=sample.record["action"] if task == "judge" else None,
        )  # fmt: skip
        text = reference.correct_text(prompt)
        out[(key, task)] = parse_answer(task, text, env_id, space)
    return out


def _agrees(row: dict[str, Any], ref: ParseResult, space: dict[str, Any]) -> bool:
    task = row["task"]
    if task == "action":
        if space["type"] == "discrete":
            return row["action_index"] == ref.value
        span = np.asarray(space["high"]) - np.asarray(space["low"])
        gap = np.abs(np.asarray(row["action"]) - np.asarray(ref.value)) / span
        return float(gap.mean()) < ACTION_AGREEMENT_TOLERANCE
    if task == "milestone":
        return row["milestone"] == ref.value[0]
    return row["judge"] == ref.value


def _thumbnail(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def _overlay(frame_png: bytes, mask_pngs: list[bytes]) -> str:
    """The frame with each phrase's mask tinted in its own colour (alpha = mask), as a data URL:
    a sum of masks that covers the whole frame (road + grass) says nothing, separate colours do."""
    with Image.open(io.BytesIO(frame_png)) as image:
        out = np.asarray(image.convert("RGB"), dtype=np.float32)
    for i, png in enumerate(mask_pngs):
        alpha = 0.5 * decode_mask(png)[..., None]  # (H, W, 1)
        out = (1 - alpha) * out + alpha * np.array(PHRASE_COLOURS[i % len(PHRASE_COLOURS)], float)
    buf = io.BytesIO()
    Image.fromarray(out.astype(np.uint8)).save(buf, format="PNG")
    return _thumbnail(buf.getvalue())


def _mask_examples(
    masks_path: str | Path, samples: dict[str, Any], prefix: str = ""
) -> list[dict[str, Any]]:
    """Masks over a few frames; `prefix`: what the page puts before the mask table's keys."""
    masks = read_mask_table(masks_path).filter(pl.col("status") == "ok")
    if masks.is_empty():
        return []
    step = max(1, masks.height // MASK_EXAMPLES)
    examples = []
    for row in masks[::step].head(MASK_EXAMPLES).iter_rows(named=True):
        examples.append(
            {
                "key": prefix + row["sample_key"],
                "overlay": _overlay(samples[prefix + row["sample_key"]].frame_png, row["masks"]),
                "phrases": [
                    {
                        "phrase": p,
                        "mask": _thumbnail(m),
                        "coverage": float(decode_mask(m).mean()),
                        "colour": "#{:02x}{:02x}{:02x}".format(
                            *PHRASE_COLOURS[i % len(PHRASE_COLOURS)]
                        ),
                    }
                    for i, (p, m) in enumerate(zip(row["phrases"], row["masks"], strict=True))
                ],
            }
        )
    return examples


@dataclass(frozen=True)
class EarlierLabels:
    """The labels of an earlier round, listed on a labelling round's page with its own: `round`
    0 is the env's static (RAE) data, k > 0 labelling round k."""

    round: int
    rollouts: Path
    labels: Path


def _page_labels(
    rollout_dir: str | Path, labels_path: str | Path, earlier: Sequence[EarlierLabels]
) -> tuple[pl.DataFrame, dict[str, Any], list[dict[str, Any]]]:
    """The page's label table (with a `round` column), its frames by sample key, and one entry
    per round it lists. With `earlier`, each round's keys get the prefix `round<k>/` and its
    episodes are numbered after the previous round's (their own number is in `episode_names`), so
    rows of different rounds never share a key or an episode."""
    manifest = load_manifest(rollout_dir)
    own = (manifest.get("acting_agent") or {}).get("round", 0)
    parts = [*earlier, EarlierLabels(own, Path(rollout_dir), Path(labels_path))]
    if len({p.round for p in parts}) < len(parts):
        raise ValueError(f"rounds listed twice on one audit page: {[p.round for p in parts]}")
    tables, samples, rounds, offset = [], {}, [], 0
    for part in parts:
        table = read_label_table(part.labels).with_columns(round=pl.lit(part.round, pl.Int64))
        frames = {s.key: s for s in iter_rollouts(part.rollouts)}
        prefix = f"round{part.round}/" if earlier else ""
        names = {}
        if earlier:
            names = {e + offset: f"round {part.round}, episode {e}" for e in set(table["episode"])}
            table = table.with_columns(
                sample_key=prefix + pl.col("sample_key"),
                source_key=prefix + pl.col("source_key"),  # null stays null
                episode=pl.col("episode") + offset,
            )
            offset = max([offset - 1, *names]) + 1
        tables.append(table)
        samples |= {prefix + key: sample for key, sample in frames.items()}
        rounds.append({"round": part.round, "rollouts": part.rollouts.as_posix(),
                       "rows": table.height, "frames": len(frames), "episode_names": names})  # fmt: skip
    return pl.concat(tables, how="diagonal_relaxed"), samples, rounds


def _status_by_task(queried: pl.DataFrame) -> dict[str, dict[str, int]]:
    """task -> parse status -> count of the queried answers, the commonest status first."""
    status_counts = (
        queried.group_by("task", "parse_status")
        .len()
        .sort("task", "len", "parse_status", descending=[False, True, False])
    )
    by_task: dict[str, dict[str, int]] = {}
    for task, status, n in status_counts.iter_rows():
        by_task.setdefault(task, {})[status] = n
    return by_task


def _distributions(
    valid: pl.DataFrame, schema: EnvLabelSchema, space: dict[str, Any]
) -> dict[str, Any]:
    """What the parsed answers say, per task: milestone counts in the schema's order, action
    counts (discrete) or per-dimension statistics and histograms (continuous), the 15 commonest
    object phrases, and the judge's verdicts."""
    distributions: dict[str, Any] = {}
    tasks = set(valid["task"])
    if "milestone" in tasks:
        counts = valid.filter(pl.col("task") == "milestone").group_by("milestone").len()
        order = {label: i for i, label in enumerate(schema.milestones)}
        distributions["milestone"] = sorted(counts.iter_rows(), key=lambda r: order.get(r[0], 99))
    actions = valid.filter(pl.col("task") == "action")
    if actions.height:
        if space["type"] == "discrete":
            counts = actions.group_by("action_index").len().sort("action_index")
            distributions["action"] = [
                (schema.action_choices[i - space["start"]], n) for i, n in counts.iter_rows()
            ]
        else:
            matrix = np.asarray(actions["action"].to_list())  # (N, action dims)
            distributions["action_stats"] = [
                {
                    "name": name, "mean": float(matrix[:, d].mean()), "std": float(matrix[:, d].std()),
                    "min": float(matrix[:, d].min()), "max": float(matrix[:, d].max()),
                    "hist": np.histogram(matrix[:, d], bins=10, range=(space["low"][d], space["high"][d]))[0].tolist(),
                }
                for d, name in enumerate(schema.action_names)
            ]  # fmt: skip
    if "objects" in tasks:
        phrases = valid.filter(pl.col("task") == "objects").select(pl.col("objects").explode())
        distributions["objects"] = (
            phrases.group_by("objects")
            .len()
            .sort("len", "objects", descending=[True, False])  # ties by name: same bytes
            .head(15)
            .rows()
        )
    if "judge" in tasks:
        distributions["judge"] = (
            valid.filter(pl.col("task") == "judge").group_by("judge").len().sort("judge").rows()
        )
    return distributions


def _agreement(
    valid: pl.DataFrame, reference: dict[tuple[str, str], ParseResult], space: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]], dict[tuple[str, str], bool]]:
    """Agreement of the parsed answers with the reference's: per task (n, agree, rate); the
    first EXAMPLES_PER_KIND disagreeing rows of each task, with the reference's value; and per
    (sample, task) whether it agrees (the browser's reference filter)."""
    agreement: dict[str, dict[str, Any]] = {}
    disagreements: list[dict[str, Any]] = []
    agrees: dict[tuple[str, str], bool] = {}
    for row in valid.iter_rows(named=True):
        key = (row["sample_key"], row["task"])
        ref = reference.get(key)
        if ref is None or not ref.status.has_value:
            continue
        stats = agreement.setdefault(row["task"], {"n": 0, "agree": 0})
        stats["n"] += 1
        agrees[key] = _agrees(row, ref, space)
        if agrees[key]:
            stats["agree"] += 1
        elif sum(1 for d in disagreements if d["task"] == row["task"]) < EXAMPLES_PER_KIND:
            disagreements.append({**row, "reference": ref.value})
    for stats in agreement.values():
        stats["rate"] = stats["agree"] / stats["n"]
    return agreement, disagreements, agrees


def _failures(
    queried: pl.DataFrame,
) -> tuple[list[dict[str, Any]], list[tuple[str, str, int, int]]]:
    """The answers that did not parse: the first EXAMPLES_PER_KIND rows of each (task, status),
    and each kind's (task, status, shown, total)."""
    failures: list[dict[str, Any]] = []
    failure_kinds: list[tuple[str, str, int, int]] = []
    failed = queried.filter(~pl.col("parse_status").is_in(LABELLED_STATUSES))
    for (task, status), group in failed.group_by("task", "parse_status", maintain_order=True):
        failures += group.head(EXAMPLES_PER_KIND).to_dicts()
        failure_kinds.append((task, status, min(EXAMPLES_PER_KIND, group.height), group.height))
    return failures, failure_kinds


def build_audit(
    rollout_dir: str | Path,
    labels_path: str | Path,
    masks_path: str | Path | None = None,
    against: str | Path | None = None,
    max_frames: int = MAX_EMBEDDED_FRAMES,
    earlier: Sequence[EarlierLabels] = (),
) -> dict[str, Any]:
    """Everything the report shows, as plain data (also what tests check). `against`: a second
    label table of the same rollouts (another teacher) to compare with; `max_frames`: how many
    frames the answer browser embeds; `earlier`: the labels of earlier rounds, listed with these
    (a labelling round's page: every label of the chain with its round; masks are this round's)."""
    if earlier and against is not None:
        raise ValueError("a page of several rounds compares no second teacher (`against`)")
    manifest = load_manifest(rollout_dir)
    env_id, space = manifest["env_id"], manifest["action_space"]
    table, samples, rounds = _page_labels(rollout_dir, labels_path, earlier)
    queried = table.filter(pl.col("queried"))
    schema = label_schema(env_id)
    valid = queried.filter(pl.col("parse_status").is_in(LABELLED_STATUSES))
    reference = _reference(env_id, space, valid, samples)
    agreement, disagreements, agrees = _agreement(valid, reference, space)
    failures, failure_kinds = _failures(queried)
    disagreement_counts = {
        t: s["n"] - s["agree"] for t, s in agreement.items() if s["n"] > s["agree"]
    }

    def example(row: dict[str, Any]) -> dict[str, Any]:
        return {
            "key": row["sample_key"], "task": row["task"], "status": row["parse_status"],
            "detail": clip(row["parse_detail"], VALUE_CHARS_SHOWN), "value": value_text(row),
            "reference": row.get("reference"),
            "raw": clip(row["raw_text"], RAW_TEXT_CHARS) or "(no answer)",
            "thumbnail": _thumbnail(samples[row["sample_key"]].frame_png),
        }  # fmt: skip

    own_prefix = f"round{rounds[-1]['round']}/" if earlier else ""
    comparison = second = None
    if against is not None:
        comparison = compare_teachers(table, read_label_table(against), env_id, space)
        second = comparison["pairs"]
    return {
        "env_id": env_id,
        # a labelling round's frames: which round of which run, collected by which agent
        "acting_agent": manifest.get("acting_agent"),
        "teacher_ids": sorted(set(table["teacher_id"])),
        "scripted": any(t.startswith("scripted:") for t in table["teacher_id"].unique()),
        "has_reference": has_script(env_id),
        "rows": table.height,
        "queried": queried.height,
        "frames": len(samples),
        "status_by_task": _status_by_task(queried),
        "distributions": _distributions(valid, schema, space),
        "agreement": agreement,
        "failures": [example(r) for r in failures],
        "disagreements": [example(r) for r in disagreements],
        "statuses": [str(s) for s in ParseStatus],
        "failure_kinds": failure_kinds,
        "disagreement_counts": disagreement_counts,
        "masks": [] if masks_path is None else _mask_examples(masks_path, samples, own_prefix),
        "browse": browse_rows(table, env_id, space, samples, max_frames, agrees, second),
        "timelines": episode_timelines(table),
        "rounds": rounds if earlier else [],
        "episode_names": {e: n for r in rounds for e, n in r["episode_names"].items()},
        "action_names": list(schema.action_names),
        "action_choices": None if schema.action_choices is None else list(schema.action_choices),
        "comparison": comparison,
    }


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Label audit: {{ a.env_id }}{% if a.acting_agent %}, round {{ a.acting_agent.round }} of {{ a.acting_agent.run }}{% endif %}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; } td, th { padding: 3px 10px; border: 1px solid #e3e3e3; text-align: right; }
th { background: #f5f5f5; } td.l, th.l { text-align: left; }
.bar { display: inline-block; height: 10px; background: #4a7fc1; vertical-align: middle; }
.bad { color: #b3261e; } .ok { color: #1e7b34; } .note { color: #666; }
.ex { display: flex; gap: 12px; border: 1px solid #e3e3e3; padding: 8px; margin: 8px 0; }
.ex img { width: 128px; height: 128px; image-rendering: pixelated; border: 1px solid #ccc; }
.ex pre { white-space: pre-wrap; margin: 4px 0; background: #fafafa; padding: 4px; max-height: 9em; overflow: auto; }
.hist span { display: inline-block; width: 8px; background: #4a7fc1; margin-right: 1px; vertical-align: bottom; }
#br-table td { text-align: left; max-width: 260px; overflow: hidden; white-space: nowrap; text-overflow: ellipsis; cursor: pointer; }
#br-table tr.sel td { background: #e8f0fb; } #tl svg { border: 1px solid #e3e3e3; }
#br-detail pre { white-space: pre-wrap; background: #fafafa; padding: 4px; max-height: 16em; overflow: auto; }
</style></head><body>
<h1>Label audit: {{ a.env_id }}</h1>
{% if a.acting_agent %}<p>Labelling round {{ a.acting_agent.round }} of run <code>{{ a.acting_agent.run }}</code>:
the frames below were collected by the agent <code>{{ a.acting_agent.agent }}</code> ({{ a.acting_agent.explore }} actions)
and labelled in batch afterwards; the agent of this round trained on them.</p>{% endif %}
{% if a.rounds %}<p>Every label of the run's rounds so far is listed here with its round (round 0: the
env's static data). A frame's key is <code>round&lt;k&gt;/</code> and its key in that round's rollouts;
episodes are numbered across the rounds (the episode lists say each one's round and own number).
Masks are this round's.</p>
<table><tr><th>round</th><th class="l">rollouts</th><th>frames</th><th>label rows</th></tr>
{% for r in a.rounds %}<tr><td>{{ r.round }}</td><td class="l"><code>{{ r.rollouts }}</code></td><td>{{ r.frames }}</td><td>{{ r.rows }}</td></tr>{% endfor %}</table>{% endif %}
<p>Teacher{% if a.teacher_ids|length > 1 %}s{% endif %}: {% for t in a.teacher_ids %}<code>{{ t }}</code> {% endfor %}<br>
{{ a.frames }} frames, {{ a.queried }} teacher answers (queried frames x tasks), {{ a.rows }} label rows in all.</p>
{% if a.scripted %}<p class="note">The scripted teacher is a stand-in for a VLM:
deterministic reference scripts with injected failures. Its figures say nothing about a real model.</p>{% endif %}

<h2>Parse status by task</h2>
<table><tr><th class="l">status</th>{% for task in a.status_by_task %}<th>{{ task }}</th>{% endfor %}</tr>
{% for status in a.statuses %}{% if a.status_by_task.values()|selectattr(status, "defined")|list %}
<tr><td class="l {{ 'ok' if status in ('ok', 'regex_fallback') else 'bad' }}">{{ status }}</td>
{% for task, counts in a.status_by_task.items() %}{% set n = counts.get(status, 0) %}{% set total = counts.values()|sum %}
<td>{% if n %}{{ n }} ({{ '%.0f' % (100 * n / total) }} %){% else %}·{% endif %}</td>{% endfor %}</tr>{% endif %}{% endfor %}
</table>

<h2>What the calls cost: latency per answer (s), seconds and tokens</h2>
<div id="latency"><p class="note">No call telemetry beside this page: latency is kept on the machine
that paid for the calls (data/telemetry/, outside what DVC hashes and shares).</p></div>
{% if telemetry_js %}<script src="{{ telemetry_js }}"></script>{% endif %}
<script>
(function () {
  var t = window.VLMRL_TELEMETRY;
  if (!t) return;
  var rows = Object.keys(t).map(function (task) {
    var p = t[task], f = function (q) { return q in p ? p[q].toFixed(4) : "-"; };
    var tokens = p.calls_with_usage ? p.prompt_tokens + " + " + p.completion_tokens : "-";
    return '<tr><td class="l">' + task + "</td><td>" + f("p50") + "</td><td>" + f("p90") +
      "</td><td>" + f("p99") + "</td><td>" + p.calls + "</td><td>" + p.unrecorded +
      "</td><td>" + (p.seconds || 0).toFixed(1) + "</td><td>" + ({{ erpv_seconds }} * p.calls).toFixed(0) +
      "</td><td>" + tokens + "</td></tr>";
  });
  document.getElementById("latency").innerHTML = '<table><tr><th class="l">task</th>' +
    "<th>p50</th><th>p90</th><th>p99</th><th>calls</th><th>not recorded here</th>" +
    "<th>call seconds</th><th>at ERPv's {{ erpv_seconds }} s/call</th><th>tokens (prompt + completion)</th></tr>" +
    rows.join("") + "</table>";
})();
</script>

<h2>Agreement with the scripted reference</h2>
{% if a.agreement %}<table><tr><th class="l">task</th><th>compared</th><th>agree</th></tr>
{% for task, s in a.agreement.items() %}<tr><td class="l">{{ task }}</td><td>{{ s.n }}</td><td>{{ '%.1f' % (100 * s.rate) }} %</td></tr>{% endfor %}</table>
<p class="note">Over answers that parsed. Continuous actions agree when the mean gap per dimension is under a quarter of the action range.</p>
{% elif not a.has_reference %}<p>No reference for this env: the scripted teacher has no script for {{ a.env_id }}.</p>
{% else %}<p>No parsed answers to compare.</p>{% endif %}

{% if a.comparison %}{% set c = a.comparison %}<h2>Two teachers on the same frames</h2>
<p>A: <code>{{ c.a }}</code><br>B: <code>{{ c.b }}</code><br><span class="note">Over the (frame, task) pairs both queried and parsed.
"teacher B" in the browser below lists every row where B disagrees (or agrees) with this page's answer.</span></p>
<table><tr><th class="l">task</th><th>compared</th><th>agree</th></tr>
{% for task, r in c.tasks.items() %}<tr><td class="l">{{ task }}</td><td>{{ r.n }}</td><td>{{ '%.1f' % (100 * r.rate) }} %</td></tr>{% endfor %}</table>
{% for task, r in c.tasks.items() %}
{% if r.confusion %}<h3>milestone confusion (rows: A, columns: B)</h3><table><tr><th></th>{% for l in r.labels %}<th>{{ l }}</th>{% endfor %}</tr>
{% for row in r.confusion %}{% set i = loop.index0 %}<tr><th class="l">{{ r.labels[i] }}</th>{% for n in row %}<td{% if n and loop.index0 != i %} class="bad"{% endif %}>{{ n or '·' }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
{% if r.differences %}<h3>action differences (B - A)</h3><table><tr><th class="l">field</th><th>mean</th><th>mean |diff|</th><th class="l">histogram over [{{ r.differences[0].range[0] }}, {{ r.differences[0].range[1] }}]</th></tr>
{% for d in r.differences %}{% set m = d.hist|max %}<tr><td class="l">{{ d.name }}</td><td>{{ '%.3f' % d.mean }}</td><td>{{ '%.3f' % d.mean_abs }}</td>
<td class="l hist">{% for h in d.hist %}<span style="height: {{ 2 + 30 * h // (m or 1) }}px" title="{{ h }}"></span>{% endfor %}</td></tr>{% endfor %}</table>{% endif %}
{% if r.worst %}<h3>{{ task }}: where they differ most ({{ r.worst|length }} of {{ r.n - r.agree }} disagreeing)</h3>
<table><tr><th class="l">frame</th><th>gap</th><th class="l">A</th><th class="l">B</th><th class="l">A raw</th><th class="l">B raw</th></tr>
{% for w in r.worst %}<tr><td class="l"><a href="#" data-key="{{ w.sample_key }}" class="jump">{{ w.sample_key }}</a></td><td>{{ '%.3f' % w.gap }}</td><td class="l">{{ w.a }}</td><td class="l">{{ w.b }}</td><td class="l"><code>{{ w.raw_a|truncate(80) }}</code></td><td class="l"><code>{{ w.raw_b|truncate(80) }}</code></td></tr>{% endfor %}</table>{% endif %}
{% endfor %}{% endif %}

<h2>Episode timeline</h2>
<p class="note">One episode's labels over t: each lane's colour strip is the parse status of the label the step carries (queried frames marked with a tick; the others carry the last queried answer), with the values drawn above it. Drag the slider to scrub the frames.</p>
<p><label>episode <select id="tl-episode"></select></label></p>
<div id="tl"></div>
<div class="ex" id="tl-frame"></div>

<h2>Browse every answer</h2>
<p class="note" id="br-note"></p>
<p><label>task <select id="f-task"></select></label> <label>status <select id="f-status"></select></label>
<label id="f-round-label">round <select id="f-round"></select></label>
<label>episode <select id="f-episode"></select></label> <label>teacher <select id="f-teacher"></select></label>
<label><input type="checkbox" id="f-queried" checked> queried only</label>
<label>reference <select id="f-reference"><option value="">any</option><option value="0">disagrees</option><option value="1">agrees</option><option value="-1">no reference</option></select></label>
{% if a.comparison %}<label>teacher B <select id="f-against"><option value="">any</option><option value="0">disagrees</option><option value="1">agrees</option><option value="-1">not compared</option></select></label>{% endif %}
<label>value or answer contains <input type="search" id="f-text" size="16"></label>
<button id="br-export" title="download the (sample_key, task) pairs of every row listed: `python -m stages.review export ... --selection <file>` sends exactly these to Label Studio">export this selection</button></p>
<p id="br-count"></p>
<div style="display: flex; gap: 16px; align-items: flex-start">
<table id="br-table" style="font-size: 12px"></table>
<div id="br-detail" style="flex: 1; min-width: 320px"></div></div>
<p><button id="br-prev">&larr; previous</button> <button id="br-next">next &rarr;</button></p>

<h2>Distributions (parsed answers)</h2>
{% set d = a.distributions %}
{% if d.milestone %}<h3>milestone</h3><table>{% set m = d.milestone|map(attribute=1)|max %}
{% for label, n in d.milestone %}<tr><td class="l">{{ label }}</td><td>{{ n }}</td><td class="l"><span class="bar" style="width: {{ 300 * n // m }}px"></span></td></tr>{% endfor %}</table>{% endif %}
{% if d.action %}<h3>action</h3><table>{% set m = d.action|map(attribute=1)|max %}
{% for label, n in d.action %}<tr><td class="l">{{ label }}</td><td>{{ n }}</td><td class="l"><span class="bar" style="width: {{ 300 * n // m }}px"></span></td></tr>{% endfor %}</table>{% endif %}
{% if d.action_stats %}<h3>action</h3><table><tr><th class="l">field</th><th>mean</th><th>std (ddof 0: every answer)</th><th>min</th><th>max</th><th class="l">histogram over the action range</th></tr>
{% for s in d.action_stats %}{% set m = s.hist|max %}<tr><td class="l">{{ s.name }}</td><td>{{ '%.2f' % s.mean }}</td><td>{{ '%.2f' % s.std }}</td><td>{{ '%.2f' % s.min }}</td><td>{{ '%.2f' % s.max }}</td>
<td class="l hist">{% for h in s.hist %}<span style="height: {{ 2 + 30 * h // (m or 1) }}px" title="{{ h }}"></span>{% endfor %}</td></tr>{% endfor %}</table>{% endif %}
{% if d.objects %}<h3>objects (top phrases)</h3><table>{% for phrase, n in d.objects %}<tr><td class="l">{{ phrase }}</td><td>{{ n }}</td></tr>{% endfor %}</table>{% endif %}
{% if d.judge %}<h3>judge</h3><table>{% for v, n in d.judge %}<tr><td class="l">{{ 'reasonable' if v else 'unreasonable' }}</td><td>{{ n }}</td></tr>{% endfor %}</table>{% endif %}

{% if a.masks %}<h2>Masks over frames</h2>
<p class="note">Each object phrase's CLIP mask in its own colour over the frame (Semore eq. 4 sums them); the percentage is the share of the frame the mask covers.</p>
{% for m in a.masks %}<div class="ex"><img src="{{ m.overlay }}" alt="masks of {{ m.key }}"><div>
<b>{{ m.key }}</b><br>
{% for p in m.phrases %}<span style="display: inline-block; text-align: center; margin-right: 8px">
<img src="{{ p.mask }}" alt="{{ p.phrase }}" style="width: 64px; height: 64px; border: 3px solid {{ p.colour }}"><br><span style="color: {{ p.colour }}">&#9632;</span> {{ p.phrase }} ({{ '%.0f' % (100 * p.coverage) }} %)</span>{% endfor %}
</div></div>{% endfor %}{% endif %}

{% if a.failures %}<h2>Failures: frames beside raw answers</h2>
{% for task, status, shown, total in a.failure_kinds %}<h3>{{ task }} · <span class="bad">{{ status }}</span>: {{ shown }} of {{ total }}</h3>
{% for e in a.failures if e.task == task and e.status == status %}<div class="ex"><img src="{{ e.thumbnail }}" alt="frame {{ e.key }}"><div>
<b>{{ e.key }}</b>{% if e.detail %} · {{ e.detail }}{% endif %}
<pre>{{ e.raw }}</pre></div></div>{% endfor %}{% endfor %}
<p class="note">Every answer is in the browser below (filter by task, status, the reference or text; click a column to sort).</p>{% endif %}

{% if a.disagreements %}<h2>Disagreements with the reference</h2>
{% for task, total in a.disagreement_counts.items() %}<h3>{{ task }}: {{ [total, 6]|min }} of {{ total }}</h3>
{% for e in a.disagreements if e.task == task %}<div class="ex"><img src="{{ e.thumbnail }}" alt="frame {{ e.key }}"><div>
<a class="jump" href="#br-detail" data-key="{{ e.key }}" data-task="{{ e.task }}"><b>{{ e.key }}</b></a> · answer <b>{{ e.value }}</b>, reference <b>{{ e.reference }}</b>
<pre>{{ e.raw }}</pre></div></div>{% endfor %}{% endfor %}{% endif %}

<script type="application/json" id="review-data">{{ review_json|safe }}</script>
<script>
{{ review_js|safe }}
</script>
</body></html>
"""


def render_audit(audit: dict[str, Any], telemetry_js: str | None = None) -> str:
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    review = {
        key: audit[key]
        for key in ("browse", "timelines", "episode_names", "action_names", "action_choices")
    }
    return env.from_string(_TEMPLATE).render(
        a=audit,
        telemetry_js=telemetry_js,
        erpv_seconds=ERPV_SECONDS_PER_CALL,
        review_json=to_json(review),
        review_js=(Path(__file__).parent / "audit_page.js").read_text(),
    )


def write_audit(
    rollout_dir: str | Path,
    labels_path: str | Path,
    out_path: str | Path,
    masks_path: str | Path | None = None,
    telemetry_dir: str | Path | None = None,
    *,
    against: str | Path | None = None,
    max_frames: int = MAX_EMBEDDED_FRAMES,
    earlier: Sequence[EarlierLabels] = (),
) -> dict[str, Any]:
    """The audit page (a pure function of rollouts, labels and masks: a DVC output), and beside
    it `<page>.telemetry.js` with the calls' latency when `telemetry_dir` is given: wall-clock
    values stay out of what DVC hashes, and the page shows them when the file is there."""
    out_path = Path(out_path)
    audit = build_audit(rollout_dir, labels_path, masks_path, against, max_frames, earlier)
    script = out_path.name.removesuffix(".html") + TELEMETRY_JS_SUFFIX
    atomic_write_bytes(out_path, render_audit(audit, script).encode())
    if telemetry_dir is not None and Path(telemetry_dir).is_dir():
        audit["latency"] = call_latency(labels_path, telemetry_dir)
        payload = json.dumps(audit["latency"], sort_keys=True)
        atomic_write_bytes(
            out_path.parent / script, f"window.VLMRL_TELEMETRY = {payload};\n".encode()
        )
    return audit


def agreement_metrics(audit: dict[str, Any]) -> dict[str, Any]:
    """The audit's agreement with the scripted reference (metrics/audit/<env>.json, read by the
    knowledge page): per task the answers compared (`n`), those that agree and the rate;
    `has_reference` false (no agreement) for an env without a reference script."""
    return {
        "env": audit["env_id"],
        "has_reference": audit["has_reference"],
        "agreement": {task: dict(stats) for task, stats in sorted(audit["agreement"].items())},
    }
