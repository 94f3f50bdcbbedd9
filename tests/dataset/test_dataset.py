import json
import logging

import numpy as np
import polars as pl
import pytest
from datasets import load_dataset

from pipeline.dataset.build import build_dataset
from pipeline.dataset.loader import iter_raw, iter_stacked
from pipeline.teach.rollouts.reader import iter_rollouts


@pytest.fixture(scope="module")
def dataset(stage_one_dataset):
    """The wing's dataset root, and the info that build_dataset wrote beside the data."""
    info = json.loads((stage_one_dataset / "ds" / "meta" / "info.json").read_text())
    return stage_one_dataset, info


def test_hf_dataset_loads_in_one_line_with_labels_and_masks(dataset, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    root, info = dataset
    ds = load_dataset(str(root / "ds"), cache_dir=str(root / "hf_cache"))["train"]
    assert ds.num_rows == info["counts"]["samples"] == 3 * 16
    row = ds[0]
    assert row["image"].size == (32, 32) and row["is_first"]
    assert np.array_equal(np.asarray(row["image"]), next(iter_rollouts(root / "rollouts")).frame())
    labels = pl.read_parquet(root / "labels.parquet")
    first_action = labels.filter(
        (pl.col("sample_key") == "000000/000000") & (pl.col("task") == "action")
    ).row(0, named=True)
    assert row["a_v_status"] == first_action["parse_status"]
    with_masks = ds.filter(lambda r: r["mask"] is not None)
    assert with_masks.num_rows == info["counts"]["frames_with_masks"] > 0
    assert set(ds["behaviour"]) <= {"random", None}


def test_card_and_info(dataset):
    root, info = dataset
    card = (root / "ds" / "README.md").read_text()
    header = card.split("---\n")[1]  # the YAML header the Hub and load_dataset read
    assert "configs:" in header and "path: data/train-*.parquet" in header
    assert "license: mit" in header and "- n<1K" in header
    assert "Semore" in card and "ERPv" in card and "Macro Semantics" in card  # citations
    assert f"gymnasium {info['software']['gymnasium']}" in card
    assert set(info["software"]) >= {"vlmrl-pipeline", "gymnasium", "mujoco"}
    assert "stand-in for a VLM" in card and info["teacher_ids"][0] in card
    on_disk = json.loads((root / "ds" / "meta" / "info.json").read_text())
    assert on_disk["format_version"] == 3 and on_disk["counts"] == info["counts"]
    assert (
        sum(on_disk["parse_status"]["action"].values())
        == pl.read_parquet(root / "labels.parquet")
        .filter(pl.col("queried") & (pl.col("task") == "action"))
        .height
    )


def test_the_card_says_what_the_labels_cost_a_fresh_build(dataset):
    """The card's cost section: the distinct prompts per task (a frame asked one question twice
    is answered once: what a build without the cache sends) and their VLM time at ERPv's 6.95 s
    per call, from the label table alone, so every machine writes the same bytes."""
    root, info = dataset
    queried = pl.read_parquet(root / "labels.parquet").filter(pl.col("queried"))
    by_task = dict(queried.group_by("task").agg(pl.col("cache_key").n_unique()).iter_rows())
    assert info["cost"]["teacher_calls_by_task"] == dict(sorted(by_task.items()))
    assert info["cost"]["teacher_calls"] == sum(by_task.values())
    assert info["cost"]["seconds_at_erpv_rate"] == round(sum(by_task.values()) * 6.95, 2)
    card = (root / "ds" / "README.md").read_text()
    assert "## What the labels cost" in card
    assert f"asks the teacher {info['cost']['teacher_calls']} prompts" in card
    assert f"{info['cost']['seconds_at_erpv_rate']:.0f} s of VLM time" in card


def test_the_card_is_hub_ready(dataset, monkeypatch, caplog):
    """huggingface_hub reads the card's YAML (what `hf upload` shows on the Hub): license, task
    and size categories, pretty name, the train split's files; datasets reads the same features
    from it as from the parquet files, without a warning."""
    from datasets import load_dataset, load_dataset_builder
    from huggingface_hub import DatasetCard

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    root, info = dataset
    card = DatasetCard.load(root / "ds" / "README.md")
    data = card.data.to_dict()
    assert data["license"] == "mit" and data["task_categories"] == ["reinforcement-learning"]
    assert data["size_categories"] == ["n<1K"] and info["env_id"] in data["pretty_name"]
    (config,) = data["configs"]
    assert config["data_files"] == [{"split": "train", "path": "data/train-*.parquet"}]
    # (DatasetCard.validate asks the Hub's endpoint: no network here)
    assert card.text.startswith(f"# {info['env_id']}: rollouts")
    builder = load_dataset_builder(str(root / "ds"))
    with caplog.at_level(logging.WARNING):
        ds = load_dataset(str(root / "ds"))["train"]
    assert builder.info.features == ds.features  # the card's features are the files'
    assert ds.num_rows == info["counts"]["samples"]
    # datasets reads the card without a warning (it warned of a malformed `splits` field)
    assert not [r for r in caplog.records if r.name.startswith("datasets")], caplog.text


def test_training_shards_stack_frames_within_episodes(dataset):
    root, info = dataset
    assert (
        info["counts"]["wds_shards"] == 2
    )  # 16 samples an episode; closed at the first episode end past 20
    frames = {s.key: s.frame() for s in iter_rollouts(root / "rollouts")}
    samples = list(iter_stacked(root / "ds" / "wds", stack=3))
    assert len(samples) == info["counts"]["samples"]
    for sample in samples:
        e, t = sample["episode"], sample["t"]
        expected = [frames[f"{e:06d}/{max(0, t - k):06d}"] for k in (2, 1, 0)]
        np.testing.assert_array_equal(sample["obs"], np.stack(expected))
    with_mask = [s for s in samples if s["mask"] is not None]
    assert with_mask and with_mask[0]["mask"].shape == (32, 32)
    raw = next(iter_raw(root / "ds" / "wds"))
    assert {"png", "json", "labels.json"} <= set(raw)


def test_a_label_has_one_name_in_the_parquet_and_the_shards(dataset):
    """A shard's labels.json is the sample's label columns of the parquet, under the same names
    (the action label is `a_v` in both, not `labels["action"]["action"]` in the shards)."""
    import polars as pl

    from pipeline.dataset.layout import SAMPLE_COLUMNS

    root, _ = dataset
    table = pl.concat(
        [pl.read_parquet(p) for p in sorted((root / "ds" / "data").glob("*.parquet"))]
    )
    label_columns = [c for c in table.columns if c not in SAMPLE_COLUMNS]
    assert "a_v" in label_columns and "a_v_status" in label_columns
    rows = {row["key"]: row for row in table.select("key", *label_columns).iter_rows(named=True)}
    samples = list(iter_stacked(root / "ds" / "wds", stack=1))
    assert len(samples) == len(rows)
    for sample in samples:
        expected = {k: v for k, v in rows[sample["key"]].items() if k != "key"}
        assert sample["labels"] == expected, sample["key"]
    assert any(s["labels"]["a_v"] is not None for s in samples)


def test_rebuild_replaces_files(dataset, tmp_path):
    root, _ = dataset
    out = tmp_path / "ds"
    build_dataset(
        root / "rollouts",
        root / "labels.parquet",
        root / "masks.parquet",
        out,
        shard_max_samples=20,
    )
    (out / "wds" / "shard-000009.tar").write_bytes(b"stale")
    info = build_dataset(
        root / "rollouts",
        root / "labels.parquet",
        root / "masks.parquet",
        out,
        shard_max_samples=1000,
    )
    assert (
        sorted(p.name for p in (out / "wds").iterdir()) == ["shard-000000.tar"]
        and info["counts"]["wds_shards"] == 1
    )


def test_shared_dataset_keeps_the_labels_provenance(dataset):
    """Whoever gets the dataset can tell queried frames from carried ones and re-audit the raw
    answers: per task, queried / source_key / teacher_id / raw_text / parse_detail."""
    root, _ = dataset
    ds = load_dataset(str(root / "ds"), cache_dir=str(root / "hf_cache"))["train"]
    labels = pl.read_parquet(root / "labels.parquet").filter(pl.col("task") == "action")
    by_key = {r["sample_key"]: r for r in labels.iter_rows(named=True)}
    checked = 0
    for row in ds:
        label = by_key.get(row["key"])
        if label is None:
            assert row["a_v_queried"] is None and row["a_v_raw_text"] is None
            continue
        assert row["a_v_queried"] == label["queried"]
        assert row["a_v_source_key"] == label["source_key"]
        assert row["a_v_teacher_id"] == label["teacher_id"]
        if label["queried"]:
            assert row["a_v_raw_text"] == label["raw_text"]
            checked += 1
        else:  # the raw answer lives on the queried row the carried one names
            assert row["a_v_raw_text"] is None and row["a_v_source_key"] != row["key"]
    assert checked > 0


def test_a_damaged_info_json_is_named_with_the_fix(dataset, tmp_path):
    """Every reader of meta/info.json (training, C_V, verify) names the file, not only the JSON
    position."""
    import shutil

    from pipeline.dataset.layout import INFO_PATH, DatasetError, read_info, verify_dataset

    root, _ = dataset
    copy = tmp_path / "ds"
    shutil.copytree(root / "ds", copy)
    info = copy / INFO_PATH
    info.write_text(info.read_text()[:-40])  # cut: no longer valid JSON
    with pytest.raises(DatasetError, match=rf"{info} is not valid JSON \(.*\); restore it with `dvc checkout {copy}`"):  # fmt: skip
        read_info(copy)
    (problem,) = verify_dataset(copy)
    assert problem.startswith(f"{info} is not valid JSON")
    info.write_text("[1, 2]")
    with pytest.raises(DatasetError, match=rf"{info}: expected a JSON object"):
        read_info(copy)


def test_a_map_style_dataset_serves_transitions_by_index(dataset):
    """`StackedDataset`: len() transitions, item i stacked by index as iter_stacked stacks the
    stream (the same frames), with the transition's action, reward, next frames and labels; torch's
    DataLoader shuffles it like any map-style dataset."""
    import torch

    from pipeline.dataset.mapstyle import StackedDataset

    root, info = dataset
    ds = StackedDataset(root / "ds", obs="pixels", stack=3, labels=("action", "judge"))
    # 3 episodes collected by the fixture: their final samples start no transition
    assert len(ds) == info["counts"]["samples"] - 3
    stream = {(s["episode"], s["t"]): s for s in iter_stacked(root / "ds" / "wds", stack=3)}
    table = pl.read_parquet(sorted((root / "ds" / "data").glob("*.parquet"))).filter(
        ~pl.col("is_last")
    )
    for i, row in enumerate(table.iter_rows(named=True)):
        item = ds[i]
        e, t = row["episode"], row["t"]
        np.testing.assert_array_equal(item["obs"], stream[(e, t)]["obs"])
        np.testing.assert_array_equal(item["next_obs"], stream[(e, t + 1)]["obs"])
        np.testing.assert_allclose(item["action"], row["action"], rtol=1e-6)
        assert (
            item["reward"] == pytest.approx(row["reward"])
            and item["terminated"] == row["terminated"]
        )
        # the key back to the frame: the dataset's row, and so the label table's sample_key
        assert (item["key"], item["episode"], item["t"]) == (row["key"], e, t)
    assert {"a_v", "judge"} <= set(ds[0])
    np.testing.assert_array_equal(ds[-1]["obs"], ds[len(ds) - 1]["obs"])
    with pytest.raises(IndexError, match=f"transition {len(ds)} of a dataset of {len(ds)}"):
        ds[len(ds)]
    loader = torch.utils.data.DataLoader(
        ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    batch = next(iter(loader))
    assert batch["obs"].shape == (8, 3, 32, 32, 3) and batch["obs"].dtype == torch.uint8
    assert len(batch["key"]) == 8 and all(isinstance(k, str) for k in batch["key"])
