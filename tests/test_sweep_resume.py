"""A killed sweep cell goes on from its resume state when `--only` names it, and starts over
(saying how far the deleted state had got) when `--cell` does (benchmarks.sweep.run_cells with its
spawned workers and pipeline.training.train_run, as every benchmark's sweep runs them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.agents.resume import Resume
from pipeline.rollouts.format import MANIFEST_NAME
from tests.conftest import REPO, sigkill_once_saved, tiny_params_dict, wait_for_exit

ENV = "MountainCarContinuous-v0"
CELL = "sac-seed0"
MARK = (0, -12345.0)  # an episode no run can have: written into the killed run's state

SWEEP = """
import argparse, sys
from pathlib import Path
from benchmarks.sweep import Cell, add_sweep_arguments, run_cells
from pipeline.methods.base import TrainInputs

def finish(cell, params, agent_dir, trained):
    return {"name": cell.name, "curve": trained.curve, "resumed_from": trained.resumed_from}

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    add_sweep_arguments(parser)
    parser.add_argument("--root")
    args = parser.parse_args()
    root = Path(args.root)
    run = {"env": "MountainCarContinuous-v0", "method": "sac", "steps": 120, "seed": 0}
    cells = [Cell("sac-seed0", run)]
    inputs = TrainInputs(root / "rollouts", root / "labels.parquet")
    sweep = run_cells(cells, args, params=root / "params.yaml", out=root / "out",
                      prepare=lambda key: inputs, finish=finish)
    sys.exit(0 if sweep is None or not sweep.failures else 1)
"""


def _sweep(root, *args):
    return subprocess.Popen(
        [sys.executable, str(root / "sweep.py"), "--root", str(root), *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc): a sweep's spawned workers."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone since the glob
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _finish(proc) -> str:
    out, _ = proc.communicate()
    assert proc.returncode == 0, out
    return out


def _mark_state(path) -> int:
    """Put MARK first in the saved run's curve, the fingerprint kept: a run that resumes from
    this state ends with MARK in its curve, one that starts over cannot."""
    header = json.loads(path.read_text())
    resume = Resume(path.parent, header["fingerprint"], every=1)
    state = resume.load()
    state["curve"] = [MARK, *state["curve"]]
    resume.save(state)
    return int(state["step"])


@pytest.mark.slow  # four sweeps, each with a spawned worker: eight fresh interpreters
def test_only_resumes_a_killed_cell_and_cell_starts_it_over(tmp_path):
    raw = tiny_params_dict((ENV,))
    raw["env"][ENV].update(max_episode_steps=24)
    raw["sac"] = {"batch_size": 8, "start_steps": 16, "log_every": 24, "resume_every": 24,
                  "network": {"obs": "state", "hidden_dim": 16}}  # fmt: skip
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "rollouts").mkdir()  # hashed into the cell's spec, not read by sac
    (tmp_path / "rollouts" / MANIFEST_NAME).write_text("{}")
    (tmp_path / "labels.parquet").write_bytes(b"unread")
    (tmp_path / "sweep.py").write_text(SWEEP)
    state = tmp_path / "out" / "resume" / CELL / Resume.STATE
    result = tmp_path / "out" / "cells" / f"{CELL}.json"

    killed = _sweep(tmp_path, "--only", CELL)
    workers = sigkill_once_saved(killed, state, on_saved=lambda: _children(killed.pid))
    assert workers  # the cell's worker wrote the state
    # the worker gets SIGTERM as its sweep dies: once it is gone, no later state can replace this
    for pid in workers:
        wait_for_exit(pid)
    assert state.exists() and not result.exists()
    saved = {p.name: p.read_bytes() for p in state.parent.iterdir()}  # state.json, tensors
    step = _mark_state(state)

    out = _finish(_sweep(tmp_path, "--only", "sac-*", "--progress-every", "0.01"))
    curve = [tuple(e) for e in json.loads(result.read_text())["curve"]]
    assert curve[0] == MARK, f"--only started over instead of resuming from step {step}:\n{out}"
    assert f"{CELL}: resume state at step " in out  # the running cell's progress, while it ran
    assert json.loads(result.read_text())["resumed_from"] == step  # timed from there on
    assert not state.exists()  # finished: its resume state is gone

    # the same killed state again, now under --cell: deleted, said so, and the run starts over
    state.parent.mkdir(parents=True)
    for name, data in saved.items():
        (state.parent / name).write_bytes(data)
    _mark_state(state)
    out = _finish(_sweep(tmp_path, "--cell", CELL))
    assert f"{CELL}: --cell deletes its resume state at step {step}" in out
    assert f"--only {CELL} goes on from a resume state" in out
    curve = [tuple(e) for e in json.loads(result.read_text())["curve"]]
    assert curve and MARK not in curve
    assert json.loads(result.read_text())["resumed_from"] == 0

    # a current result: --only runs nothing and keeps it
    before = result.read_bytes()
    out = _finish(_sweep(tmp_path, "--only", CELL))
    assert "1 cells have a result, 0 to run" in out and result.read_bytes() == before


def test_a_resumed_runs_rates_count_the_steps_after_its_resume_state():
    from benchmarks.sweep import Trained

    whole, resumed = Trained([], [], 10.0), Trained([], [], 10.0, resumed_from=3000)
    assert (whole.steps_timed(10_000), whole.updates_timed(10_000, 1000)) == (10_000, 9001)
    assert (resumed.steps_timed(10_000), resumed.updates_timed(10_000, 1000)) == (7000, 7000)
    # resumed within the random warm-up: every update is still in the timed part
    assert Trained([], [], 1.0, resumed_from=500).updates_timed(10_000, 1000) == 9001


@pytest.mark.slow  # two sweeps, each with a spawned worker
def test_ctrl_c_ends_a_sweep_in_one_line_and_its_cell_goes_on_after(tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group, sweep and workers alike) once the cell has
    saved a resume state: the sweep ends its worker and exits 130 with one line, no traceback
    from it or the worker; the same command then goes on from the resume state."""
    import signal

    raw = tiny_params_dict((ENV,))
    raw["env"][ENV].update(max_episode_steps=24)
    raw["sac"] = {"batch_size": 8, "start_steps": 16, "log_every": 24, "resume_every": 24,
                  "network": {"obs": "state", "hidden_dim": 16}}  # fmt: skip
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "rollouts").mkdir()
    (tmp_path / "rollouts" / MANIFEST_NAME).write_text("{}")
    (tmp_path / "labels.parquet").write_bytes(b"unread")
    # long enough that the interrupt lands mid-run (the resume state is saved every 24 steps)
    script = (
        SWEEP.replace('if __name__ == "__main__":', "def main():")
        .replace("    sys.exit(0 if sweep", "    return (0 if sweep")
        .replace('"steps": 120', '"steps": 3000')
    )
    script += "\nif __name__ == '__main__':\n    from benchmarks import run_main\n"
    script += "    sys.exit(run_main(main))\n"
    (tmp_path / "sweep.py").write_text(script)
    state = tmp_path / "out" / "resume" / CELL / Resume.STATE
    result = tmp_path / "out" / "cells" / f"{CELL}.json"

    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "sweep.py"), "--root", str(tmp_path), "--only", CELL,
         "--progress-every", "0.01"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    # driven by the run's own progress: the sweep prints `<cell>: resume state at step N` once
    # the cell has saved one; the interrupt follows that line
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if f"{CELL}: resume state at step " in line:
            break
    assert seen and f"{CELL}: resume state at step " in seen[-1], (
        "the sweep ended before its cell saved a resume state:\n" + "".join(seen)
    )
    os.killpg(proc.pid, signal.SIGINT)
    out = "".join(seen) + proc.communicate()[0]
    assert proc.returncode == 130, out
    assert "interrupted: finished cells, prepared data and resume states are kept" in out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert state.exists() and not result.exists()

    rerun = _sweep(tmp_path, "--only", CELL)
    out = rerun.communicate()[0]
    assert rerun.returncode == 0, out
    assert json.loads(result.read_text())["resumed_from"] > 0, out


def test_peek_reads_the_json_alone(tmp_path):
    """benchmarks.sweep.peek reports a resume state's progress from its JSON, without its
    tensors."""
    import torch

    from benchmarks.sweep import peek

    state = {
        "step": 12,
        "curve": [(4, -1.5), (8, 2.0)],
        "logs": [{"step": 8.0, "eval_return": 3.25}],
        "weights": {"w": torch.arange(6.0).reshape(2, 3)},
        "optimizer": {0: {"step": torch.tensor(3.0)}},
    }
    Resume(tmp_path, "f", every=1).save(state)
    for tensors in tmp_path.glob("state.*.safetensors"):
        tensors.unlink()
    assert peek(tmp_path) == {
        "step": 12, "eval_step": 8, "eval_return": 3.25, "episode_return": 2.0
    }  # fmt: skip
