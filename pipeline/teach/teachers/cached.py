"""Asking a teacher through the label cache: the same prompt (frame, teacher, text, decoding,
parser version) is never paid twice, in any stage. Used by the label stage and by the behaviours
that act on a teacher's answers while collecting."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.teach.labels.cache import (
    CachedAnswer,
    CallTelemetry,
    LabelCache,
    cache_key,
    frame_sha256,
)
from pipeline.teach.labels.tasks import Prompt
from pipeline.teach.teachers.base import Reply, Teacher


def prompt_cache_key(prompt: Prompt, teacher: Teacher) -> str:
    return cache_key(
        frame_sha256(prompt.frame_png), teacher.teacher_id, prompt.text, teacher.decoding
    )


def store_replies(
    cache: LabelCache, teacher: Teacher, prompts: Sequence[Prompt], replies: Sequence[Reply]
) -> None:
    """Cache the replies that are answers (one segment); transport failures are not cached. The
    calls' latency and attempts go to the cache's telemetry store."""
    answered = [
        (prompt_cache_key(prompt, teacher), prompt, reply)
        for prompt, reply in zip(prompts, replies, strict=True)
        if reply.error is None
    ]
    cache.put_many(
        [
            CachedAnswer(
                key, teacher.teacher_id, prompt.task, frame_sha256(prompt.frame_png),
                prompt.text_sha256, reply.text or "", reply.finish_reason,
                reply.system_fingerprint,
            )
            for key, prompt, reply in answered
        ],
        [
            CallTelemetry(
                key, teacher.teacher_id, prompt.task, reply.latency_s, reply.attempts,
                reply.prompt_tokens, reply.completion_tokens,
            )
            for key, prompt, reply in answered
        ],
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
