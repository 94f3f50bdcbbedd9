"""Background work that leaves the machine usable: a process's session's autogroup lowered with
its niceness (Linux's autogroup shares the CPU between sessions before niceness counts)."""

from __future__ import annotations

import sys
from pathlib import Path


def lower_group_priority(pid: int, nice: int) -> None:
    """Give the autogroup of `pid`'s session niceness `nice` where it has less. Linux's
    autogroup (sched(7), CONFIG_SCHED_AUTOGROUP: on in most distributions' kernels) shares the
    CPU between sessions first and by niceness only within one, so a worker at nice 19 in a
    session of its own takes as much of the machine as a shell's whole session: measured on 2
    cores beside two queue workers, two busy foreground processes each got 0.50 of a core with
    the workers' group at 0 and 0.96 with it at 19. A kernel without autogroup has no
    /proc/PID/autogroup, and the process's niceness alone orders the CPU."""
    path = Path(f"/proc/{pid}/autogroup")
    try:
        current = autogroup_nice(path.read_text())
        if current is not None and nice > current:
            path.write_text(str(nice))
    except FileNotFoundError:
        return
    except (OSError, ValueError) as err:  # not ours to change (setpriority's rules), or unread
        print(
            f"warning: could not give {path} niceness {nice} ({err}): the workers compete with "
            "the machine's other sessions at an equal share", file=sys.stderr, flush=True,
        )  # fmt: skip


def autogroup_nice(text: str) -> int | None:
    """The niceness in /proc/PID/autogroup's text ("/autogroup-746 nice 0"), or None where it
    is empty: the kernel writes nothing for a process in no autogroup (the root group that a
    container's first session runs in, or a kernel with autogroup off), which has no group
    niceness to change. Other text raises ValueError."""
    fields = text.split()
    if not fields:
        return None
    if len(fields) != 3 or fields[1] != "nice":
        raise ValueError(f"unexpected autogroup text {text!r}")
    return int(fields[2])
