"""`vlmrl-sweep resume PLAN` (pipeline/tools/sweeps/background.py): the order of its steps, with
DVC's side replaced by a log; the real queue's kill-and-resume is the slow killed-queue test."""

import dataclasses
import subprocess

import pytest
import yaml

import pipeline.tools.sweeps.background as background
from pipeline.tools.sweeps.broker import BROKER_PROCESSED
from pipeline.tools.sweeps.cli import main
from pipeline.tools.sweeps.status import Progress, statuses


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


def fake_dvc(monkeypatch, clone, log, pending, progress=None):
    """background's DVC side replaced by `log`: each table's seed 0 queued and seed 1 running
    (b) or done (a); `to_queue` returns `pending[table]`'s seeds; `progress[table]` holds the
    resume states' steps by seed."""
    monkeypatch.setattr(background, "resume_progress", lambda table, root: {
        (table.run("x"), seed): Progress(step, 100, 0.0)
        for seed, step in (progress or {}).get(table.table, {}).items()
    })  # fmt: skip

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

    def to_queue(table, repo, *, kept, rev):
        log.append(("to_queue", table.table, rev, kept["of"]))
        return [f for f in statuses(table, {}) if f.seed in pending[table.table]]

    monkeypatch.setattr(background, "check_clean", lambda repo: log.append(("clean",)))
    monkeypatch.setattr(background, "end_orphans", lambda repo: log.append(("orphans",)))
    monkeypatch.setattr(background, "check_commit_paths", lambda repo: log.append(("paths",)))
    monkeypatch.setattr(background, "print_paid_again",
                        lambda table, repo: log.append(("paid again?", table.table)))  # fmt: skip
    monkeypatch.setattr(background, "print_missing_trees",
                        lambda table, repo: log.append(("trees?", table.table)))  # fmt: skip
    monkeypatch.setattr(background, "settled_rows", lambda repo, rev: log.append(("rows", rev)))
    monkeypatch.setattr(background, "all_statuses", all_statuses)
    monkeypatch.setattr(background, "committed", lambda table, results: {"of": results.name})
    monkeypatch.setattr(background, "run_checked", run_checked)
    monkeypatch.setattr(background, "to_queue", to_queue)
    monkeypatch.setattr(background, "queue_one",
                        lambda table, status, repo: log.append(("queue", status.name)))  # fmt: skip
    monkeypatch.setattr(background, "start_workers",
                        lambda repo, jobs, workers: log.append(("workers", jobs, workers.nice)))  # fmt: skip

    def wait_all(watches, repo, *, jobs, workers):
        log.append(("wait", jobs, *((w.table.table, w.rev, w.keep.results.name, w.keep.commit,
                                     w.table_path.name) for w in watches)))  # fmt: skip

    monkeypatch.setattr(background, "wait_all", wait_all)
    # the poller lowers its own priority to the workers' before it waits (not this test's)
    monkeypatch.setattr(
        background.Workers, "lower_priority", lambda self: log.append(("lowered", self.nice))
    )


def test_resume_takes_the_queue_down_then_queues_each_table_in_the_plans_order(plan, monkeypatch):
    """The queued tasks of every table come off DVC's queue before any table is queued again,
    so that the first table's orphans, queued again at the back, still run before the second
    table's tasks; each table is queued from the clone at its own commit (given short, resolved
    in full); the workers start once there is a run for each, while the rest is queued; then all
    the tables are waited on at once, each keeping its own results."""
    path, clone, first, second = plan
    log = []
    fake_dvc(monkeypatch, clone, log, {"b": [0], "a": [0, 1]})
    argv = ["resume", str(path), "--repo", str(clone), "--jobs", "2", "--nice", "19", "--wait",
            "--commit"]  # fmt: skip
    assert main(argv) == 0
    assert log == [
        ("lowered", 19),  # with --wait, background work from the start
        ("clean",),
        ("orphans",),
        # each commit can commit its experiments; what its tables' experiments pay again
        ("git", "checkout", "-q", second), ("paths",), ("paid again?", "b"), ("trees?", "b"),
        ("git", "checkout", "-q", first), ("paths",), ("paid again?", "a"), ("trees?", "a"),
        ("rows", second), ("dvc", "queue", "remove", "b-x-s0"),
        ("rows", first), ("dvc", "queue", "remove", "a-x-s0"),
        ("to_queue", "b", second, "b"), ("to_queue", "a", first, "a"),
        ("git", "checkout", "-q", second), ("queue", "b-x-s0"),
        ("git", "checkout", "-q", first), ("queue", "a-x-s0"),
        ("workers", 2, 19),
        ("queue", "a-x-s1"),
        ("wait", 2, ("b", second, "b", True, "b.yaml"), ("a", first, "a", True, "a.yaml")),
    ]  # fmt: skip

    log.clear()  # without --wait: queued and started, nothing waited on
    assert main(["resume", str(path), "--repo", str(clone), "--jobs", "2"]) == 0
    assert [entry[0] for entry in log].count("queue") == 3
    assert ("workers", 2, 10) in log
    assert not any(entry[0] in ("wait", "lowered") for entry in log)

    log.clear()  # fewer runs than workers: the workers start once all are queued
    fake_dvc(monkeypatch, clone, log, {"b": [], "a": [1]})
    assert main(["resume", str(path), "--repo", str(clone), "--jobs", "2"]) == 0
    assert [e for e in log if e[0] in ("queue", "workers")] == [("queue", "a-x-s1"),
                                                                ("workers", 2, 10)]  # fmt: skip


def test_wait_keeps_a_plans_results_as_they_land_and_leaves_the_queue_alone(
    plan, monkeypatch, capsys
):
    """A poller stopped alone (after an update of the tool's code) starts again with `wait`: it
    waits on every table at its commits, keeping each table's results, with no task taken off
    the queue or queued again (as `resume` would, minutes of queueing); a table file is not a
    plan."""
    path, clone, first, second = plan
    log = []
    fake_dvc(monkeypatch, clone, log, {"b": [0], "a": [0, 1]})
    argv = ["wait", str(path), "--repo", str(clone), "--jobs", "2", "--nice", "19", "--commit"]
    assert main(argv) == 0
    assert log == [
        ("lowered", 19),
        ("wait", 2, ("b", second, "b", True, "b.yaml"), ("a", first, "a", True, "a.yaml")),
    ]
    assert main(["wait", str(path.parent / "a.yaml"), "--repo", str(clone)]) == 2
    assert "is not a plan of tables" in capsys.readouterr().err


def test_an_interleaved_plan_queues_its_tables_in_turns(plan, monkeypatch):
    """`interleave: true`: each table's next run, round after round, the clone checked out at
    each run's own commit."""
    path, clone, first, second = plan
    spec = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**spec, "interleave": True}))
    log = []
    fake_dvc(monkeypatch, clone, log, {"b": [0], "a": [0, 1]})
    assert main(["resume", str(path), "--repo", str(clone), "--jobs", "1"]) == 0
    assert [e for e in log if e[0] in ("queue", "workers") or e[:2] == ("git", "checkout")][2:] == [
        ("git", "checkout", "-q", second), ("queue", "b-x-s0"), ("workers", 1, 10),
        ("git", "checkout", "-q", first), ("queue", "a-x-s0"), ("queue", "a-x-s1"),
    ]  # fmt: skip


def test_a_table_with_nothing_done_here_gets_one_run_in_the_first_round(plan, monkeypatch, capsys):
    """On a fresh machine both of P2's first runs (its `turns: 2`) trained the policy teacher,
    collected and pre-trained C_V side by side. A table none of whose experiments is done,
    running or partway here gets one run in the first round (the next restores those stages
    from DVC's run cache), its turns after; a table with one done keeps its turns."""
    path, clone, *_ = plan
    spec = yaml.safe_load(path.read_text())
    spec["tables"] = [{**entry, "turns": 2} for entry in spec["tables"]]
    path.write_text(yaml.safe_dump({**spec, "interleave": True}))
    argv = ["resume", str(path), "--repo", str(clone), "--jobs", "1"]

    def queued(log):
        return [e[1] for e in log if e[0] == "queue"]

    log = []  # b has one running, a one done: both keep their two runs a round
    fake_dvc(monkeypatch, clone, log, {"b": [0, 1], "a": [0, 1]})
    assert main(argv) == 0
    assert queued(log) == ["b-x-s0", "b-x-s1", "a-x-s0", "a-x-s1"]
    assert "first round" not in capsys.readouterr().out

    def nothing_here(table, rows):  # a fresh machine: nothing done or running
        return statuses(table, {})

    for progress, order in [
        (None, ["b-x-s0", "a-x-s0", "b-x-s1", "a-x-s1"]),
        ({"a": {1: 50}}, ["a-x-s1", "b-x-s0", "a-x-s0", "b-x-s1"]),
    ]:
        log = []  # with a resume state (a partway), a has paid its stages here
        fake_dvc(monkeypatch, clone, log, {"b": [0, 1], "a": [0, 1]}, progress)
        monkeypatch.setattr(background, "all_statuses", nothing_here)
        assert main(argv) == 0
        assert queued(log) == order
        out = capsys.readouterr().out
        assert "b: none of its experiments done or running here" in out
        assert ("a: none" in out) is (progress is None)


def test_turns_take_each_tables_teachers_first_then_seed_by_seed():
    from pipeline.tools.sweeps.status import Status

    def run(table, cell, seed):
        return Status(cell, seed, f"{table}-{cell}-{seed}", "missing")

    long = [run("p", c, s) for c in ("x", "y") for s in (0, 1, 2)] + [run("p", "teach", None)]
    short = [run("q", "z", 4)]
    order = [(i, r.name) for i, r in background.turns([long, short])]
    assert order == [
        (0, "p-teach-None"), (1, "q-z-4"),
        (0, "p-x-0"), (0, "p-y-0"), (0, "p-x-1"), (0, "p-y-1"), (0, "p-x-2"), (0, "p-y-2"),
    ]  # fmt: skip
    assert background.turns([[], []]) == []
    # an entry's `turns: 2`: two of its runs each round
    order = [r.name for _, r in background.turns([long[:4], short + short], [1, 2])]
    assert order == ["p-x-0", "q-z-4", "q-z-4", "p-y-0", "p-x-1", "p-x-2"]
    # the first round's shares apart: one run of q, then two a round
    order = [r.name for _, r in background.turns([long[:3], short * 3], [1, 2], [1, 1])]
    assert order == ["p-x-0", "q-z-4", "p-x-1", "q-z-4", "q-z-4", "p-x-2"]


def test_an_entrys_first_cells_are_queued_before_its_others_seed_by_seed():
    """`first: [y, z]` (a pre-registered comparison's cells before its amendments'): their
    runs seed by seed, then the other cells' seed by seed; the teachers' still first."""
    from pipeline.tools.sweeps.status import Status

    def run(cell, seed):
        return Status(cell, seed, f"p-{cell}-{seed}", "missing")

    runs = [run(c, s) for s in (2, 3) for c in ("x", "y", "z")] + [run("t", None)]
    names = [r.name for r in background.queue_order(runs, ("y", "z"))]
    assert names == ["p-t-None", "p-y-2", "p-z-2", "p-y-3", "p-z-3", "p-x-2", "p-x-3"]
    assert [r.name for r in background.queue_order(runs)] == [
        "p-t-None", "p-x-2", "p-y-2", "p-z-2", "p-x-3", "p-y-3", "p-z-3"
    ]  # fmt: skip
    order = [r.name for _, r in background.turns([runs[:6], [run("q", 0)]], leads=[("z",), ()])]
    assert order[:3] == ["p-z-2", "p-q-0", "p-z-3"]


def test_a_plans_first_cells_are_the_tables_own(plan, capsys):
    """`first` names a cell of its table; another name is refused before anything is queued,
    with the table's cells; a good one is its step's (`resume` hands each step's to `turns`)."""
    path, clone, *_ = plan
    spec = yaml.safe_load(path.read_text())
    spec["tables"][1]["first"] = ["y"]
    path.write_text(yaml.safe_dump(spec))
    assert main(["resume", str(path), "--repo", str(clone)]) == 2
    err = capsys.readouterr().err
    assert "tables/a.yaml's `first` names y, not a cell of a; its cells: x" in err
    spec["tables"][1]["first"] = ["x"]
    path.write_text(yaml.safe_dump(spec))
    steps, _ = background.load_plan(path, clone)
    assert [step.first for step in steps] == [(), ("x",)]


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


def test_status_of_a_plan_reads_each_table_on_its_commit_in_the_plans_order(
    plan, monkeypatch, capsys
):
    path, clone, first, second = plan
    asked = []
    monkeypatch.setattr(background, "settled_rows", lambda repo, rev: asked.append(rev) or {})
    monkeypatch.setattr(background, "committed", lambda table, results: {})
    assert main(["status", str(path), "--repo", str(clone)]) == 0
    out = capsys.readouterr().out
    assert asked == [second, first]
    assert out.index(f"== b (b.yaml at {second[:7]};") < out.index(f"== a (a.yaml at {first[:7]};")
    assert out.count("2 missing") == 2 and "b-x-s1" in out and "a-x-s0" in out
    assert "queue broker" not in out
    assert not background.is_plan(path.parent / "a.yaml")  # a table is not a plan
    processed = clone / BROKER_PROCESSED
    processed.mkdir(parents=True)
    for i in range(1_001):  # past the count at which the poller cleans
        (processed / f"{i}.reply.celery.pidbox.msg").write_text("{}")
    assert main(["status", str(path), "--repo", str(clone)]) == 0
    assert "keeps 1,001 control messages" in capsys.readouterr().out


def test_a_table_amended_on_a_later_commit_is_read_on_both_and_queued_on_the_last(
    plan, monkeypatch, capsys
):
    """`rev: [first, second]`: the experiments queued on the first commit (running, waiting)
    are the table's too, so none is queued twice; what is queued now goes on the last."""
    path, clone, first, second = plan
    spec = yaml.safe_load(path.read_text())
    spec["tables"] = [{**spec["tables"][1], "rev": [first[:7], second]}]  # table a
    path.write_text(yaml.safe_dump(spec))
    log = []
    fake_dvc(monkeypatch, clone, log, {"a": [0]})
    assert main(["resume", str(path), "--repo", str(clone), "--jobs", "1", "--wait"]) == 0
    both = [first, second]
    assert ("rows", both) in log and ("to_queue", "a", both, "a") in log
    at = log.index(("queue", "a-x-s0"))
    assert log[at - 1] == ("git", "checkout", "-q", second)
    assert log[-1] == ("wait", 1, ("a", both, "a", False, "a.yaml"))
    capsys.readouterr()

    monkeypatch.setattr(background, "settled_rows", lambda repo, rev: log.append(rev) or {})
    assert main(["status", str(path), "--repo", str(clone)]) == 0
    assert f"(a.yaml at {first[:7]}, {second[:7]};" in capsys.readouterr().out
    assert log[-1] == both

    spec["tables"][0]["rev"] = []
    path.write_text(yaml.safe_dump(spec))
    assert main(["status", str(path), "--repo", str(clone)]) == 2
    assert "names no commit" in capsys.readouterr().err


def test_runs_with_a_resume_state_go_first_the_furthest_first(plan, monkeypatch):
    """Whatever the turns, a run that has a resume state has the least left to pay: the
    partial runs of every table come first (in the plan's order, the furthest along first
    within a table), then the rest in turns."""
    path, clone, _, _ = plan
    spec = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**spec, "interleave": True}))
    log = []
    fake_dvc(monkeypatch, clone, log, {"b": [0, 1], "a": [0, 1]},
             progress={"a": {1: 40, 0: 80}, "b": {1: 10}})  # fmt: skip
    assert main(["resume", str(path), "--repo", str(clone)]) == 0
    assert [e[1] for e in log if e[0] == "queue"] == [
        "b-x-s1",
        "a-x-s0",
        "a-x-s1",  # partial: b (the plan's first), then a's furthest first
        "b-x-s0",  # then the rest in turns
    ]
