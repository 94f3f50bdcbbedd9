"""Content-addressed, append-only cache of teacher answers.

Key = sha256(frame bytes' sha256, teacher id, prompt text, decoding params, parser version): the
same key is never asked twice, in any stage, on any machine that has the cache. Entries live in
parquet segments (`segment-000000.parquet`, ...), one per labelled batch, each written atomically,
so a kill loses at most the batch in flight. Segments are never rewritten. Only answers are
cached: a call that got no answer (HTTP error, timeout) is asked again next time.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from pipeline.io import atomic_write_bytes
from pipeline.labels.parsers import PARSER_VERSION

if TYPE_CHECKING:
    from pipeline.labels.tasks import Prompt
    from pipeline.teachers.base import Reply, Teacher

SEGMENT_PATTERN = "segment-%06d.parquet"
SEGMENT_GLOB = "segment-*.parquet"


def cache_key(
    frame_sha256: str, teacher_id: str, prompt_text: str, decoding: dict[str, Any]
) -> str:
    material = json.dumps(
        [frame_sha256, teacher_id, prompt_text, decoding, PARSER_VERSION], sort_keys=True
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
    latency_s: float
    attempts: int


_SCHEMA = {
    "key": pl.String,
    "teacher_id": pl.String,
    "task": pl.String,
    "frame_sha256": pl.String,
    "prompt_sha256": pl.String,
    "raw_text": pl.String,
    "finish_reason": pl.String,
    "latency_s": pl.Float64,
    "attempts": pl.Int64,
}


class CacheError(RuntimeError):
    pass


class LabelCache:
    """The cache at `root` (read and appended to), plus caches it may only read (`read_also`:
    e.g. the teacher answers a collect stage paid for while acting, kept beside its rollouts)."""

    def __init__(self, root: str | Path, read_also: Sequence[str | Path] = ()) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._entries: dict[str, CachedAnswer] = {}
        for other in read_also:
            self._load(Path(other))
        self._segments = self._load(self.root)

    def _load(self, directory: Path) -> int:
        segments = sorted(directory.glob(SEGMENT_GLOB)) if directory.is_dir() else []
        for path in segments:
            try:
                frame = pl.read_parquet(path)
            except (pl.exceptions.ComputeError, OSError) as exc:
                raise CacheError(
                    f"label cache segment {path} is unreadable ({exc}); move it away to relabel "
                    f"its entries"
                ) from exc
            for row in frame.iter_rows(named=True):
                self._entries[row["key"]] = CachedAnswer(**row)
        return len(segments)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str) -> CachedAnswer | None:
        return self._entries.get(key)

    def put_many(self, answers: list[CachedAnswer]) -> None:
        """Append one segment holding `answers` (skipping keys already cached)."""
        new = [a for a in answers if a.key not in self._entries]
        if not new:
            return
        buf = io.BytesIO()
        pl.DataFrame([asdict(a) for a in new], schema=_SCHEMA).write_parquet(buf)
        # Numbered after the segments present: one writer per cache directory at a time.
        path = self.root / (SEGMENT_PATTERN % self._segments)
        if path.exists():
            raise CacheError(
                f"{path} appeared while labelling: is another label run using {self.root}?"
            )
        atomic_write_bytes(path, buf.getvalue())
        self._segments += 1
        for answer in new:
            self._entries[answer.key] = answer


def frame_sha256(frame_png: bytes) -> str:
    return hashlib.sha256(frame_png).hexdigest()


def prompt_cache_key(prompt: Prompt, teacher: Teacher) -> str:
    return cache_key(
        frame_sha256(prompt.frame_png), teacher.teacher_id, prompt.text, teacher.decoding
    )


def store_replies(
    cache: LabelCache, teacher: Teacher, prompts: Sequence[Prompt], replies: Sequence[Reply]
) -> None:
    """Cache the replies that are answers (one segment); transport failures are not cached."""
    cache.put_many(
        [
            CachedAnswer(
                prompt_cache_key(prompt, teacher), teacher.teacher_id, prompt.task,
                frame_sha256(prompt.frame_png), prompt.text_sha256, reply.text or "",
                reply.finish_reason, reply.latency_s, reply.attempts,
            )
            for prompt, reply in zip(prompts, replies, strict=True)
            if reply.error is None
        ]
    )  # fmt: skip


def ask_through_cache(
    cache: LabelCache, teacher: Teacher, prompt: Prompt
) -> tuple[CachedAnswer | Reply, bool]:
    """One prompt: the cached answer if there is one (True), else the teacher's, now cached."""
    hit = cache.get(prompt_cache_key(prompt, teacher))
    if hit is not None:
        return hit, True
    (reply,) = teacher.answer([prompt])
    store_replies(cache, teacher, [prompt], [reply])
    return reply, False
