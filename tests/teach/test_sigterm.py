"""SIGTERM (what `dvc` sends a stage it stops, and what a batch scheduler sends a job) stops every
stage, pygame-rendered envs included: SDL's own handlers turned it into a quit event nobody read,
and the orphaned stage went on writing into a DVC output."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from pipeline.teach.rollouts.collect import JOURNAL_NAME
from tests.conftest import REPO, tiny_params_dict, write_params


@pytest.mark.parametrize("env_id", ["MountainCar-v0", "CarRacing-v3"])
def test_sigterm_stops_a_collect_that_renders_with_pygame(tmp_path, env_id):
    params = write_params(tmp_path / "params.yaml", tiny_params_dict((env_id,), episodes=30))
    out = tmp_path / "rollouts"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stages.collect", "--params", str(params), "--env", env_id,
         "--out", str(out)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    journal = out / JOURNAL_NAME
    # SIGTERM once a shard is written (the env is rendering), looking after each piece of the
    # stage's own output (its progress bar): driven by the run, not a clock
    while proc.stderr.read1(65536):
        if journal.exists() and json.loads(journal.read_text())["shards"]:
            break
    assert proc.poll() is None, "collect finished before the signal; the test is void"
    proc.send_signal(signal.SIGTERM)
    proc.communicate()  # one that ignores SIGTERM ends anyway, by finishing its run (exit 0)
    assert proc.returncode == -signal.SIGTERM, f"{env_id}: collect ignored SIGTERM"
