"""What a table has left to pay: the agent steps of its experiments that are not done, less
what their resume states already hold. Divided by a pace measured on the machine (steps a second
a run, times the runs at once), it is how long the background work has to go; no pace is kept
here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from pipeline.tools.sweeps.status import Progress, Status
from pipeline.tools.sweeps.table import Table


class Left(NamedTuple):
    steps: int  # agent steps still to train, over the experiments that are not done
    total: int  # agent steps of all of the table's experiments
    runs: int  # experiments (with a seed) not done
    partway: int  # ... of which a resume state holds some steps
    teachers: int  # teacher experiments not done (their cost is not in agent steps)


def steps_left(
    table: Table, found: list[Status], progress: Mapping[tuple[str, int], Progress]
) -> Left:
    """`Left` of `found` (a table's experiments, `all_statuses`) with the resume states'
    `progress` (`resume_progress`). A rounds cell counts its rounds' steps (`Table.steps`); a
    stale experiment runs again from its start, a failed or missing one from its resume state."""
    steps = total = runs = partway = teachers = 0
    for f in found:
        if f.seed is None:
            teachers += f.state != "done"
            continue
        cell = table.steps(f.cell)
        total += cell
        if f.state == "done":
            continue
        runs += 1
        at = progress.get((table.run(f.cell), f.seed)) if f.state != "stale" else None
        reached = min(at.step, cell) if at is not None else 0
        partway += reached > 0
        steps += cell - reached
    return Left(steps, total, runs, partway, teachers)


def format_left(left: Left) -> str:
    """e.g. `agent steps left: 190,000 of 264,000 (18 runs, 2 of them partway; 1 teacher
    experiment)`."""
    head = f"agent steps left: {left.steps:,}" if left.runs else "agent steps left: none"
    parts = []
    if left.runs:
        partway = f", {left.partway} of them partway" if left.partway else ""
        parts.append(f"{left.runs} run{'s' * (left.runs != 1)}{partway}")
    if left.teachers:
        parts.append(f"{left.teachers} teacher experiment{'s' * (left.teachers != 1)}")
    return f"{head} of {left.total:,}" + (f" ({'; '.join(parts)})" if parts else "")
