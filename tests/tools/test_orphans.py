"""`resume` ends the stage processes that a killed experiment left running (orphans.py)."""

import subprocess
import sys

from pipeline.tools.sweeps.orphans import end_orphans, format_orphans, orphans


def test_a_stage_whose_experiment_workspace_is_gone_is_ended_and_a_running_one_is_not(tmp_path):
    exps = tmp_path / "clone" / ".dvc" / "tmp" / "exps"
    gone, live = exps / "tmpgone", exps / "tmplive"
    gone.mkdir(parents=True)
    live.mkdir()
    # stand-ins for stages: each blocks on its stdin, open until the test closes it
    stage = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    killed_experiments_stage = subprocess.Popen(stage, cwd=gone, stdin=subprocess.PIPE)
    running_experiments_stage = subprocess.Popen(stage, cwd=live, stdin=subprocess.PIPE)
    try:
        gone.rmdir()  # DVC removes a killed experiment's workspace
        found = orphans(tmp_path / "clone")
        assert [(o.pid, o.workspace) for o in found] == [(killed_experiments_stage.pid, str(gone))]
        assert "sys.stdin.read()" in found[0].command
        assert orphans(tmp_path) == []  # another clone's: not its to end
        said = format_orphans(found, tmp_path / "clone")  # what `status` prints
        assert f"pid {killed_experiments_stage.pid}: " in said and "1 stage process" in said
        assert format_orphans([], tmp_path / "clone") == ""
        assert end_orphans(tmp_path / "clone") == found
        # end_orphans returns once it has exited (our child here: a zombie until poll reaps it)
        assert killed_experiments_stage.poll() == -9  # SIGKILL
        assert running_experiments_stage.poll() is None
        assert orphans(tmp_path / "clone") == []
    finally:
        for proc in (killed_experiments_stage, running_experiments_stage):
            proc.stdin.close()  # ends a stand-in still reading
            proc.wait()
