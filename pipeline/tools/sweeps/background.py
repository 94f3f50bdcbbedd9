"""`vlmrl-sweep resume PLAN`: the tables that run as background work, started again in their
order at the start of a working day (docs/benchmarks.md, 'Tables that take days').

A plan names the tables in the order they should finish, each with the commit it was queued on
and its committed results directory, as paths in the repository that holds the plan:

    tables:
      - {table: benchmarks/tables/frames_mcc.yaml, rev: 543a509, results: benchmarks/results/frames_mcc}
      - {table: benchmarks/tables/frames_cartpole.yaml, rev: 99da6e6, results: ...}

DVC's queue runs its tasks first in, first out, and `queue` puts a run orphaned by a stopped
machine back at the end: behind every task of the tables queued after its own. So `resume`:

1. removes the queued (not running) tasks of every table of the plan from DVC's queue;
2. queues each table again, in the plan's order, from the clone checked out at the table's
   commit: the removed tasks and the orphans alike (each run goes on from its resume state),
   never what the table's results directory holds as done;
3. starts the workers and waits on each table in turn, writing (and with `commit`, committing)
   its results each time one more experiment lands.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.tools.sweeps.queue import (
    Keep,
    Workers,
    check_clean,
    queue,
    run_checked,
    start_workers,
    wait,
)
from pipeline.tools.sweeps.report import git_root
from pipeline.tools.sweeps.status import all_statuses, committed, settled_rows
from pipeline.tools.sweeps.table import SweepError, Table, load_table


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    table: Path = Field(description="the table's YAML file")
    rev: str = Field(
        pattern=r"^[0-9a-f]{7,40}$", description="the commit its experiments are queued on"
    )
    results: Path = Field(description="its committed results directory (`--results`)")


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tables: list[Entry] = Field(min_length=1, description="in the order they should finish")


@dataclass(frozen=True)
class Step:
    """One table of a plan, read: its paths resolved, its commit in full."""

    table: Table
    path: Path
    rev: str
    results: Path


def plan_root(path: Path) -> Path:
    """The root of the git repository that holds the plan file: its paths are relative to it."""
    root = git_root(path)
    if root is None:
        raise SweepError(f"{path}: not in a git repository; a plan names files of its repository")
    return root


def load_plan(path: Path, repo: Path) -> list[Step]:
    """The plan's tables, each loaded, with its commit resolved in `repo` (the clone the tables
    are queued from: it must hold every commit the plan names)."""
    try:
        plan = Plan.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise SweepError(f"{path}: not a plan of tables ({exc})") from exc
    root = plan_root(path)
    steps = []
    for entry in plan.tables:
        try:
            rev = run_checked(["git", "rev-parse", "--verify", f"{entry.rev}^{{commit}}"], repo)
        except SweepError as exc:
            raise SweepError(
                f"{path}: {entry.table} names commit {entry.rev}, which {repo} does not hold; "
                "fetch it there (git fetch) or clone the repository again"
            ) from exc
        table_path = root / entry.table
        steps.append(
            Step(load_table(table_path), table_path, rev.stdout.strip(), root / entry.results)
        )
    return steps


def resume(
    steps: list[Step], repo: Path, workers: Workers, jobs: int, *, commit: bool, wait_too: bool
) -> None:
    """Steps 1-3 of the module's doc for `steps` (`load_plan`), from the clone `repo`."""
    check_clean(repo)
    for step in steps:
        found = all_statuses(step.table, settled_rows(repo, step.rev))
        waiting = [f.name for f in found if f.state == "queued"]
        if waiting:
            run_checked(["dvc", "queue", "remove", *waiting], repo)
            print(f"{step.table.table}: {len(waiting)} queued task(s) taken off the queue",
                  flush=True)  # fmt: skip
    for step in steps:
        run_checked(["git", "checkout", "-q", step.rev], repo)
        queued = queue(step.table, repo, kept=committed(step.table, step.results), rev=step.rev)
        print(f"{step.table.table} at {step.rev[:7]}: queued {len(queued)} experiment(s)"
              + (f": {', '.join(s.name for s in queued)}" if queued else ""),
              flush=True)  # fmt: skip
    if jobs:
        start_workers(repo, jobs, workers)
    if not wait_too:
        return
    # the poller is background work too: its asks (up to POLL_SHARE of a core) at the workers'
    # priority, its session's autogroup with it when started in a session of its own (`setsid`)
    workers.lower_priority()
    for step in steps:
        wait(
            step.table, repo, jobs=jobs, rev=step.rev, workers=workers,
            kept=committed(step.table, step.results), keep=Keep(step.results, commit),
            table_path=step.path,
        )  # fmt: skip
