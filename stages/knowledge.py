"""DVC stage `knowledge`: one page that answers, per env, what the labelling teacher knows
(acting alone, beside random actions), what its labels cost, and what each agent reached with
the label tasks it read (pipeline/loops/knowledge.py).

    python -m stages.knowledge --params params.yaml --out reports/knowledge.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.core.config import load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.core.io import atomic_write_bytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--teachers", type=Path, default=Path("metrics/teacher"))
    parser.add_argument("--labels", type=Path, default=Path("data/labels"))
    parser.add_argument("--evals", type=Path, default=Path("metrics/eval"))
    parser.add_argument("--rounds", type=Path, default=Path("metrics/rounds"))
    parser.add_argument("--audits", type=Path, default=Path("metrics/audit"))
    parser.add_argument("--out", required=True, type=Path, help="the page to write (markdown)")
    args = parser.parse_args(argv)
    try:
        from pipeline.loops.knowledge import knowledge_report

        params = load_params(args.params)
        page = knowledge_report(
            params, args.teachers, args.labels, args.evals, args.rounds, args.audits
        )
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    atomic_write_bytes(args.out, page.encode())
    print(f"{args.out}: {len(params.envs)} envs, {len(params.train or {})} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
