"""Stage processes left running by a killed experiment, and their end before a table resumes.

`dvc queue stop --kill` (and `dvc queue kill --force`) SIGKILLs each running experiment's
`dvc exp run` process alone (dvc-task's `ProcessManager.kill` signals the process, not its
group). The stage command it started (`python -m stages.train ...`) goes on, reparented to init,
in the experiment's temporary workspace that DVC has meanwhile deleted: nothing will commit what
it writes, and it keeps writing the run's resume state, which the same run queued again (by
`resume`) would go on from at the same time. Two P2 runs went on so after `dvc queue stop --kill`
until ended by hand, before their requeued copies started. `dvc queue kill NAME` without
`--force` interrupts the whole process group and leaves no such process.

`status` names such processes; `resume` ends them before it queues (`end_orphans`).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.tools.sweeps.status import process_alive


@dataclass(frozen=True)
class Orphan:
    pid: int
    command: str
    workspace: str


def orphans(repo: Path) -> list[Orphan]:
    """Processes whose working directory is an experiment workspace of the clone `repo` (under
    `.dvc/tmp/exps/`) that no longer exists: their experiment was killed and its workspace
    removed. A running experiment's workspace exists."""
    import psutil

    exps = (repo / ".dvc" / "tmp" / "exps").resolve()
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        cwd = proc.info["cwd"]  # None: not ours to read; psutil drops " (deleted)"
        if cwd is None or Path(cwd).exists() or exps not in Path(cwd).parents:
            continue
        found.append(Orphan(proc.info["pid"], " ".join(proc.info["cmdline"] or []), cwd))
    return found


def format_orphans(found: list[Orphan], repo: Path) -> str:
    """What `status` says of `orphans(repo)` ('' when none)."""
    if not found:
        return ""
    lines = [f"{repo}: {len(found)} stage process(es) left running by killed experiments (their "
             "workspaces are gone; the next `resume` ends them):"]  # fmt: skip
    lines += [f"  pid {o.pid}: {o.command}" for o in found]
    return "\n".join(lines)


def end_orphans(repo: Path) -> list[Orphan]:
    """SIGKILL each of `orphans(repo)`, say so, wait until each has exited, and return them.
    SIGKILL, not a polite signal with a grace period: nothing will commit what an orphan
    writes, and its resume state is written atomically (`Resume.save`), so a kill at any point
    leaves the last complete state for its requeued run. The wait follows each process's own
    state (gone or a zombie, `process_alive`), not a clock."""
    found = orphans(repo)
    for orphan in found:
        print(f"{repo}: ending pid {orphan.pid}, left running by a killed experiment (its "
              f"workspace {orphan.workspace} is gone): {orphan.command}", flush=True)  # fmt: skip
        try:
            os.kill(orphan.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    for orphan in found:
        while process_alive(orphan.pid):  # SIGKILL cannot be caught: each ends once the kernel acts
            time.sleep(0.05)
    return found
