"""The real `hf` code path (AutoProcessor / AutoModelForImageTextToText / generate) on a tiny
random Qwen2-VL built here; its garbage answers must come out as classified parse failures."""

import polars as pl
import pytest

from pipeline.core.config import TeacherConfig
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.labels.cache import open_telemetry
from pipeline.teach.labels.status import ParseStatus
from pipeline.teach.teachers import make_teacher
from tests.conftest import label_cfg
from tests.factories import build_tiny_qwen2_vl


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory):
    return build_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny-qwen2-vl"))


@pytest.fixture(scope="module")
def rollouts(collected):
    return collected("CarRacing-v3", episodes=1, image_size=56, max_episode_steps=12)


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # any attempt to reach the hub fails the test


def _teacher(path, **hf):
    cfg = TeacherConfig(
        backend="hf",
        reliability=1.0,
        seed=0,
        hf={"model": str(path), "max_new_tokens": 12, "batch_size": 4, **hf},
    )
    return make_teacher(cfg)


def test_hf_teacher_labels_and_classifies_garbage(tiny_vlm, rollouts, tmp_path):
    teacher = _teacher(tiny_vlm)
    assert teacher.teacher_id.startswith(f"hf:{tiny_vlm}@local-")
    cfg = label_cfg(tasks={"action": 4, "milestone": 4, "objects": 4, "judge": 4}, batch_size=8)
    summary = label_rollouts(
        rollouts, cfg, teacher, tmp_path / "cache", tmp_path / "t.parquet",
        telemetry_dir=tmp_path / "telemetry", progress=False,
    )  # fmt: skip
    table = pl.read_parquet(tmp_path / "t.parquet")
    assert summary.teacher_calls == summary.queried > 0
    queried = table.filter(pl.col("queried"))
    assert queried["raw_text"].null_count() == 0  # every answer kept raw
    statuses = set(queried["parse_status"])
    assert statuses <= {str(s) for s in ParseStatus} and "ok" not in statuses
    assert statuses & {"format_collapse", "truncated", "empty", "wrong_arity"}
    # each call's latency is kept, outside the table (a pure function of its inputs)
    assert "latency_s" not in table.columns
    telemetry = open_telemetry(tmp_path / "telemetry")
    assert all(telemetry.get(k)["latency_s"] > 0 for k in queried["cache_key"].unique())

    cached_teacher = _teacher(tiny_vlm)
    again = label_rollouts(
        rollouts,
        cfg,
        cached_teacher,
        tmp_path / "cache",
        tmp_path / "t2.parquet",
        progress=False,
    )
    assert again.teacher_calls == 0 and again.cache_hits == summary.queried
    assert cached_teacher.model is None  # every prompt a cache hit: the weights never loaded


def test_batched_generation_matches_one_at_a_time(tiny_vlm, rollouts):
    from pipeline.teach.labels.tasks import render_prompt
    from pipeline.teach.rollouts.reader import iter_rollouts, load_manifest

    space = load_manifest(rollouts)["action_space"]
    prompts = [
        render_prompt(
            task, "CarRacing-v3", space, s.frame_png, s.record["context"], s.record["action"]
        )
        for s, task in zip(
            list(iter_rollouts(rollouts))[:4],
            ["action", "milestone", "objects", "judge"],
            strict=True,
        )
    ]
    batched = [r.text for r in _teacher(tiny_vlm, batch_size=4).answer(prompts)]
    single = [r.text for r in _teacher(tiny_vlm, batch_size=1).answer(prompts)]
    assert batched == single


def test_a_different_checkpoint_is_a_different_teacher(tiny_vlm, tmp_path):
    other = build_tiny_qwen2_vl(tmp_path / "other", seed=1)
    assert _teacher(tiny_vlm).teacher_id != _teacher(other).teacher_id


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(OSError):
        _teacher(tmp_path / "no-such-model")
