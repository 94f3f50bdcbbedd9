"""`label.executor: ray`: the label stage's uncached prompts through Ray Data (`map_batches` over
an actor pool of teachers, each built once per actor), answers streamed back to the driver and
cached one segment per finished batch, so a killed job or a dead actor loses only the batches
that had not finished: a rerun finds the rest in the cache and pays for the remainder only.

The driver keeps the teacher only for its id and decoding (the `hf` teacher loads no weights
until asked), and the label stage then builds the table from the cache exactly as a local rerun
would: the table is the same bytes. Ray is imported here only, when a params file asks for it."""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pipeline.config import LabelConfig
from pipeline.labels.cache import LabelCache
from pipeline.labels.tasks import Prompt
from pipeline.teachers.base import Reply, Teacher
from pipeline.teachers.cached import prompt_cache_key, store_replies

log = logging.getLogger(__name__)


class RayExecutorError(RuntimeError):
    pass


class _TeacherActor:
    """One per Ray actor: builds its teacher once, answers batches of pickled prompts."""

    def __init__(self, build: Callable[[], Teacher]) -> None:
        self.teacher = build()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        prompts = [pickle.loads(b) for b in batch["prompt"]]
        replies = self.teacher.answer(prompts)
        if len(replies) != len(prompts):
            raise RayExecutorError(
                f"teacher {self.teacher.teacher_id} returned {len(replies)} replies for "
                f"{len(prompts)} prompts"
            )
        return {
            "index": batch["index"],
            "reply": np.array([pickle.dumps(r) for r in replies], dtype=object),
        }


def connect(cfg: LabelConfig) -> None:
    """Join `label.ray.address` (or RAY_ADDRESS), or start a local cluster."""
    try:
        import ray
    except ImportError:
        raise RayExecutorError(
            "label.executor is ray but ray is not installed: pip install -e '.[ray]'"
        ) from None
    if ray.is_initialized():
        return
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address is None and cfg.ray.object_store_mb is not None:
        kwargs["object_store_memory"] = cfg.ray.object_store_mb * 1024 * 1024
    try:
        ray.init(address=address, **kwargs)
    except ConnectionError as exc:
        raise RayExecutorError(
            f"could not connect to the Ray cluster at {address} ({exc}); start one with "
            f"`ray start --head`, or set label.ray.address to null for a local cluster"
        ) from None


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
    if not prompts:
        return {}
    connect(cfg)
    import ray.data

    from pipeline.teachers import make_teacher

    if build is None:
        teacher_cfg = cfg.teacher
        build = lambda: make_teacher(teacher_cfg)  # noqa: E731  (pickled to the actors)
    items = [{"index": i, "prompt": pickle.dumps(p)} for i, p in enumerate(prompts)]
    dataset = ray.data.from_items(items).map_batches(
        _TeacherActor,
        fn_constructor_args=(build,),
        batch_size=cfg.ray.batch_size,
        concurrency=cfg.ray.concurrency,
        num_gpus=cfg.ray.num_gpus,
        num_cpus=cfg.ray.num_cpus,
        batch_format="numpy",
    )
    failures: dict[str, Reply] = {}
    answered = 0
    try:
        for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
            done = [prompts[int(i)] for i in batch["index"]]
            replies = [pickle.loads(r) for r in batch["reply"]]
            store_replies(cache, teacher, done, replies)  # one segment: safe from here on
            for prompt, reply in zip(done, replies, strict=True):
                if reply.error is not None:
                    failures[prompt_cache_key(prompt, teacher)] = reply
            answered += len(done)
    except Exception as exc:
        if isinstance(exc, RayExecutorError):
            raise
        raise RayExecutorError(
            f"the Ray job failed after {answered} of {len(prompts)} prompts (answers of finished "
            f"batches are cached: a rerun pays for the rest only): {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc
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
