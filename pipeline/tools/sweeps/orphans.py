"""The processes behind a table's experiments: DVC's queue workers, tasks whose process is gone
(`orphaned`: DVC still lists them as running), and stage processes left running by a killed
experiment, ended before a table resumes.

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

ORPHANED = "Orphaned"  # DVC says Running; the process it recorded is gone
ORPHANED_WHY = "its process died with its worker or machine: `queue` runs it again"


def orphaned(repo: Path, rev: str) -> bool:
    """Whether the experiment task `rev` (a queued stash commit) that DVC lists as running has
    lost its process: the pid DVC's task runner recorded (`.dvc/tmp/exps/run/<rev>/<rev>.json`)
    is not alive and no return code was written. A SIGKILLed worker, or a machine that stopped,
    leaves its task so; DVC keeps showing it as running. A task with no such record is orphaned
    when no queue worker runs in `repo`: its worker died as it took the task up (DVC's file
    broker, treeverse/dvc#7903, or a machine that stopped then), and no process will ever
    write one. With a worker alive it may be starting, and counts as running."""
    import json

    for info in (repo / ".dvc" / "tmp" / "exps" / "run").glob(f"{rev}*/{rev}*.json"):
        try:
            proc = json.loads(info.read_text())
        except (OSError, ValueError):
            continue
        pid = proc.get("pid") if isinstance(proc, dict) else None
        if not isinstance(pid, int) or proc.get("returncode") is not None:
            continue
        return not process_alive(pid)
    return not live_workers(repo)


def live_workers(repo: Path) -> list[str]:
    """The names of DVC's queue workers (`dvc exp queue-worker NAME` processes) running in
    `repo`."""
    import psutil

    root = repo.resolve()
    names = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cmdline, cwd = proc.info["cmdline"] or [], proc.info["cwd"]  # None: not ours to read
        if "queue-worker" in cmdline and cwd is not None and Path(cwd).resolve() == root:
            at = cmdline.index("queue-worker") + 1
            names.append(cmdline[at] if at < len(cmdline) else "")
    return names


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs: it exists and is not a zombie (a killed process whose parent
    died too waits for a reaper, which a container's init may be slow to be)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust the signal
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


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
