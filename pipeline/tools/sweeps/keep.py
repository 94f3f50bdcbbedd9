"""Where `wait` keeps a table's results as its experiments land: the report's files, written
(and committed) each time one more is done."""

from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.tools.sweeps.report import read_curves, read_teachers, write_report
from pipeline.tools.sweeps.status import Status
from pipeline.tools.sweeps.table import Table


@dataclass(frozen=True)
class Keep:
    """Where `wait` keeps the table's results as experiments land: `report --out results`'s
    files, rewritten each time one more is done, and with `commit`, committed (those files
    alone): a new machine keeps only what is committed."""

    results: Path
    commit: bool = False


def keep_results(table: Table, table_path: Path, found: list[Status], repo: Path,
                 keep: Keep) -> None:  # fmt: skip
    """Write (and commit) the report of `found` to `keep.results`. The commit goes to the git
    repository that holds `keep.results`, which need not be `repo`: a table queued from a clone
    of its commit keeps its results in the checkout where work goes on. A failed commit (another
    git command holding the index) is said, not raised: the next experiment commits both."""
    found = read_teachers(table, read_curves(table, found, repo), repo)
    write_report(table, table_path, found, keep.results)
    if not keep.commit:
        return
    done = sum(f.state == "done" for f in found)
    message = f"Table {table.table}: {done} of {len(found)} experiments done (raw results)"
    for args in (["git", "add", "--", "."],
                 ["git", "commit", "-q", "-m", message, "--", "."]):  # fmt: skip
        run = subprocess.run(args, cwd=keep.results, capture_output=True, text=True)
        if run.returncode and "nothing to commit" not in run.stdout + run.stderr:
            print(f"{time.strftime('%H:%M:%S')} {shlex.join(args)}: "
                  f"{(run.stderr or run.stdout).strip()[:300]}", flush=True)  # fmt: skip
            return
