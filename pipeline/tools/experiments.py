"""Seeds of a DVC experiment sweep, averaged: `vlmrl-seeds`.

`dvc exp run --queue -S train.<run>.seed=1 ...` then `dvc queue start` gives one experiment per
seed, and `dvc exp show` one row each. This groups the experiments (and the commit they branch
from) by every param of params.yaml that differs between them except seeds (`*.seed`), and gives
each run's evaluation metric (`metrics/eval/<run>.json`, `return_mean` by default) as mean +- std
(ddof 1) over the group's distinct seeds (the run's `train.<run>.seed`). Experiments that repeat a
seed are one seed, not several that agree: their values are averaged into one and the row is
flagged, so a std of 0 over one seed run three times never reads as three agreeing seeds.

    vlmrl-seeds                       # every run of every configuration
    vlmrl-seeds --runs 'cartpole.*'   # runs whose name matches
    vlmrl-seeds --baseline cartpole-swingup-sac-offline   # each run against the control

With `--baseline RUN`, each other run of a configuration gets Welch's two-sided t-test against
RUN's distinct seeds in that configuration (unequal variances; n/a where either has one seed):
the p-value of "this arm differs from the control", beside the means it compares.

With `--plot FILE`, each (configuration, run) is one line in a figure: the mean over its distinct
seeds of a training curve (`--curve`, default `eval_return`; `return` is each episode's) with a
band of +- one std (ddof 1), read from each experiment's `plots/train/<run>/` through DVC (the
curves are DVC outputs: `dvc.api.open` at the experiment's revision). Seeds that log at other
steps are interpolated onto the steps all of them cover.

    vlmrl-seeds --plot reports/seeds.png --runs 'cartpole-swingup-.*'
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pipeline.core.errors import print_error

SEED = re.compile(r"(^|\.)seed$")
EVAL_METRIC = re.compile(r"^metrics/eval/(?P<run>.+)\.json:(?P<name>.+)$")


def param_keys(params: Mapping[str, Any], prefix: str = "") -> set[str]:
    """params.yaml's keys as `dvc exp show` names them (nested keys joined by dots)."""
    keys = set()
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            keys |= param_keys(value, f"{name}.")
        else:
            keys.add(name)
    return keys


@dataclass(frozen=True)
class SeedSummary:
    config: tuple[tuple[str, Any], ...]  # the non-seed params that tell this group apart
    run: str
    values: tuple[float, ...]  # one per experiment of the group that has the metric
    seeds: tuple[Any, ...] = ()  # the run's seed in each of those experiments (None: unknown)
    revs: tuple[str, ...] = ()  # each of those experiments' name (or git revision)

    def per_seed(self) -> dict[Any, float]:
        """The metric per distinct seed (experiments repeating a seed averaged into one)."""
        seeds = self.seeds or tuple(range(len(self.values)))  # unknown: each row its own
        groups: dict[Any, list[float]] = {}
        for seed, value in zip(seeds, self.values, strict=True):
            groups.setdefault(seed, []).append(value)
        return {seed: float(np.mean(v)) for seed, v in groups.items()}

    @property
    def n(self) -> int:
        """Distinct seeds."""
        return len(self.per_seed())

    @property
    def repeated(self) -> dict[Any, int]:
        """Seeds that more than one experiment ran, and how many times."""
        counts: dict[Any, int] = {}
        for seed in self.seeds:
            counts[seed] = counts.get(seed, 0) + 1
        return {seed: k for seed, k in counts.items() if k > 1}

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.per_seed().values())))

    @property
    def std(self) -> float:
        """Sample std (ddof 1) over distinct seeds; NaN for one seed."""
        values = list(self.per_seed().values())
        return float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")


def with_file_prefix(rows: list[dict[str, Any]], metric: str, repo: Path) -> list[dict[str, Any]]:
    """`dvc exp show` names a metric `<file>:<key>` only where two files share the key: with a
    single eval file (one run) the column is the bare `metric`. Name it after the one
    `metrics/eval/<run>.json` of the workspace that holds that key, as it is named otherwise."""
    if not any(metric in row for row in rows):
        return rows
    eval_dir = repo / "metrics" / "eval"
    holders = []
    for path in sorted(eval_dir.rglob("*.json")) if eval_dir.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and metric in data:
            holders.append(path.relative_to(repo).as_posix())
    if len(holders) != 1:
        return rows
    name = f"{holders[0]}:{metric}"
    return [{(name if k == metric else k): v for k, v in row.items()} for row in rows]


def summarise(
    rows: Iterable[Mapping[str, Any]],
    params: set[str],
    metric: str = "return_mean",
    runs: str = ".*",
) -> list[SeedSummary]:
    """Group `dvc exp show` rows (dvc.api.exp_show's flat dicts) by the `params` that differ
    between them, seeds excepted; the workspace row is left out (it repeats its baseline)."""
    rows = [r for r in rows if r.get("rev") != "workspace"]
    varying = sorted(k for k in params if len({repr(r.get(k)) for r in rows}) > 1)
    config_keys = [k for k in varying if not SEED.search(k)]
    columns = {}
    for row in rows:
        for column in row:
            match = EVAL_METRIC.match(column)
            if match and match["name"] == metric and re.fullmatch(runs, match["run"]):
                columns[column] = match["run"]
    groups: dict[tuple[tuple[str, Any], ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple((k, row.get(k)) for k in config_keys), []).append(row)
    out = []
    for config, members in groups.items():
        for column, run in sorted(columns.items(), key=lambda item: item[1]):
            present = [r for r in members if r.get(column) is not None]
            if present:
                values = tuple(float(r[column]) for r in present)
                seeds = tuple(r.get(f"train.{run}.seed") for r in present)
                revs = tuple(str(r.get("Experiment") or r.get("rev")) for r in present)
                out.append(SeedSummary(config, run, values, seeds, revs))
    return out


def welch_p(a: SeedSummary, b: SeedSummary) -> float | None:
    """Welch's two-sided t-test p-value between two summaries' per-seed values (unequal
    variances); None where either has fewer than two distinct seeds or both are constant."""
    from scipy import stats

    x, y = list(a.per_seed().values()), list(b.per_seed().values())
    if len(x) < 2 or len(y) < 2:
        return None
    p = float(stats.ttest_ind(x, y, equal_var=False).pvalue)
    return None if np.isnan(p) else p


def fisher_p(
    successes: tuple[int, int], others: tuple[int, int], alternative: str = "greater"
) -> float:
    """Fisher's exact test on two (successes, n) counts, e.g. seeds at the flag: the p-value of
    the first having the greater success rate (`greater`) or a different one (`two-sided`)."""
    from scipy import stats

    (k1, n1), (k2, n2) = successes, others
    return float(stats.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]], alternative).pvalue)


def mann_whitney_p(x: list[float], y: list[float], alternative: str = "greater") -> float | None:
    """The Mann-Whitney U test's p-value (exact where scipy can, i.e. without ties at small n),
    x against y; None where either has fewer than two values."""
    from scipy import stats

    if len(x) < 2 or len(y) < 2:
        return None
    return float(stats.mannwhitneyu(x, y, alternative=alternative).pvalue)


def best_case_p(
    x: list[float], y: list[float], n: int, alternative: str = "greater",
    success: float | None = None,
) -> float | None:  # fmt: skip
    """The smallest p-value x against y can still reach once each has `n` values: every value
    still to come as far as it can go the test's way (x's above every value, y's below, or the
    reverse; with `success`, Fisher's exact test on the counts at or above it, x's successes and
    y's failures). A lower bound on the final p; None where the test will have too few values.
    `two-sided`: the two-sided test of the better of the two ways."""
    ways = {"greater": [True], "less": [False], "two-sided": [True, False]}[alternative]
    to_x, to_y = max(n - len(x), 0), max(n - len(y), 0)
    found = []
    for up in ways:
        if success is not None:
            kx = sum(v >= success for v in x) + (to_x if up else 0)
            ky = sum(v >= success for v in y) + (0 if up else to_y)
            found.append(fisher_p((kx, len(x) + to_x), (ky, len(y) + to_y), alternative))
            continue
        seen = [*x, *y] or [0.0]
        high, low = max(seen) + 1.0, min(seen) - 1.0
        # distinct values: no ties, so scipy's exact test applies at small n
        far_x = [high + i if up else low - i for i in range(to_x)]
        far_y = [low - i if up else high + i for i in range(to_y)]
        p = mann_whitney_p([*x, *far_x], [*y, *far_y], alternative)
        if p is not None:
            found.append(p)
    return min(found) if found else None


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values (None: not tested, left out of the
    family): adjusted p_(i) = max over j <= i of min(1, (m - j + 1) p_(j)), sorted ascending."""
    tested = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        out[i] = running
    return out


def format_table(summaries: list[SeedSummary], metric: str, baseline: str | None = None) -> str:
    """One line per (configuration, run); with `baseline`, each other run's Welch p-value against
    the baseline run of its configuration."""
    if not summaries:
        return f"no experiment has a metrics/eval/<run>.json:{metric}"
    lines = [
        f"{'configuration':40s} {'run':36s} {'seeds':>5s} {'exps':>4s}  {metric} "
        "(mean +- std over distinct seeds, ddof 1)"
        + ("" if baseline is None else f"; Welch p vs {baseline}")
    ]
    controls = {s.config: s for s in summaries if s.run == baseline}
    for s in summaries:
        config = ", ".join(f"{k}={v}" for k, v in s.config) or "(all rows alike but seeds)"
        std = f"{s.std:.1f}" if s.n > 1 else "n/a (one seed)"
        line = f"{config:40s} {s.run:36s} {s.n:5d} {len(s.values):4d}  {s.mean:.1f} +- {std}"
        if baseline is not None and s.run != baseline:
            control = controls.get(s.config)
            p = None if control is None else welch_p(s, control)
            line += (
                f"  p = {p:.2g}" if p is not None
                else "  p n/a (no baseline run here)" if control is None
                else "  p n/a (needs two seeds each)"
            )  # fmt: skip
        if s.repeated:
            repeats = ", ".join(f"seed {seed} x{k}" for seed, k in s.repeated.items())
            line += f"  [{repeats}: repeats of a seed count once]"
        lines.append(line)
    return "\n".join(lines)


Curve = list[tuple[float, float]]  # (step, value) rows of one metric


def seed_band(
    summary: SeedSummary, read: Callable[[str, str], Curve]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(steps, mean, std, distinct seeds) of a run's curve over its distinct seeds: `read(rev,
    run)` gives one experiment's curve; experiments repeating a seed are averaged into one
    curve first. Steps are those every seed covers (up to the shortest curve's last), each
    seed's curve interpolated there; std is ddof 1 (NaN for one seed)."""
    by_seed: dict[Any, list[Curve]] = {}
    seeds = summary.seeds or tuple(range(len(summary.revs)))
    for seed, rev in zip(seeds, summary.revs, strict=True):
        curve = read(rev, summary.run)
        if not curve:
            raise ValueError(f"experiment {rev}: run {summary.run}'s curve has no rows")
        by_seed.setdefault(seed, []).append(curve)
    end = min(max(s for s, _ in c) for curves in by_seed.values() for c in curves)
    steps = np.unique([s for curves in by_seed.values() for c in curves for s, _ in c if s <= end])

    def on_grid(curve: Curve) -> np.ndarray:
        x, y = np.asarray(curve, dtype=np.float64).T
        return np.interp(steps, x, y)

    per_seed = np.stack(
        [np.mean([on_grid(c) for c in curves], axis=0) for curves in by_seed.values()]
    )
    std = per_seed.std(axis=0, ddof=1) if len(per_seed) > 1 else np.full(len(steps), np.nan)
    return steps, per_seed.mean(axis=0), std, len(per_seed)


def dvc_curve_reader(repo: Path, curve: str) -> Callable[[str, str], Curve]:
    """`read(rev, run)`: the run's `curve` TSV (pipeline.learn.curves' layout) at an experiment's
    revision, through DVC (the curves are cached outputs, not in git)."""
    import csv

    import dvc.api

    from pipeline.learn.curves import METRICS_SUBDIR

    leaf = curve.rsplit("/", 1)[-1]

    def read(rev: str, run: str) -> Curve:
        path = f"plots/train/{run}/{METRICS_SUBDIR}/{curve}.tsv"
        with dvc.api.open(path, repo=str(repo), rev=rev) as f:
            return [(float(r["step"]), float(r[leaf])) for r in csv.DictReader(f, delimiter="\t")]

    return read


def plot_seed_bands(
    summaries: list[SeedSummary], read: Callable[[str, str], Curve], curve: str, path: Path
) -> list[str]:
    """The figure of `--plot`: per (configuration, run), the mean curve over distinct seeds and
    its +- 1 std band (ddof 1). Returns what was left out, and why (one line each)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from dvc.exceptions import DvcException

    left_out = []
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    for i, s in enumerate(summaries):
        config = ", ".join(f"{k}={v}" for k, v in s.config)
        try:
            steps, mean, std, n = seed_band(s, read)
        except (FileNotFoundError, KeyError, ValueError, DvcException) as exc:
            left_out.append(f"{config or 'baseline'} / {s.run}: no {curve} curve ({exc})")
            continue
        label = f"{config + ' / ' if config else ''}{s.run} ({n} seed{'s' * (n > 1)})"
        ax.plot(steps, mean, color=f"C{i % 10}", label=label)
        if n > 1:
            ax.fill_between(steps, mean - std, mean + std, color=f"C{i % 10}", alpha=0.2)
    ax.set_xlabel("agent steps")
    ax.set_ylabel(curve)
    ax.set_title(f"{curve}: mean over distinct seeds, band +- 1 std (ddof 1)", fontsize=10)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path)
    return left_out


def save_png(fig: Any, path: Path) -> None:
    """A matplotlib figure as a PNG at `path`, written atomically (no half-written figure
    beside committed results), and closed."""
    import matplotlib.pyplot as plt

    from pipeline.core.io import atomic_write_bytes

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repo", type=Path, default=Path("."), help="the DVC repository")
    parser.add_argument("--metric", default="return_mean", help="a key of metrics/eval/<run>.json")
    parser.add_argument("--runs", default=".*", help="regular expression over run names")
    parser.add_argument(
        "--baseline",
        metavar="RUN",
        help="a run (the control): every other run of each configuration gets Welch's p-value "
        "against it",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="a PNG of each run's mean curve with its seed band",
    )
    parser.add_argument(
        "--curve", default="eval_return", help="the curve --plot draws (a TSV of plots/train/<run>)"
    )
    args = parser.parse_args(argv)
    import dvc.api
    from dvc.exceptions import DvcException

    params_path = args.repo / "params.yaml"
    try:
        params = yaml.safe_load(params_path.read_text())
        rows = dvc.api.exp_show(repo=str(args.repo))
    except (OSError, yaml.YAMLError, DvcException) as exc:
        print_error(f"{params_path.parent}: {exc}")
        return 2
    rows = with_file_prefix(rows, args.metric, args.repo)
    summaries = summarise(rows, param_keys(params), args.metric, args.runs)
    if args.baseline is not None and not any(s.run == args.baseline for s in summaries):
        runs = sorted({s.run for s in summaries})
        print_error(f"--baseline {args.baseline}: no experiment has its metric; runs: {runs}")
        return 2
    print(format_table(summaries, args.metric, args.baseline))
    if args.plot is not None:
        try:
            left_out = plot_seed_bands(
                summaries, dvc_curve_reader(args.repo, args.curve), args.curve, args.plot
            )
        except OSError as exc:
            print_error(f"{args.plot}: {exc}")
            return 2
        for line in left_out:
            print(f"left out of {args.plot}: {line}")
        print(f"{args.plot}: {args.curve}, mean +- 1 std over distinct seeds (ddof 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
