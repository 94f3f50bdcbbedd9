"""DVC stage `compare`: every run's learning curves side by side, per env: a PNG
(`reports/curves/<env>.png`) and, for `dvc plots show`'s default page, one long table per metric
and env (`plots/compare/<metric>/<env>.tsv`: the training episodes' `return` and the
deterministic `eval_return`), drawn one line per run by dvc.yaml's top-level plots.

    python -m stages.compare --params params.yaml --curves plots/train --out reports/curves \\
        --tables plots/compare
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.core.config import load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.learn.curves import RETURN, compare_curves, plot_curves, write_compare_tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "--curves",
        required=True,
        type=Path,
        help="directory of the runs' curve directories (dvclive's layout)",
    )
    parser.add_argument("--out", required=True, type=Path, help="directory for <env>.png")
    parser.add_argument(
        "--tables",
        type=Path,
        help="directory for <metric>/<env>.tsv: each env's runs as one table per metric",
    )
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        runs = [(name, run.env, run.method) for name, run in (params.train or {}).items()]
        tables = compare_curves(runs, args.curves)
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for env_id, curves in tables[RETURN].items():
        plot_curves(curves, f"{env_id}: learning curves", args.out / f"{env_id}.png")
        print(f"{args.out / f'{env_id}.png'}: {len(curves)} runs")
    if args.tables is not None:
        write_compare_tables(tables, args.tables)
        print(f"{args.tables}: {', '.join(sorted(tables))} per env, one line per run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
