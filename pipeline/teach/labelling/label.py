"""The label stage's logic: ask a teacher about every k-th frame of a rollout directory, through
the cache, and write one label table row per (sample, task).

The table is a pure function of (rollouts, teacher, prompts, parser): whether an answer came from
the cache or from a call is reported by the stage, not stored, and so is how long a call took
(latency and attempts go to the cache's telemetry store, which the audit reads), so the same
inputs write the same bytes on every machine.

Rows of frames between two queries carry the last queried label of the episode, with
`queried = False` and `source_key` naming the frame whose label they carry (ERPv C.4: the VLM is
queried every 10 frames). Every answer becomes a row with a `parse_status`; none is dropped.

Why one module of this length: the label loop, the cache protocol it follows and the failure-rate
gates the table's guarantees rest on are one unit; the Ray path differs only in where
`_label_queried` runs.
"""

from __future__ import annotations

import hashlib
import io
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from tqdm import tqdm

from pipeline.core.cached_map import CachedMap, missing
from pipeline.core.config import LabelConfig
from pipeline.core.errors import PipelineError
from pipeline.core.io import atomic_write_bytes, check_writable
from pipeline.core.kernels import warn_native_kernels
from pipeline.core.tables import LABEL_TABLE_SCHEMA
from pipeline.teach.labelling.corrections import (
    Correction,
    CorrectionsError,
    quote_clipped,
    read_corrections,
)
from pipeline.teach.labels.cache import CachedAnswer, LabelCache, cache_key
from pipeline.teach.labels.parsers import PARSER_VERSION
from pipeline.teach.labels.status import LABELLED_STATUSES, TRANSPORT_FAILURES, ParseStatus
from pipeline.teach.labels.tasks import Prompt, TaskName, parse_answer, render_prompt
from pipeline.teach.rollouts.format import TEACHER_CACHE_DIR
from pipeline.teach.rollouts.reader import iter_rollouts, load_manifest
from pipeline.teach.teachers.base import Reply, Teacher
from pipeline.teach.teachers.cached import store_replies

log = logging.getLogger(__name__)


FAILED_SUFFIX = ".failed"  # the table of a failed run, beside where the table would be


class LabelError(PipelineError, RuntimeError):
    pass


@dataclass
class LabelSummary:
    queried: int = 0  # prompts (queried frames x tasks)
    teacher_calls: int = 0  # prompts actually sent to the teacher
    cache_hits: int = 0  # prompts answered without a call: from the cache, or a repeat in a batch
    corrected: int = 0  # queried rows whose answer is a person's correction (corrections file)
    corrections_unused: int = 0  # corrections of frames / tasks not queried under `cfg.tasks`
    rows: int = 0
    statuses: Counter = field(default_factory=Counter)
    # what this run's calls cost (wall time and tokens: printed, and in the label stage's
    # machine-dependent metrics, `label_metrics`); tokens where the server reports `usage`
    teacher_wall_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls_without_usage: int = 0

    def cost_line(self) -> str:
        """This run's calls: count, wall seconds waiting on the teacher, tokens where known."""
        if not self.teacher_calls:
            return "no teacher call this run"
        line = (
            f"{self.teacher_calls} teacher calls in {self.teacher_wall_s:.1f} s "
            f"({self.teacher_wall_s / self.teacher_calls:.3f} s per call"
        )
        known = self.teacher_calls - self.calls_without_usage
        if known:
            line += (
                f"; {self.prompt_tokens:,} prompt + {self.completion_tokens:,} completion tokens "
                f"over the {known} calls whose server reported usage"
            )
        return line + ")"

    @property
    def transport_failures(self) -> int:
        return sum(self.statuses[s] for s in TRANSPORT_FAILURES)


def label_metrics(
    env_id: str, table_path: str | Path, summary: LabelSummary, telemetry_dir: str | Path | None
) -> dict[str, Any]:
    """What a label table cost, for `dvc metrics show` (costs/label/<env>.json):
    `prompts_fresh_build` (queried frames x tasks; the same on every machine) and
    `teacher_calls_fresh_build` (the distinct ones among them: what a build without the cache
    pays), `this_run` (the calls this run made: 0 when the cache held every answer),
    and `recorded` (each answer's own call as the telemetry store recorded it on this machine:
    seconds summed per request, tokens where the server reported usage; answers without a
    record, e.g. from a pulled cache, are counted as `unrecorded`). Seconds and tokens depend on
    the machine and the cache's history: vlmrl-lockcheck lets this file differ."""
    from pipeline.teach.labels.cost import call_latency, read_label_cost

    cost = read_label_cost(table_path)
    by_task = call_latency(table_path, telemetry_dir) if telemetry_dir else {}
    recorded = {
        key: sum(task[key] for task in by_task.values())
        for key in ("calls", "unrecorded", "seconds", "prompt_tokens", "completion_tokens")
    } if by_task else None  # fmt: skip
    if recorded is not None:
        recorded["seconds_per_call"] = (
            recorded["seconds"] / recorded["calls"] if recorded["calls"] else None
        )
    calls = summary.teacher_calls
    return {
        "env": env_id,
        "prompts_fresh_build": sum(cost["prompts"].values()),
        "prompts_by_task": cost["prompts"],
        # the calls those prompts make: a frame asked one question twice is answered once
        "teacher_calls_fresh_build": sum(cost["calls"].values()),
        "teacher_calls_by_task": cost["calls"],
        "this_run": {
            "teacher_calls": calls,
            "cache_hits": summary.cache_hits,
            "wall_seconds": round(summary.teacher_wall_s, 3),
            "seconds_per_call": round(summary.teacher_wall_s / calls, 4) if calls else None,
            "prompt_tokens": summary.prompt_tokens,
            "completion_tokens": summary.completion_tokens,
            "calls_without_usage": summary.calls_without_usage,
        },
        "recorded": recorded,
    }


@dataclass
class _Pending:
    prompt: Prompt
    key: str
    frame_sha256: str
    sample_key: str


VALUE_COLUMNS = ("action", "action_index", "milestone", "potential", "objects", "judge")


def _value_columns(task: TaskName, value: Any, discrete: bool) -> dict[str, Any]:
    if value is None:
        return {}
    if task == "action":
        return {"action_index": value} if discrete else {"action": value}
    if task == "milestone":
        return {"milestone": value[0], "potential": value[1]}
    if task == "objects":
        return {"objects": value}
    return {"judge": value}


def _row(
    pending: _Pending,
    answer: CachedAnswer | Reply,
    teacher_id: str,
    env_id: str,
    space: dict,
) -> dict[str, Any]:
    prompt = pending.prompt
    if isinstance(answer, Reply) and answer.error is not None:
        status, detail, value = answer.error, answer.error_detail, None
        raw, finish = None, None
    else:
        raw = answer.text if isinstance(answer, Reply) else answer.raw_text
        finish = answer.finish_reason
        parsed = parse_answer(prompt.task, raw, env_id, space)
        status, detail, value = parsed.status, parsed.detail, parsed.value
        if finish == "length" and not (status.has_value or status == ParseStatus.OUT_OF_RANGE):
            # the token limit cut the answer before anything parseable: that, not the text, failed
            status, detail, value = ParseStatus.TRUNCATED, f"finish_reason=length; {detail}", None
    episode, t = (int(part) for part in pending.sample_key.split("/"))
    return {
        "sample_key": pending.sample_key,
        "episode": episode,
        "t": t,
        "task": prompt.task,
        "queried": True,
        "source_key": pending.sample_key,
        "teacher_id": teacher_id,
        "cache_key": pending.key,
        "frame_sha256": pending.frame_sha256,
        "prompt_sha256": prompt.text_sha256,
        "parser_version": PARSER_VERSION,
        "parse_status": str(status),
        "parse_detail": detail,
        "raw_text": raw,
        "finish_reason": finish,
        "system_fingerprint": answer.system_fingerprint,
        **_value_columns(prompt.task, value, space["type"] == "discrete"),
    }


def _overlay_corrections(
    rows: dict[tuple[str, str], dict[str, Any]],
    corrections: dict[tuple[str, str], Correction],
    env_id: str,
    space: dict,
    source: str | Path,
) -> tuple[int, int]:
    """Replace, in place, each queried row (keyed (sample_key, task)) that has a correction with
    the correction's answer, parsed as a teacher's answer is (pipeline.teach.labelling.corrections).
    Returns (rows corrected, corrections of frames or tasks not queried)."""
    applied = 0
    for key, c in corrections.items():
        row = rows.get(key)
        if row is None:
            continue
        if row["frame_sha256"] != c.frame_sha256:
            raise CorrectionsError(
                f"{source}: the correction of {key} was made on another frame than the one in "
                "the rollouts now (were they recollected?): export and review those frames again, "
                "or delete its line"
            )
        parsed = parse_answer(c.task, c.answer, env_id, space)
        if not parsed.status.has_value:
            raise CorrectionsError(
                f"{source}: the correction of {key} ({quote_clipped(c.answer)}) is not a valid {c.task} "
                f"label: {quote_clipped(parsed.detail)}"
            )
        row.update(
            dict.fromkeys(VALUE_COLUMNS),
            teacher_id=c.teacher_id,
            cache_key=None,  # not a cached teacher answer: no call, no telemetry
            parser_version=PARSER_VERSION,
            parse_status=str(parsed.status),
            parse_detail=parsed.detail,
            raw_text=c.answer,
            finish_reason=None,
            system_fingerprint=None,
        )
        row.update(_value_columns(c.task, parsed.value, space["type"] == "discrete"))
        applied += 1
    return applied, len(corrections) - applied


def estimate_prompts(
    rollout_dir: str | Path, cfg: LabelConfig, teacher: Teacher, cache_dir: str | Path
) -> dict[str, dict[str, int]]:
    """What `label_rollouts` would ask, without asking: per task, the prompts (queried frames)
    and how many of them the cache (and collect's teacher cache) answers already; the rest are
    the calls a run makes. Nothing is written and the teacher is not called."""
    manifest = load_manifest(rollout_dir)
    env_id, space = manifest["env_id"], manifest["action_space"]
    stores = [d for d in (Path(cache_dir), Path(rollout_dir) / TEACHER_CACHE_DIR) if d.is_dir()]
    cache = LabelCache(stores[0], read_also=stores[1:]) if stores else None  # none: no writes
    counts: dict[str, dict[str, int]] = {}
    seen: set[str] = set()  # a repeat of a key is answered by its first call
    for sample in iter_rollouts(rollout_dir):
        for task, _, key, _ in _queried_prompts(sample, cfg, teacher, env_id, space):
            row = counts.setdefault(task, {"prompts": 0, "cached": 0, "to_ask": 0})
            row["prompts"] += 1
            if key in seen or (cache is not None and cache.get(key) is not None):
                row["cached"] += 1
            else:
                row["to_ask"] += 1
            seen.add(key)
    return counts


def _queried_prompts(
    sample: Any, cfg: LabelConfig, teacher: Teacher, env_id: str, space: dict
) -> list[tuple[TaskName, Prompt, str, str]]:
    """(task, prompt, cache key, frame sha256) of each task asked about this sample."""
    frame_sha = hashlib.sha256(sample.frame_png).hexdigest()
    record, out = sample.record, []
    for task, k in cfg.tasks.items():
        if task == "judge" and record["is_last"]:
            continue  # no action was taken in the final observation
        if sample.t % k != 0:
            continue
        prompt = render_prompt(
            task, env_id, space, sample.frame_png, record["context"],
            stored_action=record["action"] if task == "judge" else None,
        )  # fmt: skip
        key = cache_key(frame_sha, teacher.teacher_id, prompt.text, teacher.decoding)
        out.append((task, prompt, key, frame_sha))
    return out


def label_rollouts(
    rollout_dir: str | Path,
    cfg: LabelConfig,
    teacher: Teacher,
    cache_dir: str | Path,
    out_path: str | Path,
    *,
    telemetry_dir: str | Path | None = None,
    progress: bool = True,
    ray_build: Any = None,
    corrections: str | Path | None = None,
    read_also: Sequence[str | Path] = (),
    rebuild: str | None = None,
) -> LabelSummary:
    """Label a finished rollout directory with `cfg` (one env's settings: `label.for_env(env_id)`)
    and `teacher` (made from `cfg.teacher`); write the label table (parquet) to `out_path`, and
    the calls' latency and attempts to `telemetry_dir` (not a DVC output) when given. The
    corrections file `corrections` (pipeline.teach.labelling.corrections), when given, overlays a
    person's answers on the teacher's for the prompts it corrects. With
    `cfg.executor == "ray"`, the uncached prompts are asked through Ray Data first (actors build
    their teacher with `ray_build`, default `make_teacher(cfg.teacher)`). `read_also`: more
    label caches answers are served from (read only; a labelling round reads the env's).
    `rebuild`: the command that rebuilds `cache_dir` (named in its errors; default label@<env>)."""
    warn_native_kernels(out_path)
    manifest = load_manifest(rollout_dir)
    env_id, space = manifest["env_id"], manifest["action_space"]
    if env_id in cfg.per_env:  # the teacher was built by the caller: it must be this env's
        raise ValueError(
            f"label_rollouts needs the settings of one env: pass `cfg.for_env({env_id!r})` and "
            "its teacher, not the `label` section with its per_env entries"
        )
    reviewed = read_corrections(corrections) if corrections is not None else {}  # fail early
    # every answer is paid for: every place it goes must be writable before the first call
    out_path = Path(out_path)
    check_writable(cache_dir, out_path.parent, *([telemetry_dir] if telemetry_dir else []))
    # answers the collect stage paid for while acting (behaviours teacher / rae) are reused
    cache = LabelCache(
        cache_dir, read_also=[Path(rollout_dir) / TEACHER_CACHE_DIR, *map(Path, read_also)],
        telemetry=telemetry_dir,
        rebuild=rebuild or f"`dvc repro label@{env_id}`",
    )  # fmt: skip
    # the prompts no cache answers: listed once, for the budget and for Ray
    listed = cfg.budget is not None or cfg.executor == "ray"
    todo = _to_ask(rollout_dir, manifest, cfg, teacher, cache) if listed else {}
    if cfg.budget is not None:
        _check_budget(todo, cfg, teacher)
    summary = LabelSummary()
    probe = _Probe(teacher)
    if cfg.executor == "ray":
        teacher = _ask_on_ray_first(todo, cfg, teacher, cache, probe, ray_build)
    queried_rows, carried = _label_queried(
        rollout_dir, manifest, cfg, teacher, cache, summary, probe, progress
    )
    summary.corrected, summary.corrections_unused = _overlay_corrections(
        queried_rows, reviewed, env_id, space, corrections or ""
    )
    table = _label_table(queried_rows, carried)
    summary.rows = table.height
    _write_table(table, out_path, cfg, summary)
    return summary


def _to_ask(
    rollout_dir: str | Path,
    manifest: dict[str, Any],
    cfg: LabelConfig,
    teacher: Teacher,
    cache: LabelCache,
) -> dict[str, Prompt]:
    """The prompts no cache answers, one per cache key, in the order the run asks them."""
    env_id, space = manifest["env_id"], manifest["action_space"]
    return missing(
        (
            (key, lambda prompt=prompt: prompt)
            for sample in iter_rollouts(rollout_dir)
            for _, prompt, key, _ in _queried_prompts(sample, cfg, teacher, env_id, space)
        ),
        cache.get,
    )  # fmt: skip


def _check_budget(todo: dict[str, Prompt], cfg: LabelConfig, teacher: Teacher) -> None:
    """`label.budget`: refuse before the first call a run that would send more prompts than
    the cap (`todo`: those no cache answers, `_to_ask`); nothing is asked or written."""
    if len(todo) > cfg.budget:  # type: ignore[operator]
        tasks = Counter(prompt.task for prompt in todo.values())
        by_task = ", ".join(f"{task} {n}" for task, n in sorted(tasks.items()))
        raise LabelError(
            f"label.budget: this run would send {len(todo)} prompts that no cache answers "
            f"({by_task}) to {teacher.teacher_id}, over the budget of {cfg.budget}; nothing "
            "was asked. Raise label.budget, query fewer frames (label.tasks: every k-th frame), "
            "or collect fewer episodes; `python -m stages.label ... --estimate` prints the count"
        )


class _Probe:
    """The teacher's pre-flight check, before its first call and not before a run the cache
    answers alone: a served teacher says what is wrong with it, naming the setting."""

    def __init__(self, teacher: Teacher) -> None:
        self._probe = getattr(teacher, "probe", None)
        self._done = self._probe is None

    def __call__(self) -> None:
        if not self._done:
            self._probe()
        self._done = True


def _ask_on_ray_first(
    todo: dict[str, Prompt],
    cfg: LabelConfig,
    teacher: Teacher,
    cache: LabelCache,
    probe: _Probe,
    ray_build: Any,
) -> Teacher:
    """The prompts not yet cached (`todo`, `_to_ask`) go through Ray Data first; the loop then
    finds every answer in the cache (and the transport failures in the returned teacher), as a
    rerun would."""
    from pipeline.teach.labelling.ray_executor import RayAnswers, RayExecutorError, ask_with_ray

    if todo:
        probe()
    try:
        failures = ask_with_ray(list(todo.values()), cfg, teacher, cache, ray_build)
    except RayExecutorError as exc:
        raise LabelError(str(exc)) from exc
    return RayAnswers(teacher, failures)


def _label_queried(
    rollout_dir: str | Path,
    manifest: dict[str, Any],
    cfg: LabelConfig,
    teacher: Teacher,
    cache: LabelCache,
    summary: LabelSummary,
    probe: _Probe,
    progress: bool,
) -> tuple[dict[tuple[str, str], dict[str, Any]], list[tuple[str, str, str]]]:
    """The rows of every queried (sample, task), from the cache or asked in batches, and the
    (sample, task, source sample) of every label carried from the last queried frame."""
    env_id, space = manifest["env_id"], manifest["action_space"]
    queried_rows: dict[tuple[str, str], dict[str, Any]] = {}  # (sample_key, task) -> row
    carried: list[tuple[str, str, str]] = []  # (sample_key, task, source sample_key)
    last_queried: dict[tuple[int, str], str] = {}  # (episode, task) -> sample_key
    started = time.perf_counter()
    bar = tqdm(
        total=manifest["totals"]["samples"],
        unit="frame",
        desc=f"label {env_id}",
        disable=not progress,
    )

    def ask(prompts: list[Prompt]) -> list[Reply]:
        probe()
        asked = time.perf_counter()
        replies = teacher.answer(prompts)
        summary.teacher_wall_s += time.perf_counter() - asked
        for reply in replies:
            if reply.prompt_tokens is None or reply.completion_tokens is None:
                summary.calls_without_usage += 1
            else:
                summary.prompt_tokens += reply.prompt_tokens
                summary.completion_tokens += reply.completion_tokens
        if len(replies) != len(prompts):
            raise LabelError(
                f"teacher {teacher.teacher_id} returned {len(replies)} replies for "
                f"{len(prompts)} prompts"
            )
        summary.teacher_calls += len(prompts)
        if summary.teacher_calls == len(prompts) and all(
            r.error in TRANSPORT_FAILURES for r in replies
        ):
            first = replies[0]
            raise LabelError(
                f"teacher {teacher.teacher_id} answered none of the first {len(prompts)} "
                f"prompts ({first.error}: {first.error_detail}); check its settings"
            )
        return replies

    def deliver(pending: _Pending, answer: CachedAnswer | Reply, source: str) -> None:
        # a repeat of a key within the batch is served by the one answer, like a cache hit
        row = _row(pending, answer, teacher.teacher_id, env_id, space)
        queried_rows[(pending.sample_key, pending.prompt.task)] = row
        summary.cache_hits += source != "computed"
        summary.statuses[row["parse_status"]] += 1

    def note_progress() -> None:
        done, no_answer = summary.queried, summary.transport_failures
        unparsed = sum(
            n for s, n in summary.statuses.items()
            if s not in LABELLED_STATUSES and s not in TRANSPORT_FAILURES
        )  # fmt: skip
        bar.set_postfix(
            prompts=done,
            calls=summary.teacher_calls,
            prompts_per_s=f"{done / (time.perf_counter() - started):.1f}",
            no_answer=no_answer,
            parse_fail=f"{unparsed / max(1, done - no_answer):.0%}",
        )

    batches: CachedMap[Prompt, Reply, CachedAnswer, _Pending] = CachedMap(
        cache.get,
        ask,
        # one atomic segment per batch: a kill loses at most this batch
        lambda keys, prompts, replies: store_replies(cache, teacher, prompts, replies),
        deliver,
        cfg.batch_size,
        after_flush=note_progress,
    )
    try:
        for sample in iter_rollouts(rollout_dir):
            for task, k in cfg.tasks.items():  # judge rows exist for queried frames only
                if task != "judge" and sample.t % k and (sample.episode, task) in last_queried:
                    carried.append((sample.key, task, last_queried[(sample.episode, task)]))
            for task, prompt, key, frame_sha in _queried_prompts(
                sample, cfg, teacher, env_id, space
            ):
                last_queried[(sample.episode, task)] = sample.key
                summary.queried += 1
                pending = _Pending(prompt, key, frame_sha, sample.key)
                batches.submit(key, lambda prompt=prompt: prompt, pending)
            bar.update(1)
        batches.flush()
    finally:
        bar.close()
    return queried_rows, carried


def _label_table(
    queried_rows: dict[tuple[str, str], dict[str, Any]], carried: list[tuple[str, str, str]]
) -> pl.DataFrame:
    """The label table: every queried row, and each carried label as a copy of its source row
    (`queried` false), sorted by episode, step and task."""
    rows = list(queried_rows.values())
    for sample_key, task, source in carried:
        source_row = queried_rows[(source, task)]
        episode, t = (int(part) for part in sample_key.split("/"))
        rows.append(
            {**source_row, "sample_key": sample_key, "episode": episode, "t": t, "queried": False}
        )
    return pl.DataFrame(rows, schema=LABEL_TABLE_SCHEMA).sort(["episode", "t", "task"])


def collapsed_tasks(table: pl.DataFrame, cfg: LabelConfig) -> list[str]:
    """The tasks of a label table whose answers (queried rows with an answer, corrections
    included) carry no label more often than `cfg.parse_failure_limit(task)`, one line each:
    the task, the rate, and its most frequent failure statuses."""
    answered = table.filter(
        pl.col("queried") & ~pl.col("parse_status").is_in(sorted(TRANSPORT_FAILURES))
    )
    problems = []
    for (task,), rows in answered.group_by("task", maintain_order=True):
        failed = rows.filter(~pl.col("parse_status").is_in(LABELLED_STATUSES))
        limit = cfg.parse_failure_limit(str(task))
        if rows.height and failed.height / rows.height > limit:
            top = failed["parse_status"].value_counts(sort=True).head(3).rows()
            problems.append(
                f"{task}: {failed.height} of {rows.height} answers carry no label "
                f"({failed.height / rows.height:.0%} > max_parse_failure_rate {limit}; "
                + ", ".join(f"{status} {n}" for status, n in top)
                + ")"
            )
    return problems


def _write_table(
    table: pl.DataFrame, out_path: Path, cfg: LabelConfig, summary: LabelSummary
) -> None:
    """Write the table, or, past `max_transport_failure_rate` or a task's
    `max_parse_failure_rate`, keep it aside and fail."""
    buf = io.BytesIO()
    table.write_parquet(buf)
    calls = summary.teacher_calls
    failed = out_path.with_name(out_path.name + FAILED_SUFFIX)

    def keep_aside() -> None:  # a failed stage leaves no table a later stage could take
        out_path.unlink(missing_ok=True)
        atomic_write_bytes(failed, buf.getvalue())

    if calls and summary.transport_failures / calls > cfg.max_transport_failure_rate:
        keep_aside()
        raise LabelError(
            f"{summary.transport_failures} of {calls} teacher calls got no answer (more than "
            f"max_transport_failure_rate={cfg.max_transport_failure_rate}); no label table was "
            f"written ({failed} records the failures for inspection: not an output). Rerun to "
            f"retry them: answers already received are cached"
        )
    collapsed = collapsed_tasks(table, cfg)
    if collapsed:
        keep_aside()
        raise LabelError(
            f"the teacher's answers carry no label too often ({'; '.join(collapsed)}); no label "
            f"table was written ({failed} holds the answers: `python -m stages.review` or the "
            "audit page show them). Fix the prompt (env.<id>.labels.prompts) or the schema, or "
            "raise label.max_parse_failure_rate; the answers are cached, so the rerun pays "
            "only for new prompts"
        )
    atomic_write_bytes(out_path, buf.getvalue())
