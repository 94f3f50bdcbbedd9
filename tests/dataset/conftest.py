"""The dataset wing's builder: `stage_one_dataset`, the one tiny dataset its tests read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import build_stage_one, collect_cfg, env_cfg


@pytest.fixture(scope="package")
def stage_one_dataset(tmp_path_factory) -> Path:
    """Stage one as its stages chain (`build_stage_one`): three 15-step MountainCarContinuous
    episodes, the scripted teacher, scripted masks, 20-sample shards. Returns the root holding
    `rollouts/`, `labels.parquet`, `masks.parquet` and the dataset `ds/`. Read-only by contract:
    a test that edits the dataset copies it first (tests/dataset/test_sharing_integrity.py)."""
    root = tmp_path_factory.mktemp("stage_one")
    build_stage_one(
        root, "MountainCarContinuous-v0", env_cfg(max_episode_steps=15), collect_cfg(episodes=3),
        shard_max_samples=20,
    )  # fmt: skip
    return root
