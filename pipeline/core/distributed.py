"""Batches of work on a Ray cluster, the way the label and masks stages scale out: Ray Data's
`map_batches` over an actor pool (each actor builds its model once: a teacher, a segmenter),
results streamed back to the driver batch by batch, so that the caller can cache each finished
batch before the next arrives (a killed job loses only unfinished batches). Ray is imported only
here, only when a params file asks for `executor: ray`."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from pipeline.core.config import RayExecutorConfig
from pipeline.core.env_registry import brought_envs, register_env
from pipeline.core.errors import PipelineError


class RayExecutorError(PipelineError, RuntimeError):
    pass


class _Worker:
    """One per Ray actor: builds its model once, applies `method` to batches of pickled items.
    The driver's brought envs (`env.<id>.make`) are registered first: a teacher asked about
    one reads its label schema."""

    def __init__(
        self, build: Callable[[], Any], method: str, brought: dict[str, tuple[Any, Any]]
    ) -> None:
        for info, schema in brought.values():
            register_env(info, schema)
        self.model, self.method = build(), method

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        items = [pickle.loads(b) for b in batch["item"]]
        results = getattr(self.model, self.method)(items)
        if len(results) != len(items):
            raise RayExecutorError(
                f"{self.method} returned {len(results)} results for {len(items)} items"
            )
        return {
            "index": batch["index"],
            "result": np.array([pickle.dumps(r) for r in results], dtype=object),
        }


def connect(cfg: RayExecutorConfig) -> None:
    """Join `cfg.address` (or RAY_ADDRESS), or start a local cluster."""
    try:
        import ray
    except ImportError:
        raise RayExecutorError(
            "executor is ray but ray is not installed: pip install -e '.[ray]'"
        ) from None
    if ray.is_initialized():
        return
    address = cfg.address or os.environ.get("RAY_ADDRESS")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address is None and cfg.object_store_mb is not None:
        kwargs["object_store_memory"] = cfg.object_store_mb * 1024 * 1024
    try:
        ray.init(address=address, **kwargs)
    except ConnectionError as exc:
        raise RayExecutorError(
            f"could not connect to the Ray cluster at {address} ({exc}); start one with "
            f"`ray start --head`, or set the executor's address to null for a local cluster"
        ) from None


def map_on_ray(
    items: Sequence[Any], build: Callable[[], Any], method: str, cfg: RayExecutorConfig
) -> Iterator[tuple[list[int], list[Any]]]:
    """(indices into `items`, results) of each finished batch, in the order batches finish.
    A failure raises RayExecutorError naming how many items had come back."""
    if not items:
        return
    connect(cfg)
    import ray.data

    rows = [{"index": i, "item": pickle.dumps(x)} for i, x in enumerate(items)]
    dataset = ray.data.from_items(rows).map_batches(
        _Worker,
        fn_constructor_args=(build, method, brought_envs()),
        batch_size=cfg.batch_size,
        concurrency=cfg.concurrency,
        num_gpus=cfg.num_gpus,
        num_cpus=cfg.num_cpus,
        batch_format="numpy",
    )
    returned = 0
    try:
        for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
            indices = [int(i) for i in batch["index"]]
            yield indices, [pickle.loads(r) for r in batch["result"]]
            returned += len(indices)
    except RayExecutorError:
        raise
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise RayExecutorError(
            f"the Ray job failed after {returned} of {len(items)} items came back (those of "
            f"finished batches are cached: a rerun pays for the rest only): "
            f"{type(exc).__name__}: {first}"
        ) from exc
