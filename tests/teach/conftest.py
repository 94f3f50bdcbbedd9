"""Stage one's builder: `collected`, the one way a test here gets rollouts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import collect_cfg, env_cfg


@pytest.fixture(scope="session")
def collected(tmp_path_factory) -> Callable[..., Path]:
    """`collected(env_id, episodes=1, **env)` -> a rollout directory named `env_id`, collected
    once per session for each distinct (env_id, episodes, env overrides): modules that ask for
    the same rollouts share them. The directory is read-only by contract: a test that edits
    rollouts copies them first (tests/teach/test_verify.py)."""
    built: dict[tuple, Path] = {}

    def collect_once(env_id: str, episodes: int = 1, **env: Any) -> Path:
        from pipeline.teach.rollouts.collect import collect

        key = (env_id, episodes, tuple(sorted(env.items())))
        if key not in built:
            out = tmp_path_factory.mktemp("rollouts") / env_id
            collect(env_id, env_cfg(**env), collect_cfg(episodes=episodes), out, progress=False)
            built[key] = out
        return built[key]

    return collect_once
