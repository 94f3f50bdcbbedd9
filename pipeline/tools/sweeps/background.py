"""`vlmrl-sweep resume PLAN`: the tables that run as background work, started again in their
order at the start of a working day (docs/benchmarks.md, 'Tables that take days').

A plan names the tables in the order they should finish, each with the commit it was queued on
and its committed results directory, as paths in the repository that holds the plan:

    tables:
      - {table: benchmarks/tables/frames_mcc.yaml, rev: 543a509, results: benchmarks/results/frames_mcc}
      - {table: benchmarks/tables/frames_cartpole.yaml, rev: 99da6e6, results: ...}
    interleave: true  # optional: the tables take turns on the workers

DVC's queue runs its tasks first in, first out, and `queue` puts a run orphaned by a stopped
machine back at the end: behind every task of the tables queued after its own. So `resume`:

1. ends the stage processes that killed experiments left running (`orphans`), checks that
   each table's commit can commit its experiments (`check_commit_paths`), says what its
   experiments would pay again (`paid_again`) and which lock trees this cache lacks
   (`lock_trees`), then removes the queued (not running) tasks of every table of the plan from
   DVC's queue;
2. queues each table's runs again from the clone checked out at the table's commit: the removed
   tasks and the orphans alike (each run goes on from its resume state), never what the
   table's results directory holds as done. Runs that have a resume state go first (they have
   the least left to pay); then one table after another in the plan's order, or,
   with `interleave`, in turns (`turns`; an entry's `turns: 2` queues two of its runs each
   round): a long table then holds back no other, and each table's cells move seed by seed;
3. starts the workers as soon as there is a run for each (queueing takes minutes), and waits
   on all the tables at once, writing (and with `commit`, committing) a table's results each
   time one more of its experiments lands.

An entry's `rev` may list commits: those its experiments were queued on, the last the one they
are queued on now (a cell added by an amendment). All are read, so that nothing running or
waiting on an earlier one is queued twice.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from pipeline.tools.sweeps.broker import clean_broker, format_broker
from pipeline.tools.sweeps.left import format_left, steps_left
from pipeline.tools.sweeps.lock_trees import print_missing_trees
from pipeline.tools.sweeps.orphans import end_orphans, format_orphans, orphans
from pipeline.tools.sweeps.paid_again import print_paid_again
from pipeline.tools.sweeps.queue import (
    Keep,
    Watch,
    Workers,
    check_clean,
    check_commit_paths,
    queue_one,
    run_checked,
    start_workers,
    to_queue,
    wait_all,
)
from pipeline.tools.sweeps.report import git_root
from pipeline.tools.sweeps.status import (
    Progress,
    Status,
    all_statuses,
    committed,
    format_status,
    resume_progress,
    settled_rows,
    with_committed,
    with_progress,
)
from pipeline.tools.sweeps.table import SweepError, Table, load_table

Commit = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{7,40}$")]


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    table: Path = Field(description="the table's YAML file")
    rev: Commit | list[Commit] = Field(
        description="the commit its experiments are queued on; a list: the commits they were "
        "queued on, the last the one they are queued on now (a cell added by an amendment)"
    )
    results: Path = Field(description="its committed results directory (`--results`)")
    turns: int = Field(
        default=1, ge=1, description="with `interleave`: how many of its runs each round queues"
    )
    first: list[str] = Field(
        default_factory=list,
        description="cells whose runs are queued before the table's other cells' (seed by seed "
        "among them, then the others seed by seed): a pre-registered comparison's cells before "
        "its amendments'",
    )


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tables: list[Entry] = Field(min_length=1, description="in the order they should finish")
    interleave: bool = Field(
        default=False,
        description="the tables take turns on the workers (each table's next run, round after "
        "round, seed by seed) instead of one table after another",
    )


@dataclass(frozen=True)
class Step:
    """One table of a plan, read: its paths resolved, its commits in full."""

    table: Table
    path: Path
    revs: tuple[str, ...]  # every commit its experiments were queued on, the last one now
    results: Path
    turns: int = 1
    first: tuple[str, ...] = ()  # cells whose runs go before the others' (Entry.first)

    @property
    def rev(self) -> str:
        """The commit its experiments are queued on now."""
        return self.revs[-1]

    @property
    def read(self) -> str | list[str]:
        """The commits whose experiments are the table's (`settled_rows`' `rev`)."""
        return self.revs[0] if len(self.revs) == 1 else list(self.revs)


def plan_root(path: Path) -> Path:
    """The root of the git repository that holds the plan file: its paths are relative to it."""
    root = git_root(path)
    if root is None:
        raise SweepError(f"{path}: not in a git repository; a plan names files of its repository")
    return root


def is_plan(path: Path) -> bool:
    """Whether the YAML file `path` is a plan of tables (a mapping with `tables`), not a table."""
    try:
        spec = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False  # the table's loader says what is wrong with it
    return isinstance(spec, dict) and "tables" in spec


def plan_status(steps: list[Step], repo: Path, root: Path) -> str:
    """`status` of each table of a plan, on its own commit, its committed results done and its
    resume states under `root` read: a header line per table, then its experiments."""
    blocks = []
    for step in steps:
        found = all_statuses(step.table, settled_rows(repo, step.read))
        found = with_committed(found, committed(step.table, step.results))
        progress = resume_progress(step.table, root)
        found = with_progress(step.table, found, progress)
        at = ", ".join(r[:7] for r in step.revs)
        head = f"== {step.table.table} ({step.path.name} at {at}; {step.results}) =="
        todo = format_left(steps_left(step.table, found, progress))
        blocks.append(f"{head}\n{format_status(step.table, found)}\n{todo}")
    notes = [note for note in (format_orphans(orphans(repo), repo), format_broker(repo)) if note]
    return "\n\n".join(blocks + notes)


def load_plan(path: Path, repo: Path) -> tuple[list[Step], bool]:
    """The plan's tables, each loaded, with its commit resolved in `repo` (the clone the tables
    are queued from: it must hold every commit the plan names), and whether they interleave."""
    try:
        plan = Plan.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise SweepError(f"{path}: not a plan of tables ({exc})") from exc
    root = plan_root(path)
    steps = []
    for entry in plan.tables:
        revs = []
        for named in [entry.rev] if isinstance(entry.rev, str) else entry.rev:
            try:
                found = run_checked(["git", "rev-parse", "--verify", f"{named}^{{commit}}"], repo)
            except SweepError as exc:
                raise SweepError(
                    f"{path}: {entry.table} names commit {named}, which {repo} does not hold; "
                    "fetch it there (git fetch) or clone the repository again"
                ) from exc
            revs.append(found.stdout.strip())
        if not revs:
            raise SweepError(f"{path}: {entry.table} names no commit (rev: [])")
        table_path = root / entry.table
        table = load_table(table_path)
        unknown = [cell for cell in entry.first if cell not in table.cells]
        if unknown:
            raise SweepError(
                f"{path}: {entry.table}'s `first` names {', '.join(unknown)}, not a cell of "
                f"{table.table}; its cells: {', '.join(table.cells)}"
            )
        steps.append(
            Step(
                table,
                table_path,
                tuple(dict.fromkeys(revs)),
                root / entry.results,
                entry.turns,
                tuple(entry.first),
            )
        )
    return steps, plan.interleave


def turns(
    pending: list[list[Status]],
    shares: Sequence[int] | None = None,
    first: Sequence[int] | None = None,
    leads: Sequence[Sequence[str]] | None = None,
) -> list[tuple[int, Status]]:
    """The order in which interleaved tables' `pending` runs (one list per table, as `to_queue`
    gives them) are queued, as (table index, run): round after round, each table's next
    `shares[i]` runs (default 1; `first[i]` in the first round, default `shares`). Within a
    table, its teachers' runs first, then seed by seed (every cell of its first seed, then of
    the next): a table cut short holds its cells at the same seeds. `leads[i]`: table i's
    cells whose runs come before its other cells' (Entry.first), seed by seed among them."""
    shares = shares or [1] * len(pending)
    first = first or shares
    leads = leads or [()] * len(pending)
    ordered = [queue_order(runs, lead) for runs, lead in zip(pending, leads, strict=True)]
    out: list[tuple[int, Status]] = []
    taken, round_shares = [0] * len(ordered), first
    while any(n < len(runs) for n, runs in zip(taken, ordered, strict=True)):
        for i, (runs, k) in enumerate(zip(ordered, round_shares, strict=True)):
            out += [(i, run) for run in runs[taken[i] : taken[i] + max(k, 1)]]
            taken[i] += max(k, 1)
        round_shares = shares
    return out


def queue_order(runs: list[Status], lead: Sequence[str] = ()) -> list[Status]:
    """A table's runs in the order they are queued: its teachers' first, then the `lead` cells'
    seed by seed, then its other cells' seed by seed. Stable: within a seed, the cells keep the
    table's order."""

    def key(run: Status) -> tuple[bool, bool, int]:
        cell = run.seed is not None
        return cell, cell and run.cell not in lead, -1 if run.seed is None else run.seed

    return sorted(runs, key=key)


def cold_shares(steps: list[Step], warm: Sequence[bool]) -> list[int]:
    """The first round's share of each table (`turns`' `first`): one run of a table none of
    whose experiments is done, running or partway here (a fresh machine or clone). Its first run
    pays the stages its runs share and DVC's run cache can restore (a policy teacher, collect,
    C_V); a second run started beside it pays them again (on a fresh 2-core machine both of P2's
    first runs trained the teacher, collected and pre-trained C_V side by side, about an hour
    each before their first training step), where one started a round later restores them."""
    out = []
    for step, known in zip(steps, warm, strict=True):
        if not known and step.turns > 1:
            print(f"{step.table.table}: none of its experiments done or running here (a fresh "
                  "machine or clone): one of its runs in the first round, so that the next "
                  "restores what that one pays from DVC's run cache", flush=True)  # fmt: skip
        out.append(step.turns if known else 1)
    return out


def partial_first(
    steps: list[Step],
    pending: list[list[Status]],
    progress: list[Mapping[tuple[str, int], Progress]],
) -> list[tuple[int, Status]]:
    """The pending runs (one list per table) that have a resume state (`resume_progress`, one
    mapping per table), as (table index, run): they go first, whatever the turns, since each
    has the least left to pay before its result lands. In the plan's order; within a table,
    the furthest along first."""
    out = []
    for i, (step, runs) in enumerate(zip(steps, pending, strict=True)):
        reached = {r.name: progress[i].get((step.table.run(r.cell), r.seed)) for r in runs}
        partial = [r for r in runs if reached[r.name] is not None]
        out += [(i, r) for r in sorted(partial, key=lambda r: -reached[r.name].step)]
    return out


def resume(
    steps: list[Step],
    repo: Path,
    workers: Workers,
    jobs: int,
    *,
    commit: bool,
    wait_too: bool,
    interleave: bool = False,
) -> None:
    """Steps 1-3 of the module's doc for `steps` (`load_plan`), from the clone `repo`; with
    `interleave`, the tables' runs are queued in `turns`."""
    if wait_too:
        # background work from the start: its queueing (minutes of `dvc exp run --queue`) and its
        # asks (up to POLL_SHARE of a core) at the workers' priority, its session's autogroup
        # with it when started in a session of its own (`setsid`)
        workers.lower_priority()
    check_clean(repo)
    end_orphans(repo)  # a killed experiment's stage would race its requeued run's resume state
    clean_broker(repo, run_checked)  # what earlier sessions' asks left in DVC's queue broker
    # each commit's experiments could commit (before any task comes off the queue)
    for rev in dict.fromkeys(step.rev for step in steps):
        run_checked(["git", "checkout", "-q", rev], repo)
        check_commit_paths(repo)
        for step in steps:  # what each experiment of a table there would pay again
            if step.rev == rev:
                print_paid_again(step.table, repo)
                print_missing_trees(step.table, repo)
    warm = []  # whether each table has paid its shared stages here (`cold_shares`)
    for step in steps:
        found = all_statuses(step.table, settled_rows(repo, step.read))
        warm.append(any(f.state in ("done", "running") for f in found))
        waiting = [f.name for f in found if f.state == "queued"]
        if waiting:
            run_checked(["dvc", "queue", "remove", *waiting], repo)
            print(f"{step.table.table}: {len(waiting)} queued task(s) taken off the queue",
                  flush=True)  # fmt: skip
    pending = [
        to_queue(step.table, repo, kept=committed(step.table, step.results), rev=step.read)
        for step in steps
    ]
    progress = [resume_progress(step.table, workers.resume_root) for step in steps]
    order = partial_first(steps, pending, progress)
    first = {r.name for _, r in order}  # experiment names: one table's each, never shared
    rest = [[r for r in runs if r.name not in first] for runs in pending]
    order += (
        turns(
            rest,
            [step.turns for step in steps],
            cold_shares(steps, [w or bool(p) for w, p in zip(warm, progress, strict=True)]),
            [step.first for step in steps],
        )
        if interleave
        else [
            (i, r)
            for i, runs in enumerate(rest)
            for r in (queue_order(runs, steps[i].first) if steps[i].first else runs)
        ]
    )
    checked_out, started = None, False
    for n, (i, run) in enumerate(order, 1):
        if steps[i].rev != checked_out:
            run_checked(["git", "checkout", "-q", steps[i].rev], repo)
            checked_out = steps[i].rev
        queue_one(steps[i].table, run, repo)
        print(f"{time.strftime('%H:%M:%S')} queued {n}/{len(order)}: {run.name} "
              f"(at {steps[i].rev[:7]})", flush=True)  # fmt: skip
        if jobs and n == jobs:  # the workers take these up while the rest is queued
            start_workers(repo, jobs, workers)
            started = True
    if jobs and not started:
        start_workers(repo, jobs, workers)
    if wait_too:
        wait_plan(steps, repo, workers, jobs, commit=commit)


def wait_plan(steps: list[Step], repo: Path, workers: Workers, jobs: int, *, commit: bool) -> None:
    """Step 3's wait alone (`vlmrl-sweep wait PLAN`): the queue as it stands, each table's
    results written (and with `commit`, committed) as its experiments land. What a poller that
    was stopped alone needs (after an update of this tool's code), where `resume` would take
    every waiting task off the queue and queue it again (3-11 minutes here for 38-40 runs)."""
    watches = [
        Watch(step.table, step.read, committed(step.table, step.results),
              Keep(step.results, commit), step.path)
        for step in steps
    ]  # fmt: skip
    wait_all(watches, repo, jobs=jobs, workers=workers)
