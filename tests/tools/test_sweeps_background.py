"""`vlmrl-sweep resume PLAN` (pipeline/tools/sweeps/background.py): the order of its steps, with
DVC's side replaced by a log; the real queue's kill-and-resume is the slow killed-queue test."""

import dataclasses
import subprocess

import pytest
import yaml

import pipeline.tools.sweeps.background as background
from pipeline.tools.sweeps.cli import main
from pipeline.tools.sweeps.status import statuses


def table_spec(name: str) -> dict:
    return {
        "table": name,
        "seeds": [0, 1],
        "cells": {"x": {"train": {"env": "E-v0", "method": "sac", "steps": 100}}},
    }


def git(repo, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def plan(tmp_path):
    """A repository holding two tables and a plan (b before a), and a clone holding the commits
    the plan names."""
    main_repo = tmp_path / "main"
    (main_repo / "tables").mkdir(parents=True)
    git(main_repo, "init", "-q")
    for name in ("a", "b"):
        (main_repo / "tables" / f"{name}.yaml").write_text(yaml.safe_dump(table_spec(name)))
    git(main_repo, "add", ".")
    git(main_repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    first = git(main_repo, "rev-parse", "HEAD")
    git(main_repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
        "--allow-empty", "-m", "two")  # fmt: skip
    second = git(main_repo, "rev-parse", "HEAD")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(main_repo), str(clone))
    entries = [
        {"table": "tables/b.yaml", "rev": second[:7], "results": "results/b"},
        {"table": "tables/a.yaml", "rev": first, "results": "results/a"},
    ]
    path = main_repo / "tables" / "background.yaml"
    path.write_text(yaml.safe_dump({"tables": entries}))
    return path, clone, first, second


def test_resume_takes_the_queue_down_then_queues_each_table_in_the_plans_order(plan, monkeypatch):
    """The queued tasks of every table come off DVC's queue before any table is queued again,
    so that the first table's orphans, queued again at the back, still run before the second
    table's tasks; each table is queued from the clone at its own commit (given short, resolved
    in full), then the workers start and each table is waited on in turn, its results kept."""
    path, clone, first, second = plan
    log = []

    def all_statuses(table, rows):
        found = statuses(table, {})
        states = {0: "queued", 1: "running" if table.table == "b" else "done"}
        return [dataclasses.replace(f, state=states[f.seed]) for f in found]

    real = background.run_checked

    def run_checked(args, repo):
        assert repo == clone
        if args[:2] == ["git", "rev-parse"]:  # the plan's commits, resolved in the clone
            return real(args, repo)
        log.append(tuple(args))

    monkeypatch.setattr(background, "check_clean", lambda repo: log.append(("clean",)))
    monkeypatch.setattr(background, "settled_rows", lambda repo, rev: log.append(("rows", rev)))
    monkeypatch.setattr(background, "all_statuses", all_statuses)
    monkeypatch.setattr(background, "committed", lambda table, results: {"of": results.name})
    monkeypatch.setattr(background, "run_checked", run_checked)

    def queue(table, repo, *, kept, rev):
        log.append(("queue", table.table, rev, kept["of"]))
        return []

    monkeypatch.setattr(background, "queue", queue)
    monkeypatch.setattr(background, "start_workers",
                        lambda repo, jobs, workers: log.append(("workers", jobs, workers.nice)))  # fmt: skip

    def wait(table, repo, *, jobs, rev, workers, kept, keep, table_path):
        log.append(("wait", table.table, rev, keep.results.name, keep.commit, table_path.name))

    monkeypatch.setattr(background, "wait", wait)
    # the poller lowers its own priority to the workers' before it waits (not this test's)
    monkeypatch.setattr(
        background.Workers, "lower_priority", lambda self: log.append(("lowered", self.nice))
    )
    argv = ["resume", str(path), "--repo", str(clone), "--jobs", "2", "--nice", "19", "--wait",
            "--commit"]  # fmt: skip
    assert main(argv) == 0
    assert log == [
        ("clean",),
        ("rows", second), ("dvc", "queue", "remove", "b-x-s0"),
        ("rows", first), ("dvc", "queue", "remove", "a-x-s0"),
        ("git", "checkout", "-q", second), ("queue", "b", second, "b"),
        ("git", "checkout", "-q", first), ("queue", "a", first, "a"),
        ("workers", 2, 19),
        ("lowered", 19),
        ("wait", "b", second, "b", True, "b.yaml"),
        ("wait", "a", first, "a", True, "a.yaml"),
    ]  # fmt: skip

    log.clear()  # without --wait: queued and started, nothing waited on
    assert main(["resume", str(path), "--repo", str(clone), "--jobs", "2"]) == 0
    assert [entry[0] for entry in log].count("queue") == 2
    assert log[-1] == ("workers", 2, 10)
    assert not any(entry[0] in ("wait", "lowered") for entry in log)


def test_a_plan_that_names_a_commit_the_clone_lacks_or_no_tables_is_refused(plan, tmp_path, capsys):
    path, clone, first, _ = plan
    missing = yaml.safe_load(path.read_text())
    missing["tables"][1]["rev"] = "0" * 40
    path.write_text(yaml.safe_dump(missing))
    assert main(["resume", str(path), "--repo", str(clone)]) == 2
    err = capsys.readouterr().err
    assert "tables/a.yaml names commit 0000000000" in err and "does not hold" in err

    path.write_text(yaml.safe_dump({"tables": []}))
    assert main(["resume", str(path), "--repo", str(clone)]) == 2
    assert "not a plan of tables" in capsys.readouterr().err

    outside = tmp_path / "elsewhere.yaml"
    outside.write_text(yaml.safe_dump({"tables": [
        {"table": "t.yaml", "rev": first, "results": "r"}]}))  # fmt: skip
    assert main(["resume", str(outside), "--repo", str(clone)]) == 2
    assert "not in a git repository" in capsys.readouterr().err


def test_the_committed_plan_names_tables_and_results_of_this_repository():
    from pipeline.tools.sweeps.table import load_table
    from tests.conftest import REPO

    path = REPO / "benchmarks" / "background.yaml"
    plan = background.Plan.model_validate(yaml.safe_load(path.read_text()))
    assert background.plan_root(path) == REPO
    for entry in plan.tables:
        load_table(REPO / entry.table)
        assert entry.results.parts[:2] == ("benchmarks", "results"), entry.results  # may be new
