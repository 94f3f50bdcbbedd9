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
    "pipeline.rollouts.reader",
    "pipeline.rollouts.writer",
    "pipeline.agents.checkpoint",
    "pipeline.methods.table",
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
        [sys.executable, "-c", _CODE, "pipeline.agents.networks"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert result.stdout.strip() == "['torch']"
