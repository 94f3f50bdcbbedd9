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
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pipeline.errors import print_error

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
                out.append(SeedSummary(config, run, values, seeds))
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
    summaries = summarise(rows, param_keys(params), args.metric, args.runs)
    if args.baseline is not None and not any(s.run == args.baseline for s in summaries):
        runs = sorted({s.run for s in summaries})
        print_error(f"--baseline {args.baseline}: no experiment has its metric; runs: {runs}")
        return 2
    print(format_table(summaries, args.metric, args.baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
