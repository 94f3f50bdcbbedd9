"""SIGTERM (what `dvc` sends a stage it stops, and what a batch scheduler sends a job) stops every
stage, pygame-rendered envs included: SDL's own handlers turned it into a quit event nobody read,
and the orphaned stage went on writing into a DVC output."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from pipeline.rollouts.collect import JOURNAL_NAME
from tests.conftest import REPO, tiny_params_dict, write_params


@pytest.mark.parametrize("env_id", ["MountainCar-v0", "CarRacing-v3"])
def test_sigterm_stops_a_collect_that_renders_with_pygame(tmp_path, env_id):
    params = write_params(tmp_path / "params.yaml", tiny_params_dict((env_id,), episodes=30))
    out = tmp_path / "rollouts"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stages.collect", "--params", str(params), "--env", env_id,
         "--out", str(out)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    journal = out / JOURNAL_NAME
    while proc.poll() is None:  # SIGTERM once a shard is written: the env is rendering
        if journal.exists() and json.loads(journal.read_text())["shards"]:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "collect finished before the signal; the test is void"
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=120)  # it dies at once; 120 s only bounds a broken run
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"{env_id}: collect ignored SIGTERM")
    assert code == -signal.SIGTERM
