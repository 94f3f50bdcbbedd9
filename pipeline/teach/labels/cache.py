"""Content-addressed, append-only cache of teacher answers.

Key = sha256(frame bytes' sha256, teacher id, prompt text, decoding params, "4"): the same key is
never asked twice, in any stage, on any machine that has the cache. "4" is the parser version of
the day the key's material was fixed, kept constant since: an entry is raw text, which no parser
change alters, so a new parser re-reads the cache instead of paying for every answer again. Entries live in
append-only parquet segments (pipeline.core.segments), one per labelled batch. Only answers are
cached: a call that got no answer (HTTP error, timeout) is asked again next time.

The cache holds what was answered, never how long it took: it is a DVC output, and the same
frames, teacher and prompts must give the same bytes on every machine. Call telemetry (latency,
attempts) goes to a separate store (`telemetry`, outside what DVC hashes) that the audit reads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.core.segments import SegmentStore

# The parser version when the key's material was fixed (see the module doc): never bump it; the
# parser that read each row is recorded in the label table instead.
KEY_PARSER_VERSION = "4"


def cache_key(
    frame_sha256: str, teacher_id: str, prompt_text: str, decoding: dict[str, Any]
) -> str:
    material = json.dumps(
        [frame_sha256, teacher_id, prompt_text, decoding, KEY_PARSER_VERSION], sort_keys=True
    )
    return hashlib.sha256(material.encode()).hexdigest()


@dataclass(frozen=True)
class CachedAnswer:
    key: str
    teacher_id: str
    task: str
    frame_sha256: str
    prompt_sha256: str
    raw_text: str
    finish_reason: str | None
    system_fingerprint: str | None = None  # the server's build, where its API reports one


@dataclass(frozen=True)
class CallTelemetry:
    """How the call that produced a cached answer went (for the audit; never hashed by DVC)."""

    key: str
    teacher_id: str
    task: str
    latency_s: float
    attempts: int
    prompt_tokens: int | None = None  # from the server's `usage`, where it reports one
    completion_tokens: int | None = None


_TELEMETRY_SCHEMA = {
    "key": pl.String,
    "teacher_id": pl.String,
    "task": pl.String,
    "latency_s": pl.Float64,
    "attempts": pl.Int64,
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
}


_SCHEMA = {
    "key": pl.String,
    "teacher_id": pl.String,
    "task": pl.String,
    "frame_sha256": pl.String,
    "prompt_sha256": pl.String,
    "raw_text": pl.String,
    "finish_reason": pl.String,
    "system_fingerprint": pl.String,
}


def open_telemetry(root: str | Path) -> SegmentStore:
    """The store of `CallTelemetry` rows at `root` (keyed by cache key)."""
    return SegmentStore(
        root, _TELEMETRY_SCHEMA, name="label call telemetry",
        rebuild="the stage (the latency of its calls is not recomputed: it is lost)",
        added_later=("prompt_tokens", "completion_tokens"),  # older segments read as unknown
    )  # fmt: skip


class LabelCache:
    """The cache at `root` (read and appended to), plus caches it may only read (`read_also`:
    e.g. the teacher answers a collect stage paid for while acting, kept beside its rollouts).
    `telemetry`: where the calls' latency and attempts are appended (None: not kept)."""

    def __init__(
        self,
        root: str | Path,
        read_also: Sequence[str | Path] = (),
        telemetry: str | Path | None = None,
        rebuild: str = "the stage that writes it",
    ) -> None:
        """`rebuild`: the command that recomputes a refused segment's entries (for errors)."""
        self._store = SegmentStore(root, _SCHEMA, read_also, name="label cache", rebuild=rebuild)
        self.root = self._store.root
        self.telemetry = None if telemetry is None else open_telemetry(telemetry)

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, key: str) -> bool:
        return key in self._store

    def get(self, key: str) -> CachedAnswer | None:
        row = self._store.get(key)
        return None if row is None else CachedAnswer(**row)

    def put_many(
        self, answers: Sequence[CachedAnswer], telemetry: Sequence[CallTelemetry] = ()
    ) -> None:
        """Append one segment holding `answers` (skipping keys already cached), and their calls'
        telemetry to the telemetry store when there is one."""
        self._store.put_many([asdict(a) for a in answers])
        if self.telemetry is not None and telemetry:
            self.telemetry.put_many([asdict(t) for t in telemetry])

    def retain(self, keys: Collection[str]) -> int:
        """Keep only the answers of `keys` in this cache's own segments; return how many went."""
        return self._store.retain(keys)


def frame_sha256(frame_png: bytes) -> str:
    return hashlib.sha256(frame_png).hexdigest()
