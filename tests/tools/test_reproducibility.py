"""pipeline/tools/reproducibility.py: a rebuild keeps data outputs, deps and params exactly, and network
outputs by their metrics (settings equal, returns within the stated tolerance)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from pipeline.tools import reproducibility
from pipeline.tools.reproducibility import (
    Report,
    check_rebuild,
    compare_metrics,
    main,
    network_stages,
)


def _lock(model_md5="m1", rollout_md5="r1", eval_md5="e1", source_md5="s1") -> dict:
    return {
        "schema": "2.0",
        "stages": {
            "collect@cart": {
                "cmd": "python -m stages.collect --env cart",
                "deps": [{"path": "pipeline/core/envs", "md5": source_md5}],
                "params": {"params.yaml": {"collect.cart": {"episodes": 2}}},
                "outs": [{"path": "data/rollouts/cart", "md5": rollout_md5}],
            },
            "train@cart-sac": {
                "cmd": "python -m stages.train --run cart-sac",
                "deps": [{"path": "data/rollouts/cart", "md5": rollout_md5}],
                "params": {"params.yaml": {"env.cart": {"image_size": 84}, "sac": {}}},
                "outs": [
                    {"path": "metrics/train/cart-sac.json", "md5": "t1"},
                    {"path": "models/cart-sac", "md5": model_md5},
                ],
            },
            "evaluate@cart-sac": {
                "cmd": "python -m stages.evaluate --agent models/cart-sac",
                "deps": [{"path": "models/cart-sac", "md5": model_md5}],
                "params": {"params.yaml": {"env.cart": {"image_size": 84}, "evaluate": {}}},
                "outs": [{"path": "metrics/eval/cart-sac.json", "md5": eval_md5}],
            },
        },
    }


EVAL = {"env": "cart", "episodes": 5, "return_mean": 200.0, "return_std": 10.0, "method": "sac"}


def _check(
    before: dict, after: dict, changed: dict[str, tuple[dict, dict]], exact: bool = False
) -> Report:
    files = {path: pair for path, pair in changed.items()}
    return check_rebuild(
        yaml.safe_dump(before),
        yaml.safe_dump(after),
        ["dvc.lock", *files],
        lambda path: json.dumps(files[path][0]),
        lambda path: json.dumps(files[path][1]),
        exact=exact,
    )


def test_an_evaluation_is_a_network_stage_because_it_reads_an_agent():
    assert network_stages(_lock()["stages"]) == {"train@cart-sac", "evaluate@cart-sac"}


def test_network_outputs_may_differ_when_their_returns_agree(monkeypatch):
    monkeypatch.setitem(reproducibility.RETURN_TOLERANCE, "cart", 50.0)
    after = {**EVAL, "return_mean": 240.0, "return_std": 3.0}
    report = _check(
        _lock(), _lock("m2", eval_md5="e2"), {"metrics/eval/cart-sac.json": (EVAL, after)}
    )
    assert report.problems == []
    assert any("models/cart-sac m1 -> m2" in line for line in report.allowed)
    assert any("return_mean: 200 -> 240 (tolerance 50)" in line for line in report.allowed)


def test_a_return_beyond_the_tolerance_breaks_the_policy(monkeypatch):
    monkeypatch.setitem(reproducibility.RETURN_TOLERANCE, "cart", 50.0)
    after = {**EVAL, "return_mean": 260.0}
    report = _check(
        _lock(), _lock("m2", eval_md5="e2"), {"metrics/eval/cart-sac.json": (EVAL, after)}
    )
    assert report.problems == [
        "metrics/eval/cart-sac.json:return_mean: 200 -> 260, |difference| 60 > the tolerance 50"
    ]


@pytest.mark.parametrize(
    ("after", "says"),
    [
        ({**EVAL, "episodes": 4}, "a setting: equal everywhere"),
        ({**EVAL, "return_std": float("nan")}, "not finite"),
        ({**EVAL, "method": "erpv"}, "'sac' -> 'erpv'"),
        ({k: v for k, v in EVAL.items() if k != "return_std"}, "keys"),
    ],
)
def test_a_network_metric_file_keeps_its_settings_and_structure(after, says):
    report = _check(
        _lock(), _lock("m2", eval_md5="e2"), {"metrics/eval/cart-sac.json": (EVAL, after)}
    )
    assert len(report.problems) == 1 and says in report.problems[0]


def test_a_data_output_source_dep_or_param_that_differs_breaks_the_policy():
    report = _check(_lock(), _lock(rollout_md5="r2"), {})
    # the rollouts themselves, and the train stage's dep on them
    assert report.problems == [
        "collect@cart: data/rollouts/cart r1 -> r2",
        "train@cart-sac: data/rollouts/cart r1 -> r2",
    ]
    assert _check(_lock(), _lock(source_md5="s2"), {}).problems == [
        "collect@cart: pipeline/core/envs s1 -> s2"
    ]
    changed = _lock()
    changed["stages"]["collect@cart"]["params"]["params.yaml"]["collect.cart"]["episodes"] = 3
    assert _check(_lock(), changed, {}).problems == [
        "stage collect@cart: its params differs from the committed one"
    ]


def test_any_other_changed_file_breaks_the_policy():
    report = check_rebuild(
        yaml.safe_dump(_lock()), yaml.safe_dump(_lock()), ["dvc.lock", "data/.gitignore"],
        lambda path: "", lambda path: "",
    )  # fmt: skip
    assert report.problems == ["data/.gitignore: changed, and it is not a network stage's metrics"]


def test_nested_metrics_are_compared_leaf_by_leaf():
    before = {"costs": {"prompts": 84, "round": 1}, "rows": [{"return_mean": 1.0}]}
    report = Report()
    compare_metrics(
        "m.json",
        before,
        {"costs": {"prompts": 90, "round": 1}, "rows": [{"return_mean": 1.5}]},
        1.0,
        report,
    )
    assert report.problems == []
    assert report.allowed == [
        "m.json:costs.prompts: 84 -> 90",
        "m.json:rows[0].return_mean: 1 -> 1.5 (tolerance 1)",
    ]
    compare_metrics(
        "m.json",
        before,
        {"costs": {"prompts": 84, "round": 2}, "rows": [{"return_mean": 3.0}]},
        1.0,
        report,
    )
    assert [line.split(":")[1] for line in report.problems] == [
        "costs.round",
        "rows[0].return_mean",
    ]


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def _built_workspace(tmp_path, monkeypatch, before_commit=()) -> Path:
    """A git workspace in `tmp_path` (the cwd) holding a dvc.lock and an evaluation's metrics,
    committed after `before_commit` ran (e.g. `--record-machine`); its metrics file."""
    monkeypatch.setitem(reproducibility.RETURN_TOLERANCE, "cart", 50.0)
    monkeypatch.chdir(tmp_path)
    _git("init", "-q")
    (tmp_path / "metrics" / "eval").mkdir(parents=True)
    metrics = tmp_path / "metrics" / "eval" / "cart-sac.json"
    metrics.write_text(json.dumps(EVAL))
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(_lock()))
    for argv in before_commit:
        assert main(argv) == 0
    _git("add", ".")
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "built")
    return metrics


def test_the_command_checks_a_git_workspace(tmp_path, monkeypatch, capsys):
    metrics = _built_workspace(tmp_path, monkeypatch)
    assert main([]) == 0  # clean

    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(_lock("m2", eval_md5="e2")))
    metrics.write_text(json.dumps({**EVAL, "return_mean": 230.0}))
    assert main([]) == 0
    assert "return_mean: 200 -> 230 (tolerance 50)" in capsys.readouterr().out

    metrics.write_text(json.dumps({**EVAL, "return_mean": 300.0}))
    (tmp_path / "stray.txt").write_text("new")
    assert main(["--quiet"]) == 1
    out = capsys.readouterr().out
    assert (
        "stray.txt: changed" in out
        and "> the tolerance 50" in out
        and "allowed" not in out.split("\n")[0]
    )


def test_a_run_is_held_to_its_own_spread_before_its_envs(monkeypatch):
    """A run's own tolerance (from its seeds' spread) comes before its env's (the largest over
    the env's runs): a change within the env's but beyond the run's is refused."""
    monkeypatch.setitem(reproducibility.RETURN_TOLERANCE, "cart", 1000.0)
    monkeypatch.setitem(reproducibility.RUN_RETURN_TOLERANCE, "metrics/eval/cart-sac.json", 57.5)
    after = {**EVAL, "return_mean": 800.0}
    report = _check(
        _lock(), _lock("m2", eval_md5="e2"), {"metrics/eval/cart-sac.json": (EVAL, after)}
    )
    assert report.problems == [
        "metrics/eval/cart-sac.json:return_mean: 200 -> 800, |difference| 600 > the tolerance 57.5"
    ]


def test_on_the_build_machines_kernels_every_network_difference_is_a_problem(monkeypatch):
    monkeypatch.setitem(reproducibility.RETURN_TOLERANCE, "cart", 50.0)
    after = {**EVAL, "return_mean": 201.0}
    files = {"metrics/eval/cart-sac.json": (EVAL, after)}
    report = check_rebuild(
        yaml.safe_dump(_lock()), yaml.safe_dump(_lock("m2", eval_md5="e2")),
        ["dvc.lock", *files], lambda p: json.dumps(files[p][0]), lambda p: json.dumps(files[p][1]),
        exact=True,
    )  # fmt: skip
    assert report.allowed == []
    assert any("models/cart-sac m1 -> m2" in line and "same bytes" in line
               for line in report.problems)  # fmt: skip
    assert any("return_mean: 200 -> 201" in line for line in report.problems)


def test_an_output_edited_after_its_stage_wrote_it_is_a_problem():
    """`dvc status` against the workspace's dvc.lock: a model or report changed after `dvc
    repro` (without a new lock) is not what its stage wrote."""
    status = {
        "train@cart-sac": [{"changed outs": {"models/cart-sac": "modified"}}],
        "knowledge": [{"changed outs": {"reports/knowledge.md": "modified"}},
                      {"changed deps": {"metrics/eval/cart-sac.json": "modified"}}],
    }  # fmt: skip
    modified = reproducibility.modified_outputs(status)
    assert modified == ["models/cart-sac (modified)", "reports/knowledge.md (modified)"]
    report = check_rebuild(yaml.safe_dump(_lock()), yaml.safe_dump(_lock()), [], str, str,
                           modified=modified)  # fmt: skip
    assert [line.split(":")[0] for line in report.problems] == modified


def test_the_command_is_exact_on_the_machine_that_recorded_the_build(tmp_path, monkeypatch, capsys):
    metrics = _built_workspace(tmp_path, monkeypatch, before_commit=[["--record-machine"]])
    capsys.readouterr()
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(_lock("m2", eval_md5="e2")))
    metrics.write_text(json.dumps({**EVAL, "return_mean": 201.0}))
    assert main([]) == 1  # within the tolerance, but this is the build's machine
    out = capsys.readouterr().out
    assert out.startswith("exact check") and "same bytes" in out
    monkeypatch.setattr(reproducibility, "machine_fingerprint", lambda: {"cpu": "another"})
    assert main([]) == 0  # another machine: by the tolerance
    assert capsys.readouterr().out.startswith("tolerance check")


def test_a_label_stages_costs_may_differ_but_not_the_prompts_it_asks():
    """costs/label/<env>.json holds what this machine paid (calls, seconds, tokens): another
    machine, or a run the cache answered, writes other numbers, listed; the prompts a fresh
    build asks are data, compared exactly."""
    lock = _lock()
    lock["stages"]["label@cart"] = {
        "cmd": "python -m stages.label", "deps": [], "params": {},
        "outs": [{"path": "costs/label/cart.json", "md5": "c1"}],
    }  # fmt: skip
    rebuilt = yaml.safe_load(yaml.safe_dump(lock))
    rebuilt["stages"]["label@cart"]["outs"][0]["md5"] = "c2"
    cost = {"env": "cart", "prompts_fresh_build": 10, "prompts_by_task": {"action": 10},
            "this_run": {"teacher_calls": 10, "wall_seconds": 3.2}, "recorded": None}  # fmt: skip
    cached = {**cost, "this_run": {"teacher_calls": 0, "wall_seconds": 0.0}}
    files = {"costs/label/cart.json": (cost, cached)}
    report = _check(lock, rebuilt, files)
    assert report.problems == [] and len(report.machine) == 2
    files["costs/label/cart.json"] = (cost, {**cached, "prompts_fresh_build": 11})
    report = _check(lock, rebuilt, files)
    assert report.problems == ["costs/label/cart.json:prompts_fresh_build: 10 -> 11"]


def test_a_rounds_calls_follow_its_agent_and_are_listed_not_problems():
    """A round asks the teacher about the frames the last agent visited: on another machine's
    kernels that agent differs, and so do its calls (81 -> 80, seen on an Intel AVX-512 machine
    against the AMD build). They are network differences, listed (problems where the kernels
    are the committed build's); the round's number and env stay data."""
    lock = _lock()
    lock["stages"]["round@cart-r2"] = {
        "cmd": "python -m stages.round", "deps": [], "params": {},
        "outs": [{"path": "costs/rounds/cart-r2.json", "md5": "c1"}],
    }  # fmt: skip
    rebuilt = yaml.safe_load(yaml.safe_dump(lock))
    rebuilt["stages"]["round@cart-r2"]["outs"][0]["md5"] = "c2"
    cost = {"round": 2, "teacher_calls": 81, "seconds_at_erpv_rate": 562.95,
            "recorded": {"calls": 81}}  # fmt: skip
    moved = {**cost, "teacher_calls": 80, "seconds_at_erpv_rate": 556.0, "recorded": {"calls": 80}}
    files = {"costs/rounds/cart-r2.json": (cost, moved)}
    report = _check(lock, rebuilt, files)
    assert report.problems == []
    assert (
        "costs/rounds/cart-r2.json:teacher_calls: 81 -> 80 (the frames a network agent "
        "visited)" in report.allowed
    )
    assert _check(lock, rebuilt, files, exact=True).problems != []
    files["costs/rounds/cart-r2.json"] = (cost, {**moved, "round": 3})
    assert _check(lock, rebuilt, files).problems == ["costs/rounds/cart-r2.json:round: 2 -> 3"]
    files["costs/rounds/cart-r2.json"] = (cost, {**moved, "teacher_calls": None})
    assert _check(lock, rebuilt, files).problems == [
        "costs/rounds/cart-r2.json:teacher_calls: 81 -> None"
    ]


def test_the_command_runs_this_interpreters_dvc_with_no_venv_on_path(tmp_path, monkeypatch):
    """`.ci/run` calls `.venv/bin/vlmrl-lockcheck` without activating the venv: the `dvc status`
    it runs must be this interpreter's DVC, not one looked up on PATH."""
    import sys

    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], check=True)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no dvc here
    assert reproducibility._dvc_status() == {}
