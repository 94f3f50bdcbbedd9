"""`vlmrl-sweep`: the command line (see the package's docstring)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pipeline.tools.sweeps as sweeps
from pipeline.core.errors import print_error
from pipeline.tools.sweeps.broker import format_broker
from pipeline.tools.sweeps.left import format_left, steps_left
from pipeline.tools.sweeps.lock_trees import print_missing_trees
from pipeline.tools.sweeps.orphans import format_orphans, orphans
from pipeline.tools.sweeps.paid_again import print_paid_again
from pipeline.tools.sweeps.queue import (
    Keep,
    Workers,
    check_commit_paths,
    queue,
    run_checked,
    start_workers,
    wait,
)
from pipeline.tools.sweeps.report import format_report, read_curves, read_teachers, write_report
from pipeline.tools.sweeps.roundtrip import roundtrip_problems
from pipeline.tools.sweeps.status import (
    Status,
    all_statuses,
    committed,
    format_status,
    resume_progress,
    resume_root,
    settled_rows,
    with_committed,
    with_progress,
)
from pipeline.tools.sweeps.table import (
    DEFAULT_RESUME_ROOT,
    SweepError,
    check_table,
    exp_command,
    job_line,
    load_table,
    teacher_command,
)

# ---- command line --------------------------------------------------------------------------------


def queued_line(queued: list[Status], head: str, revs: list[str]) -> str:
    """What `queue` queued, and on which commit: DVC queues on the checked-out one, which need
    not be the one `--rev` names (right for a cell added on a later commit; wrong where the
    table's commit was meant and the clone was left at another table's)."""
    names = ", ".join(s.name for s in queued) or "every one is done or queued"
    line = f"queued {len(queued)} experiment(s): {names}"
    if not queued:
        return line
    line += f" (on {head[:7]}, the commit checked out"
    if revs and head not in revs:
        named = ", ".join(r[:7] for r in revs)
        line += (f", not --rev's {named}: if they should run on {named}, remove them "
                 f"(dvc queue remove) and queue again from a checkout of it")  # fmt: skip
    return line + ")"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["seeds"]:  # statistics over any experiments, not a table's
        from pipeline.tools.experiments import main as seeds

        return seeds(argv[1:])
    parser = argparse.ArgumentParser(
        prog="vlmrl-sweep",
        description=sweeps.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command",
        choices=("check", "status", "queue", "report", "commands", "resume", "wait"),
        help="wait: a plan's tables as queued, their results kept as they land (a poller "
        "started again alone; `resume` queues again too)",
    )
    parser.add_argument(
        "table",
        type=Path,
        help="the table's YAML file (resume, wait: a plan of tables, in order; status: either)",
    )
    parser.add_argument("--repo", type=Path, default=Path("."), help="the DVC repository")
    parser.add_argument("--cell", action="append", help="these cells only (repeatable)")
    parser.add_argument("--seed", type=int, action="append", help="these seeds only")
    parser.add_argument("--force", action="store_true", help="queue: done experiments too")
    parser.add_argument("--jobs", type=int, default=0, help="queue / resume: start N queue workers")
    parser.add_argument("--wait", action="store_true", help="queue / resume: until none is queued")
    parser.add_argument("--out", type=Path, help="report: directory of the table and figure")
    parser.add_argument(
        "--rev",
        action="append",
        help="status / report: the experiments of this commit (default: the one checked out), "
        "e.g. the commit they ran on when a later one changed only docs; repeatable, for a "
        "cell added on a later commit. queue: the commits it was queued on, read beside the "
        "one checked out: what is queued, running or done there is not queued again",
    )
    parser.add_argument(
        "--results",
        type=Path,
        help="status / queue / report: the table's committed results directory (a report's "
        "results.json): experiments done there count as done, and are never queued again; "
        "queue --wait rewrites it each time one more lands (default for report: --out)",
    )
    parser.add_argument(
        "--commit",
        action="store_true",
        help="queue / resume --wait: git-commit the results as they change",
    )
    parser.add_argument(
        "--resume-root",
        type=Path,
        help="status / queue: the runs' resume states (default: $VLMRL_RESUME_ROOT, else "
        f"{DEFAULT_RESUME_ROOT}); the workers keep them there",
    )
    parser.add_argument(
        "--nice", type=int, default=10, help="queue: the workers' niceness (default 10)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="queue: each worker's BLAS/OpenMP threads (1)"
    )
    parser.add_argument("--push", metavar="REMOTE", help="commands: push each experiment there")
    parser.add_argument(
        "--clone", metavar="URL", help="commands: each job clones URL at this commit first"
    )
    args = parser.parse_args(argv)
    try:
        from pipeline.tools.sweeps.background import (
            is_plan,
            load_plan,
            plan_status,
            resume,
            wait_plan,
        )

        if args.command == "status" and is_plan(args.table):
            steps, _ = load_plan(args.table, args.repo)
            print(plan_status(steps, args.repo, resume_root(args.resume_root)))
            return 0
        if args.command == "resume":
            workers = Workers(resume_root(args.resume_root), args.nice, args.threads)
            steps, interleave = load_plan(args.table, args.repo)
            resume(steps, args.repo, workers, args.jobs, commit=args.commit, wait_too=args.wait,
                   interleave=interleave)  # fmt: skip
            return 0
        if args.command == "wait":
            if not is_plan(args.table):
                raise SweepError(f"wait: {args.table} is not a plan of tables (`queue --wait` "
                                 "waits on one table)")  # fmt: skip
            workers = Workers(resume_root(args.resume_root), args.nice, args.threads)
            workers.lower_priority()  # background work, as resume --wait's poller
            steps, _ = load_plan(args.table, args.repo)
            wait_plan(steps, args.repo, workers, args.jobs, commit=args.commit)
            return 0
        table = load_table(args.table)
        unknown = sorted(set(args.cell or ()) - set(table.cells))
        if unknown:
            raise SweepError(f"--cell {', '.join(unknown)}: not in {args.table}; its cells: "
                             f"{', '.join(table.cells)}")  # fmt: skip
        if args.command == "check":
            problems = roundtrip_problems(args.repo / "params.yaml")
            problems += check_table(table, args.repo / "params.yaml")
            for line in problems:
                print_error(line)
            if not problems:
                teachers = len(table.teacher_groups())
                print(f"{args.table}: {len(table.cells)} cells"
                      + (f" and {teachers} teacher experiment(s)" if teachers else "")
                      + f" pass check_params over {args.repo / 'params.yaml'}")  # fmt: skip
                print_paid_again(table, args.repo)
                print_missing_trees(table, args.repo)
            return 2 if problems else 0
        if args.command == "commands":
            if args.clone and not args.push:
                raise SweepError("--clone needs --push REMOTE: the job's experiment must leave "
                                 "the clone")  # fmt: skip
            rev = (
                run_checked(["git", "rev-parse", "HEAD"], args.repo).stdout.strip()
                if args.clone
                else ""
            )
            pull = args.clone is not None
            commands = [exp_command(table, cell, seed, pull=pull)
                        for cell in args.cell or table.cells
                        for seed in args.seed or table.seeds]  # fmt: skip
            if not args.seed:  # a teacher experiment has no seed
                commands += [teacher_command(table, group, pull=pull)
                             for group in table.teacher_groups_of(args.cell)]  # fmt: skip
            for command in commands:
                print(job_line(command, args.push, args.clone, rev) if args.push
                      else shlex.join(command))  # fmt: skip
            return 0
        results = args.results or (args.out if args.command == "report" else None)
        kept = committed(table, results) if results is not None else {}
        root = resume_root(args.resume_root)
        if args.command == "queue":
            if args.commit and args.results is None:
                raise SweepError("--commit commits the --results directory: give --results DIR")
            rewritten = roundtrip_problems(args.repo / "params.yaml")
            if rewritten:  # every experiment would fail at its first stage, saying only "Failed"
                raise SweepError("nothing queued: DVC's rewrite of params.yaml for each "
                                 "experiment would change what the stages read:\n"
                                 + "\n".join(rewritten))  # fmt: skip
            check_commit_paths(args.repo)
            print_paid_again(table, args.repo)
            print_missing_trees(table, args.repo)
            workers = Workers(root, args.nice, args.threads)
            # the table's experiments on the commits it was queued on, and those queued now
            revs = [*(args.rev or []), "HEAD"]
            full = run_checked(["git", "rev-parse", *revs], args.repo).stdout.split()
            rev = list(dict.fromkeys(full)) if args.rev else full[-1]
            queued = queue(table, args.repo, args.cell, args.seed, args.force, kept, rev)
            print(queued_line(queued, full[-1], full[:-1]), flush=True)
            if args.jobs:
                start_workers(args.repo, args.jobs, workers)
            if args.wait:
                keep = Keep(args.results, args.commit) if args.results is not None else None
                wait(table, args.repo, jobs=args.jobs, rev=rev, workers=workers, kept=kept,
                     keep=keep, table_path=args.table)  # fmt: skip
            elif queued and not args.jobs:
                print("run them: dvc queue start -j N (then `vlmrl-sweep status`)")
            return 0
        found = all_statuses(table, settled_rows(args.repo, args.rev), args.cell, args.seed)
        found = with_committed(found, kept)
        if args.command == "status":
            progress = resume_progress(table, root)
            found = with_progress(table, found, progress)
            print(format_status(table, found))
            print(format_left(steps_left(table, found, progress)))
            for note in (format_orphans(orphans(args.repo), args.repo), format_broker(args.repo)):
                if note:
                    print(note)
            return 0
        found = read_teachers(table, read_curves(table, found, args.repo), args.repo)
        if args.out is None:
            print(format_report(table, found))
        else:
            print(write_report(table, args.table, found, args.out))
            files = ("table.md", f"{table.metric}.png", "curves.png", "results.json")
            print(f"\n{args.out}: " + ", ".join(f for f in files if (args.out / f).exists()))
        return 0
    except (SweepError, OSError) as exc:
        print_error(exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
