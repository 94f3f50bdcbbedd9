"""`--list-cells` tells how far each cell has got: a result, the step and last evaluation of a
running or killed run's resume state (benchmarks.sweep.peek), or nothing yet; a running sweep
prints the same of its running cells as they move on (Progress)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from benchmarks.sweep import Cell, Progress, peek, run_cells, select_names
from pipeline.agents.resume import Resume


def _unused(*_):
    raise AssertionError("--list-cells must run and prepare nothing")


def test_list_cells_reports_results_and_resume_states(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "cells").mkdir(parents=True)
    (out / "cells" / "done.json").write_text(json.dumps({"name": "done"}))
    # an off-policy run killed at step 1500: periodic evaluations in its logs, and a replay the
    # listing must not need to read
    Resume(out / "resume" / "sac-run", "f", every=500).save(
        {
            "step": 1500,
            "logs": [
                {"step": 500.0, "eval_return": 12.0},
                {"step": 1000.0, "critic_loss": 1.0, "eval_return": 150.25},
                {"step": 1500.0, "critic_loss": 0.5},
            ],
            "curve": [(125, 3.0), (250, 40.0)],
            "buffer": {"obs": np.zeros((64, 3, 8, 8), np.uint8)},
        }
    )
    # a PPO run: episode returns only, no evaluations
    Resume(out / "resume" / "ppo-run", "f", every=1).save(
        {"update": 3, "step": 6144, "curve": [(2048, -200.0), (4096, -180.5)]}
    )
    # a damaged file is reported, and the listing goes on
    (out / "resume" / "torn").mkdir()
    (out / "resume" / "torn" / Resume.STATE).write_bytes(b"not a torch file")
    names = ("done", "sac-run", "ppo-run", "torn", "new")
    cells = [Cell(n, {"env": "e", "method": "sac"}) for n in names]
    args = argparse.Namespace(list_cells=True, cell=None, workers=1, threads=1, time_budget=None)
    assert run_cells(cells, args, params="unused", out=out, prepare=_unused, finish=_unused) is None
    lines = dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines())
    assert lines.pop("torn").startswith("no result; resume state unreadable (")
    assert lines == {
        "done": "result",
        "sac-run": "no result; resume state at step 1500, eval 150.2 at step 1000",
        "ppo-run": "no result; resume state at step 6144, last episode -180.5",
        "new": "no result",
    }


def test_peek_without_a_state_is_none_and_reads_the_step(tmp_path):
    assert peek(tmp_path / "missing") is None
    Resume(tmp_path / "r", "f", every=1).save({"step": 7, "logs": [], "curve": []})
    assert peek(tmp_path / "r") == {
        "step": 7, "eval_step": None, "eval_return": None, "episode_return": None
    }  # fmt: skip


def test_progress_prints_a_running_cell_once_per_new_state(tmp_path, capsys):
    out = tmp_path / "out"
    progress = Progress(out, started=0.0)
    progress.report(["a", "b"])  # no resume state yet: nothing to say
    assert capsys.readouterr().out == ""
    Resume(out / "resume" / "a", "f", every=1).save(
        {"step": 500, "logs": [{"step": 500.0, "eval_return": 80.5}], "curve": []}
    )
    progress.report(["a", "b"])
    progress.report(["a", "b"])  # unchanged: not again
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "a: resume state at step 500, eval 80.5 at step 500 ["
    )
    Resume(out / "resume" / "a", "f", every=1).save(
        {"step": 1000, "logs": [{"step": 1000.0, "eval_return": 120.0}], "curve": []}
    )
    progress.report(["a"])
    assert capsys.readouterr().out.startswith(
        "a: resume state at step 1000, eval 120.0 at step 1000"
    )


def test_select_names_keeps_pattern_order_once_each_and_names_a_pattern_that_matches_nothing():
    names = ["erpv-seed0", "erpv-seed1", "sac-seed0", "Sac-seed9"]
    assert select_names(names, ["sac-*", "erpv-seed1", "*-seed0"]) == [
        "sac-seed0", "erpv-seed1", "erpv-seed0"
    ]  # fmt: skip
    with pytest.raises(SystemExit, match=r"--only drq\*: no such cell \(cells: erpv-seed0, "):
        select_names(names, ["erpv*", "drq*"], what="--only")
