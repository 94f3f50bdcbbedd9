"""What a table has left to pay (`vlmrl-sweep status`'s last line): agent steps, from the
experiments' states and their resume states."""

import dataclasses

from pipeline.tools.sweeps.left import Left, format_left, steps_left
from pipeline.tools.sweeps.status import Progress, Status, statuses
from pipeline.tools.sweeps.table import Table

TABLE = {
    "table": "t",
    "control": "base",
    "seeds": [0, 1, 2],
    "cells": {
        "base": {"train": {"env": "E-v0", "method": "sac", "steps": 100}},
        "r": {
            "train": {"env": "E-v0", "method": "erpv", "steps": 100},
            "rounds": {"count": 2, "episodes": 1, "steps": 50},  # 200 steps in all
        },
    },
}


def _found(table: Table, states: dict[str, str]) -> list[Status]:
    return [dataclasses.replace(f, state=states.get(f.name, "queued"))
            for f in statuses(table, {})]  # fmt: skip


def test_steps_left_count_what_is_not_done_less_what_resume_states_hold():
    table = Table.model_validate(TABLE)
    found = _found(table, {"t-base-s0": "done", "t-base-s1": "running", "t-r-s0": "done",
                           "t-r-s1": "partial", "t-r-s2": "stale"})  # fmt: skip
    progress = {
        ("t-base", 1): Progress(40, 100, 0.0),
        ("t-r", 1): Progress(150, 200, 0.0),  # in its second round
        ("t-r", 2): Progress(90, 200, 0.0),  # stale: runs again from its start
        ("t-base", 0): Progress(100, 100, 0.0),  # done: a final state left behind counts nothing
    }
    left = steps_left(table, found, progress)
    # base: s1 60 + s2 100; r: s1 50 + s2 200 (stale)
    assert left == Left(steps=410, total=900, runs=4, partway=2, teachers=0)
    assert format_left(left) == "agent steps left: 410 of 900 (4 runs, 2 of them partway)"


def test_a_finished_table_and_teacher_experiments_are_said_so():
    table = Table.model_validate(TABLE)
    done = _found(table, {f.name: "done" for f in statuses(table, {})})
    assert format_left(steps_left(table, done, {})) == "agent steps left: none of 900"
    teacher = dataclasses.replace(done[0], seed=None, name="t-teacher-base", state="queued")
    left = steps_left(table, [*done, teacher], {})
    assert (left.runs, left.teachers) == (0, 1)
    assert format_left(left) == "agent steps left: none of 900 (1 teacher experiment)"
