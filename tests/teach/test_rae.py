"""Behaviours `teacher` and `rae` (ERPv D.1): who acts when, and teacher answers paid once."""

import polars as pl
import pytest

from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.rollouts.collect import collect
from pipeline.teach.rollouts.reader import iter_rollouts
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.conftest import collect_cfg, env_cfg, label_cfg
from tests.teach.test_label import CountingTeacher

MC = "MountainCar-v0"


def _episodes(rollout_dir):
    episodes: dict[int, list[dict]] = {}
    for sample in iter_rollouts(rollout_dir):
        if not sample.record["is_last"]:
            episodes.setdefault(sample.episode, []).append(sample.record)
    return episodes


def test_teacher_behaviour_acts_on_the_teachers_answers(tmp_path):
    teacher = CountingTeacher(ScriptedTeacher(1.0, 0))
    cfg = collect_cfg(behaviour="teacher", teacher_every_k=1, episodes=1)
    manifest = collect(
        MC, env_cfg(max_episode_steps=200), cfg, tmp_path / "r", teacher=teacher, progress=False
    )
    (episode,) = manifest["episodes"]
    assert episode["terminated"], "a reliable energy-pumping teacher reaches the flag"
    records = _episodes(tmp_path / "r")[0]
    assert {r["behaviour"] for r in records} == {"teacher"}
    assert teacher.calls == len(records)  # asked every step (k=1), one prompt per call


def test_rae_alternates_explorer_and_teacher_phases(tmp_path):
    teacher = CountingTeacher(ScriptedTeacher(0.8, 0))
    cfg = collect_cfg(behaviour="rae", rae_switch_steps=(5, 12), teacher_every_k=4, episodes=4)
    collect(MC, env_cfg(max_episode_steps=60), cfg, tmp_path / "r", teacher=teacher, progress=False)
    for records in _episodes(tmp_path / "r").values():
        tags = [r["behaviour"] for r in records]
        runs = []  # lengths of maximal runs of the same phase
        for i, tag in enumerate(tags):
            phase = (
                "explorer" if tag == "explorer" else "teacher"
            )  # before its first answer the teacher may act randomly
            if i and phase == runs[-1][0]:
                runs[-1][1] += 1
            else:
                runs.append([phase, 1])
        assert len(runs) >= 2, "both the explorer and the teacher act within an episode"
        lengths = {n for _, n in runs[:-1]}  # the last phase is cut by the episode end
        assert len(lengths) == 1 and 5 <= lengths.pop() <= 12  # one T_switch per episode


def test_teacher_answers_paid_while_collecting_are_not_paid_again_by_label(tmp_path):
    collecting = CountingTeacher(ScriptedTeacher(0.8, 0))
    cfg = collect_cfg(behaviour="rae", rae_switch_steps=(5, 12), teacher_every_k=5, episodes=3)
    collect(MC, env_cfg(), cfg, tmp_path / "r", teacher=collecting, progress=False)
    assert collecting.calls > 0
    labelling = CountingTeacher(ScriptedTeacher(0.8, 0))
    summary = label_rollouts(
        tmp_path / "r",
        label_cfg(tasks={"action": 5}),
        labelling,
        tmp_path / "c",
        tmp_path / "t.parquet",
        progress=False,
    )
    queried = pl.read_parquet(tmp_path / "t.parquet").filter(pl.col("queried")).height
    assert (
        summary.cache_hits > 0
        and summary.teacher_calls + summary.cache_hits == summary.queried == queried
    )
    assert not set(collecting.asked) & set(labelling.asked)


def test_rae_collection_is_deterministic(tmp_path):
    cfg = collect_cfg(behaviour="rae", rae_switch_steps=(5, 12), teacher_every_k=5)
    a = collect(MC, env_cfg(), cfg, tmp_path / "a", teacher=ScriptedTeacher(0.8, 0), progress=False)
    b = collect(MC, env_cfg(), cfg, tmp_path / "b", teacher=ScriptedTeacher(0.8, 0), progress=False)
    assert [s["sha256"] for s in a["shards"]] == [s["sha256"] for s in b["shards"]]
    c = collect(MC, env_cfg(), cfg, tmp_path / "c", teacher=ScriptedTeacher(0.5, 0), progress=False)
    assert a["fingerprint"] != c["fingerprint"]


def test_manifest_names_the_acting_teacher_and_an_old_manifest_is_refused(tmp_path):
    """Rollout format 1 manifests may lack `acting_teacher`: they were rewritten in place (a
    migration shim, issue 26); now every reader refuses them with the format found and wanted,
    collect refuses to reuse them, and --replace (what `dvc repro` passes) recollects."""
    import json

    from pipeline.teach.rollouts.collect import CollectError
    from pipeline.teach.rollouts.reader import RolloutIntegrityError, load_manifest

    teacher = ScriptedTeacher(0.8, 0)
    cfg = collect_cfg(behaviour="rae", rae_switch_steps=(5, 12), teacher_every_k=4, episodes=1)
    out = tmp_path / "r"
    manifest = collect(MC, env_cfg(max_episode_steps=30), cfg, out, teacher=teacher, progress=False)
    assert manifest["acting_teacher"]["id"] == teacher.teacher_id
    assert "teacher" not in manifest["collect"]  # settings of the acting teacher live beside it
    old = {k: v for k, v in manifest.items() if k != "acting_teacher"}
    (out / "manifest.json").write_text(json.dumps({**old, "format_version": 1}))
    with pytest.raises(RolloutIntegrityError, match="rollout format 1, this code reads 2"):
        load_manifest(out)
    with pytest.raises(CollectError, match="rollout format 1, this code writes 2"):
        collect(MC, env_cfg(max_episode_steps=30), cfg, out, teacher=teacher, progress=False)
    again = collect(
        MC, env_cfg(max_episode_steps=30), cfg, out, teacher=teacher, progress=False, replace=True
    )
    assert again == manifest == load_manifest(out)
    random_cfg = collect_cfg(episodes=1)
    plain = collect(MC, env_cfg(max_episode_steps=30), random_cfg, tmp_path / "p", progress=False)
    assert plain["acting_teacher"] is None


def _cache_files(rollout_dir):
    return {p.name: p.read_bytes() for p in (rollout_dir / "teacher_cache").glob("segment-*")}


def test_a_longer_collection_reverted_leaves_the_teacher_cache_of_the_shorter_one(tmp_path):
    """A collection of 3 episodes replaced (as `dvc repro` does after params went back) by one of
    1 keeps only the answers episode 0 asked: the same cache files as a fresh 1-episode
    collection's, and its manifest records them. Nothing is paid twice on the way."""
    cfg = collect_cfg(behaviour="rae", rae_switch_steps=(5, 12), teacher_every_k=4)
    env = env_cfg(max_episode_steps=40)
    fresh = collect(MC, env, cfg.model_copy(update={"episodes": 1}), tmp_path / "fresh",
                    teacher=ScriptedTeacher(0.8, 0), progress=False)  # fmt: skip
    out = tmp_path / "r"
    collect(MC, env, cfg.model_copy(update={"episodes": 3}), out,
            teacher=ScriptedTeacher(0.8, 0), progress=False)  # fmt: skip
    assert len(_cache_files(out)) > len(_cache_files(tmp_path / "fresh"))
    teacher = CountingTeacher(ScriptedTeacher(0.8, 0))
    reverted = collect(MC, env, cfg.model_copy(update={"episodes": 1}), out, teacher=teacher,
                       replace=True, progress=False)  # fmt: skip
    assert teacher.calls == 0  # episode 0's answers were still there
    assert _cache_files(out) == _cache_files(tmp_path / "fresh")
    assert reverted["episodes"] == fresh["episodes"]
    (episode,) = reverted["episodes"]
    assert len(episode["teacher_keys"]) == len(_cache_files(out)) > 0
