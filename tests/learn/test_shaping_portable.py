"""Hybrid PPO's potentials are the same bytes on every x86 CPU: the train stage's weights (and so
dvc.lock) must not depend on which BLAS kernel or SIMD path the machine picks. A run on an AMD
EPYC with AVX-512 once trained other weights than the committed ones, built where OpenBLAS had
picked its Haswell kernel (`OPENBLAS_CORETYPE`), because Phi_rbf went through a float32 sgemv.

Each variant runs in its own process: OpenBLAS and numpy read their dispatch settings at import."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests import cpu_dispatch

PROBE = """
import hashlib
from types import SimpleNamespace
import numpy as np
from pipeline.learn.shaping.prototypes import GreyEmbedder, PrototypeCache
from pipeline.learn.shaping.tabulated import PositionPotentialTable, mountaincar_frames_at

# the default pipeline's case: grey 16x16 MountainCar frames, labelled positions as prototypes
embedder = GreyEmbedder(16)
positions = np.linspace(-1.2, 0.5, 80)
milestones = (np.arange(80) // 20).astype(np.float32)
cache = PrototypeCache(
    embedder.embed(mountaincar_frames_at(positions, 64)), milestones, 0.1, positions
)
table = PositionPotentialTable.build(cache, embedder, SimpleNamespace(image_size=64), 0.005, positions)
print(hashlib.sha256(table.levels.tobytes() + table.phis.tobytes()).hexdigest())
"""


def _digest(extra_env: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k not in cpu_dispatch.VARIABLES}
    env.update(extra_env)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{extra_env}: {done.stderr[-2000:]}"
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # a fresh interpreter per variant (five or six); the pin: test_kernels.py
@pytest.mark.skipif(not cpu_dispatch.X86, reason="the dispatch variants are x86 CPU settings")
def test_prototype_potentials_do_not_depend_on_blas_kernel_or_simd_path():
    digests = {str(v): _digest(v) for v in cpu_dispatch.variants()}
    assert len(set(digests.values())) == 1, digests
