"""Stage two's `train`: one run of params.yaml's `train.<name>` -> an agent checkpoint and its
learning curve, by the method the run names (pipeline.learn.methods.table). The agent reads cached
labels only; nothing here, nor anything it imports, imports a teacher (tests/learn/test_training.py
checks).

Learning curves are TSVs in dvclive's layout, the one `dvc plots` reads, written by
pipeline.learn.curves: `return` is the env's native return of each finished episode, whatever reward
the agent was trained on.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.core.config import NO_TEACHER, Params, TrainRun
from pipeline.core.io import atomic_write_json
from pipeline.core.kernels import training_torch
from pipeline.learn.curves import write_run_summary, write_training_log
from pipeline.learn.methods.base import TrainError, TrainInputs
from pipeline.learn.methods.table import check_params, get_method


def set_threads(params: Params, name: str) -> None:
    """Fix torch's intra-op thread count to the run's section's `threads` (0: leave torch's
    default; `training_torch`): the train stage's weights are then the same bytes from run to run
    on one machine. Benchmarks that run many trainings in parallel processes set their own count
    instead."""
    if params.train is None or name not in params.train:
        return  # train_run names the missing run
    run = params.train[name]
    training_torch(getattr(get_method(run.method).params(params, run), "threads", 0))


def train_run(
    name: str,
    params: Params,
    inputs: TrainInputs,
    out_dir: str | Path,
    log_dir: str | Path,
    summary_path: str | Path,
    resume_dir: str | Path | None = None,
    progress: bool = True,
) -> list[tuple[int, float]]:
    """Train `train.<name>` of params.yaml; write the checkpoint to `out_dir`, and the learning
    curve with the training metrics (pipeline.learn.curves: TSVs in dvclive's layout) to `log_dir` +
    `summary_path`."""
    if params.train is None or name not in params.train:
        known = ", ".join(params.train or {}) or "none"
        raise TrainError(f"params.yaml has no run train.{name} (runs: {known})")
    check_params(params)
    paths = (out_dir, log_dir, summary_path, resume_dir)
    return _train_and_write(name, params.train[name], params, inputs, *paths, progress)


def _train_and_write(
    name: str,
    run: TrainRun,
    params: Params,
    inputs: TrainInputs,
    out_dir: str | Path,
    log_dir: str | Path,
    summary_path: str | Path,
    resume_dir: str | Path | None,
    progress: bool,
) -> list[tuple[int, float]]:
    """Train `run` by its method; write the checkpoint, the curves and their summary."""
    method = get_method(run.method)
    result = method.train(name, run, params, inputs, progress=progress, resume_dir=resume_dir)
    result.save(out_dir)
    eval_episodes = getattr(method.params(params, run), "eval_episodes", None)
    write_training_log(log_dir, summary_path, result.curve, result.logs)
    write_run_summary(summary_path, eval_episodes)
    return result.curve


def train_policy_teacher(
    env_id: str,
    params: Params,
    out_dir: str | Path,
    log_dir: str | Path,
    summary_path: str | Path,
    resume_dir: str | Path | None = None,
    progress: bool = True,
) -> list[tuple[int, float]]:
    """Stage policy_teacher@<env>: train `policy_teachers.<env>` online (it reads no cached data:
    a teacher must not learn from the labels it will give) into `out_dir`, the checkpoint a
    `policy` teacher of that env reads. An env not listed gets a marker (`NO_TEACHER`) and no
    curve, so that its label stage depends on something stable."""
    out_dir = Path(out_dir)
    spec = params.policy_teachers.get(env_id)
    if spec is None:
        if out_dir.exists():
            shutil.rmtree(out_dir)
        atomic_write_json(
            out_dir / NO_TEACHER,
            {"env": env_id, "teacher": None, "why": "not listed in policy_teachers"},
        )
        write_training_log(log_dir, summary_path)  # empty: nothing was trained
        return []
    check_params(params)
    run = spec.train_run(env_id)
    training_torch(getattr(get_method(run.method).params(params, run), "threads", 0))
    inputs = TrainInputs()  # no data: an online run
    paths = (out_dir, log_dir, summary_path, resume_dir)
    return _train_and_write(f"policy-teacher-{env_id}", run, params, inputs, *paths, progress)
