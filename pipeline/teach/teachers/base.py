"""The teacher interface: a batch of prompts (frame + messages + context) in, one reply each out.

A teacher only produces text; the label task that rendered the prompt parses it. So every back
end (scripted, random, constant, hf, openai) goes through the same parsers and the same cache.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.teach.labels.parsers import MAX_ANSWER_CHARS, clip_answer
from pipeline.teach.labels.status import ParseStatus
from pipeline.teach.labels.tasks import Prompt

# lone surrogates: legal in a JSON string (`"\udcff"`) and a Python str, not encodable as UTF-8
_SURROGATES = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, so that it can be written as UTF-8
    (a cache segment, a parquet string, a page); everything else, control characters included,
    is kept as the teacher sent it."""
    return _SURROGATES.sub("\ufffd", text)


@dataclass(frozen=True)
class Reply:
    text: str | None  # the raw answer; None when the teacher never answered
    finish_reason: str | None = "stop"  # "stop", or "length" when the token limit cut it
    # HTTP_ERROR or TIMEOUT when there is no answer. Replies with an error are never cached.
    error: ParseStatus | None = None
    error_detail: str = ""
    latency_s: float = 0.0  # wall time of the call that produced it (a batch's time is shared)
    attempts: int = 1
    system_fingerprint: str | None = None  # the server's build, where an API reports one
    # what the call cost, where the server reports it (OpenAI-compatible `usage`)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def __post_init__(self) -> None:
        # a teacher's text is untrusted: whatever a back end decoded, what is stored is UTF-8
        if self.text is not None:
            text = valid_unicode(self.text)
            # what is kept of an answer over the cap: its start and its size (parsers.py)
            object.__setattr__(
                self, "text", clip_answer(text) if len(text) > MAX_ANSWER_CHARS else text
            )
        object.__setattr__(self, "error_detail", valid_unicode(self.error_detail))


class TeacherUnavailableError(PipelineError, RuntimeError):
    """A served teacher cannot answer (unreachable, refuses the key, hung, serves another model);
    the message names the setting that configured it."""


class Teacher(Protocol):
    # Names the back end, model and revision (and any knob that changes answers), so that two
    # teachers never share cache entries.
    teacher_id: str
    # Decoding parameters (temperature, max tokens, ...): part of the cache key.
    decoding: dict[str, Any]

    def answer(self, prompts: Sequence[Prompt]) -> list[Reply]: ...


def prompt_rng(prompt: Prompt, seed: int) -> np.random.Generator:
    """Randomness that is a pure function of (frame, prompt, seed), as a cached label must be."""
    digest = hashlib.sha256(prompt.frame_png + prompt.text.encode() + str(seed).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))
