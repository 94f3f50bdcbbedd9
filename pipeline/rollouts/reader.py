"""Reading rollout shards back, through webdataset (the same reader training uses)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from pipeline.errors import PipelineError
from pipeline.io import sha256_file
from pipeline.rollouts.format import FORMAT_VERSION, MANIFEST_NAME, parse_sample_key


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
    import webdataset as wds  # here, not at import: webdataset imports torch (~1.5 s)

    dataset = wds.WebDataset(str(path), shardshuffle=False, empty_check=False)
    for sample in dataset:
        key = sample["__key__"]
        missing = {"png", "json"} - sample.keys()
        if missing:
            raise RolloutIntegrityError(
                f"{path}: sample {key!r} lacks {sorted(missing)} (a shard cut or edited by hand); "
                f"{_fix(Path(path).parent)}"
            )
        episode, t = parse_sample_key(key)
        yield RolloutSample(key, episode, t, sample["png"], json.loads(sample["json"]))


def load_manifest(rollout_dir: str | Path) -> dict[str, Any]:
    path = Path(rollout_dir) / MANIFEST_NAME
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist: the collection in {rollout_dir} is unfinished or missing "
            f"(rerun `dvc repro` or the collect stage to finish it)"
        )
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RolloutIntegrityError(f"{path} is not valid JSON ({exc}); {_fix(Path(rollout_dir))}") from None  # fmt: skip
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if version != FORMAT_VERSION:
        raise RolloutIntegrityError(
            f"{path}: rollout format {version}, this code reads {FORMAT_VERSION}; recollect it "
            f"(`dvc repro collect@<env>`, or `python -m stages.collect ... --replace`)"
        )
    return manifest


class RolloutIntegrityError(PipelineError, ValueError):
    """A shard does not match what its manifest recorded; the message names it and the fix."""


def _fix(rollout_dir: Path) -> str:
    return (
        f"restore it with `dvc checkout {rollout_dir}` (or `dvc pull`), or recollect it "
        f"(`dvc repro collect@<env>`); `vlmrl-verify {rollout_dir}` lists every problem"
    )


def iter_rollouts(rollout_dir: str | Path) -> Iterator[RolloutSample]:
    """Every sample of a finished collection, shard by shard, in step order. Each shard is
    checked against its manifest entry (size and sha256 before any sample is read, the sample
    count after), so no stage labels, masks or trains on a damaged or cut shard."""
    rollout_dir = Path(rollout_dir)
    for shard in load_manifest(rollout_dir)["shards"]:
        path = rollout_dir / shard["name"]
        if not path.exists():
            raise RolloutIntegrityError(f"{path} is missing; {_fix(rollout_dir)}")
        size = path.stat().st_size
        if size != shard["bytes"]:
            cut = "truncated" if size < shard["bytes"] else "longer than recorded"
            raise RolloutIntegrityError(
                f"{path} is {cut}: {size} bytes, its manifest records {shard['bytes']}; "
                f"{_fix(rollout_dir)}"
            )
        if sha256_file(path) != shard["sha256"]:
            raise RolloutIntegrityError(
                f"{path} is damaged: its sha256 does not match its manifest; {_fix(rollout_dir)}"
            )
        samples = 0
        for sample in iter_shard(path):
            samples += 1
            yield sample
        if samples != shard["samples"]:
            raise RolloutIntegrityError(
                f"{path} holds {samples} samples, its manifest records {shard['samples']}; "
                f"{_fix(rollout_dir)}"
            )
