"""Factories for tiny configs and rollouts, built in code: nothing is downloaded or committed."""

from __future__ import annotations

import copy
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

# One OpenMP thread (torch's intra-op pool, the BLAS) for this run and every process it starts,
# unless OMP_NUM_THREADS says otherwise: set before torch loads, which reads it once. The tests'
# networks are tiny, so one thread is faster than two, and a second thread fighting a busy
# neighbour for a core made the suite several times slower. Tests about thread counts set their
# own (test_training.py).
os.environ.setdefault("OMP_NUM_THREADS", "1")

from pipeline.core.config import CollectConfig, EnvConfig, LabelConfig, Params, parse_params
from pipeline.learn.agents.ppo import PPOParams

REPO = Path(__file__).resolve().parents[1]

TINY_ENV = {"image_size": 32, "action_repeat": 1, "max_episode_steps": 20, "include_state": True}
TINY_COLLECT = {"behaviour": "random", "episodes": 3, "seed": 0, "shard_max_samples": 30}
TINY_LABEL = {
    "teacher": {"backend": "scripted", "reliability": 0.8, "seed": 0},
    "tasks": {"action": 5, "milestone": 5, "objects": 10, "judge": 5},
    "batch_size": 8,
    "max_transport_failure_rate": 0.05,
    # the tests label with failure-injecting and hostile teachers on purpose; the collapse
    # gate has its own tests (tests/teach/test_label.py)
    "max_parse_failure_rate": 1.0,
}


# CleanRL's ppo.py defaults (classic control)
PPO_DEFAULTS = {
    "num_envs": 4,
    "rollout_steps": 128,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "update_epochs": 4,
    "minibatches": 4,
    "clip_coef": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "learning_rate": 2.5e-4,
    "anneal_lr": True,
    "hidden": 64,
    "normalize_obs": False,
    "normalize_reward": False,
}


def ppo_params(**overrides: Any) -> PPOParams:
    return PPOParams(**{**PPO_DEFAULTS, **overrides})


def tiny_params_dict(envs: tuple[str, ...] = ("MountainCar-v0",), **collect_overrides: Any) -> dict:
    return {
        "envs": list(envs),
        "env": {e: copy.deepcopy(TINY_ENV) for e in envs},
        "collect": {e: {**TINY_COLLECT, **collect_overrides} for e in envs},
        "label": {**copy.deepcopy(TINY_LABEL), "per_env": {e: {} for e in envs}},
        "masks": {"backend": "scripted", "batch_size": 16},
        "dataset": {"shard_max_samples": 100},
        "rounds": {},  # dvc.yaml iterates over it: none, but the key must be there
        # teacher_eval@<env> reads it: one short episode, the fresh-answer interval only
        "teacher_eval": {"episodes": 1, "seed": 0, "every_k": [1]},
    }


@pytest.fixture
def one_thread():
    """One torch thread for the test, the previous count restored after: tiny networks run
    faster on one thread and are immune to a busy neighbour (`pytestmark =
    pytest.mark.usefixtures("one_thread")` in a module)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_params() -> Params:
    return parse_params(tiny_params_dict())


def env_cfg(**overrides: Any) -> EnvConfig:
    return EnvConfig(**{**TINY_ENV, **overrides})


def collect_cfg(**overrides: Any) -> CollectConfig:
    return CollectConfig(**{**TINY_COLLECT, **overrides})


def label_cfg(**overrides: Any) -> LabelConfig:
    return LabelConfig(**{**copy.deepcopy(TINY_LABEL), **overrides})


def build_stage_one(
    root: Path,
    env_id: str = "MountainCar-v0",
    env: EnvConfig | None = None,
    collect: CollectConfig | None = None,
    label: LabelConfig | None = None,
    reliability: float = 0.8,
    shard_max_samples: int = 100,
) -> Path:
    """Stage one in this process, the way its stages chain: collect -> label (the scripted
    teacher) -> masks (the scripted segmenter) -> dataset, under `root`: `rollouts/`,
    `labels.parquet`, `masks.parquet` and the dataset `ds/` that stage two reads. Returns `ds`."""
    from pipeline.core.config import MasksConfig
    from pipeline.dataset.build import build_dataset
    from pipeline.teach.labelling.label import label_rollouts
    from pipeline.teach.masks import make_mask_backend
    from pipeline.teach.masks.compute import compute_masks
    from pipeline.teach.rollouts.collect import collect as collect_rollouts
    from pipeline.teach.teachers.scripted import ScriptedTeacher

    rollouts, labels, masks = root / "rollouts", root / "labels.parquet", root / "masks.parquet"
    collect_rollouts(env_id, env or env_cfg(), collect or collect_cfg(), rollouts, progress=False)
    label_rollouts(rollouts, label or label_cfg(), ScriptedTeacher(reliability, 0),
                   root / "label_cache", labels, progress=False)  # fmt: skip
    compute_masks(rollouts, labels, make_mask_backend(MasksConfig(backend="scripted", batch_size=8)),
                  root / "mask_cache", masks, batch_size=8, progress=False)  # fmt: skip
    build_dataset(rollouts, labels, masks, root / "ds", shard_max_samples=shard_max_samples)
    return root / "ds"


@pytest.fixture(scope="session")
def stage_one_dataset(tmp_path_factory) -> Path:
    """Stage one as its stages chain (`build_stage_one`): three 15-step MountainCarContinuous
    episodes, the scripted teacher, scripted masks, 20-sample shards. Returns the root holding
    `rollouts/`, `labels.parquet`, `masks.parquet` and the dataset `ds/`. Read-only by contract:
    a test that edits the dataset copies it first (tests/dataset/test_sharing_integrity.py,
    tests/core/test_file_errors.py)."""
    root = tmp_path_factory.mktemp("stage_one")
    build_stage_one(
        root, "MountainCarContinuous-v0", env_cfg(max_episode_steps=15), collect_cfg(episodes=3),
        shard_max_samples=20,
    )  # fmt: skip
    return root


def write_params(path: Path, params: dict) -> Path:
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def sigkill_once_saved(
    proc: subprocess.Popen, state: Path, on_saved: Callable[[], Any] | None = None
) -> Any:
    """SIGKILL `proc` as soon as `state` (its first resume state) exists, or when it has exited;
    then reap it. Driven by the run's own progress, never by a clock: a loaded machine only makes
    it wait longer. `on_saved` runs between the two (e.g. to list `proc`'s workers); its result
    is returned. The caller asserts what the kill left."""
    while not state.exists() and proc.poll() is None:
        time.sleep(0.02)
    seen = on_saved() if on_saved is not None else None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return seen


def count_calls(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, interrupt_at: int | None = None
) -> list[int]:
    """Count the calls of `owner.name` (a one-element list, read after), raising
    KeyboardInterrupt at call `interrupt_at`: an interruption at a point of the run's own
    progress, in process. `monkeypatch.undo()` restores the original."""
    original, calls = getattr(owner, name), [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == interrupt_at:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def wait_for_exit(pid: int) -> None:
    """Block until process `pid` (not necessarily a child) has exited: its pidfd becomes
    readable then (Linux >= 5.3). No clock: it returns when the process ends."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone already
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def send_json(handler: Any, body: Any, status: int = 200) -> None:
    """Answer the request `handler` (an http.server handler) serves with `body` as JSON: the
    tests' stand-in OpenAI-compatible servers."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
