"""Reading rollout shards back: webdataset tars, read with the standard library's `tarfile` as
webdataset groups them (consecutive members `<key>.<ext>` form one sample), so that the stages
that read rollouts (verify, label, masks, dataset, audit, review) load no torch, which webdataset
imports (~1.5 s per process). Training reads the dataset's shards with webdataset itself
(pipeline.dataset.loader); tests/teach/test_writer.py checks both readers see the same samples."""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from pipeline.core.errors import PipelineError
from pipeline.core.io import sha256_file
from pipeline.teach.rollouts.format import FORMAT_VERSION, MANIFEST_NAME, parse_sample_key


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


# webdataset's split of a member name into sample key and field: up to the basename's first dot
_KEY_AND_FIELD = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


def iter_tar_samples(path: str | Path) -> Iterator[dict[str, Any]]:
    """The samples of a webdataset tar as webdataset yields them (`__key__` plus one bytes entry
    per field, field names lower-cased), streaming, without webdataset. Corrupt tars raise
    (tarfile.TarError, OSError); a field twice in one sample raises RolloutIntegrityError."""
    sample: dict[str, Any] = {}
    with tarfile.open(str(path), mode="r|") as tar:
        for member in tar:
            match = _KEY_AND_FIELD.match(member.name)
            if not member.isfile() or match is None:
                continue  # directories; names without a field, which webdataset skips too
            key, field = match.group(1), match.group(2).lower()
            data = tar.extractfile(member).read()  # type: ignore[union-attr]  # a file member
            if sample and sample["__key__"] != key:
                yield sample
                sample = {}
            if field in sample:
                raise RolloutIntegrityError(
                    f"{path}: sample {key!r} holds field {field!r} twice; {_fix(Path(path).parent)}"
                )
            sample.setdefault("__key__", key)
            sample[field] = data
    if sample:
        yield sample


def iter_shard(path: str | Path) -> Iterator[RolloutSample]:
    """Samples of one shard in stored order. Corrupt tars raise (tarfile.TarError, OSError)."""
    for sample in iter_tar_samples(path):
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
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
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
