"""What DVC holds of a table: each experiment done, queued, running, partial, failed, stale or
missing; what outlives a machine (resume states, committed results)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pipeline.tools.sweeps.orphans import ORPHANED, ORPHANED_WHY, orphaned
from pipeline.tools.sweeps.table import (
    DEFAULT_RESUME_ROOT,
    STATES,
    SweepError,
    Table,
    _leaves,
    cell_params,
    round_seed,
    teacher_params,
)

if TYPE_CHECKING:
    from pipeline.tools.sweeps.childask import ChildAsk

# ---- what DVC holds ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    cell: str  # a teacher experiment's: the first cell of its group
    seed: int | None  # None: a teacher experiment
    name: str
    state: str  # one of STATES
    rev: str | None = None
    value: float | None = None  # the metric, when done
    why: str = ""  # what makes it stale or failed
    steps_to: dict[str, int | None] | None = None  # threshold -> first step (report, when done)
    diagnostics: dict[str, float | None] | None = None  # curve -> second-half mean (report)
    round_calls: int | None = None  # the teacher calls of a rounds cell's rounds (when done)
    teacher: dict[str, Any] | None = None  # a teacher experiment's metrics file (report, done)
    labels: dict[str, Any] | None = None  # what its label table paid (`label_cost`; report, done)
    kept: bool = False  # done by the table's committed results (`--results`), not by DVC
    # the machine whose queue ran it (`machine_summary`), stamped when a done experiment is first
    # read where it ran and kept with its committed result; None: not recorded
    machine: str | None = None
    # curve -> [[step, value], ...] as logged (report, when done): the raw curves of the
    # thresholds and diagnostics, kept in results.json beside what was read from them
    curves: dict[str, list[list[float]]] | None = None


def _same(actual: Any, expected: Any) -> bool:
    """A `dvc exp show` value against the table's: numbers compare as floats (DVC's flat rows
    give 5000 as 5000.0, and 1e-05 as '1e-05'; a nested bool can come as 'True'), a missing
    key reads 'None', a list comes as its Python repr ("['env', 'kinematic']")."""
    if expected is None:
        return actual in (None, "None")
    if isinstance(expected, bool) and isinstance(actual, str):
        return actual.lower() == str(expected).lower()
    if isinstance(expected, bool) or isinstance(actual, bool):
        return actual == expected
    if isinstance(expected, int | float) and isinstance(actual, int | float | str):
        try:  # DVC writes 1e-05, which YAML 1.1 (and so `dvc exp show`) reads as a string
            return float(actual) == float(expected)
        except ValueError:
            return False
    if isinstance(expected, list | tuple) and isinstance(actual, str):
        try:
            actual = ast.literal_eval(actual)
        except (ValueError, SyntaxError):
            return False
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        return len(actual) == len(expected) and all(map(_same, actual, expected))
    if isinstance(expected, Mapping) and not expected:
        return actual in ({}, None, "None")
    return actual == expected


def _column(row: Mapping[str, Any], path: str, key: str) -> Any:
    """`path`'s `key` in a flat `dvc exp show` row: DVC prefixes a name with its file only where
    another file has it too (`metrics/teacher/E.json:teacher_id`), so a name that one file
    alone holds comes bare."""
    return row.get(f"{path}:{key}", row.get(key))


def exp_rows(repo: Path, rev: str | Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """The experiments of the commit checked out (or of `rev`: one commit or several, as when a
    cell added later ran on a later commit), by name (dvc.api.exp_show's flat rows). A name held
    by two of the commits raises: which one the table means is not known."""
    import dvc.api
    from dvc.exceptions import DvcException
    from scmrepo.exceptions import SCMError

    try:
        rows = dvc.api.exp_show(repo=str(repo), revs=rev)
    # SCMError: a worker's workspace half made ("Empty git repo"), which DVC lets through;
    # OSError: a task's run files removed while DVC read them (a worker ending its task)
    except (DvcException, SCMError, OSError) as exc:
        task = re.search(r"exps/run/([0-9a-f]{7,40})/", str(exc))
        hint = (
            f"; if it stays, the task's worker died as it took it up: `dvc queue kill "
            f"{task.group(1)[:7]}` then `dvc queue remove {task.group(1)[:7]}` in {repo} let "
            "DVC read its queue again (the next `queue` or `resume` queues it again)"
            if task else ""
        )  # fmt: skip
        raise SweepError(f"{repo}: dvc exp show: {exc}{hint}") from exc
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        name = row.get("Experiment")
        if not name:
            continue
        if str(name) in out:
            where = f"on more than one of the commits {rev}" if rev else "twice on one commit"
            raise SweepError(
                f"{repo}: dvc exp show lists experiment {name} {where} (a queue worker taking it "
                "up lists it for a moment as queued and running): if it stays, remove one "
                "(dvc exp remove) or read one commit"
            )
        if row.get("State") == "Running" and orphaned(repo, str(row.get("rev"))):
            row = {**row, "State": ORPHANED}
        out[str(name)] = row
    return out


def settled_rows(
    repo: Path,
    rev: str | Sequence[str] | None = None,
    tries: int = 5,
    every_s: float = 10.0,
    ask: ChildAsk | None = None,
) -> dict[str, dict[str, Any]]:
    """exp_rows, asked again (up to `tries` times, `every_s` apart) when `dvc exp show` meets a
    queue worker's temporary workspace half made or half gone, as it can while workers run, or
    when `ask` (exp_rows in a child process; None: in this one) finds it hung."""
    for _ in range(tries - 1):
        try:
            return ask(exp_rows, repo, rev) if ask else exp_rows(repo, rev)
        except SweepError as exc:
            print(f"{time.strftime('%H:%M:%S')} {exc} (trying again)", flush=True)
            time.sleep(every_s)
    return ask(exp_rows, repo, rev) if ask else exp_rows(repo, rev)


def _unfinished(
    cell: str, seed: int | None, name: str, row: Mapping[str, Any], params: dict[str, Any]
) -> Status | None:
    """The experiment's status unless it succeeded with `params` (then None: its outputs decide)."""
    rev, state = str(row.get("rev")), row.get("State")
    if state in ("Queued", "Running"):
        return Status(cell, seed, name, state.lower(), rev)
    if state == ORPHANED:
        return Status(cell, seed, name, "failed", rev, why=ORPHANED_WHY)
    # no state: a committed experiment that no local queue ran (`dvc exp pull`)
    if state not in ("Success", None):
        return Status(cell, seed, name, "failed", rev,
                      why=f"state {state}: `dvc queue logs {name}` says why")  # fmt: skip
    differs = [f"{k}={row.get(k)!r} (table: {v!r})"
               for k, v in _leaves(params) if not _same(row.get(k), v)]  # fmt: skip
    return Status(cell, seed, name, "stale", rev, why="; ".join(differs)) if differs else None


@functools.cache
def machine_summary() -> str:
    """This machine in a line, for the record of what ran where: the CPU (vendor, family, model
    and model name: a virtual machine's model name alone can be vague), its core count and the
    vector extensions torch's CPU kernels dispatch to (`machine_fingerprint`)."""
    from pipeline.tools.reproducibility import machine_fingerprint

    found = machine_fingerprint()
    return f"{found['cpu']}, {found['cores']} cores, torch {found['torch_cpu_capability']}"


def ran_here(row: Mapping[str, Any]) -> str | None:
    """The machine that ran a done experiment: this one where a queue here ran it (DVC's state
    `Success`, which only the local queue's task records give); None where none did (an
    experiment fetched with `dvc exp pull` has no state)."""
    return machine_summary() if row.get("State") == "Success" else None


def statuses(
    table: Table,
    rows: Mapping[str, Mapping[str, Any]],
    cells: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> list[Status]:
    """Every (cell, seed) of the table against the experiments `rows`."""
    out = []
    for cell in cells or table.cells:
        for seed in table.seeds if seeds is None else seeds:
            name = table.experiment(cell, seed)
            row = rows.get(name)
            if row is None:
                out.append(Status(cell, seed, name, "missing"))
                continue
            unfinished = _unfinished(cell, seed, name, row, cell_params(table, cell, seed))
            if unfinished is not None:
                out.append(unfinished)
                continue
            rev = str(row.get("rev"))
            column = f"{table.metrics_file(cell)}:{table.metric}"
            value = _column(row, table.metrics_file(cell), table.metric)
            if not isinstance(value, int | float) or isinstance(value, bool):
                out.append(Status(cell, seed, name, "failed", rev, why=f"no {column}"))
                continue
            calls = [_column(row, f"metrics/rounds/{r}.json", "costs.teacher_calls")
                     for r in table.round_names(cell)]  # fmt: skip
            known = bool(calls) and all(isinstance(c, int | float) for c in calls)
            out.append(Status(cell, seed, name, "done", rev, float(value),
                              round_calls=int(sum(calls)) if known else None,
                              machine=ran_here(row)))  # fmt: skip
    return out


def teacher_statuses(
    table: Table, rows: Mapping[str, Mapping[str, Any]], cells: Sequence[str] | None = None
) -> list[Status]:
    """Each teacher experiment whose group holds one of `cells` (default: every one) against the
    experiments `rows`: done once it succeeded with the params the table gives it now and wrote
    its teacher's id."""
    out = []
    for group in table.teacher_groups_of(cells):
        name = table.teacher_experiment(group)
        row = rows.get(name)
        if row is None:
            out.append(Status(group, None, name, "missing"))
            continue
        unfinished = _unfinished(group, None, name, row, teacher_params(table, group))
        if unfinished is not None:
            out.append(unfinished)
            continue
        rev = str(row.get("rev"))
        if not isinstance(_column(row, table.teacher_file(group), "teacher_id"), str):
            out.append(Status(group, None, name, "failed", rev,
                              why=f"no {table.teacher_file(group)}:teacher_id"))  # fmt: skip
        else:
            out.append(Status(group, None, name, "done", rev, machine=ran_here(row)))
    return out


def all_statuses(
    table: Table,
    rows: Mapping[str, Mapping[str, Any]],
    cells: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> list[Status]:
    """The cells' experiments, then the teachers' (which have no seed: `seeds` leaves them in)."""
    return statuses(table, rows, cells, seeds) + teacher_statuses(table, rows, cells)


# ---- what outlives a machine: committed results and resume states ---------------------------------


def resume_root(path: str | Path | None = None) -> Path:
    """The resume states' directory: `path`, else $VLMRL_RESUME_ROOT, else DEFAULT_RESUME_ROOT;
    absolute (the workers run in other directories)."""
    from pipeline.learn.methods.base import RESUME_ROOT_ENV

    chosen = path or os.environ.get(RESUME_ROOT_ENV) or DEFAULT_RESUME_ROOT
    return Path(chosen).expanduser().resolve()


def _saved_states(root: Path, name: str) -> Iterator[tuple[Path, int, int, Any, float]]:
    """(directory, seed, step reached, steps, when it was saved) of each resume state of training
    `name` under `root` (`<root>/<name>/<fingerprint>/state.json`,
    pipeline.learn.methods.base.resume_for); a damaged one, or one removed as its run ended, is
    skipped (the run starts over from it anyway)."""
    from pipeline.learn.agents.resume import ResumeStateError, read_header, read_plain

    for state in sorted((root / name).glob("*/state.json")):
        try:
            about = (read_header(state.parent) or {}).get("about") or {}
            step = (read_plain(state.parent) or {}).get("step")
            saved = state.stat().st_mtime  # state.json is written last (resume.py)
        except (ResumeStateError, OSError):
            continue
        seed = about.get("seed")
        if isinstance(seed, int) and isinstance(step, int):
            yield state.parent, seed, step, about.get("steps"), saved


class Progress(NamedTuple):
    """How far a run's resume state is: the step it reached, of how many, and when it was saved
    (seconds since the epoch; a running run's stops moving when its worker stops)."""

    step: int
    steps: int | None
    saved: float


def resume_progress(table: Table, root: Path) -> dict[tuple[str, int], Progress]:
    """(run, seed) -> the `Progress` of each resume state under `root` of the table's runs
    (`_saved_states`). A rounds cell's rounds keep theirs under each round's name, with the
    round's seed: their steps count from the run's first step, out of all of the cell's
    training."""
    out: dict[tuple[str, int], Progress] = {}
    for cell, spec in table.cells.items():
        run = table.run(cell)
        for k, (name, before) in enumerate(table.trainings(cell)):
            # the experiment's seed of a state's seed (round k's: round_seed)
            seeds = None if k == 0 else {round_seed(s, k): s for s in table.seeds}
            for _, seed, step, steps, saved in _saved_states(root, name):
                seed = seed if seeds is None else seeds.get(seed)
                if seed is None:
                    continue
                steps = table.steps(cell) if spec.rounds is not None else steps
                if (run, seed) not in out or before + step > out[(run, seed)].step:
                    out[(run, seed)] = Progress(before + step, steps, saved)
    return out


def clear_done_states(table: Table, found: list[Status], root: Path) -> list[Path]:
    """Delete the final resume states (step reached = steps) under `root` of `found`'s done
    experiments, the run's and each round's, and return them. A finished SAC-family run keeps
    its final state while its experiment runs (`Resume.keep_final`); once the experiment is
    done nothing reads it. A partial state stays: a rerun of the experiment goes on from it."""
    cleared = []
    for f in found:
        if f.state != "done" or f.seed is None:
            continue
        for k, (name, _) in enumerate(table.trainings(f.cell)):
            wanted = f.seed if k == 0 else round_seed(f.seed, k)
            for directory, seed, step, steps, _ in _saved_states(root, name):
                if seed == wanted and step == steps:
                    shutil.rmtree(directory, ignore_errors=True)
                    cleared.append(directory)
    return cleared


def with_progress(
    table: Table, found: list[Status], progress: Mapping[tuple[str, int], Progress]
) -> list[Status]:
    """`found` with each unfinished experiment's resume state (`resume_progress`) and when it
    was saved: a running one says its step; one that no worker holds (missing, failed: its
    machine or worker stopped) is `partial`, and the next `queue` goes on from there; a queued
    one says the step it will go on from."""
    out = []
    for f in found:
        at = progress.get((table.run(f.cell), f.seed)) if f.seed is not None else None
        if at is None or f.state in ("done", "stale"):
            out.append(f)
            continue
        saved = time.strftime("%Y-%m-%d %H:%M", time.localtime(at.saved))
        where = (f"at step {at.step:,}" + (f" of {at.steps:,}" if at.steps else "")
                 + f" (resume state, saved {saved})")  # fmt: skip
        if f.state == "queued":
            out.append(dataclasses.replace(f, why=f"goes on from {where.removeprefix('at ')}"))
            continue
        state = "running" if f.state == "running" else "partial"
        out.append(dataclasses.replace(f, state=state, why=where))
    return out


def committed(table: Table, results: Path) -> dict[str, Status]:
    """The experiments that `results/results.json` (a report committed to git) holds as done
    and that the table still gives the same params: by name. What a machine that stopped had
    finished is kept there and never run again."""
    import json

    path = results / "results.json"
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        old = Table.model_validate(raw["spec"])
        experiments = [Status(**e) for e in raw["experiments"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SweepError(f"{path}: not a `vlmrl-sweep report` results file ({exc})") from exc
    groups = table.teacher_groups()
    out = {}
    for e in experiments:
        if e.state != "done" or e.cell not in table.cells or e.cell not in old.cells:
            continue
        if e.seed is None:
            # a group is named by its first cell, and the results file holds the table's cells
            # in its own order (sorted keys): the old group is the one that holds e.cell
            was = [g for g, members in old.teacher_groups().items() if e.cell in members]
            same = (
                e.cell in groups
                and bool(was)
                and (teacher_params(old, was[0]) == teacher_params(table, e.cell))
            )
        else:
            same = e.seed in table.seeds and (
                cell_params(old, e.cell, e.seed) == cell_params(table, e.cell, e.seed)
            )
        if same and (e.seed is None or old.metric == table.metric):
            out[e.name] = dataclasses.replace(e, kept=True)
    return out


def with_committed(found: list[Status], kept: Mapping[str, Status]) -> list[Status]:
    """`found` with each experiment that DVC does not hold as done replaced by its committed
    result, where there is one."""
    return [kept.get(f.name, f) if f.state != "done" else f for f in found]


def count_line(found: Iterable[Status]) -> str:
    """How many experiments are in each state, e.g. `3 done, 2 queued`."""
    states = [f.state for f in found]
    return ", ".join(f"{states.count(s)} {s}" for s in STATES if s in states)


def format_status(table: Table, found: list[Status]) -> str:
    lines = [f"{f.name:48s} {f.state:8s} "
             + (f"{table.metric} {f.value:.4g}" if f.value is not None else f.why)
             + (" (committed)" if f.kept else "")
             for f in found]  # fmt: skip
    lines.append(count_line(found))
    return "\n".join(lines)
