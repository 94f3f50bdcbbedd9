"""`label.executor: ray`: the label stage's uncached prompts through Ray Data
(pipeline.core.distributed: an actor pool of teachers, each built once per actor), each finished
batch's answers cached as it streams back, so a killed job or a dead actor loses only the
batches that had not finished: a rerun finds the rest in the cache and pays for the remainder.

The driver keeps the teacher only for its id and decoding (the `hf` teacher loads no weights
until asked), and the label stage then builds the table from the cache exactly as a local rerun
would: the table is the same bytes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pipeline.core.config import LabelConfig
from pipeline.core.distributed import RayExecutorError, map_on_ray
from pipeline.teach.labels.cache import LabelCache
from pipeline.teach.labels.tasks import Prompt
from pipeline.teach.teachers.base import Reply, Teacher
from pipeline.teach.teachers.cached import prompt_cache_key, store_replies

log = logging.getLogger(__name__)

__all__ = ["RayAnswers", "RayExecutorError", "ask_with_ray"]


def ask_with_ray(
    prompts: Sequence[Prompt],
    cfg: LabelConfig,
    teacher: Teacher,
    cache: LabelCache,
    build: Callable[[], Teacher] | None = None,
) -> dict[str, Reply]:
    """Ask every prompt through Ray Data; cache each finished batch's answers as it arrives.
    Each actor builds its teacher with `build` (default: `make_teacher(cfg.teacher)`), which
    must give `teacher`'s id. Returns the transport failures by cache key (not cached, as
    locally: the stage records them as rows and a rerun asks again)."""
    if build is None:
        from pipeline.teach.teachers import make_teacher

        teacher_cfg = cfg.teacher
        build = lambda: make_teacher(teacher_cfg)  # noqa: E731  (pickled to the actors)
    failures: dict[str, Reply] = {}
    answered = 0
    for indices, replies in map_on_ray(prompts, build, "answer", cfg.ray):
        done = [prompts[i] for i in indices]
        store_replies(cache, teacher, done, replies)  # one segment: safe from here on
        for prompt, reply in zip(done, replies, strict=True):
            if reply.error is not None:
                failures[prompt_cache_key(prompt, teacher)] = reply
        answered += len(done)
    log.info("ray: %d prompts answered, %d transport failures", answered, len(failures))
    return failures


class RayAnswers:
    """The label stage's teacher after the Ray pass: every answer is in the cache, so it is asked
    only about the prompts whose call failed, and gives back those failures."""

    def __init__(self, teacher: Teacher, failures: dict[str, Reply]) -> None:
        self.teacher_id, self.decoding = teacher.teacher_id, teacher.decoding
        self._teacher, self._failures = teacher, failures

    def answer(self, prompts: Sequence[Prompt]) -> list[Reply]:
        keys = [prompt_cache_key(p, self._teacher) for p in prompts]
        unknown = [k for k in keys if k not in self._failures]
        if unknown:
            raise RayExecutorError(
                f"{len(unknown)} prompts were neither answered by the Ray job nor failed in it "
                f"(is another run writing the cache?)"
            )
        return [self._failures[k] for k in keys]
