"""Training curves and metrics in dvclive's layout, the one DVC pipelines read: each run's
directory (`plots/train/<run>/`, `plots/critic/<env>/`) holds one TSV per metric
(`plots/metrics/<name>.tsv`, columns `step` and the value) that `dvc plots show / diff` and
`dvc exp show` read, and its last values go to a summary JSON that the stage declares as a DVC
metric. The `compare` stage gathers every run of an env into one long table per metric
(`env_curves_tsv`: step, run, value), which dvc.yaml's top-level `plots` draw one line per run:
the default `dvc plots show` page, where a run added to params.yaml appears with no dvc.yaml
edit. A run's own TSVs (ERPv's Q_f, alpha, ...) are plain outputs, drawn on demand
(`dvc plots show -x step plots/train/<run>/plots/metrics/<name>.tsv`).

Written here rather than through dvclive's `Live` (the files are byte for byte what dvclive
3.49.1 writes for the same calls): `Live()` always runs its repository discovery, which `dvc
init`s a git repository that has no DVC and fails in one with no commit yet, and always puts
the summary inside its directory; no documented option or environment variable turns either
off. The stages declare their outputs in dvc.yaml, so the logger has no business with the
repository.

A metric is logged only at the steps where it has a value (ERPv's Q_f and alpha start after the
warm-up): nothing plots as zero that was never measured. No wall-clock value is written, so the
same run gives the same bytes.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import math
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core.io import atomic_write_bytes, atomic_write_json

RETURN = "return"  # the env's native return of each finished training episode
EVAL_RETURN = "eval_return"  # deterministic episodes played at a metrics row (SAC family)
METRICS_SUBDIR = "plots/metrics"  # a run's per-metric TSVs (dvclive's layout)
# what dvclive's Live removed from its directory on start: a rerun replaces them
STALE_SUBDIRS = ("plots/metrics", "plots/images", "plots/sklearn", "plots/custom")
STALE_FILES = ("params.yaml", "report.html", "report.md")
Curves = dict[str, list[tuple[int, float]]]  # run label -> (step, value) rows


def _logged(value: float) -> float | str:
    """A value as dvclive logs it: NaN and the infinities as their text ("nan", "inf", "-inf"),
    in the TSV and the summary alike (JSON has no literal for them)."""
    return str(value) if math.isnan(value) or math.isinf(value) else value


def _tsv(name: str, points: list[tuple[int, float | str]]) -> bytes:
    """One metric's TSV as dvclive's `Metric.dump` writes it: a `step` column and one named after
    the metric's last path component, tab-separated, csv's minimal quoting."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(["step", os.path.basename(name)])
    writer.writerows(points)
    return buffer.getvalue().encode()


def _clear(directory: Path) -> None:
    """Remove what a previous run (this module's or dvclive's) left in `directory`."""
    for sub in STALE_SUBDIRS:
        shutil.rmtree(directory / sub, ignore_errors=True)
    for name in STALE_FILES:
        (directory / name).unlink(missing_ok=True)
    for dvc_file in glob.glob(os.path.join(directory, "*dvc.yaml")):
        os.remove(dvc_file)


def write_training_log(
    directory: str | Path,
    summary_path: str | Path,
    curve: Iterable[tuple[int, float]] = (),
    rows: Iterable[dict[str, float]] = (),
) -> None:
    """Replace `directory` with the run's curves: `return` at the agent step of each finished
    episode, and every other metric of `rows` (each with a `step`) where it has a value; the last
    value of each in `summary_path` (a name with a `/` nests there, as in dvclive's summary), with
    the last step set. Nothing is written until every input is read."""
    points: dict[str, list[tuple[int, float | str]]] = {}  # in the order first logged
    summary: dict[str, Any] = {}
    last_step: int | None = None

    def log(step: int, name: str, value: float) -> None:
        value = _logged(value)
        points.setdefault(name, []).append((step, value))
        *parents, leaf = os.path.normpath(name).split(os.sep)
        node = summary
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value

    for step, episode_return in curve:
        last_step = int(step)
        log(last_step, RETURN, float(episode_return))
    for row in rows:
        last_step = int(row["step"])
        for name, value in row.items():
            if name != "step":
                log(last_step, name, float(value))
    if last_step is not None:  # the step last set, as dvclive's summary has it
        summary["step"] = last_step

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _clear(directory)
    for name, rows_of_name in points.items():
        atomic_write_bytes(f"{directory / METRICS_SUBDIR / name}.tsv", _tsv(name, rows_of_name))
    atomic_write_bytes(summary_path, (json.dumps(summary, indent=4) + "\n").encode())


def write_run_summary(summary_path: str | Path, eval_episodes: int | None) -> None:
    """Reduce a training run's summary (`write_training_log`'s, a DVC metric) to what its curves
    ended on, named so that no one takes it for the evaluate stage's figures:
    `last_episode_return` (one training episode, exploring) and `last_eval_return` over
    `eval_episodes` deterministic episodes. The training losses stay in the curves (`dvc plots`),
    out of `dvc metrics show` and `dvc exp show`."""
    last = json.loads(Path(summary_path).read_text())  # every metric's last value
    summary: dict[str, Any] = {"step": last.get("step", 0)}
    if RETURN in last:
        summary["last_episode_return"] = last[RETURN]
    if EVAL_RETURN in last:
        summary["last_eval_return"] = last[EVAL_RETURN]
        if eval_episodes is not None:
            summary["eval_episodes"] = eval_episodes
    atomic_write_json(summary_path, summary)


def read_metric(directory: str | Path, name: str = RETURN) -> list[tuple[int, float]]:
    """(step, value) rows of one metric of a run's directory (`write_training_log`)."""
    path = Path(directory) / METRICS_SUBDIR / f"{name}.tsv"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run the stage that trains it first")
    return parse_metric_tsv(path.read_text(), name)


def parse_metric_tsv(text: str, name: str = RETURN) -> list[tuple[int, float]]:
    """(step, value) rows of one metric's TSV text (`read_metric` without the file)."""
    leaf = name.rsplit("/", 1)[-1]
    rows = csv.DictReader(io.StringIO(text), delimiter="\t")
    return [(int(r["step"]), float(r[leaf])) for r in rows]


def env_curves_tsv(curves: Curves, name: str) -> bytes:
    """One metric of several runs as one long table (columns `step`, `run`, `name`'s last path
    component), runs in the given order: what a top-level dvc.yaml plot with the `runs` template
    (.dvc/plots/runs.json) draws as one line per run."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(["step", "run", os.path.basename(name)])
    for run, points in curves.items():
        writer.writerows((step, run, _logged(value)) for step, value in points)
    return buffer.getvalue().encode()


# the curves of `dvc plots show`'s default page (the `compare` stage, dvc.yaml's top-level plots)
COMPARE_METRICS = (RETURN, EVAL_RETURN)


def compare_curves(
    runs: Iterable[tuple[str, str, str]], curves_dir: str | Path
) -> dict[str, dict[str, Curves]]:
    """metric -> env -> run label (`<run> (<method>)`) -> curve, for each `(run, env, method)`
    whose directory `curves_dir/<run>` `write_training_log` wrote, in the runs' order. Every
    run logs `return`; one that does not log a metric (PPO has no `eval_return`) is left out of
    that metric. A run with no directory raises FileNotFoundError naming it."""
    curves_dir = Path(curves_dir)
    tables: dict[str, dict[str, Curves]] = {metric: {} for metric in COMPARE_METRICS}
    for name, env_id, method in runs:
        label = f"{name} ({method})"
        for metric in COMPARE_METRICS:
            logged = (curves_dir / name / METRICS_SUBDIR / f"{metric}.tsv").is_file()
            if metric == RETURN or logged:
                tables[metric].setdefault(env_id, {})[label] = read_metric(
                    curves_dir / name, metric
                )
    return tables


def write_compare_tables(tables: dict[str, dict[str, Curves]], out: str | Path) -> None:
    """`compare_curves`' tables as `out/<metric>/<env>.tsv` (`env_curves_tsv`), replacing what
    `out` held: an env no longer trained leaves no table."""
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    for metric, by_env in tables.items():
        for env_id, curves in by_env.items():
            atomic_write_bytes(out / metric / f"{env_id}.tsv", env_curves_tsv(curves, metric))


def steps_to(curve: Iterable[tuple[int, float]], threshold: float, window: int = 1) -> int | None:
    """First step at which the mean of the last `window` values of `curve` ((step, value) rows:
    episode returns, or periodic evaluations with window 1) is >= threshold; None if never."""
    rows = list(curve)
    values = [v for _, v in rows]
    for i in range(window - 1, len(rows)):
        if np.mean(values[i - window + 1 : i + 1]) >= threshold:
            return int(rows[i][0])
    return None


def median_steps(values: list[int | None]) -> int | None:
    """Median over seeds of steps to a threshold, "not reached" (None) counted as +inf: None
    when fewer than half of the seeds reached it (the lower median of an even count)."""
    if not values:
        return None
    ordered = sorted(v for v in values if v is not None) + [None] * values.count(None)
    return ordered[(len(ordered) - 1) // 2]


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Entry i: the mean of values[max(0, i - window + 1) : i + 1] (fewer at the start)."""
    sums = np.cumsum(np.concatenate([[0.0], np.asarray(values, dtype=np.float64)]))
    i = np.arange(1, len(values) + 1)
    lo = np.maximum(0, i - window)
    return (sums[i] - sums[lo]) / (i - lo)


def plot_curves(
    curves: dict[str, list[tuple[int, float]]], title: str, path: str | Path, window: int = 10
) -> None:
    """Learning curves of several runs in one PNG: each episode's return (faint) and its trailing
    mean over up to `window` episodes (`trailing_mean`: drawn from the first episode on, so a run
    with a single episode is a visible marker, not an empty plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for i, (name, curve) in enumerate(sorted(curves.items())):
        if not curve:
            continue
        steps, rets = np.asarray(curve, dtype=np.float64).T
        color = f"C{i}"
        ax.plot(steps, rets, color=color, alpha=0.2, linewidth=0.8)
        few = len(rets) < window  # a short run: mark each point, a line alone may be invisible
        ax.plot(
            steps, trailing_mean(rets, window), color=color, label=name,
            marker="o" if few else None, markersize=4,
        )  # fmt: skip
    ax.set_xlabel("agent steps (env steps / action repeat)")
    ax.set_ylabel("episode return (native)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
