"""Every kind of file the pipeline writes and reads back, damaged in each way a disk, a copy or an
old version damages it (missing, garbage, cut in half, another format), is refused by its reader
with an error that names the file and what to do, as a project error (one `error:` line in a
stage), never a raw traceback from json, polars, safetensors or the parquet reader (issue 26,
item 3)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from pipeline.core.errors import PipelineError

FIXES = ("dvc repro", "dvc checkout", "--replace", "retrain", "rerun", "fix or delete", "mv ")


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00\xff not this file \x80" * 8)


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _missing(path: Path) -> None:
    path.unlink()


def _old_table(path: Path) -> None:  # a label / mask table of before telemetry moved out
    pl.read_parquet(path).with_columns(pl.lit(0.1).alias("latency_s")).write_parquet(path)


def _nested(path: Path) -> None:  # valid JSON nested past the decoder's recursion limit
    path.write_text("[" * 200_000 + "]" * 200_000)


def _old_version(path: Path) -> None:  # a JSON file of the previous format version
    obj = json.loads(path.read_text())
    obj["format_version"] -= 1
    path.write_text(json.dumps(obj))


def _agent(root: Path) -> Path:
    import torch

    from pipeline.learn.agents.checkpoint import write_checkpoint

    out = root / "agent"
    if not out.exists():
        write_checkpoint(out, {"actor.weight": torch.zeros(2, 3)}, {"method": "ppo"})
    return out


def _read_checkpoint(directory: Path) -> None:
    from pipeline.learn.agents.checkpoint import read_checkpoint

    read_checkpoint(directory)


def _read_labels(path: Path) -> None:
    from pipeline.core.tables import read_label_table

    read_label_table(path)


def _read_masks(path: Path) -> None:
    from pipeline.core.tables import read_mask_table

    read_mask_table(path)


def _read_rollouts(directory: Path) -> None:
    from pipeline.teach.rollouts.reader import iter_rollouts

    for _ in iter_rollouts(directory):
        pass


def _read_manifest(directory: Path) -> None:
    from pipeline.teach.rollouts.reader import load_manifest

    load_manifest(directory)


def _read_label_cache(directory: Path) -> None:
    from pipeline.teach.labels.cache import LabelCache

    LabelCache(directory)


def _read_info(directory: Path) -> None:
    from pipeline.dataset.layout import read_info

    read_info(directory)


def _read_dataset_parquet(directory: Path) -> None:
    from pipeline.dataset.transitions import load_offline_transitions

    load_offline_transitions(directory, "state")


def _read_corrections(path: Path) -> None:
    from pipeline.teach.labelling.corrections import read_corrections

    read_corrections(path)


def _corrections(root: Path) -> Path:
    path = root / "corrections.jsonl"
    line = {"sample_key": "000000/000000", "task": "judge", "frame_sha256": "0" * 64,
            "answer": "yes", "reviewer": "alice"}  # fmt: skip
    path.write_text(json.dumps(line) + "\n")
    return path


# kind -> (the file to damage under the pipeline's outputs, what it is read through, damages)
KINDS: dict[
    str,
    tuple[
        Callable[[Path], Path],
        Callable[[Path], None],
        Callable[[Path], Path],
        tuple[Callable[[Path], None], ...],
    ],
] = {
    "rollout manifest": (
        lambda r: r / "rollouts" / "manifest.json",
        _read_manifest,
        lambda f: f.parent,
        (_missing, _garbage, _cut, _old_version, _nested),
    ),
    "rollout shard": (
        lambda r: r / "rollouts" / "shard-000000.tar",
        _read_rollouts,
        lambda f: f.parent,
        (_missing, _garbage, _cut),
    ),
    "label cache segment": (
        lambda r: next((r / "label_cache").glob("segment-*.parquet")),
        _read_label_cache,
        lambda f: f.parent,
        (_garbage, _cut),
    ),
    "label table": (
        lambda r: r / "labels.parquet",
        _read_labels,
        lambda f: f,
        (_missing, _garbage, _cut, _old_table),
    ),
    "mask table": (
        lambda r: r / "masks.parquet",
        _read_masks,
        lambda f: f,
        (_missing, _garbage, _cut, _old_table),
    ),
    "dataset info.json": (
        lambda r: r / "ds" / "meta" / "info.json",
        _read_info,
        lambda f: f.parent.parent,
        (_missing, _garbage, _cut, _old_version, _nested),
    ),
    "dataset parquet": (
        lambda r: next((r / "ds").rglob("*.parquet")),
        _read_dataset_parquet,
        lambda f: next(p for p in f.parents if (p / "meta").is_dir()),
        (_garbage, _cut),
    ),
    "checkpoint agent.json": (
        lambda r: _agent(r) / "agent.json",
        _read_checkpoint,
        lambda f: f.parent,
        (_missing, _garbage, _cut, _old_version, _nested),
    ),
    "checkpoint weights": (
        lambda r: next(_agent(r).glob("*.safetensors")),
        _read_checkpoint,
        lambda f: f.parent,
        (_missing, _garbage, _cut),
    ),
    "corrections file": (_corrections, _read_corrections, lambda f: f, (_garbage, _cut)),
}
CASES = [(kind, damage) for kind, (_, _, _, damages) in KINDS.items() for damage in damages]


@pytest.mark.parametrize(
    ("kind", "damage"), CASES, ids=[f"{k}-{d.__name__.strip('_')}" for k, d in CASES]
)
def test_a_damaged_file_is_named_with_the_fix(stage_one_dataset, tmp_path, kind, damage):
    root = tmp_path / "copy"
    shutil.copytree(stage_one_dataset, root)
    locate, read, target, _ = KINDS[kind]
    path = locate(root)
    damage(path)
    with pytest.raises((PipelineError, OSError)) as err:
        read(target(path))
    message = str(err.value)
    assert str(path) in message or str(target(path)) in message, message
    assert any(fix in message for fix in FIXES), message
