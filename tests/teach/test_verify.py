import json
import shutil
import tarfile

import pytest

from pipeline.teach.rollouts.collect import collect
from pipeline.teach.rollouts.format import MANIFEST_NAME
from pipeline.teach.rollouts.verify import main as verify_main
from pipeline.teach.rollouts.verify import verify_rollouts
from pipeline.teach.rollouts.writer import AtomicShardWriter, encode_json
from tests.conftest import collect_cfg, env_cfg


@pytest.fixture(scope="module")
def good_rollouts(collected):
    return collected("MountainCar-v0", episodes=3)


@pytest.fixture
def rollouts(good_rollouts, tmp_path):
    copy = tmp_path / "mc"
    shutil.copytree(good_rollouts, copy)
    return copy


def _manifest(path):
    return json.loads((path / MANIFEST_NAME).read_text())


def _set_manifest(path, manifest):
    (path / MANIFEST_NAME).write_text(json.dumps(manifest))


def test_good_rollouts_pass(good_rollouts, capsys):
    report = verify_rollouts(good_rollouts)
    assert report.ok, report.problems
    assert (report.shards, report.episodes, report.steps, report.samples) == (2, 3, 60, 63)
    assert verify_main([str(good_rollouts)]) == 0
    assert "ok: 2 shards, 3 episodes, 60 steps, 63 samples" in capsys.readouterr().out


def test_truncated_shard_is_reported_by_name(rollouts, capsys):
    shard = rollouts / "shard-000001.tar"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    report = verify_rollouts(rollouts)
    assert not report.ok
    assert any(p.startswith("shard-000001.tar: sha256 does not match") for p in report.problems)
    assert any(
        p.startswith("shard-000001.tar: ") and "samples, manifest says 21" in p
        for p in report.problems
    )
    assert all("shard-000000.tar" not in p for p in report.problems)
    assert verify_main([str(rollouts)]) == 1
    assert "shard-000001.tar" in capsys.readouterr().out


def test_garbage_in_the_middle_of_a_shard_is_reported(rollouts):
    shard = rollouts / "shard-000000.tar"
    data = bytearray(shard.read_bytes())
    data[0:512] = b"\xff" * 512  # the first tar header
    shard.write_bytes(bytes(data))
    problems = verify_rollouts(rollouts).problems
    assert any(
        p.startswith("shard-000000.tar: ") and "samples, manifest says 42" in p for p in problems
    )


def test_tampered_manifest_hash_is_reported(rollouts):
    manifest = _manifest(rollouts)
    manifest["shards"][0]["sha256"] = "0" * 64
    _set_manifest(rollouts, manifest)
    assert verify_rollouts(rollouts).problems == [
        "shard-000000.tar: sha256 does not match the manifest"
    ]


def test_tampered_manifest_counts_are_reported(rollouts):
    manifest = _manifest(rollouts)
    manifest["episodes"][1]["steps"] = 25
    manifest["totals"]["samples"] = 1000
    _set_manifest(rollouts, manifest)
    problems = verify_rollouts(rollouts).problems
    assert any("episode 1 steps are not 0..25 contiguous" in p for p in problems)
    assert any("totals.samples = 1000, found 63" in p for p in problems)


def test_missing_and_unlisted_shards_are_reported(rollouts):
    (rollouts / "shard-000001.tar").rename(rollouts / "shard-000007.tar")
    problems = verify_rollouts(rollouts).problems
    assert "shard-000001.tar: listed in manifest.json but missing" in problems
    assert "shard-000007.tar: shard file not listed in manifest.json" in problems


def test_missing_manifest_and_interrupted_collection(rollouts):
    (rollouts / MANIFEST_NAME).unlink()
    assert verify_rollouts(rollouts).problems == ["manifest.json: missing"]
    (rollouts / MANIFEST_NAME).write_text("{ not json")
    assert "unreadable or incomplete" in verify_rollouts(rollouts).problems[0]


def test_bad_records_are_reported(rollouts):
    """Rewrite the last shard with an out-of-space action, a step gap and a missing member."""
    import io
    import tarfile

    from pipeline.teach.rollouts.reader import iter_shard

    shard = rollouts / "shard-000001.tar"
    samples = list(iter_shard(shard))
    writer = AtomicShardWriter(rollouts / "rewritten.tar")
    for sample in samples:
        record = dict(sample.record)
        if sample.t == 3:
            record["action"] = 7  # MountainCar has Discrete(3)
        if sample.t == 5:
            continue  # a gap in the steps
        if sample.t == 6:
            data = encode_json(record)  # the json member alone: no png
            member = tarfile.TarInfo(f"{sample.key}.json")
            member.size = len(data)
            writer._tar.addfile(member, io.BytesIO(data))
            continue
        writer.write(sample.key, sample.frame_png, encode_json(record))
    writer.close()
    (rollouts / "rewritten.tar").replace(shard)
    problems = verify_rollouts(rollouts).problems
    assert (
        "shard-000001.tar: sample 000002/000003: action 7 outside Discrete(3, start=0)" in problems
    )
    assert any(
        p.startswith("shard-000001.tar: unreadable") and "lacks ['png']" in p for p in problems
    )


def test_non_finite_rewards_and_states_are_reported(rollouts):
    """NaN / Infinity tokens (what a brought env's non-finite values became before collect
    refused them) are named by sample: prompts would quote them to the teacher."""
    import json

    from pipeline.teach.rollouts.reader import iter_shard

    shard = rollouts / "shard-000001.tar"
    samples = list(iter_shard(shard))
    writer = AtomicShardWriter(rollouts / "rewritten.tar")
    for sample in samples:
        record = dict(sample.record)
        if sample.t == 2:
            record["reward"] = float("nan")
        if sample.t == 4 and record.get("state"):
            record["state"] = [float("inf"), *record["state"][1:]]
        writer.write(sample.key, sample.frame_png, json.dumps(record).encode())
    writer.close()
    (rollouts / "rewritten.tar").replace(shard)
    problems = verify_rollouts(rollouts).problems
    assert any("000002/000002: reward nan is not finite" in p for p in problems), problems
    assert any("000002/000004: state [inf" in p and "non-finite" in p for p in problems), problems


def test_every_stage_that_reads_rollouts_checks_them_against_the_manifest(tmp_path):
    """A shard cut at a member boundary, or damaged, is named, never labelled: the label stage run
    alone (dvc repro -s, or by hand) reads the rollouts through the same check."""
    import shutil

    from pipeline.core.config import MasksConfig
    from pipeline.dataset.build import build_dataset
    from pipeline.teach.labelling.label import label_rollouts
    from pipeline.teach.masks import make_mask_backend
    from pipeline.teach.masks.compute import compute_masks
    from pipeline.teach.rollouts.reader import RolloutIntegrityError, iter_rollouts
    from pipeline.teach.teachers.scripted import ScriptedTeacher
    from tests.conftest import label_cfg

    good = tmp_path / "good"
    collect("MountainCar-v0", env_cfg(max_episode_steps=10), collect_cfg(episodes=2), good,
            progress=False)  # fmt: skip
    assert len(list(iter_rollouts(good))) == 2 * 11
    labels, masks = tmp_path / "labels.parquet", tmp_path / "masks.parquet"
    label_rollouts(good, label_cfg(), ScriptedTeacher(0.8, 0), tmp_path / "lc", labels,
                   progress=False)  # fmt: skip
    backend = make_mask_backend(MasksConfig(backend="scripted", batch_size=8))
    compute_masks(good, labels, backend, tmp_path / "mc", masks, batch_size=8, progress=False)
    shard = sorted(good.glob("shard-*.tar"))[0]
    data = shard.read_bytes()
    with tarfile.open(shard) as tar:
        members = tar.getmembers()
    cut_at = members[len(members) // 2].offset  # a member boundary: a valid, shorter tar
    for name, damaged, message in [
        ("cut", data[:cut_at] + b"\\0" * 1024, "truncated"),
        ("flipped", data[:600] + bytes([data[600] ^ 1]) + data[601:], "damaged"),
    ]:
        broken = tmp_path / name
        shutil.copytree(good, broken)
        (broken / shard.name).write_bytes(damaged)
        with pytest.raises(RolloutIntegrityError, match=f"{broken / shard.name} is {message}"):
            label_rollouts(broken, label_cfg(), ScriptedTeacher(0.8, 0), tmp_path / f"{name}c",
                           tmp_path / f"{name}.parquet", progress=False)  # fmt: skip
        assert not (tmp_path / f"{name}.parquet").exists()
        # the dataset stage's reader too (it once read shards without the manifest's checks)
        with pytest.raises(RolloutIntegrityError, match=f"{broken / shard.name} is {message}"):
            build_dataset(broken, labels, masks, tmp_path / f"{name}-ds", shard_max_samples=20)
        assert not (tmp_path / f"{name}-ds" / "meta" / "info.json").exists()
