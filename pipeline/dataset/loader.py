"""Reading the training shards: frames stacked at load time (ERPv table 6: 3 frames), labels and
masks decoded beside them.

`iter_stacked` checks every shard against the sha256 its dataset's meta/info.json records before
reading any sample (a shard with swapped labels is still a valid tar: nothing downstream could
tell). Each shard is hashed once per process while its file is unchanged (same inode, size and
mtime): the check costs one read of the data per process, not one per epoch (1.3-2.2 % of one
pass over the shipped envs' datasets; docs/guide.md, Sharing).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import webdataset as wds
from PIL import Image

from pipeline.core.io import sha256_file
from pipeline.core.stacking import FrameStacker
from pipeline.dataset.layout import WDS_DIR, DatasetIntegrityError, read_info
from pipeline.teach.rollouts.format import SHARD_GLOB, parse_sample_key

# (resolved path, inode, size, mtime_ns) -> sha256 of the shards this process has verified
_VERIFIED: dict[tuple[str, int, int, int], str] = {}


def iter_raw(wds_dir: str | Path) -> Iterator[dict[str, Any]]:
    """The samples as stored: member name -> bytes (no decoding), in shard and step order."""
    shards = sorted(str(p) for p in Path(wds_dir).glob(SHARD_GLOB))
    if not shards:
        raise FileNotFoundError(f"no training shards ({SHARD_GLOB}) in {wds_dir}")
    yield from wds.WebDataset(shards, shardshuffle=False, empty_check=False)


def verify_shards(wds_dir: str | Path) -> None:
    """Raise DatasetIntegrityError naming the shard and the fix unless every shard in `wds_dir`
    is one its dataset's meta/info.json records, with the recorded sha256."""
    wds_dir = Path(wds_dir)
    dataset_dir = wds_dir.parent
    fix = (
        f"restore the dataset with `dvc checkout {dataset_dir}` (`dvc pull --force "
        f"{dataset_dir}` if its cache is damaged too) or rebuild it (`dvc repro dataset@<env>`)"
    )
    recorded = read_info(dataset_dir).get("files")
    if not isinstance(recorded, dict):
        raise DatasetIntegrityError(
            f"{dataset_dir / 'meta/info.json'} records no checksums (`files`), so the shards in "
            f"{wds_dir} cannot be verified; {fix}"
        )
    for path in sorted(wds_dir.glob(SHARD_GLOB)):
        expected = recorded.get(f"{WDS_DIR}/{path.name}")
        if expected is None:
            raise DatasetIntegrityError(
                f"{path} is not part of this dataset (meta/info.json does not record it); "
                f"remove it, or {fix}"
            )
        stat = path.stat()
        identity = (str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if _VERIFIED.get(identity) == expected:
            continue
        if sha256_file(path) != expected:
            raise DatasetIntegrityError(
                f"{path} is damaged or was changed: its sha256 does not match the one "
                f"meta/info.json records, so none of its samples are read; {fix}"
            )
        _VERIFIED[identity] = expected


def _png(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image)


def iter_stacked(wds_dir: str | Path, stack: int = 3) -> Iterator[dict[str, Any]]:
    """Each sample with `obs`: the last `stack` frames of its episode, (stack, H, W, 3) uint8,
    oldest first; at an episode's start the first frame is repeated (as DrQ / SAC-AE pad). Every
    shard is checked against its recorded sha256 first (`verify_shards`)."""
    verify_shards(wds_dir)
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
