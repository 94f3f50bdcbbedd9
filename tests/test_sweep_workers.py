"""A sweep's workers end with the sweep: a sweep killed from outside (SIGKILL, or SIGTERM of its
process alone) must not leave training workers running unseen (benchmarks.sweep.worker_pool)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

SWEEP = """
import os, sys, time
from benchmarks.sweep import worker_pool

def work(path):
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    time.sleep(120)

if __name__ == "__main__":
    with worker_pool(1) as pool:
        pool.submit(work, sys.argv[1]).result()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead: it waits for its parent only to be reaped
    stat = f"/proc/{pid}/stat"
    return not (os.path.exists(stat) and open(stat).read().split(") ")[1].startswith("Z"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_sweep_takes_its_workers_with_it(tmp_path):
    script, marker = tmp_path / "sweep.py", tmp_path / "worker.pid"
    script.write_text(SWEEP)
    sweep = subprocess.Popen([sys.executable, str(script), str(marker)], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    try:
        while not marker.exists():  # progress-driven: a loaded machine only makes it longer
            assert sweep.poll() is None, "the sweep ended before its worker started"
            time.sleep(0.2)
        worker = int(marker.read_text())
        assert _alive(worker)
        sweep.kill()  # SIGKILL: no handler of the sweep's runs
        sweep.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(worker), "the worker outlived the killed sweep"
    finally:
        sweep.kill()
        if marker.exists() and _alive(pid := int(marker.read_text())):
            os.kill(pid, 9)  # a failed run leaves no sleeper behind
