"""Sharing that cannot be tampered with (issue 47, item 3): a dataset card cannot point
`load_dataset` at files the dataset does not record, and training shards are checked before
use."""

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import polars as pl
import pytest
import yaml

from pipeline.dataset.layout import CARD_NAME, DatasetIntegrityError, verify_dataset
from pipeline.dataset.loader import iter_stacked
from pipeline.integrity import main as vlmrl_verify


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny dataset, built as the dataset stage builds it (the fixture of test_dataset)."""
    from pipeline.config import MasksConfig
    from pipeline.dataset.build import build_dataset
    from pipeline.labelling.label import label_rollouts
    from pipeline.masks import make_mask_backend
    from pipeline.masks.compute import compute_masks
    from pipeline.rollouts.collect import collect
    from pipeline.teachers.scripted import ScriptedTeacher
    from tests.conftest import collect_cfg, env_cfg, label_cfg

    root = tmp_path_factory.mktemp("sharing")
    env = env_cfg(max_episode_steps=15)
    collect("MountainCarContinuous-v0", env, collect_cfg(episodes=3), root / "r", progress=False)
    label_rollouts(
        root / "r", label_cfg(), ScriptedTeacher(0.8, 0), root / "lc", root / "labels.parquet",
        progress=False,
    )  # fmt: skip
    backend = make_mask_backend(MasksConfig(backend="scripted", batch_size=8))
    compute_masks(
        root / "r", root / "labels.parquet", backend, root / "mc", root / "masks.parquet",
        batch_size=8, progress=False,
    )  # fmt: skip
    build_dataset(
        root / "r", root / "labels.parquet", root / "masks.parquet", root / "out",
        shard_max_samples=20,
    )  # fmt: skip
    return root / "out"


@pytest.fixture
def dataset(built, tmp_path):
    copy = tmp_path / "ds"
    shutil.copytree(built, copy)
    return copy


def _negate_a_v(parquet: Path) -> None:
    """The attack of the issue: the labels an agent learns from, negated, in a valid file."""
    frame = pl.read_parquet(parquet)
    frame = frame.with_columns(pl.col("a_v").list.eval(-pl.element()))
    frame.write_parquet(parquet)


# --- the card's `configs` ------------------------------------------------------------------


def _point_card_at(dataset: Path, data_files) -> Path:
    card = dataset / CARD_NAME
    _, header, body = card.read_text().split("---\n", 2)
    header = yaml.safe_load(header)
    header["configs"][0]["data_files"] = data_files
    card.write_text("---\n" + yaml.safe_dump(header) + "---\n" + body)
    return card


def test_a_card_pointing_load_dataset_at_an_unrecorded_parquet_is_refused(dataset):
    """Today the card's `configs` are not checked: `load_dataset(dir)` serves any parquet the card
    names (the issue's reward 1000 on every row) and vlmrl-verify says ok."""
    parquet = sorted(dataset.glob("data/*.parquet"))[0]
    evil = dataset / "extra" / "train.parquet"
    evil.parent.mkdir()
    pl.read_parquet(parquet).with_columns(pl.lit(1000.0).alias("reward")).write_parquet(evil)
    card = _point_card_at(dataset, [{"split": "train", "path": "extra/*.parquet"}])
    problems = verify_dataset(dataset)
    assert any(
        str(card) in p and "extra/train.parquet" in p and "not recorded" in p for p in problems
    ), problems
    assert vlmrl_verify(["--datasets", str(dataset)]) == 1


@pytest.mark.parametrize(
    "data_files",
    [
        "../elsewhere/*.parquet",  # outside the dataset folder
        {"train": ["data/*.parquet", "/tmp/evil.parquet"]},  # an absolute path
        [{"split": "train", "path": "hf://datasets/someone/else/*.parquet"}],  # another repo
    ],
)
def test_a_card_whose_data_files_leave_the_dataset_is_refused(dataset, data_files):
    card = _point_card_at(dataset, data_files)
    problems = verify_dataset(dataset)
    assert any(str(card) in p and "outside" in p for p in problems), problems


def test_the_built_card_passes(built):
    assert verify_dataset(built) == []


# --- training shards ------------------------------------------------------------------------


def _rewrite_member(shard: Path, suffix: str, edit) -> None:
    """A valid tar with one member's content changed (what a reader cannot tell apart)."""
    members = []
    with tarfile.open(shard) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read()
            if member.name.endswith(suffix):
                data = edit(data)
            members.append((member, data))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for member, data in members:
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    shard.write_bytes(buf.getvalue())


def test_iter_stacked_refuses_a_shard_that_does_not_match_its_recorded_sha256(dataset):
    """Today iter_stacked reads a shard whose labels were swapped (a valid tar) without a word."""
    shard = dataset / "wds" / "shard-000001.tar"

    def swap(data: bytes) -> bytes:
        labels = json.loads(data)
        if "action" in labels and "a_v" in labels["action"]:
            labels["action"]["a_v"] = [-v for v in labels["action"]["a_v"]]
        return json.dumps(labels).encode()

    _rewrite_member(shard, ".labels.json", swap)
    with pytest.raises(DatasetIntegrityError) as err:
        next(iter_stacked(dataset / "wds"))
    message = str(err.value)
    assert str(shard) in message and "sha256" in message and "dvc checkout" in message


def test_iter_stacked_refuses_an_unrecorded_shard(dataset):
    shutil.copy(dataset / "wds" / "shard-000000.tar", dataset / "wds" / "shard-000002.tar")
    with pytest.raises(DatasetIntegrityError, match=r"shard-000002\.tar is not part of"):
        next(iter_stacked(dataset / "wds"))


def test_iter_stacked_hashes_each_shard_once_per_process(dataset, monkeypatch):
    from pipeline.dataset import loader

    calls = []
    real = loader.sha256_file
    monkeypatch.setattr(loader, "sha256_file", lambda p: calls.append(p) or real(p))
    first = [s["key"] for s in iter_stacked(dataset / "wds")]
    assert len(calls) == 2
    assert [s["key"] for s in iter_stacked(dataset / "wds")] == first
    assert len(calls) == 2  # verified shards are not hashed again while unchanged
    shard = dataset / "wds" / "shard-000000.tar"
    shard.write_bytes(shard.read_bytes())  # the same bytes, written again
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    list(iter_stacked(dataset / "wds"))
    assert len(calls) == 3  # a rewritten file is hashed again
