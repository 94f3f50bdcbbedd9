"""`resume` ends the stage processes that a killed experiment left running (orphans.py)."""

import subprocess
import sys

import psutil

from pipeline.tools.sweeps.orphans import end_orphans, format_orphans, orphans


def test_a_stage_whose_experiment_workspace_is_gone_is_ended_and_a_running_one_is_not(tmp_path):
    exps = tmp_path / "clone" / ".dvc" / "tmp" / "exps"
    gone, live = exps / "tmpgone", exps / "tmplive"
    gone.mkdir(parents=True)
    live.mkdir()
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    killed_experiments_stage = subprocess.Popen(sleep, cwd=gone)
    running_experiments_stage = subprocess.Popen(sleep, cwd=live)
    try:
        gone.rmdir()  # DVC removes a killed experiment's workspace
        found = orphans(tmp_path / "clone")
        assert [(o.pid, o.workspace) for o in found] == [(killed_experiments_stage.pid, str(gone))]
        assert "time.sleep(600)" in found[0].command
        assert orphans(tmp_path) == []  # another clone's: not its to end
        said = format_orphans(found, tmp_path / "clone")  # what `status` prints
        assert f"pid {killed_experiments_stage.pid}: " in said and "1 stage process" in said
        assert format_orphans([], tmp_path / "clone") == ""
        assert end_orphans(tmp_path / "clone") == found
        # ended and reaped (end_orphans waits for it, as the orphan's init would)
        assert not psutil.pid_exists(killed_experiments_stage.pid)
        assert running_experiments_stage.poll() is None
        assert orphans(tmp_path / "clone") == []
    finally:
        for proc in (killed_experiments_stage, running_experiments_stage):
            proc.kill()
            proc.wait()
