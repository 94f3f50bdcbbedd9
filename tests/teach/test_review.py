"""The audit's review data (timeline, filters, two-teacher comparison) and the round trip of a
label table through Label Studio's JSON formats into a corrections file that the label stage
overlays on the base teacher's answers."""

import dataclasses
import json

import polars as pl
import pytest

from pipeline.core.config import TeacherConfig
from pipeline.teach.labelling.corrections import (
    CorrectionsError,
    read_corrections,
    write_corrections,
)
from pipeline.teach.labelling.exchange import (
    ReviewImportError,
    export_label_studio,
    import_label_studio,
    label_config,
)
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.labelling.review import (
    compare_teachers,
    facets,
    filter_rows,
    thumbnail,
    timeline,
    value_text,
)
from pipeline.teach.labels.schema import label_schema
from pipeline.teach.rollouts.reader import iter_rollouts, load_manifest
from pipeline.teach.teachers.baselines import ConstantTeacher, RandomTeacher
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.conftest import label_cfg

ENV = "MountainCar-v0"
TASKS = {"action": 3, "milestone": 2, "objects": 5, "judge": 4}


@pytest.fixture(scope="module")
def rollouts(collected):
    return collected(ENV, episodes=2, max_episode_steps=20)


def _label(rollouts, d, teacher, tasks=TASKS, cache="cache"):
    path = d / f"{teacher.teacher_id.replace(':', '_')}.parquet"
    label_rollouts(rollouts, label_cfg(tasks=tasks), teacher, d / cache, path, progress=False)
    return path


@pytest.fixture(scope="module")
def tables(rollouts, tmp_path_factory):
    d = tmp_path_factory.mktemp("labels")
    return (
        pl.read_parquet(_label(rollouts, d, ScriptedTeacher(1.0, 0))),
        pl.read_parquet(_label(rollouts, d, ScriptedTeacher(0.5, 3))),
        pl.read_parquet(_label(rollouts, d, ConstantTeacher())),
        pl.read_parquet(_label(rollouts, d, RandomTeacher(1))),
    )


def test_timeline_follows_the_table_step_by_step(tables):
    table = tables[1]
    line = timeline(table, 1)
    rows = table.filter(pl.col("episode") == 1)
    assert line["t"] == sorted(set(rows["t"])) and line["t"][0] == 0
    milestones = rows.filter(pl.col("task") == "milestone").sort("t")
    lane = line["tasks"]["milestone"]
    assert lane["queried"] == milestones["queried"].to_list()
    assert lane["status"] == milestones["parse_status"].to_list()
    for i, row in enumerate(milestones.iter_rows(named=True)):
        ok = row["parse_status"] in ("ok", "regex_fallback")
        assert lane["value"][i] == (row["milestone"] if ok else None)
        assert lane["potential"][i] == (row["potential"] if ok else None)
    # queried every 2nd step for milestone, every 3rd for action (label.tasks)
    assert lane["queried"][:4] == [True, False, True, False]
    assert line["tasks"]["action"]["queried"][:4] == [True, False, False, True]
    assert line["sample_keys"][0] == "000001/000000"
    with pytest.raises(ValueError, match="episode 7"):
        timeline(table, 7)


def test_facets_count_what_each_filter_selects(tables):
    table = tables[1]
    f = facets(table)
    assert sum(n for _, n in f["task"]) == table.height
    for status, n in f["parse_status"]:
        assert filter_rows(table, status=status).height == n
    task, status = "action", f["parse_status"][0][0]
    chosen = filter_rows(table, task=task, status=status, episode=0, queried_only=True)
    assert chosen.height == table.filter(
        (pl.col("task") == task) & (pl.col("parse_status") == status) & (pl.col("episode") == 0)
        & pl.col("queried")
    ).height  # fmt: skip
    assert filter_rows(table, teacher="nobody").is_empty()


def test_two_teachers_compared_on_the_same_frames(rollouts, tables):
    manifest = load_manifest(rollouts)
    reference, _, constant, random = tables
    same = compare_teachers(reference, reference, ENV, manifest["action_space"])
    for task, result in same["tasks"].items():
        assert result["rate"] == 1.0 and result["worst"] == [], task
    m = same["tasks"]["milestone"]
    assert sum(map(sum, m["confusion"])) == m["n"]
    assert all(m["confusion"][i][j] == 0 for i in range(5) for j in range(5) if i != j)

    diff = compare_teachers(reference, constant, ENV, manifest["action_space"])
    assert diff["a"].startswith("scripted:") and diff["b"].startswith("constant")
    for task, result in diff["tasks"].items():
        parsed = (
            reference.join(constant, on=["sample_key", "task"], suffix="_b")
            .filter(pl.col("queried") & pl.col("queried_b") & (pl.col("task") == task))
            .filter(pl.col("parse_status").is_in(["ok", "regex_fallback"]))
            .filter(pl.col("parse_status_b").is_in(["ok", "regex_fallback"]))
        )
        assert result["n"] == parsed.height, task
    action = diff["tasks"]["action"]
    assert sum(action["differences"][0]["hist"]) == action["n"]
    worst = action["worst"]
    assert worst and [w["gap"] for w in worst] == sorted((w["gap"] for w in worst), reverse=True)
    milestone = compare_teachers(reference, random, ENV, manifest["action_space"])["tasks"][
        "milestone"
    ]
    agree = sum(milestone["confusion"][i][i] for i in range(len(milestone["labels"])))
    assert agree == milestone["agree"] < milestone["n"]


def test_value_text_and_thumbnail(rollouts):
    assert value_text({"action": [0.5, -1.0]}) == "0.50, -1.00"
    assert value_text({"objects": ["car", "hill"]}) == "car, hill"
    assert value_text({"judge": False}) == "False" and value_text({}) == "-"
    sample = next(iter(iter_rollouts(rollouts)))
    assert thumbnail(sample.frame_png).startswith("data:image/jpeg;base64,")


def _choice(name, value):
    return [{"result": [{"from_name": name, "to_name": "image", "type": "choices",
             "value": {"choices": [value]}}]}]  # fmt: skip


def test_label_studio_round_trip_overlays_corrections_on_the_base_teacher(rollouts, tmp_path):
    """Export -> a reviewer corrects some tasks -> import as human:alice into the corrections
    file -> the label stage with the same base teacher replaces exactly the corrected rows (and
    the frames that carry them) and keeps every other answer, with no teacher call."""
    base = ScriptedTeacher(0.5, 3)
    labels = _label(rollouts, tmp_path, base)
    summary = export_label_studio(rollouts, labels, tmp_path / "ls", tasks=["milestone", "action"])
    exported = {t: json.loads((tmp_path / "ls" / f"{t}.json").read_text()) for t in summary.tasks}
    table = pl.read_parquet(labels).filter(pl.col("queried"))
    assert summary.tasks["milestone"] == table.filter(pl.col("task") == "milestone").height
    assert '<Choices name="milestone"' in (tmp_path / "ls/milestone.label_config.xml").read_text()
    first = exported["milestone"][0]
    assert first["data"]["image"].startswith("data:image/png;base64,")
    ok_rows = table.filter((pl.col("task") == "milestone") & (pl.col("parse_status") == "ok"))
    predicted = [t for t in exported["milestone"] if "predictions" in t]
    assert len(predicted) >= ok_rows.height  # regex fallbacks are pre-filled too

    # the reviewer: GOAL on the first 3 milestone tasks, one cancelled, the rest untouched;
    # push "right" on the first action task
    corrected = exported["milestone"]
    for item in corrected[:3]:
        item["annotations"] = _choice("milestone", "GOAL")
    corrected[3]["annotations"] = [{"was_cancelled": True, "result": []}]
    exported["action"][0]["annotations"] = _choice("push", "right")
    export = tmp_path / "export.json"
    export.write_text(json.dumps(corrected + exported["action"][:1]))
    path = tmp_path / "corrections" / f"{ENV}.jsonl"
    result = import_label_studio(export, rollouts, "alice", corrections=path)
    assert result.teacher_id == "human:alice" and result.path == path
    assert dict(result.imported) == {"milestone": 3, "action": 1}
    assert result.skipped == len(corrected) - 3
    assert len(read_corrections(path)) == 4 and len(path.read_text().splitlines()) == 4
    before = path.read_bytes()
    again = import_label_studio(export, rollouts, "alice", corrections=path)  # idempotent
    assert sum(again.imported.values()) == 0 and again.unchanged == 4
    assert path.read_bytes() == before

    cache = tmp_path / "cache"  # the base teacher's answers, as _label cached them
    out = tmp_path / "overlaid.parquet"
    got = label_rollouts(
        rollouts, label_cfg(tasks=TASKS), base, cache, out, progress=False, corrections=path
    )
    assert got.teacher_calls == 0 and got.corrected == 4 and got.corrections_unused == 0
    new, old = pl.read_parquet(out), pl.read_parquet(labels)
    assert new.height == old.height
    keys = {(t["data"]["sample_key"], "milestone") for t in corrected[:3]}
    keys.add((exported["action"][0]["data"]["sample_key"], "action"))
    human = new.filter(pl.col("teacher_id") == "human:alice")
    queried = human.filter(pl.col("queried"))
    assert set(queried.select("sample_key", "task").iter_rows()) == keys
    assert set(queried["parse_status"]) == {"ok"}
    assert set(human.filter(pl.col("task") == "milestone")["milestone"]) == {"GOAL"}
    assert set(human.filter(pl.col("task") == "action")["action_index"]) == {2}
    # the frames between two queries carry the corrected answer too
    assert set(human["source_key"]) == {k for k, _ in keys} and human.height > len(keys)
    # everything else is the base teacher's table, byte for byte in every column
    rest = new.filter(pl.col("teacher_id") != "human:alice")
    kept = old.join(human.select("sample_key", "task"), on=["sample_key", "task"], how="anti")
    assert rest.sort("sample_key", "task").equals(kept.sort("sample_key", "task"))
    assert set(rest["teacher_id"]) == {base.teacher_id}

    # a second review of one frame replaces the first; the file stays one line per (frame, task)
    corrected[0]["annotations"] = _choice("milestone", "BOTTOM")
    export.write_text(json.dumps(corrected[:1]))
    third = import_label_studio(export, rollouts, "bob", corrections=path)
    assert third.replaced == 1 and len(read_corrections(path)) == 4
    now = read_corrections(path)[(corrected[0]["data"]["sample_key"], "milestone")]
    assert now.reviewer == "bob" and "BOTTOM" in now.answer


def _exported_milestones(rollouts, tmp_path):
    """The milestone tasks Label Studio would import: the reliable teacher's labels, exported."""
    labels = _label(rollouts, tmp_path, ScriptedTeacher(1.0, 0))
    export_label_studio(rollouts, labels, tmp_path / "ls", tasks=["milestone"])
    return json.loads((tmp_path / "ls" / "milestone.json").read_text())


def test_an_export_nested_past_the_recursion_limit_is_named(rollouts, tmp_path):
    export = tmp_path / "e.json"
    export.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ReviewImportError, match=rf"{export}: not a Label Studio JSON export"):
        import_label_studio(export, rollouts, "bob", corrections=tmp_path / "c.jsonl")


def test_corrections_of_other_frames_or_tasks_are_refused_or_reported(rollouts, tmp_path):
    items = _exported_milestones(rollouts, tmp_path)
    items[0]["annotations"] = _choice("milestone", "GOAL")
    (tmp_path / "e.json").write_text(json.dumps(items[:1]))
    path = tmp_path / "c.jsonl"
    import_label_studio(tmp_path / "e.json", rollouts, "bob", corrections=path)
    key = items[0]["data"]["sample_key"]

    def relabel(tasks):
        out = tmp_path / "out.parquet"
        return label_rollouts(
            rollouts, label_cfg(tasks=tasks), ScriptedTeacher(1.0, 0), tmp_path / "cache", out,
            progress=False, corrections=path,
        )  # fmt: skip

    assert relabel({"action": 3}).corrections_unused == 1  # milestone not queried: reported
    (correction,) = read_corrections(path).values()
    write_corrections(path, [dataclasses.replace(correction, frame_sha256="0" * 64)])
    with pytest.raises(CorrectionsError, match=rf"{path}: the correction of \('{key}', 'milestone'\) was made on another frame"):  # fmt: skip
        relabel(TASKS)
    path.write_text('{"sample_key": "000000/000000"}\n')
    with pytest.raises(CorrectionsError, match=rf"{path}:1: a correction has the keys"):
        relabel(TASKS)


def test_import_refuses_what_it_cannot_store_faithfully(rollouts, tmp_path):
    items = _exported_milestones(rollouts, tmp_path)
    out = tmp_path / "c.jsonl"
    path = tmp_path / "e.json"
    items[0]["annotations"] = [{"result": []}]  # submitted without a choice
    path.write_text(json.dumps(items[:1]))
    with pytest.raises(ReviewImportError, match="no choices for 'milestone'"):
        import_label_studio(path, rollouts, "bob", corrections=out)
    items[0]["annotations"] = _choice("milestone", "FLYING")
    path.write_text(json.dumps(items[:1]))
    with pytest.raises(ReviewImportError, match="not a valid milestone label"):
        import_label_studio(path, rollouts, "bob", corrections=out)
    path.write_text("{not json")
    with pytest.raises(ReviewImportError, match="not a Label Studio JSON export"):
        import_label_studio(path, rollouts, "bob", corrections=out)
    with pytest.raises(ReviewImportError, match="reviewer name"):
        import_label_studio(path, rollouts, "a:b", corrections=out)
    assert not out.exists()  # nothing refused was written


def test_continuous_action_controls_are_named():
    """CarRacing's three number boxes each carry a header naming the dimension and its range."""
    space = {"type": "box", "low": [-1.0, 0.0, 0.0], "high": [1.0, 1.0, 1.0]}
    xml = label_config("action", "CarRacing-v3", space)
    names = label_schema("CarRacing-v3").action_names
    assert len(names) == 3
    for name, low, high in zip(names, space["low"], space["high"], strict=True):
        header = f'<Header value="{name} in [{low}, {high}]"/>'
        assert header in xml and xml.index(header) < xml.index(f'<Number name="{name}"')


def test_human_backend_names_the_overlay():
    with pytest.raises(ValueError, match=r"corrections/<env>\.jsonl"):
        TeacherConfig(backend="human", reliability=1.0, seed=0)


def _hostile(items):
    """Hand-edited or hostile exports: each must be refused with a ReviewImportError naming the
    file, never a traceback (they were 13 raw tracebacks and one hang)."""
    item = items[0]
    data = item["data"]
    milestone = _choice("milestone", "GOAL")

    def result(name, value):
        return [{**item, "annotations": [{"result": [{"from_name": name, "value": value}]}]}]

    return {
        "item not an object": ["task"],
        "data missing": [{"annotations": milestone}],
        "data not an object": [{**item, "data": [1, 2]}],
        "sample_key not a string": [{**item, "data": {**data, "sample_key": 7}}],
        "task missing": [{**item, "data": {k: v for k, v in data.items() if k != "task"}}],
        "unknown task": [{**item, "data": {**data, "task": "dance"}}],
        "annotations not a list": [{**item, "annotations": "yes"}],
        "annotation not an object": [{**item, "annotations": [3]}],
        "result not a list": [{**item, "annotations": [{"result": {"a": 1}}]}],
        "value not an object": result("milestone", 5),
        "two choices": result("milestone", {"choices": ["GOAL", "BOTTOM"]}),
        "choices not a list": result("milestone", {"choices": 12}),
        "cancelled flag a string": [
            {**item, "annotations": [{**milestone[0], "was_cancelled": "x"}]}
        ],
        "escape sequences": [{**item, "data": {**data, "env_id": "\x1b]0;owned\x07"}}],
        "a huge answer": [
            {
                **result("objects", {"text": ["car, " * 2_000_000]})[0],
                "data": {**data, "task": "objects"},
            }
        ],
    }


def test_a_hostile_export_is_refused_naming_the_file(rollouts, tmp_path):
    items = _exported_milestones(rollouts, tmp_path)
    out = tmp_path / "c.jsonl"
    path = tmp_path / "e.json"
    for name, export in _hostile(items).items():
        path.write_text(json.dumps(export))
        with pytest.raises(ReviewImportError) as err:
            import_label_studio(path, rollouts, "bob", corrections=out)
        assert str(path) in str(err.value), (name, str(err.value))
    assert not out.exists()  # nothing refused was written


def test_an_exported_selection_sends_exactly_its_rows_to_label_studio(rollouts, tmp_path, capsys):
    """The audit page's "export this selection" file drives `stages.review export --selection`:
    only those (sample_key, task) rows become Label Studio tasks; a malformed file is one line."""
    from stages import review as review_stage

    labels = _label(rollouts, tmp_path, ScriptedTeacher(0.5, 3))
    queried = pl.read_parquet(labels).filter(pl.col("queried"))
    picked = [(k, t) for k, t in queried.select("sample_key", "task").rows()][::7][:4]
    assert {t for _, t in picked} and len(picked) == 4
    selection = tmp_path / "selection.json"
    selection.write_text(json.dumps([{"sample_key": k, "task": t} for k, t in picked]))
    assert filter_rows(queried, selection=picked).height == 4
    argv = ["export", "--rollouts", str(rollouts), "--labels", str(labels)]
    assert (
        review_stage.main([*argv, "--out", str(tmp_path / "ls"), "--selection", str(selection)])
        == 0
    )
    exported = [
        (item["data"]["sample_key"], item["data"]["task"])
        for path in (tmp_path / "ls").glob("*.json")
        for item in json.loads(path.read_text())
    ]
    assert sorted(exported) == sorted(picked)
    selection.write_text('[{"sample": "x"}]')
    assert (
        review_stage.main([*argv, "--out", str(tmp_path / "ls2"), "--selection", str(selection)])
        == 2
    )
    error = capsys.readouterr().err
    assert "selection.json: not a selection the audit page exports" in error and "KeyError" in error


def test_an_export_that_matches_nothing_says_how_many_rows_each_filter_kept(
    rollouts, tmp_path, capsys
):
    """A selection of another table's frames (a labelling round's audit page) used to write
    nothing and say nothing: the stage now fails, naming each filter's count and the fix."""
    from stages import review as review_stage

    labels = _label(rollouts, tmp_path, ScriptedTeacher(0.5, 3))
    selection = tmp_path / "selection.json"
    selection.write_text(json.dumps([{"sample_key": "000099/000001", "task": "milestone"}]))
    argv = ["export", "--rollouts", str(rollouts), "--labels", str(labels)]
    out = tmp_path / "ls"
    assert review_stage.main([*argv, "--out", str(out), "--selection", str(selection)]) == 2
    error = capsys.readouterr().err
    assert "nothing to export, nothing written" in error
    assert "the selection's 1 (sample_key, task) pairs match 0" in error
    assert "none of its sample keys is in this table" in error and "data/rounds/" in error
    assert not out.exists() or not list(out.iterdir())
    assert review_stage.main([*argv, "--out", str(out), "--statuses", "no_such_status"]) == 2
    assert "--statuses no_such_status keeps 0" in capsys.readouterr().err
