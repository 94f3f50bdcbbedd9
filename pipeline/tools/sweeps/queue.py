"""Queue and run a table as background work: DVC's queue workers at low priority, one thread
each, and a wait that keeps the results as experiments land."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.tools.sweeps.broker import clean_broker
from pipeline.tools.sweeps.childask import ChildAsk
from pipeline.tools.sweeps.keep import Keep, keep_results
from pipeline.tools.sweeps.orphans import ORPHANED_WHY, live_workers
from pipeline.tools.sweeps.priority import lower_group_priority
from pipeline.tools.sweeps.status import (
    Status,
    all_statuses,
    clear_done_states,
    count_line,
    resume_root,
    settled_rows,
    with_committed,
)
from pipeline.tools.sweeps.table import SweepError, Table, exp_command, teacher_command

# ---- queue and run -------------------------------------------------------------------------------


SHIM = Path(__file__).parent / "shim"  # its `dvc`: DVC with whole broker messages (safe_dvc)


def tool_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (the environment) with SHIM and then this interpreter's directory first on PATH:
    `dvc` is the project's own with kombu's broker writing whole messages (safe_dvc), and the
    stages' `python` the project's own, whether or not its environment was activated (a
    `.venv/bin/vlmrl-sweep` run from a plain shell would otherwise find no `dvc`, or start queue
    workers whose `python` lacks the project's dependencies)."""
    env = dict(os.environ if base is None else base)
    first = [str(SHIM), str(Path(sys.executable).parent)]
    path = env.get("PATH", "")
    if path.split(os.pathsep)[:2] != first:
        env["PATH"] = os.pathsep.join([*first, *([path] if path else [])])
    return env


def run_checked(args: list[str], repo: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=repo, capture_output=True, text=True, env=tool_env())
    if done.returncode != 0:
        raise SweepError(f"{shlex.join(args)} (in {repo}) exited {done.returncode}:\n"
                         f"{(done.stderr or done.stdout).strip()}")  # fmt: skip
    return done


def queue(
    table: Table,
    repo: Path,
    cells: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    force: bool = False,
    kept: Mapping[str, Status] | None = None,
    rev: str | Sequence[str] | None = None,
) -> list[Status]:
    """Queue every (cell, seed) that is not done (`force`: done ones too), queued or running;
    a failed or stale experiment of that name is replaced; the teachers' experiments too. One
    that `kept` (the committed results) holds is done. `rev`: the commits whose experiments
    count (default: the one checked out), e.g. the one a table was queued on and HEAD, so that
    a commit made while it runs does not queue its experiments twice. Returns what was queued."""
    found = to_queue(table, repo, cells, seeds, force, kept, rev)
    for status in found:
        queue_one(table, status, repo)
    return found


def to_queue(
    table: Table,
    repo: Path,
    cells: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    force: bool = False,
    kept: Mapping[str, Status] | None = None,
    rev: str | Sequence[str] | None = None,
) -> list[Status]:
    """What `queue` would queue (its arguments), in the order it would: nothing is queued."""
    found = with_committed(all_statuses(table, settled_rows(repo, rev), cells, seeds), kept or {})
    return [f for f in found
            if f.state not in ("queued", "running") and (f.state != "done" or force)]  # fmt: skip


def queue_one(table: Table, status: Status, repo: Path) -> None:
    """Queue the experiment `status` names (one of `to_queue`'s), from the checkout `repo`: a
    failed, stale or orphaned experiment of that name is removed from DVC first."""
    check_clean(repo)
    if status.kept:  # --force: DVC has no experiment of that name to replace
        status = dataclasses.replace(status, state="missing")
    if status.why == ORPHANED_WHY:  # DVC's task of a dead process: kill, then remove it
        run_checked(["dvc", "queue", "kill", str(status.rev)], repo)
        run_checked(["dvc", "queue", "remove", str(status.rev)], repo)
    elif status.state != "missing":
        run_checked(["dvc", "exp", "remove", status.name], repo)
    if status.seed is None:
        run_checked(teacher_command(table, status.cell, queue=True), repo)
    else:
        run_checked(exp_command(table, status.cell, status.seed, queue=True), repo)


def check_clean(repo: Path) -> None:
    """Refuse to queue from a checkout whose tracked files differ from its commit:
    `dvc exp run --queue` copies those changes into every experiment it queues (its code would
    be no commit's), and DVC stashes and restores the workspace while it queues, which
    overwrites an edit saved meanwhile. Untracked files are left alone (DVC leaves them too)."""
    out = run_checked(["git", "status", "--porcelain", "--untracked-files=no"], repo).stdout
    changed = [line[3:] for line in out.splitlines()]
    if changed:
        shown = ", ".join(changed[:5]) + (
            f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        )
        raise SweepError(
            f"{repo}: {len(changed)} tracked file(s) differ from the commit ({shown}): "
            "experiments queued now would hold them. Commit or stash them first, or queue the "
            "table from its own clone at the table's commit (docs/benchmarks.md, 'Tables that "
            "take days') and go on working here"
        )


def check_commit_paths(repo: Path) -> None:
    """Read now what DVC reads when it commits each experiment of the checkout `repo`, after
    the experiment's stages have run: dvc.yaml's top-level metrics, params and plots
    (`ExecutorBase._get_top_level_paths`, dvc 3.x). A top-level plot that lies in a directory
    output whose tree neither the workspace nor the DVC cache holds (a fresh clone's cache is
    empty) fails every experiment there, each after all its compute. Raises SweepError naming
    it and what gives the clone that output."""
    from dvc.repo import Repo
    from dvc_data.index.index import DataIndexError

    try:
        with Repo(str(repo)) as dvc_repo:
            dvc_repo.index._plot_sources  # noqa: B018  (the property is the read)
    except DataIndexError as exc:
        raise SweepError(
            f"{repo}: every experiment queued here would fail as DVC commits it, after its "
            f"stages have run: dvc.yaml's top-level plots read a directory output that neither "
            f"the workspace nor the DVC cache here holds ({exc}). Give this checkout that output "
            "first: share the cache of the checkout that built it (`dvc cache dir --local "
            "<that checkout>/.dvc/cache` here), `dvc pull` it from a remote, or `dvc repro` the "
            "stage that writes it"
        ) from exc


POLL_SHARE = 0.05  # wait: at most this share of one core asks `dvc exp show` (docs/benchmarks.md)


@dataclass(frozen=True)
class Workers:
    """How `queue` starts DVC's queue workers: background work that leaves the machine usable.
    Each worker runs one experiment at a time at `nice` (low priority: its process's niceness and
    its session's autogroup's, `lower_group_priority`), with `threads` threads for numpy /
    torch's thread pools (a table's cells set their own `threads` param as well), and keeps its
    runs' resume states under `resume_root` (VLMRL_RESUME_ROOT), where a run killed with its
    worker or its machine goes on from."""

    resume_root: Path
    nice: int = 10
    threads: int = 1

    def lower_priority(self) -> None:
        """In the child before it runs (started in a session of its own): niceness `nice`
        whatever the caller's (a poller run at nice 19 must not lend its workers a lower priority
        than its own), and its session's autogroup's too."""
        current = os.nice(0)
        if self.nice > current:
            os.nice(self.nice - current)
        if os.getsid(0) == os.getpid():  # never the group of the caller's session
            lower_group_priority(os.getpid(), self.nice)

    def env(self) -> dict[str, str]:
        from pipeline.learn.methods.base import RESUME_ROOT_ENV

        threads = str(self.threads)
        return {
            **tool_env(), RESUME_ROOT_ENV: str(self.resume_root),
            "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
        }  # fmt: skip


# DVC's name for its queue worker `num` of a repository (dvc/repo/experiments/queue/celery.py)
WORKER_NAME = re.compile(r"^(dvc-exp-[0-9a-f]+-)(\d+)@localhost$")


def start_workers(repo: Path, jobs: int, workers: Workers | None = None) -> None:
    """Queue workers 1..jobs for `repo`, with `workers`' priority, threads and resume root: the
    ones not running. DVC's own `dvc queue start -j jobs` finds the live ones by asking them,
    and a worker busy with an experiment does not answer (DVC runs tasks in celery's solo
    pool): with a worker busy, it started a second worker of that name, and three runs shared
    two cores. So the live workers are found by their processes; with none, `dvc queue start`
    starts them all, else each missing one is started by its name, as DVC would."""
    live = live_workers(repo)
    if len(live) >= jobs:
        print(f"{time.strftime('%H:%M:%S')} {repo}: {len(live)} queue worker(s) already run "
              "there; none started", flush=True)  # fmt: skip
        return
    workers = workers or Workers(resume_root())
    workers.resume_root.mkdir(parents=True, exist_ok=True)
    matches = [WORKER_NAME.match(name) for name in live]
    prefixes = {m.group(1) for m in matches if m}
    if live and len(prefixes) == 1 and all(matches):
        prefix = prefixes.pop()
        running = {int(m.group(2)) for m in matches if m}
        for num in range(1, 1 + jobs):
            if num not in running:  # worker 1 cleans DVC's celery state when it stops
                spawn_worker(repo, f"{prefix}{num}@localhost", num == 1, workers)
        return
    # not captured: the workers it starts keep its stdout open until they stop. In a session of
    # its own: the workers it forks share it, and with it its autogroup's low priority
    start = ["dvc", "queue", "start", "-j", str(jobs)]
    done = subprocess.run(
        start, cwd=repo, stdin=subprocess.DEVNULL, env=workers.env(),
        preexec_fn=workers.lower_priority, start_new_session=True,
    )  # fmt: skip
    if done.returncode:
        raise SweepError(f"{shlex.join(start)} (in {repo}) failed: see above")


def spawn_worker(repo: Path, name: str, clean: bool, workers: Workers) -> None:
    """`dvc exp queue-worker NAME` in the background, as `dvc queue start` spawns it, with
    `workers`' priority, threads and resume root; its output appended to
    .dvc/tmp/exps/vlmrl-<name>.log."""
    log_path = repo / ".dvc" / "tmp" / "exps" / f"vlmrl-{name.partition('@')[0]}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    args = ["dvc", "exp", "queue-worker", name, *(["--clean"] if clean else [])]
    with log_path.open("ab") as log:
        subprocess.Popen(
            args, cwd=repo, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=workers.env(),
            preexec_fn=workers.lower_priority, start_new_session=True,
        )  # fmt: skip
    print(f"{time.strftime('%H:%M:%S')} {repo}: started queue worker {name}", flush=True)


@dataclass(frozen=True)
class Watch:
    """One table that `wait_all` waits on: the commits its experiments were queued on (`rev`,
    default the one checked out), its committed results (`kept`), and where its report is kept
    as experiments land (`keep`, with the table's file `table_path`)."""

    table: Table
    rev: str | Sequence[str] | None = None
    kept: Mapping[str, Status] | None = None
    keep: Keep | None = None
    table_path: Path | None = None


def wait(
    table: Table,
    repo: Path,
    every_s: float = 10.0,
    jobs: int = 0,
    *,
    rev: str | Sequence[str] | None = None,
    workers: Workers | None = None,
    kept: Mapping[str, Status] | None = None,
    keep: Keep | None = None,
    table_path: Path | None = None,
) -> list[Status]:
    """`wait_all` for one table."""
    watch = Watch(table, rev, kept, keep, table_path)
    return wait_all([watch], repo, every_s, jobs, workers=workers)[0]


def cpu_seconds() -> float:
    """This process's CPU time (user and system), not its reaped children's (a queue worker
    would add its experiments' hours); an ask's child counts its own (ChildAsk.cpu_s)."""
    t = os.times()
    return t.user + t.system


def _revs_key(rev: str | Sequence[str] | None) -> str | tuple[str, ...] | None:
    return rev if rev is None or isinstance(rev, str) else tuple(rev)


def wait_all(
    watches: Sequence[Watch],
    repo: Path,
    every_s: float = 10.0,
    jobs: int = 0,
    *,
    workers: Workers | None = None,
) -> list[list[Status]]:
    """Until no experiment of the tables is queued or running: one line for a table each time
    its counts change. Driven by the queue's own progress (no time limit): a stuck worker shows
    as a count that stops moving, and `dvc queue status` / `dvc queue logs NAME` say why.
    Returns each table's statuses, in `watches`' order.

    - Each table's experiments are read on its own commits (`Watch.rev`), so that commits made
      while they run (`keep`) do not hide them: one `dvc exp show` for each set of commits.
    - `dvc exp show` takes longer the more experiments a commit holds (3 s for 162 on an idle
      2-core machine), so the pause between two rounds of asks is at least every_s and at
      least (1 / POLL_SHARE - 1) times the CPU time of the last round: the workers keep the
      cores. CPU time, not wall time: a poller at nice 19 beside busy cores waits for the CPU,
      and paced by wall time it once paused 17 minutes while both workers had stopped. A
      landing (a new experiment ref, `experiment_refs`) ends the pause within every_s.
    - With `jobs`, a worker that stopped is started again, as soon as a round finds experiments
      queued (in any of the tables) and fewer than `jobs` queue-worker processes in `repo`. A
      queue worker can die on a half-written message of DVC's file broker (celery's
      "Unrecoverable error: JSONDecodeError", treeverse/dvc#7903), and one that finds the
      queue empty (as `resume` takes it down to queue it again) stops after the experiment it
      holds ("monitor: shutting down due to empty queue"): each leaves the rest to the others.
      Counted by process, a worker between two experiments still counts. Between two asks,
      while experiments are queued, the worker processes are counted every `every_s` (a
      process scan, no DVC ask: `pause_between_asks`): a worker that dies on the broker goes on with
      the experiment it holds and stops when it ends, and the core it leaves would otherwise
      wait for the next ask, minutes away at the poller's pace.
    - With `workers`, the final resume states of the tables' done experiments under its resume
      root are deleted (`clear_done_states`).
    - With a table's `keep`, each time one more of its experiments is done, its report is
      written there (and committed): each finished cell's raw results as it lands. Against the
      table's `kept` (its committed results), those that landed while no poller ran are kept
      at the first round. A report that fails (a bug, a full disk, a module edited under the
      running poller) is said with its traceback and tried again at the next round: the
      workers and the other tables go on.
    - Each ask runs in a child process (ChildAsk): one that hangs (pygit2's BlobIO) is killed
      once its CPU time stops for ten minutes, and asked again."""
    with closing(ChildAsk()) as ask:
        return _wait_rounds(watches, repo, every_s, jobs, workers, ask)


def _wait_rounds(watches: Sequence[Watch], repo: Path, every_s: float, jobs: int,
                 workers: Workers | None, ask: ChildAsk) -> list[list[Status]]:  # fmt: skip
    last: list[str | None] = [None] * len(watches)
    # what the committed results hold: experiments done since (a poller started again after
    # some landed) are kept at the first round
    done_before: list[int | None] = [
        None if w.kept is None else sum(f.state == "done" for f in w.kept.values()) for w in watches
    ]
    while True:
        clean_broker(repo, run_checked)  # what this poller's asks left there
        refs = experiment_refs(repo)  # what landed before this round's asks
        started = cpu_seconds() + ask.cpu_s
        rows: dict[Any, dict[str, dict[str, Any]]] = {}
        every: list[list[Status]] = []
        for watch in watches:
            key = _revs_key(watch.rev)
            if key not in rows:
                rows[key] = settled_rows(repo, watch.rev, every_s=every_s, ask=ask)
            every.append(with_committed(all_statuses(watch.table, rows[key]), watch.kept or {}))
        asked_s = cpu_seconds() + ask.cpu_s - started
        for i, (watch, found) in enumerate(zip(watches, every, strict=True)):
            line = count_line(found)
            if line != last[i]:
                print(f"{time.strftime('%H:%M:%S')} {watch.table.table}: {line}", flush=True)
                last[i] = line
            done = sum(f.state == "done" for f in found)
            if workers is not None and done:
                for state in clear_done_states(watch.table, found, workers.resume_root):
                    print(f"{time.strftime('%H:%M:%S')} {watch.table.table}: deleted the final "
                          f"resume state {state} (its experiment is done)", flush=True)  # fmt: skip
            if watch.keep is not None and watch.table_path is not None:
                before = done_before[i]
                if before is not None and done > before:
                    try:
                        keep_results(watch.table, watch.table_path, found, repo, watch.keep)
                    except Exception:  # any: a poller of a days-long table outlives its report
                        print(f"{time.strftime('%H:%M:%S')} {watch.table.table}: its results were "
                              "not kept; tried again at the next round:\n"
                              f"{traceback.format_exc()}", flush=True)  # fmt: skip
                        continue  # its count of done stays: the next round keeps them
                done_before[i] = done
        states = [f.state for found in every for f in found]
        if "queued" not in states and "running" not in states:
            return every
        names = ", ".join(w.table.table for w in watches)
        pause = max(every_s, asked_s * (1 / POLL_SHARE - 1))
        jobs_now = jobs if "queued" in states else 0
        if jobs_now:
            top_up(repo, jobs, workers, names)
        pause_between_asks(repo, jobs_now, workers, names, pause, every_s, refs)


def experiment_refs(repo: Path) -> frozenset[str]:
    """`repo`'s experiment refs with their commits (`refs/exps/<baseline>/<name>`; not DVC's
    queue and executor refs under `celery/` and `exec/`): DVC writes one when an experiment
    lands. A `git for-each-ref` of milliseconds, where an ask of `dvc exp show` takes seconds to
    a minute of CPU."""
    out = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps"],
        cwd=repo, capture_output=True, text=True, check=True,
    )  # fmt: skip
    skip = ("refs/exps/celery/", "refs/exps/exec/")
    return frozenset(line for line in out.stdout.splitlines() if not line.startswith(skip))


def top_up(repo: Path, jobs: int, workers: Workers | None, names: str) -> None:
    """Start the queue workers missing from `repo`, where fewer than `jobs` processes run."""
    if len(live_workers(repo)) < jobs:
        print(f"{time.strftime('%H:%M:%S')} {names}: fewer than {jobs} queue workers with "
              "experiments queued: starting the missing ones", flush=True)  # fmt: skip
        start_workers(repo, jobs, workers)


def pause_between_asks(
    repo: Path, jobs: int, workers: Workers | None, names: str, pause_s: float, every_s: float,
    refs: frozenset[str] | None = None,
) -> None:  # fmt: skip
    """Pause `pause_s` seconds (the time sleeps count, whatever the CPU) in steps of `every_s`.
    After each, with `jobs` (experiments queued), `top_up`: a stopped worker's core is taken up
    again within `every_s`. With `refs` (`experiment_refs` before the last asks), the pause ends
    as soon as the experiment refs differ: an experiment landed, and its results are kept (and
    committed) within `every_s` of it, not at the next ask, which the poller's pace puts up to
    twenty minutes away (a machine that stops before then would lose them)."""
    slept = 0.0
    while slept < pause_s:
        step = min(every_s, pause_s - slept)
        time.sleep(step)
        slept += step
        if jobs:
            top_up(repo, jobs, workers, names)
        if refs is not None and experiment_refs(repo) != refs:
            return
