"""Stages that compute nothing with torch do not import it (issue: every `python -m stages.<x>`
process spent 2-3 s importing, 70-90 % of it torch, also in stages that train nothing).

Each module is imported in a fresh interpreter, which then names the heavy ML libraries found in
`sys.modules`; a stage that needs one (a checkpoint behaviour, an hf teacher, CLIP masks, a
training run) imports it inside the function that uses it. `benchmarks/import_times.py` measures
what the imports cost."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

HEAVY = ("torch", "transformers", "open_clip", "ray")

# Stage modules (and the library modules most of them share) whose import needs none of HEAVY.
TORCH_FREE = [
    "stages.audit",
    "stages.check_params",
    "stages.collect",
    "stages.compare",
    "stages.dataset",
    "stages.label",
    "stages.masks",
    "stages.review",
    "stages.verify",
    "pipeline.teach.rollouts.reader",
    "pipeline.teach.rollouts.writer",
    "pipeline.learn.agents.checkpoint",
    "pipeline.learn.methods.table",
]

_CODE = f"import importlib, sys; importlib.import_module(sys.argv[1]); print(sorted(m for m in {HEAVY!r} if m in sys.modules))"  # fmt: skip


@pytest.fixture(scope="module")
def heavy_imports() -> dict[str, str]:
    """module -> what its fresh interpreter printed: one process per module, run side by side."""
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    procs = {}
    for module in TORCH_FREE:
        procs[module] = subprocess.Popen(
            [sys.executable, "-c", _CODE, module],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    out = {}
    for module, proc in procs.items():
        stdout, stderr = proc.communicate()
        out[module] = stdout.strip() if proc.returncode == 0 else f"failed: {stderr[-2000:]}"
    return out


@pytest.mark.parametrize("module", TORCH_FREE)
def test_module_imports_no_heavy_ml_library(module, heavy_imports):
    assert heavy_imports[module] == "[]", (
        f"importing {module} imports {heavy_imports[module]}: import it inside the function that "
        f"uses it (`python -m benchmarks.import_times --modules {module}` names the chain)"
    )


def test_the_check_sees_an_import():
    """The check itself: a module that does import torch is reported."""
    result = subprocess.run(
        [sys.executable, "-c", _CODE, "pipeline.learn.agents.networks"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert result.stdout.strip() == "['torch']"


STAGE_ONE_RUN = """
import sys
from pathlib import Path
from stages import collect, label, masks, verify

out, env = Path(sys.argv[1]), "MountainCar-v0"
p = ["--params", str(out / "params.yaml")]
rollouts, labels, mask_table = out / "rollouts", out / "labels.parquet", out / "masks.parquet"
assert collect.main([*p, "--env", env, "--out", str(rollouts)]) == 0
assert verify.main([str(rollouts), "--json", str(out / "verify.json")]) == 0
assert label.main([*p, "--rollouts", str(rollouts), "--cache", str(out / "cache"),
                   "--out", str(labels)]) == 0
assert masks.main([*p, "--rollouts", str(rollouts), "--labels", str(labels),
                   "--cache", str(out / "mcache"), "--out", str(mask_table)]) == 0
print(sorted(m for m in {heavy!r} if m in sys.modules))
"""


def test_stage_one_runs_without_torch(tmp_path):
    """Not only their imports: collecting (random behaviour), verifying, labelling (scripted
    teacher) and masking (scripted back end) load no torch in the process that runs them; the
    shards are read and written with `tarfile` in webdataset's layout (tests/teach/test_writer.py)."""
    from tests.conftest import tiny_params_dict, write_params  # here: it imports torch itself

    params = tiny_params_dict(("MountainCar-v0",), episodes=1)
    params["collect"]["MountainCar-v0"]["behaviour"] = "random"
    write_params(tmp_path / "params.yaml", params)
    result = subprocess.run(
        [sys.executable, "-c", STAGE_ONE_RUN.format(heavy=HEAVY), str(tmp_path)],
        cwd=REPO, env={**os.environ, "MUJOCO_GL": "egl"}, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout[-2000:]
