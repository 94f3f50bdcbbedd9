"""DVC stage `compare`: every run's learning curve, one PNG per env (all methods side by side),
beside the evaluation metrics. `dvc plots show` renders the same curves from dvc.yaml's `plots`.

    python -m stages.compare --params params.yaml --curves plots/train --out reports/curves
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from pipeline.core.config import load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.learn.curves import plot_curves, read_metric


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
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        by_env: dict[str, dict] = defaultdict(dict)
        for name, run in (params.train or {}).items():
            by_env[run.env][f"{name} ({run.method})"] = read_metric(args.curves / name)
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for env_id, curves in by_env.items():
        plot_curves(curves, f"{env_id}: learning curves", args.out / f"{env_id}.png")
        print(f"{args.out / f'{env_id}.png'}: {len(curves)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
