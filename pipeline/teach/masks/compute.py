"""The masks stage's logic: one row per sample with a mask per object phrase of its `objects`
label (queried or carried), computed in batches through a content-addressed cache keyed by
(frame bytes, phrases, back end id)."""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from tqdm import tqdm

from pipeline.core.cached_map import CachedMap, missing
from pipeline.core.config import RayExecutorConfig
from pipeline.core.distributed import map_on_ray
from pipeline.core.io import atomic_write_bytes, check_writable
from pipeline.core.kernels import warn_native_kernels
from pipeline.core.segments import SegmentStore
from pipeline.core.tables import MASK_TABLE_SCHEMA, read_label_table
from pipeline.teach.labels.status import LABELLED_STATUSES
from pipeline.teach.masks.base import MaskBackend, MaskRequest, combine, decode_mask, encode_mask
from pipeline.teach.rollouts.reader import iter_rollouts, load_manifest

_CACHE_SCHEMA = {
    "key": pl.String,
    "backend_id": pl.String,
    "phrases": pl.List(pl.String),
    "masks": pl.List(pl.Binary),
}


def _mask_columns(pngs: list[bytes], masks: np.ndarray | None = None) -> dict[str, Any]:
    """The stored masks and their eq. 4 sum (clipped to [0, 1] to fit 8 bits)."""
    if masks is None:
        masks = np.stack([decode_mask(png) for png in pngs])  # (P, H, W)
    return {"masks": pngs, "combined": encode_mask(np.clip(combine(masks), 0.0, 1.0))}


def _cache_row(
    key: str, request: MaskRequest, masks: np.ndarray, backend: MaskBackend
) -> dict[str, Any]:
    if masks.shape[0] != len(request.phrases):
        raise ValueError(
            f"{backend.backend_id} returned {masks.shape[0]} masks for {len(request.phrases)} phrases"
        )
    return {
        "key": key,
        "backend_id": backend.backend_id,
        "phrases": list(request.phrases),
        "masks": [encode_mask(m) for m in masks],
    }


def mask_key(frame_sha256: str, phrases: tuple[str, ...], backend_id: str) -> str:
    return hashlib.sha256(
        json.dumps([frame_sha256, list(phrases), backend_id]).encode()
    ).hexdigest()


@dataclass
class MaskSummary:
    samples: int = 0
    computed: int = 0
    cache_hits: int = 0
    statuses: Counter = field(default_factory=Counter)


def _compute_on_ray(
    rollout_dir: str | Path,
    phrases_of: dict[str, tuple[str, ...]],
    env_id: str,
    backend: MaskBackend,
    store: SegmentStore,
    ray: RayExecutorConfig,
    build: Callable[[], MaskBackend],
) -> set[str]:
    """Compute the (frame, phrases) pairs that the cache lacks on a Ray cluster, caching each
    finished batch as it arrives (a killed job loses only unfinished batches). Returns their keys."""
    todo = missing(
        (
            (
                mask_key(hashlib.sha256(sample.frame_png).hexdigest(), phrases, backend.backend_id),
                _request_of(sample, phrases, env_id),
            )
            for sample in iter_rollouts(rollout_dir)
            if (phrases := phrases_of.get(sample.key))
        ),
        store.get,
    )
    keys, requests = list(todo), list(todo.values())
    for indices, results in map_on_ray(requests, build, "masks", ray):
        store.put_many(
            [
                _cache_row(keys[i], requests[i], m, backend)
                for i, m in zip(indices, results, strict=True)
            ]
        )
    return set(keys)


def _request_of(sample: Any, phrases: tuple[str, ...], env_id: str) -> Callable[[], MaskRequest]:
    """The mask request of a sample, made when asked (decoding the frame costs)."""
    return lambda: MaskRequest(sample.frame(), phrases, env_id, sample.record["context"])


def compute_masks(
    rollout_dir: str | Path,
    labels_path: str | Path,
    backend: MaskBackend,
    cache_dir: str | Path,
    out_path: str | Path,
    *,
    batch_size: int,
    progress: bool = True,
    ray: RayExecutorConfig | None = None,
    ray_build: Callable[[], MaskBackend] | None = None,
    rebuild: str | None = None,
) -> MaskSummary:
    """Write the mask table of `rollout_dir` to `out_path`, computing what `cache_dir` lacks.
    With `ray`, the uncached (frame, phrases) pairs are computed on a Ray cluster first (actors
    build the back end with `ray_build`), each finished batch cached as it arrives; the table
    is then built from the cache, the same bytes as a local run's."""
    warn_native_kernels(out_path)
    manifest = load_manifest(rollout_dir)
    env_id = manifest["env_id"]
    check_writable(cache_dir, Path(out_path).parent)  # before any (GPU-)paid mask
    objects = (
        read_label_table(labels_path)
        .filter((pl.col("task") == "objects") & pl.col("parse_status").is_in(LABELLED_STATUSES))
        .select("sample_key", "objects")
    )
    phrases_of = {key: tuple(value) for key, value in objects.iter_rows()}
    store = SegmentStore(
        cache_dir,
        _CACHE_SCHEMA,
        name="mask cache",
        rebuild=rebuild or f"`dvc repro masks@{env_id}`",
    )
    summary = MaskSummary()
    # a back end may have no masks for an env (the scripted one knows the shipped envs only):
    # its frames are listed with status no_backend, and no mask is paid or cached
    covered = getattr(backend, "covers", lambda env: True)(env_id)
    rows: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    bar = tqdm(
        total=manifest["totals"]["samples"],
        unit="frame",
        desc=f"masks {env_id}",
        disable=not progress,
    )

    computed_on_ray: set[str] = set()
    if ray is not None and covered:
        if ray_build is None:
            raise ValueError("executor ray needs ray_build: how an actor builds the back end")
        computed_on_ray = _compute_on_ray(
            rollout_dir, phrases_of, env_id, backend, store, ray, ray_build
        )
        summary.computed += len(computed_on_ray)

    fresh: dict[str, list[bytes]] = {}  # the batch just computed: key -> its masks as PNGs

    def store_batch(keys: list[str], requests: list[MaskRequest], results: list) -> None:
        cache_rows = [
            _cache_row(k, r, m, backend) for k, r, m in zip(keys, requests, results, strict=True)
        ]
        store.put_many(cache_rows)  # one atomic segment per batch
        fresh.clear()
        fresh.update((r["key"], r["masks"]) for r in cache_rows)
        summary.computed += len(keys)

    def deliver(row: dict[str, Any], result: Any, source: str) -> None:
        if source == "cache":  # a cache row: the masks as stored PNGs
            summary.cache_hits += row["cache_key"] not in computed_on_ray
            row.update(_mask_columns(result["masks"]))
        else:  # computed now: (P, H, W) floats
            row.update(_mask_columns(fresh[row["cache_key"]], result))

    def progress_note() -> None:
        bar.set_postfix(frames_per_s=f"{summary.samples / (time.perf_counter() - started):.1f}")

    batches = CachedMap(
        store.get, backend.masks, store_batch, deliver, batch_size, after_flush=progress_note
    )
    try:
        for sample in iter_rollouts(rollout_dir):
            summary.samples += 1
            bar.update(1)
            phrases = phrases_of.get(sample.key)
            row: dict[str, Any] = {
                "sample_key": sample.key,
                "episode": sample.episode,
                "t": sample.t,
                "backend_id": backend.backend_id,
            }
            rows[sample.key] = row
            if not phrases:
                row["status"] = "no_objects"
                summary.statuses["no_objects"] += 1
                continue
            if not covered:
                row.update(status="no_backend", phrases=list(phrases))
                summary.statuses["no_backend"] += 1
                continue
            key = mask_key(
                hashlib.sha256(sample.frame_png).hexdigest(), phrases, backend.backend_id
            )
            row.update(status="ok", cache_key=key, phrases=list(phrases))
            summary.statuses["ok"] += 1
            batches.submit(key, _request_of(sample, phrases, env_id), row)
        batches.flush()
    finally:
        bar.close()

    table = pl.DataFrame(list(rows.values()), schema=MASK_TABLE_SCHEMA).sort("episode", "t")
    buf = io.BytesIO()
    table.write_parquet(buf)
    atomic_write_bytes(out_path, buf.getvalue())
    return summary
