"""The older mechanism of the benchmark sweeps, left to benchmarks.pixels (the other tables are
DVC experiment tables now: pipeline.sweeps, docs/benchmarks.md): a table of cells, each one run
of the train stage, run in one process pool with one result file per cell, and the data a cell
reads prepared by the stages' own functions.

- A `Cell` is a name, the `train.<name>` entry of params.yaml it trains (env, method, steps, seed,
  ...), `overrides` of method sections (`{section: {key: value}}`: those keys of that section of
  params.yaml are replaced), the data it reads (`data`: a key the benchmark's `prepare` maps to
  `TrainInputs`) and `info`, the benchmark's own columns (copied into the result; evaluation
  settings belong here).
- `prepare_data` builds what a teacher's labels give for an env, as the DVC stages do and by the
  functions they call: label (stages/label.py: label_rollouts), masks (stages/masks.py:
  compute_masks), dataset (stages/dataset.py: build_dataset) and C_V (stages/pretrain_critic.py:
  pretrain_critic), into directories named by a hash of what they depend on (rollouts manifest,
  label / masks / dataset / critic settings), so that a rerun or another benchmark reuses them.
  With no teacher (`label=None`) the pipeline's own outputs under `--data` are read as they are.
- `run_cells` trains every cell that has no result yet with pipeline.training.train_run in a
  spawned worker process (agent in `<out>/agents/<cell>`, curves in `<out>/live/<cell>`: TSVs
  in dvclive's layout, written by pipeline.curves; a killed run's resume state in
  `<out>/resume/<cell>`), then calls the benchmark's `finish(cell, params, agent_dir, trained)`
  there for its evaluation (deployment:
  pipeline.methods.table.load_agent + pipeline.evaluation.deployed + play_episodes /
  evaluate_policy) and writes the result to `<out>/<results_dir>/<cell>.json` atomically. A rerun
  skips cells whose result exists and was made with the same settings (run, method section,
  env, data); a result made with other settings is stale and run again. A run builds what its
  method builds (hybrid_ppo's prototypes and MountainCar position table, ~4 s): the library has
  no benchmark-only cache, so a run's steps/s counts what a `train` stage pays.

Command line (`add_sweep_arguments`, the same for every sweep):

    --cell NAME          rerun that cell only (repeatable; shell patterns such as
                         'hybrid-seed*' match several): its result, agent, curves and resume
                         state are deleted first (a line says how far the deleted state had
                         got); the other cells' results are kept and the report is rebuilt
                         from all of them
    --only NAME          run that cell only if it has no current result (repeatable, patterns):
                         nothing is deleted, and a killed run goes on from its resume state
                         (the way to finish some cells of a table, or to share one across
                         machines)
    --list-cells         print every cell of the table and whether it has a result, or how far
                         its run has got (step and last evaluation of its resume state, while it
                         runs or after a kill); run nothing
    --workers N          runs in parallel (processes, one torch thread each unless --threads)
    --time-budget S      start no run after S seconds (rerun the same command to go on)
    --progress-every S   while cells run, print each one's resume step and last evaluation
                         every S seconds (default 300) when it has moved on
"""

from __future__ import annotations

import argparse
import ctypes
import fnmatch
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipeline.agents.resume import ResumeStateError, read_plain
from pipeline.config import LabelConfig, Params, parse_params
from pipeline.io import atomic_write_json, sha256_file
from pipeline.methods.base import TrainInputs
from pipeline.rollouts.format import MANIFEST_NAME

PREP_DONE = "prep.json"  # written last in a prepared directory: its content is complete


# ---- data a cell reads ---------------------------------------------------------------------------


def default_inputs(data: str | Path, env_id: str) -> TrainInputs:
    """The pipeline's own outputs for `env_id` under `data` (dvc.yaml's layout)."""
    data = Path(data)
    return TrainInputs(
        data / "rollouts" / env_id,
        data / "labels" / f"{env_id}.parquet",
        dataset=data / "datasets" / env_id,
    )


def content_key(material: Any) -> str:
    """A short hash of a JSON-able value: the name of a directory built from it."""
    text = json.dumps(material, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def prepare_data(
    env_id: str,
    params: Params,
    data: str | Path,
    work: str | Path,
    label: LabelConfig | None = None,
    *,
    dataset: bool = True,
    critic: bool = False,
) -> TrainInputs:
    """The inputs of a run on `env_id` when `label`'s teacher labels the pipeline's rollouts
    (`<data>/rollouts/<env>`): its label table, and with `dataset` its masks and dataset, with
    `critic` its C_V; each built once under `<work>/<env>/` by the functions the label, masks,
    dataset and pretrain_critic stages call, with params' `masks`, `dataset` and `critic`
    settings. `label=None`: the pipeline's own label table and dataset under `data`, read in place
    (the dataset checked to be built from the current rollouts)."""
    from pipeline.dataset.layout import read_info

    base = default_inputs(data, env_id)
    rollouts = base.rollouts
    manifest_sha = sha256_file(rollouts / MANIFEST_NAME)
    root = Path(work) / env_id
    if label is None:
        labels, dataset_dir = base.labels, base.dataset if dataset else None
        if dataset_dir is not None:
            built_from = read_info(dataset_dir).get("sources", {}).get("rollout_manifest_sha256")
            if built_from != manifest_sha:
                raise SystemExit(
                    f"{dataset_dir} was not built from the current {rollouts}: run `dvc repro "
                    f"dataset@{env_id}` first"
                )
    else:
        label = label.for_env(env_id)  # per_env dropped: the key is the settings that label it
        labels_key = content_key(
            {"rollouts": manifest_sha, "label": label.model_dump(mode="json", exclude={"per_env"})}
        )
        labels = _labels(env_id, rollouts, label, root, labels_key)
        dataset_dir = None
        if dataset:
            dataset_dir = _dataset(env_id, params, rollouts, labels, root, labels_key)
    critics = None
    if critic:
        assert dataset_dir is not None, "C_V is trained on a dataset: pass dataset=True"
        critics = _critic(env_id, params, dataset_dir, root)
    return TrainInputs(rollouts, labels, dataset=dataset_dir, critics=critics)


def _labels(env_id: str, rollouts: Path, label: LabelConfig, root: Path, key: str) -> Path:
    """stages/label.py: label_rollouts with `label`'s teacher (answers cached per env)."""
    from pipeline.labelling.label import label_rollouts
    from pipeline.teachers import make_teacher

    directory = root / f"labels-{key}"
    out = directory / "labels.parquet"
    if (directory / PREP_DONE).exists():
        return out
    started = time.perf_counter()
    summary = label_rollouts(
        rollouts, label, make_teacher(label.teacher), root / "label_cache", out, progress=False
    )
    stats = {
        "env": env_id,
        "label": label.model_dump(mode="json"),
        "rows": summary.rows,
        "teacher_calls": summary.teacher_calls,
        "statuses": dict(summary.statuses),
        "seconds": round(time.perf_counter() - started, 1),
    }
    atomic_write_json(directory / PREP_DONE, stats)
    print(f"{env_id}: labels of teacher {label.teacher.backend} -> {out} {stats}", flush=True)
    return out


def _dataset(
    env_id: str, params: Params, rollouts: Path, labels: Path, root: Path, labels_key: str
) -> Path:
    """stages/masks.py then stages/dataset.py: compute_masks and build_dataset."""
    from pipeline.dataset.build import build_dataset
    from pipeline.masks import make_mask_backend
    from pipeline.masks.compute import compute_masks

    if params.masks is None or params.dataset is None:
        raise SystemExit("params.yaml needs `masks` and `dataset` sections to build a dataset")
    key = content_key(
        {
            "labels": labels_key,
            "masks": params.masks.model_dump(mode="json"),
            "dataset": params.dataset.model_dump(mode="json"),
        }
    )
    directory = root / f"dataset-{key}"
    if (directory / PREP_DONE).exists():
        return directory / "dataset"
    if directory.exists():
        shutil.rmtree(directory)  # a half-done build
    started = time.perf_counter()
    masks = compute_masks(
        rollouts,
        labels,
        make_mask_backend(params.masks),
        root / "mask_cache",
        directory / "masks.parquet",
        batch_size=params.masks.batch_size,
        progress=False,
    )
    info = build_dataset(
        rollouts,
        labels,
        directory / "masks.parquet",
        directory / "dataset",
        shard_max_samples=params.dataset.shard_max_samples,
    )
    stats = {
        "env": env_id,
        "labels": str(labels),
        "frames_with_masks": masks.statuses["ok"],
        "samples": info["counts"]["samples"],
        "seconds": round(time.perf_counter() - started, 1),
    }
    atomic_write_json(directory / PREP_DONE, stats)
    print(f"{env_id}: dataset -> {directory / 'dataset'} {stats}", flush=True)
    return directory / "dataset"


def _critic(env_id: str, params: Params, dataset: Path, root: Path) -> Path:
    """stages/pretrain_critic.py: pretrain_critic; returns the critics directory (C_V in
    `<it>/<env>`, as TrainInputs.critics)."""
    from pipeline.critic import pretrain_critic
    from pipeline.curves import write_training_log
    from pipeline.dataset.layout import dataset_hashes

    if params.critic is None:
        raise SystemExit("params.yaml needs a `critic` section to pre-train C_V")
    key = content_key(
        {
            "dataset": dataset_hashes(dataset),
            # not how often it saves a resume state: that changes no byte of C_V
            "critic": params.critic.model_dump(mode="json", exclude={"resume_every"}),
            "erpv": params.section("erpv"),
        }
    )
    directory = root / f"critic-{key}"
    if (directory / PREP_DONE).exists():
        return directory
    if directory.exists():
        shutil.rmtree(directory)
    started = time.perf_counter()
    # the longest part of a pixel benchmark's preparation (minutes on a CPU): a progress bar,
    # and a resume state beside the directory (which a rerun deletes), so Ctrl-C loses little
    logs = pretrain_critic(
        env_id, params, dataset, directory / env_id, progress=True,
        resume_dir=root / f"critic-{key}.resume",
    )  # fmt: skip
    write_training_log(directory / "live", directory / "critic.json", rows=logs)
    stats = {
        "env": env_id,
        "dataset": str(dataset),
        "last_log": logs[-1] if logs else {},
        "seconds": round(time.perf_counter() - started, 1),
    }
    atomic_write_json(directory / PREP_DONE, stats)
    print(f"{env_id}: C_V on {dataset} -> {directory / env_id} {stats}", flush=True)
    return directory


# ---- cells ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One run of a benchmark's table. `run`: its train.<name> entry (env, method, steps, seed
    and the method's run options); `overrides`: `{section: {key: value}}` replaced in params.yaml
    for this run; `data`: the key of its inputs (the benchmark's `prepare`); `info`: the
    benchmark's columns and evaluation settings, copied into the result."""

    name: str
    run: dict[str, Any]
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    data: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def env(self) -> str:
        return self.run["env"]

    @property
    def method(self) -> str:
        return self.run["method"]


def cell_params(params_path: str | Path, cell: Cell) -> Params:
    """params.yaml with the cell's section overrides and its one train run."""
    raw = yaml.safe_load(Path(params_path).read_text())  # `<<: *sac` merges are resolved here
    for section, keys in cell.overrides.items():
        raw[section] = {**(raw.get(section) or {}), **keys}
    raw["train"] = {cell.name: cell.run}
    raw["rounds"] = {}  # params.yaml's labelling rounds follow its own runs
    return parse_params(raw, source=f"{params_path} + cell {cell.name}")


def input_hashes(inputs: TrainInputs) -> dict[str, str]:
    """What identifies a run's data: the rollouts' manifest, the label table and the dataset
    files by content, C_V by its directory (named by the content it was trained on)."""
    from pipeline.dataset.layout import dataset_hashes

    data = inputs.hashes()
    if inputs.dataset is not None:
        data |= dataset_hashes(inputs.dataset)
    if inputs.critics is not None:
        data["critics"] = inputs.critics.name
    return data


def cell_spec(cell: Cell, params: Params, data: dict[str, str]) -> dict[str, Any]:
    """What a cell's result depends on (`data`: its input_hashes); a stored result with another
    spec is stale."""
    spec = {
        "run": cell.run,
        "info": cell.info,
        "section": params.section(cell.method),
        "env": params.env[cell.env].model_dump(mode="json"),
        "data": data,
    }
    return json.loads(json.dumps(spec, default=str))  # as it reads back from the result file


@dataclass
class Trained:
    """What training left for `finish`: the curve (step, native return of each episode), the
    metric rows (each with a `step`) and the seconds it took. A run that went on from a resume
    state was timed from there: `resumed_from` is that state's step (0: from the start), so
    rates are of the steps after it."""

    curve: list[tuple[int, float]]
    logs: list[dict[str, float]]
    seconds: float
    resumed_from: int = 0

    def steps_timed(self, steps: int) -> int:
        """The agent steps of a `steps`-step run that `seconds` covers."""
        return steps - self.resumed_from

    def updates_timed(self, steps: int, start_steps: int) -> int:
        """The updates `seconds` covers: one per step from `start_steps` on, after the resume."""
        return max(0, steps - max(start_steps - 1, self.resumed_from))


Finish = Callable[[Cell, Params, Path, Trained], dict[str, Any]]


@dataclass(frozen=True)
class _Job:
    cell: Cell
    params: str
    inputs: TrainInputs
    out: str
    threads: int
    finish: Finish
    spec: dict[str, Any]


def read_logs(live_dir: str | Path) -> list[dict[str, float]]:
    """The metric rows a run wrote (pipeline.curves: TSVs in dvclive's layout), back as rows
    keyed by step (every metric but the episode `return`)."""
    from pipeline.curves import METRICS_SUBDIR, RETURN, read_metric

    root = Path(live_dir) / METRICS_SUBDIR
    rows: dict[int, dict[str, float]] = {}
    for path in sorted(root.rglob("*.tsv")):
        name = path.relative_to(root).with_suffix("").as_posix()
        if name == RETURN:
            continue
        for step, value in read_metric(live_dir, name):
            rows.setdefault(step, {"step": float(step)})[name] = value
    return [rows[s] for s in sorted(rows)]


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _end_with_sweep(sweep_pid: int) -> None:
    """Worker initializer: the worker gets SIGTERM when the sweep's process ends (Linux's
    PR_SET_PDEATHSIG). Otherwise a sweep killed from outside leaves its workers training unseen,
    taking the CPU, and the results they return reach nobody. A worker's resume state stays, so a
    rerun of the sweep goes on from it. Ctrl-C reaches the terminal's whole process group: a
    worker ignores it, and the sweep ends its workers itself (benchmarks.run_main), so no worker
    prints a traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != sweep_pid:  # the sweep ended before the call
        os.kill(os.getpid(), signal.SIGTERM)


def _end_workers() -> None:
    """SIGTERM to this process's workers, and wait for them."""
    for process in multiprocessing.active_children():
        process.terminate()
        process.join()


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """The sweep's worker processes: spawned, not forked (a forked child inherits torch's thread
    pool state and can crawl or hang), and ended with the sweep (`_end_with_sweep`)."""
    return ProcessPoolExecutor(
        max(1, workers),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_end_with_sweep,
        initargs=(os.getpid(),),
    )


def _run_cell(job: _Job) -> dict[str, Any]:
    """One cell in a worker: train_run as the train stage, then the benchmark's `finish`."""
    import torch

    from pipeline.training import train_run

    torch.set_num_threads(job.threads)  # small nets: runs in parallel processes instead
    cell, out = job.cell, Path(job.out)
    params = cell_params(job.params, cell)
    live = out / "live" / cell.name
    try:
        state = peek(out / "resume" / cell.name)  # where train_run goes on from, if anywhere
    except ResumeStateError:
        state = None  # damaged: train_run warns and starts over
    started = time.perf_counter()
    curve = train_run(
        cell.name,
        params,
        job.inputs,
        out / "agents" / cell.name,
        live,
        out / "live" / f"{cell.name}.json",
        resume_dir=out / "resume" / cell.name,
        progress=False,
    )
    seconds = time.perf_counter() - started
    trained = Trained(
        [(int(s), float(r)) for s, r in curve],
        read_logs(live),
        seconds,
        resumed_from=state["step"] if state else 0,
    )
    result = job.finish(cell, params, out / "agents" / cell.name, trained)
    return {**result, "spec": job.spec}


def add_sweep_arguments(parser: argparse.ArgumentParser, workers: int = 1) -> None:
    parser.add_argument(
        "--cell",
        action="append",
        metavar="NAME",
        help="rerun this cell only (repeatable; shell patterns allowed): its result and resume "
        "state are deleted and it starts over; the other cells' results are kept",
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="run this cell only, if it has no current result (repeatable; shell patterns "
        "allowed): nothing is deleted, a killed run goes on from its resume state",
    )
    parser.add_argument(
        "--list-cells", action="store_true", help="list the cells and how far each got; run nothing"
    )
    parser.add_argument("--workers", type=int, default=workers, help="runs in parallel")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument(
        "--time-budget", type=float, default=None, help="start no run after this many seconds"
    )
    parser.add_argument(
        "--progress-every", type=float, default=300.0, metavar="SECONDS",
        help="print each running cell's resume step and last evaluation this often, when it "
        "has moved on (a cell's curve is written only when it ends)",
    )  # fmt: skip


@dataclass
class Sweep:
    """The outcome of `run_cells`: the result of every cell that has a current one, by name;
    the cells that have none (not run, failed, stale and not selected)."""

    results: dict[str, dict[str, Any]]
    missing: list[str]
    failures: int

    def ordered(self, cells: Iterable[Cell]) -> list[dict[str, Any]]:
        return [self.results[c.name] for c in cells if c.name in self.results]


def select_names(names: list[str], patterns: list[str], what: str = "--cell") -> list[str]:
    """The names matching any of the shell-style `patterns` (case-sensitive), in pattern order
    and without repeats. A pattern matching nothing is an error naming it and the known names:
    a typo must not silently select fewer cells."""
    chosen: list[str] = []
    for pattern in patterns:
        matched = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not matched:
            raise SystemExit(f"{what} {pattern}: no such cell (cells: {', '.join(names)})")
        chosen += [n for n in matched if n not in chosen]
    return chosen


def finished_cells(out: Path, patterns: list[str], results_dir: str = "runs") -> list[str]:
    """The names of the cells of the sweep in `out` that have a result in `<out>/<results_dir>`
    and match `patterns` (`select_names`, as `--cells`); none at all is an error."""
    names = sorted(p.stem for p in (out / results_dir).glob("*.json"))
    if not names:
        raise SystemExit(f"no finished cell in {out / results_dir}: run the sweep first")
    return select_names(names, patterns, what=f"--cells (finished cells of {out})")


def _select(cells: list[Cell], patterns: list[str]) -> list[Cell]:
    by_name = {c.name: c for c in cells}
    return [by_name[n] for n in select_names(list(by_name), patterns)]


def peek(directory: str | Path) -> dict[str, Any] | None:
    """Where the run whose resume state (pipeline.agents.resume) is in `directory` stands: `step`,
    the last periodic evaluation (`eval_step`, `eval_return`; None before the first, and for PPO)
    and the last finished episode's return (`episode_return`). None: no resume state. Only its
    `state.json` is read (no tensor, so not the replay it holds, and nothing is unpickled);
    ResumeStateError where that file is damaged."""
    state = read_plain(directory)
    if state is None:
        return None
    evals = [row for row in state.get("logs") or [] if "eval_return" in row]
    curve = state.get("curve") or []
    return {
        "step": int(state["step"]),
        "eval_step": int(evals[-1]["step"]) if evals else None,
        "eval_return": float(evals[-1]["eval_return"]) if evals else None,
        "episode_return": float(curve[-1][1]) if curve else None,
    }


def _cell_state(out: Path, results_dir: str, name: str) -> str:
    """`result`, or how far a running or interrupted run has got (its resume state), or
    `no result`: what `--list-cells` prints for a cell."""
    if (out / results_dir / f"{name}.json").exists():
        return "result"
    where = _resume_state(out, name)
    return "no result" if where is None else f"no result; {where}"


def _resume_state(out: Path, name: str) -> str | None:
    """How far a cell's running or killed run has got, from its resume state (`resume state at
    step N, ...`); None without one."""
    try:
        where = peek(out / "resume" / name)
    except (ValueError, KeyError, TypeError) as exc:  # the listing goes on; the run warns
        return f"resume state unreadable ({type(exc).__name__}: {exc})"
    if where is None:
        return None
    text = f"resume state at step {where['step']}"
    if where["eval_return"] is not None:
        text += f", eval {where['eval_return']:.1f} at step {where['eval_step']}"
    elif where["episode_return"] is not None:
        text += f", last episode {where['episode_return']:.1f}"
    return text


class Progress:
    """How far the running cells have got, printed from their resume states (`_resume_state`)
    when one has moved on since the last report: a run's curve is written only when it ends, so
    without this a sweep of hour-long runs says nothing for hours."""

    def __init__(self, out: Path, started: float) -> None:
        self.out, self.started = out, started
        self.last: dict[str, str] = {}  # cell -> what was last printed

    def report(self, names: Iterable[str]) -> None:
        for name in names:
            where = _resume_state(self.out, name)
            if where is not None and where != self.last.get(name):
                self.last[name] = where
                elapsed = time.monotonic() - self.started
                print(f"{name}: {where} [{elapsed:.0f} s elapsed]", flush=True)


def forget_cell(out: Path, results_dir: str, name: str) -> None:
    """Delete a cell's result and everything its run left (agent, curves, resume state); a line
    says how far a deleted resume state had got, and how to keep one next time."""
    where = _resume_state(out, name)
    if where is not None:
        print(
            f"{name}: --cell deletes its {where} and starts it over "
            f"(--only {name} goes on from a resume state)",
            flush=True,
        )
    (out / results_dir / f"{name}.json").unlink(missing_ok=True)
    (out / "live" / f"{name}.json").unlink(missing_ok=True)
    for sub in ("agents", "live", "resume"):
        shutil.rmtree(out / sub / name, ignore_errors=True)


def run_cells(
    cells: list[Cell],
    args: argparse.Namespace,
    *,
    params: str | Path,
    out: Path,
    prepare: Callable[[str | None], TrainInputs],
    finish: Finish,
    describe: Callable[[dict[str, Any]], str] = lambda r: "done",
    results_dir: str = "cells",
) -> Sweep | None:
    """Run the cells of a table that have no current result (all, or those `--cell` and `--only`
    name; `--cell` deletes what its cells had first), in a pool of `--workers` spawned processes;
    each result is written to `<out>/<results_dir>/<cell>.json` as soon as its run ends.
    `prepare(data key)` gives a cell's inputs (called in this process, once per key). Returns None
    with `--list-cells`."""
    started = time.monotonic()
    names = [c.name for c in cells]
    if len(set(names)) != len(names):
        raise ValueError("cell names must be unique")
    directory = out / results_dir
    if args.list_cells:
        for c in cells:
            print(f"{c.name:48} {_cell_state(out, results_dir, c.name)}")
        return None
    rerun = _select(cells, args.cell) if args.cell else []
    only = _select(cells, args.only) if getattr(args, "only", None) else []
    selected = rerun + [c for c in only if c not in rerun] if rerun or only else None
    for c in rerun:
        forget_cell(out, results_dir, c.name)
    inputs: dict[str | None, tuple[TrainInputs, dict[str, str]]] = {}

    def inputs_of(cell: Cell) -> tuple[TrainInputs, dict[str, str]]:
        if cell.data not in inputs:
            prepared = prepare(cell.data)
            inputs[cell.data] = prepared, input_hashes(prepared)
        return inputs[cell.data]

    results: dict[str, dict[str, Any]] = {}
    todo: list[_Job] = []
    stale: list[str] = []
    for c in cells:
        path = directory / f"{c.name}.json"
        to_run = selected is None or c in selected
        if not to_run and not path.exists():
            continue
        cell_inputs, data = inputs_of(c)
        spec = cell_spec(c, cell_params(params, c), data)
        if path.exists():
            result = json.loads(path.read_text())
            if result.get("spec") == spec:
                results[c.name] = result
                continue
            stale.append(c.name)
        if to_run:
            todo.append(_Job(c, str(params), cell_inputs, str(out), args.threads, finish, spec))
    if stale:
        print(f"stale results (made with other settings or data): {', '.join(stale)}")
    print(f"{len(results)} cells have a result, {len(todo)} to run", flush=True)

    failures = 0
    every = getattr(args, "progress_every", None)
    progress, next_report = Progress(out, started), time.monotonic() + (every or 0.0)
    with worker_pool(args.workers) as pool:
        try:
            pending: dict[Future, _Job] = {}
            queue = list(todo)
            while queue or pending:
                out_of_time = (
                    args.time_budget is not None and time.monotonic() - started > args.time_budget
                )
                while queue and len(pending) < args.workers and not out_of_time:
                    job = queue.pop(0)
                    pending[pool.submit(_run_cell, job)] = job
                if not pending:
                    break
                timeout = None if every is None else max(0.0, next_report - time.monotonic())
                done, _ = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
                if every is not None and time.monotonic() >= next_report:
                    progress.report(job.cell.name for job in pending.values())
                    next_report = time.monotonic() + every
                for future in done:
                    job = pending.pop(future)
                    try:
                        result = future.result()
                    except Exception as exc:  # report and go on: the other cells are worth having
                        failures += 1
                        print(f"{job.cell.name}: FAILED: {type(exc).__name__}: {exc}", flush=True)
                        continue
                    atomic_write_json(directory / f"{job.cell.name}.json", result)
                    results[job.cell.name] = result
                    print(
                        f"{job.cell.name}: {describe(result)} "
                        f"[{time.monotonic() - started:.0f} s elapsed]",
                        flush=True,
                    )
        except KeyboardInterrupt:
            # Ctrl-C: the workers ignore it (`_end_with_sweep`); end them now rather than
            # after their cells (a killed cell's resume state stays for the rerun)
            _end_workers()
            raise
    missing = [c.name for c in cells if c.name not in results]
    if missing:
        print(
            f"{len(missing)} cells have no result yet ({', '.join(missing[:5])}"
            f"{', ...' if len(missing) > 5 else ''}): rerun the same command to go on"
        )
    return Sweep(results, missing, failures)
