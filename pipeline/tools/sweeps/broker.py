"""DVC's queue broker kept small: `dvc exp clean` once it keeps many celery control messages.

DVC's queue is celery over dvc-task's file broker. Each `dvc exp show` asks the workers what
they run (celery's remote control), and every question and reply stays a file in the broker's
folder of processed messages, which DVC reads whole, each file parsed, several times in each
`exp show`, and nothing empties it. A clone that had run a plan's tables in the background
since 2026-11-29 held 57,484 files there (all but 6 control messages), and one `vlmrl-sweep
status` of the plan took 149 s of CPU; 71 s after `dvc exp clean` (DVC's command for them,
treeverse/dvc#10578: it deletes the control messages and keeps the experiments' own)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.tools.sweeps.table import SweepError

BROKER_PROCESSED = Path(".dvc", "tmp", "exps", "celery", "broker", "processed")
CLEAN_ABOVE = 1_000  # control messages kept before a clean: then one takes a few seconds


def control_messages(repo: Path) -> int:
    """How many celery control messages (`*.pidbox.msg`: remote-control questions and replies)
    `repo`'s DVC queue broker keeps among its processed messages."""
    try:
        with os.scandir(repo / BROKER_PROCESSED) as entries:
            return sum(entry.name.endswith(".pidbox.msg") for entry in entries)
    except FileNotFoundError:
        return 0


def clean_broker(repo: Path, run: Callable[[list[str], Path], object],
                 above: int = CLEAN_ABOVE) -> None:  # fmt: skip
    """`dvc exp clean` in `repo` (through `run`, queue.run_checked: the project's `dvc`) once its
    queue broker keeps more than `above` control messages. One that fails (a SweepError) is
    said and the caller goes on: the queue works without it, each read of it only slower."""
    found = control_messages(repo)
    if found <= above:
        return
    started = time.monotonic()
    try:
        run(["dvc", "exp", "clean"], repo)
    except SweepError as exc:
        print(f"{time.strftime('%H:%M:%S')} {found:,} control messages in DVC's queue broker "
              f"were not cleaned, and each `dvc exp show` reads them all: {exc}",
              flush=True)  # fmt: skip
        return
    print(f"{time.strftime('%H:%M:%S')} `dvc exp clean`: {found:,} control messages in DVC's "
          f"queue broker, {control_messages(repo):,} after it "
          f"({time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip


def format_broker(repo: Path, above: int = CLEAN_ABOVE) -> str:
    """`status`'s line when `repo`'s queue broker keeps more than `above` control messages
    (`status` reads, it does not clean); empty otherwise."""
    found = control_messages(repo)
    if found <= above:
        return ""
    return (
        f"DVC's queue broker in {repo} keeps {found:,} control messages, and each `dvc exp show` "
        "(this status's too) reads them all: `resume` and `queue --wait` clean them, or run "
        "`dvc exp clean` there"
    )
