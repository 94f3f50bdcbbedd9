"""A person as a teacher: `human:<name>` answers exactly the prompts whose corrections were
imported from a review tool (pipeline.labelling.exchange) into the label cache. The label stage
finds those answers in the cache like any teacher's; a prompt with no imported correction is
never invented: it gets status not_reviewed, is not cached, and a rerun after more corrections
are imported fills it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.labels.status import ParseStatus
from pipeline.labels.tasks import Prompt
from pipeline.teachers.base import Reply

HUMAN_PREFIX = "human:"


class HumanTeacher:
    def __init__(self, name: str) -> None:
        if not name or any(c in name for c in ":/ "):
            raise ValueError(f"reviewer name {name!r}: use letters, digits, '.', '_' or '-'")
        self.teacher_id = f"{HUMAN_PREFIX}{name}"
        self.decoding: dict[str, Any] = {}

    def answer(self, prompts: Sequence[Prompt]) -> list[Reply]:
        detail = (
            f"no correction by {self.teacher_id} was imported for this prompt "
            f"(python -m stages.review import ... --reviewer {self.teacher_id[len(HUMAN_PREFIX) :]})"
        )
        return [Reply(text=None, error=ParseStatus.NOT_REVIEWED, error_detail=detail)] * len(
            prompts
        )
