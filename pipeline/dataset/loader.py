"""Reading the training shards: frames stacked at load time (ERPv table 6: 3 frames), labels and
masks decoded beside them."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import webdataset as wds
from PIL import Image

from pipeline.dataset.stacking import FrameStacker
from pipeline.rollouts.format import SHARD_GLOB, parse_sample_key


def iter_raw(wds_dir: str | Path) -> Iterator[dict[str, Any]]:
    """The samples as stored: member name -> bytes (no decoding), in shard and step order."""
    shards = sorted(str(p) for p in Path(wds_dir).glob(SHARD_GLOB))
    if not shards:
        raise FileNotFoundError(f"no training shards ({SHARD_GLOB}) in {wds_dir}")
    yield from wds.WebDataset(shards, shardshuffle=False, empty_check=False)


def _png(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image)


def iter_stacked(wds_dir: str | Path, stack: int = 3) -> Iterator[dict[str, Any]]:
    """Each sample with `obs`: the last `stack` frames of its episode, (stack, H, W, 3) uint8,
    oldest first; at an episode's start the first frame is repeated (as DrQ / SAC-AE pad)."""
    stacker = FrameStacker(stack)
    for raw in iter_raw(wds_dir):
        episode, t = parse_sample_key(raw["__key__"])
        record = json.loads(raw["json"])
        frame = _png(raw["png"])
        obs = stacker.reset(frame) if record["is_first"] else stacker.step(frame)
        mask = _png(raw["mask.png"]).astype(np.float32) / 255.0 if "mask.png" in raw else None
        yield {
            "key": raw["__key__"],
            "episode": episode,
            "t": t,
            "obs": obs,
            "record": record,
            "labels": json.loads(raw["labels.json"]),
            "mask": mask,
        }
