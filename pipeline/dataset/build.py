"""The dataset stage's logic: join rollouts + label table + masks into what users share.

Output directory (one per env):
- `README.md`: the dataset card (YAML header that `datasets.load_dataset(dir)` reads);
- `meta/info.json`: format version, sources and their hashes, teachers, counts, parse statuses;
- `data/train-00000-of-0000N.parquet`: a Hugging Face dataset (frames and masks as `Image`);
- `wds/shard-000000.tar`, ...: training shards, one sample per step as in the rollouts plus
  `labels.json` (the parquet's label columns of the sample, under the same names), and when the frame has masks `mask.png` (Semore eq. 4's sum, clipped) and
  `masks.npz` (uint8 (P, H, W), one mask per phrase).
The layout is defined once, in pipeline.dataset.layout. Frame stacking happens at load time
(pipeline.core.stacking), never on disk.
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pipeline.core.config.envs import PROMPT_SEPARATOR
from pipeline.core.io import atomic_write_bytes, atomic_write_json, sha256_file
from pipeline.core.kernels import warn_native_kernels
from pipeline.core.tables import read_label_table, read_mask_table
from pipeline.dataset.card import render_card
from pipeline.dataset.layout import (
    CARD_NAME,
    DATASET_FORMAT_VERSION,
    INFO_PATH,
    LABEL_COLUMNS,
    PARQUET_DIR,
    PARQUET_PATTERN,
    PROVENANCE_FIELDS,
    SAMPLE_COLUMNS,
    TASK_PREFIX,
    WDS_DIR,
)
from pipeline.teach.labels.cost import ERPV_SECONDS_PER_CALL, label_cost
from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.tasks import TASKS, schema_template
from pipeline.teach.masks.base import decode_mask
from pipeline.teach.rollouts.format import MANIFEST_NAME, SHARD_PATTERN
from pipeline.teach.rollouts.reader import RolloutIntegrityError, iter_rollouts, load_manifest
from pipeline.teach.rollouts.writer import AtomicShardWriter, encode_json

# The packages whose versions decide what a dataset holds (frames, labels, file format).
SOFTWARE = ("vlmrl-pipeline", "gymnasium", "mujoco", "dm_control", "datasets", "polars")


def _label_lookup(labels: pl.DataFrame) -> dict[str, dict[str, dict[str, Any]]]:
    """sample_key -> task -> {value columns, status, queried, source_key}."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for row in labels.iter_rows(named=True):
        entry = {c: row[c] for c in LABEL_COLUMNS[row["task"]] if row[c] is not None}
        entry.update(
            status=row["parse_status"],
            queried=row["queried"],
            source_key=row["source_key"],
            teacher_id=row["teacher_id"],
            # the raw answer once, on the queried row; carried rows name it in source_key
            raw_text=row["raw_text"] if row["queried"] else None,
            parse_detail=row["parse_detail"] if row["queried"] else None,
        )
        out.setdefault(row["sample_key"], {})[row["task"]] = entry
    return out


def _features(discrete: bool, has_state: bool) -> Any:
    from datasets import Features, Image, List, Value

    label_action = {"a_v_index": Value("int64")} if discrete else {"a_v": List(Value("float32"))}
    return Features(
        {
            "key": Value("string"),
            "episode": Value("int64"),
            "t": Value("int64"),
            "image": Image(),
            "action": Value("int64") if discrete else List(Value("float32")),
            "reward": Value("float32"),
            "terminated": Value("bool"),
            "truncated": Value("bool"),
            "is_first": Value("bool"),
            "is_last": Value("bool"),
            "behaviour": Value("string"),
            "context": Value("string"),  # JSON: fields differ per env
            **({"state": List(Value("float32"))} if has_state else {}),
            **label_action,
            "a_v_status": Value("string"),
            "milestone": Value("string"),
            "potential": Value("float32"),
            "milestone_status": Value("string"),
            "objects": List(Value("string")),
            "objects_status": Value("string"),
            "judge": Value("bool"),
            "judge_status": Value("string"),
            "mask": Image(),
            "mask_phrases": List(Value("string")),
            **{
                f"{prefix}_{name}": Value("bool") if name == "queried" else Value("string")
                for prefix in TASK_PREFIX.values()
                for name in PROVENANCE_FIELDS
            },
        }
    )


def _hf_row(
    sample: Any,
    labels: dict[str, dict[str, Any]],
    mask: dict[str, Any] | None,
    discrete: bool,
    has_state: bool,
) -> dict[str, Any]:
    record = sample.record
    action_label = labels.get("action", {})
    row = {
        "key": sample.key,
        "episode": sample.episode,
        "t": sample.t,
        "image": {"bytes": sample.frame_png, "path": None},
        "action": record["action"],
        "reward": record["reward"],
        "terminated": record["terminated"],
        "truncated": record["truncated"],
        "is_first": record["is_first"],
        "is_last": record["is_last"],
        "behaviour": record["behaviour"],
        "context": json.dumps(record["context"], sort_keys=True),
        "a_v_status": action_label.get("status"),
        "milestone": labels.get("milestone", {}).get("milestone"),
        "potential": labels.get("milestone", {}).get("potential"),
        "milestone_status": labels.get("milestone", {}).get("status"),
        "objects": labels.get("objects", {}).get("objects"),
        "objects_status": labels.get("objects", {}).get("status"),
        "judge": labels.get("judge", {}).get("judge"),
        "judge_status": labels.get("judge", {}).get("status"),
        "mask": None if mask is None else {"bytes": mask["combined"], "path": None},
        "mask_phrases": None if mask is None else mask["phrases"],
        **{
            f"{prefix}_{name}": labels.get(task, {}).get(name)
            for task, prefix in TASK_PREFIX.items()
            for name in PROVENANCE_FIELDS
        },
    }
    if has_state:
        row["state"] = record["state"]
    if discrete:
        row["a_v_index"] = action_label.get("action_index")
    else:
        row["a_v"] = action_label.get("action")
    return row


def _npz(masks_png: list[bytes]) -> bytes:
    stack = np.stack(
        [np.round(decode_mask(p) * 255).astype(np.uint8) for p in masks_png]
    )  # (P, H, W)
    buf = io.BytesIO()
    np.savez_compressed(buf, masks=stack)
    return buf.getvalue()


def _write_parquet(rows: list[dict[str, Any]], features: Any, path: Path) -> None:
    from datasets import Dataset

    buf = io.BytesIO()
    Dataset.from_list(rows, features=features).to_parquet(buf)
    atomic_write_bytes(path, buf.getvalue())


def build_dataset(
    rollout_dir: str | Path,
    labels_path: str | Path,
    masks_path: str | Path,
    out_dir: str | Path,
    *,
    shard_max_samples: int,
) -> dict[str, Any]:
    """Write the dataset directory; return its meta/info.json content."""
    warn_native_kernels(out_dir)
    rollout_dir, out_dir = Path(rollout_dir), Path(out_dir)
    manifest = load_manifest(rollout_dir)
    env_id, space = manifest["env_id"], manifest["action_space"]
    discrete, has_state = space["type"] == "discrete", "state" in manifest["observation"]
    labels = read_label_table(labels_path)
    masks = read_mask_table(masks_path).filter(pl.col("status") == "ok")
    label_of = _label_lookup(labels)
    mask_of = {row["sample_key"]: row for row in masks.iter_rows(named=True)}
    features = _features(discrete, has_state)

    for stale in [*out_dir.glob(f"{PARQUET_DIR}/*.parquet"), *out_dir.glob(f"{WDS_DIR}/*.tar")]:
        stale.unlink()  # a rebuild replaces the previous version (DVC keeps it in its cache)
    (out_dir / PARQUET_DIR).mkdir(parents=True, exist_ok=True)
    (out_dir / WDS_DIR).mkdir(parents=True, exist_ok=True)

    # One parquet file and one training shard per rollout shard: bounded memory, aligned layout.
    groups = _by_rollout_shard(rollout_dir, manifest)
    n_files, samples, wds_shards = len(manifest["shards"]), 0, 0
    writer: AtomicShardWriter | None = None
    for index, shard_samples in enumerate(groups):
        rows = []
        for sample in shard_samples:
            sample_labels = label_of.get(sample.key, {})
            mask = mask_of.get(sample.key)
            row = _hf_row(sample, sample_labels, mask, discrete, has_state)
            rows.append(row)
            if writer is None:
                writer = AtomicShardWriter(out_dir / WDS_DIR / (SHARD_PATTERN % wds_shards))
            # the row's label columns under the parquet's names: one name per label everywhere
            labels_json = {k: v for k, v in row.items() if k not in SAMPLE_COLUMNS}
            members = {"labels.json": encode_json(labels_json)}
            if mask is not None:
                members["mask.png"] = mask["combined"]
                members["masks.npz"] = _npz(mask["masks"])
            writer.write(sample.key, sample.frame_png, encode_json(sample.record), extra=members)
            samples += 1
            if sample.record["is_last"] and writer.samples >= shard_max_samples:
                writer.close()
                writer, wds_shards = None, wds_shards + 1
        _write_parquet(rows, features, out_dir / PARQUET_DIR / (PARQUET_PATTERN % (index, n_files)))
    if writer is not None:
        writer.close()
        wds_shards += 1

    queried = labels.filter(pl.col("queried"))
    statuses = {
        task: dict(
            sorted(
                queried.filter(pl.col("task") == task).group_by("parse_status").len().iter_rows()
            )
        )
        for task in TASKS
        if task in set(queried["task"])
    }
    schema = label_schema(env_id)
    info = {
        "format_version": DATASET_FORMAT_VERSION,
        "env_id": env_id,
        "env": manifest["env"],
        "collect": manifest["collect"],
        "acting_teacher": manifest.get("acting_teacher"),
        # a labelling round's part: which round of which run, and the agent that collected it
        **({"acting_agent": manifest["acting_agent"]} if "acting_agent" in manifest else {}),
        # what produced it; versions, not a commit, so the same inputs give the same bytes
        "software": {name: version(name) for name in SOFTWARE},
        "observation": manifest["observation"],
        "action_space": space,
        "action_names": list(schema.action_names),
        "action_choices": None if schema.action_choices is None else list(schema.action_choices),
        "milestones": schema.milestones,
        "teacher_ids": sorted(set(labels["teacher_id"])),
        "mask_backend_ids": sorted(set(masks["backend_id"])),
        "prompts": {
            task: PROMPT_SEPARATOR.join(schema_template(schema, task)) for task in statuses
        },
        "counts": {
            "samples": samples,
            "episodes": manifest["totals"]["episodes"],
            "steps": manifest["totals"]["steps"],
            "labelled_answers": queried.height,
            "frames_with_masks": masks.height,
            "parquet_files": n_files,
            "wds_shards": wds_shards,
        },
        "parse_status": statuses,
        "cost": label_cost_of(queried),
        # every file's checksum: readers verify what they read against it
        "files": {
            str(path.relative_to(out_dir)): sha256_file(path)
            for pattern in (f"{PARQUET_DIR}/*.parquet", f"{WDS_DIR}/*.tar")
            for path in sorted(out_dir.glob(pattern))
        },
        "sources": {
            "rollout_manifest_sha256": sha256_file(rollout_dir / MANIFEST_NAME),
            "labels_sha256": sha256_file(labels_path),
            "masks_sha256": sha256_file(masks_path),
        },
    }
    atomic_write_json(out_dir / INFO_PATH, info)
    atomic_write_bytes(out_dir / CARD_NAME, render_card(info, features).encode())
    return info


def label_cost_of(queried: pl.DataFrame) -> dict[str, Any]:
    """What the labels cost a fresh build, from the queried rows alone (the same on every machine):
    per task the distinct prompts (a repeat of one frame and prompt is answered once: the teacher
    calls a build without the cache makes), and those calls at ERPv table 14's 6.95 s per
    Qwen2-VL-7B call. Seconds and tokens measured on the building machine are its
    costs/label/<env>.json, not part of the dataset: they depend on the machine and server."""
    calls = label_cost(queried)["calls"]
    total = sum(calls.values())
    return {
        "teacher_calls": total,
        "teacher_calls_by_task": calls,
        "seconds_at_erpv_rate": round(total * ERPV_SECONDS_PER_CALL, 2),
    }


def _by_rollout_shard(rollout_dir: Path, manifest: dict[str, Any]) -> Iterator[list[Any]]:
    """The samples of each shard, read through `iter_rollouts`: every shard checked against its
    manifest (size, sha256, sample count) like every other stage's reads."""
    samples = iter_rollouts(rollout_dir)
    for shard in manifest["shards"]:
        yield list(itertools.islice(samples, shard["samples"]))
    if next(samples, None) is not None:  # also runs the last shard's sample-count check
        raise RolloutIntegrityError(f"{rollout_dir} holds more samples than its manifest records")
