"""The `knowledge` page: the teacher acting alone, what its labels paid, each agent with the label
tasks it reads, a round's teacher calls; a missing input is named with the command that builds
it. (The stage runs for real in the DVC pipeline tests, on every env of the tiny pipeline.)"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import stages.knowledge
from pipeline.core.config import parse_params
from pipeline.core.errors import PipelineError
from pipeline.learn.methods.table import METHODS
from pipeline.loops.knowledge import knowledge_report
from tests.conftest import tiny_params_dict, write_params

ENV = "MountainCar-v0"
TEACHER = {
    "env": ENV, "episodes": 3, "seed": 1000, "std_ddof": 1, "teacher_id": "scripted:v2:x",
    "teacher_rows": [
        {"policy": "teacher:k=1", "return_mean": -120.0, "return_std": 4.0, "success_rate": 1.0,
         "welch_p_vs_random": 1e-5, "prompts_paid_on_a_fresh_build": 360},
        {"policy": "teacher:k=10", "return_mean": -150.0, "return_std": 9.0, "success_rate": 0.5,
         "welch_p_vs_random": 0.02, "prompts_paid_on_a_fresh_build": 37},
    ],
    "random": {"return_mean": -200.0, "return_std": 0.0, "success_rate": 0.0},
}  # fmt: skip


def _eval(method: str, mean: float, steps: int) -> dict:
    return {"env": ENV, "method": method, "episodes": 5, "return_mean": mean, "return_std": 2.5,
            "std_ddof": 1, "success_rate": 1.0, "train_steps": steps}  # fmt: skip


def _tree(root: Path) -> dict:
    """The metrics and label table of a built pipeline with a ppo run, a hybrid run and one
    labelling round of the hybrid run (its params as a dict)."""
    params = tiny_params_dict((ENV,))
    params["train"] = {
        "mc-ppo": {"env": ENV, "method": "ppo", "steps": 2048, "seed": 0},
        "mc-hybrid": {"env": ENV, "method": "hybrid_ppo", "steps": 2048, "seed": 0},
    }
    params["rounds"] = {
        "mc-hybrid-r1": {"run": "mc-hybrid", "env": ENV, "method": "hybrid_ppo", "round": 1,
                         "previous_agent": "models/mc-hybrid", "previous_data":
                         f"data/datasets/{ENV}", "episodes": 2, "steps": 500, "seed": 1},
    }  # fmt: skip
    (root / "metrics/teacher").mkdir(parents=True)
    (root / f"metrics/teacher/{ENV}.json").write_text(json.dumps(TEACHER))
    (root / "metrics/eval/rounds").mkdir(parents=True)
    (root / "metrics/eval/mc-ppo.json").write_text(json.dumps(_eval("ppo", -130.0, 2048)))
    (root / "metrics/eval/mc-hybrid.json").write_text(json.dumps(_eval("hybrid_ppo", -110.0, 2048)))
    (root / "metrics/eval/rounds/mc-hybrid-r1.json").write_text(
        json.dumps(_eval("hybrid_ppo", -105.0, 500))
    )
    (root / "metrics/rounds").mkdir(parents=True)
    (root / "metrics/rounds/mc-hybrid-r1.json").write_text(
        json.dumps({"costs": {"round": 1, "teacher_calls": 84}})
    )
    (root / "metrics/audit").mkdir(parents=True)
    (root / f"metrics/audit/{ENV}.json").write_text(json.dumps({
        "env": ENV, "has_reference": True,
        "agreement": {"judge": {"n": 2, "agree": 1, "rate": 0.5},
                      "milestone": {"n": 2, "agree": 2, "rate": 1.0}},
    }))  # fmt: skip
    (root / "data/labels").mkdir(parents=True)
    pl.DataFrame(
        {
            "task": ["milestone"] * 4 + ["judge"] * 2,
            "queried": [True, True, True, False, True, True],
            "parse_status": ["ok", "ok", "empty", "ok", "ok", "ok"],
            "judge": [None, None, None, None, True, False],
            # the third milestone prompt repeats the first (the same frame and prompt)
            "cache_key": ["m0", "m1", "m0", "m0", "j0", "j1"],
        }
    ).write_parquet(root / f"data/labels/{ENV}.parquet")
    return params


def _page(root: Path, params: dict) -> str:
    return knowledge_report(
        parse_params(params), root / "metrics/teacher", root / "data/labels",
        root / "metrics/eval", root / "metrics/rounds", root / "metrics/audit",
    )  # fmt: skip


def test_the_page_puts_the_teacher_its_cost_and_each_agent_with_what_it_reads(tmp_path):
    page = _page(tmp_path, _tree(tmp_path))
    assert f"## {ENV}" in page and "`scripted:v2:x` acting alone" in page
    n = json.loads((tmp_path / "metrics/teacher" / f"{ENV}.json").read_text())["episodes"]
    few = "; too few to test" if n < 3 else ""
    assert (
        f"| teacher:k=1 | -120.0 +- 4.0 (100% success) | 1e-05 (n = {n} vs {n}{few}) | 360 |"
        in page
    )
    assert "| uniform random actions | -200.0 +- 0.0 (0% success) | | 0 |" in page
    # prompts are queried rows by task; parsed: 4 of the 5 queried; judged reasonable: 1 of 2
    assert (
        "judge 2, milestone 3; 80.0% of the answers parsed (judge 100.0%, milestone 66.7%); "
        "50.0% of the judged" in page
    )
    assert "Mostly unlabelled" not in page
    # 4 distinct prompts of the 5 (one frame asked twice) at 6.95 s: 0.5 min of VLM time
    assert ("A build without the cache sends 4 of them to the teacher (a frame asked one "
            "question twice is answered once): at ERPv table 14's 6.95 s per Qwen2-VL-7B call, "
            "0.5 min of VLM time.") in page  # fmt: skip
    # the labels against the scripted reference, n beside each rate (the audit's metrics)
    assert ("Agreement with the scripted reference at reliability 1.0 (`audit`; answers that "
            "parsed, per task): judge 50.0% (n = 2), milestone 100.0% (n = 2)") in page  # fmt: skip
    assert "| mc-ppo | ppo | no label | 2,048 | -130.0 +- 2.5 (100% success) | 5 |" in page
    assert "| mc-hybrid | hybrid_ppo | `milestone` | 2,048 | -110.0 +- 2.5" in page
    assert "| mc-hybrid-r1 (round 1 of mc-hybrid: +84 teacher calls) | hybrid_ppo |" in page
    assert "+500 | -105.0 +- 2.5" in page
    assert "does not show that the labels caused it" in page


def test_a_task_whose_answers_mostly_carry_no_label_is_flagged(tmp_path):
    """A table kept with a raised label.max_parse_failure_rate: its collapsed task is named, not
    hidden in the overall share."""
    params = _tree(tmp_path)
    pl.DataFrame(
        {"task": ["milestone"] * 4 + ["judge"] * 4, "queried": [True] * 8,
         "parse_status": ["format_collapse"] * 3 + ["ok"] * 5,
         "judge": [None] * 4 + [True, False, True, True]}
    ).write_parquet(tmp_path / f"data/labels/{ENV}.parquet")  # fmt: skip
    teacher = tmp_path / "metrics/teacher" / f"{ENV}.json"
    teacher.write_text(json.dumps({**json.loads(teacher.read_text()), "episodes": 2}))
    page = _page(tmp_path, params)
    assert "1e-05 (n = 2 vs 2; too few to test)" in page  # the default build's 2 episodes
    assert "(judge 100.0%, milestone 25.0%)" in page
    assert "**Mostly unlabelled**: under half of the `milestone` answers carry a label" in page


def test_a_missing_metric_names_its_stage_and_the_stage_exits_2(tmp_path, capsys, monkeypatch):
    params = _tree(tmp_path)
    (tmp_path / "metrics/eval/mc-ppo.json").unlink()
    with pytest.raises(PipelineError, match=r"mc-ppo.json: missing \(evaluate@mc-ppo's metrics\)"):
        _page(tmp_path, params)
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path / "params.yaml", params)
    assert stages.knowledge.main(["--out", "reports/knowledge.md"]) == 2
    assert "run `dvc repro`" in capsys.readouterr().err
    assert not (tmp_path / "reports/knowledge.md").exists()
    (tmp_path / "metrics/eval/mc-ppo.json").write_text("{not json")
    with pytest.raises(PipelineError, match="not JSON"):
        _page(tmp_path, params)
    (tmp_path / f"data/labels/{ENV}.parquet").write_bytes(b"PAR1 torn")
    with pytest.raises(PipelineError, match=rf"unreadable .*dvc repro --force label@{ENV}"):
        _page(tmp_path, params)


def test_a_methods_teacher_tasks_are_the_tasks_behind_the_labels_it_reads():
    """The page's "reads" column: an off-policy method's replay labels come from these tasks
    (`mask` from the `objects` phrases), and a method that reads none declares none."""
    source = {"action": "action", "mask": "objects", "judge": "judge"}
    for name in METHODS:
        method = METHODS[name]
        labels = getattr(method, "labels", None)
        if labels is not None:
            assert set(method.teacher_tasks) == {source[label] for label in labels}, name
    assert METHODS["hybrid_ppo"].teacher_tasks == ("milestone",)
    assert METHODS["ppo"].teacher_tasks == () and METHODS["sac"].teacher_tasks == ()


def test_a_constant_teacher_is_flagged_whatever_its_parse_rate(tmp_path):
    """The Worst Model parses 100 %: the page says how many distinct answers each task got, and
    flags a decision task (action, milestone, judge) whose every parsed answer is one answer.
    Objects may rightly be one phrase list for a scene: counted, not flagged."""
    params = _tree(tmp_path)
    constant = pl.DataFrame({
        "task": ["milestone"] * 3 + ["objects"] * 2,
        "queried": [True] * 5,
        "parse_status": ["ok"] * 5,
        "milestone": ["BOTTOM"] * 3 + [None] * 2,
        "objects": [None] * 3 + [["car", "flag"]] * 2,
    })  # fmt: skip
    constant.write_parquet(tmp_path / f"data/labels/{ENV}.parquet")
    page = _page(tmp_path, params)
    assert "distinct parsed answers by task: milestone 1, objects 1" in page
    assert "**Constant teacher**: every parsed `milestone` answer is the same one" in page
    varied = constant.with_columns(pl.Series("milestone", ["BOTTOM", "GOAL", "BOTTOM", None, None]))
    varied.write_parquet(tmp_path / f"data/labels/{ENV}.parquet")
    page = _page(tmp_path, params)
    assert "milestone 2, objects 1" in page and "Constant teacher" not in page


def test_an_env_without_a_reference_says_so_and_a_missing_audit_is_named(tmp_path):
    params = _tree(tmp_path)
    audit = tmp_path / "metrics/audit" / f"{ENV}.json"
    audit.write_text(json.dumps({"env": ENV, "has_reference": False, "agreement": {}}))
    assert "Agreement with a reference: none for this env" in _page(tmp_path, params)
    audit.unlink()
    with pytest.raises(PipelineError, match=rf"{ENV}\.json: missing \(audit@{ENV}'s metrics\)"):
        _page(tmp_path, params)
