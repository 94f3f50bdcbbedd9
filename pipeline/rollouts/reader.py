"""Reading rollout shards back, through webdataset (the same reader training uses)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import webdataset as wds
from PIL import Image

from pipeline.rollouts.format import MANIFEST_NAME, parse_sample_key


@dataclass
class RolloutSample:
    key: str
    episode: int
    t: int
    frame_png: bytes
    record: dict[str, Any]

    def frame(self) -> np.ndarray:
        """Decode the PNG: (H, W, 3) uint8."""
        with Image.open(io.BytesIO(self.frame_png)) as image:
            return np.asarray(image.convert("RGB"))


def iter_shard(path: str | Path) -> Iterator[RolloutSample]:
    """Samples of one shard in stored order. Corrupt tars raise (tarfile.TarError, OSError)."""
    dataset = wds.WebDataset(str(path), shardshuffle=False, empty_check=False)
    for sample in dataset:
        key = sample["__key__"]
        missing = {"png", "json"} - sample.keys()
        if missing:
            raise ValueError(f"{Path(path).name}: sample {key!r} lacks {sorted(missing)}")
        episode, t = parse_sample_key(key)
        yield RolloutSample(key, episode, t, sample["png"], json.loads(sample["json"]))


def load_manifest(rollout_dir: str | Path) -> dict[str, Any]:
    path = Path(rollout_dir) / MANIFEST_NAME
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist: the collection in {rollout_dir} is unfinished or missing "
            f"(rerun `dvc repro` or the collect stage to finish it)"
        )
    return json.loads(path.read_text())


def iter_rollouts(rollout_dir: str | Path) -> Iterator[RolloutSample]:
    """Every sample of a finished collection, shard by shard, in step order."""
    rollout_dir = Path(rollout_dir)
    for shard in load_manifest(rollout_dir)["shards"]:
        yield from iter_shard(rollout_dir / shard["name"])
