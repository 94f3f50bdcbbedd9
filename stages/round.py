"""DVC stage `round@<name>`: one labelling round of params.yaml's `rounds.<name>`
(pipeline.loops.rounds): the previous agent collects, the label teacher answers the new frames in
batch through the cache, masks and a dataset part follow, and the agent trains on from the
previous one. Its costs (frames, prompts, teacher calls on a fresh build) are its metrics.

    python -m stages.round --params params.yaml --round cartpole-swingup-erpv-r1 \\
        --data data/rounds/cartpole-swingup-erpv-r1 --caches data/round_caches/cartpole-swingup-erpv-r1 \\
        --out models/rounds/cartpole-swingup-erpv-r1 \\
        --live plots/rounds/cartpole-swingup-erpv-r1 \\
        --summary metrics/rounds/cartpole-swingup-erpv-r1.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path

from pipeline.core.config import load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.learn.training import set_threads
from pipeline.loops.rounds import cost_line, run_round


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--round", required=True, help="a key of `rounds` in params.yaml")
    parser.add_argument("--data", required=True, type=Path, help="the round's data directory")
    parser.add_argument(
        "--caches", required=True, type=Path, help="the round's label and mask caches (persisted)"
    )
    parser.add_argument("--out", required=True, type=Path, help="the round's agent checkpoint")
    parser.add_argument(
        "--live", required=True, help="curve directory (dvclive's layout) of its training"
    )
    parser.add_argument("--summary", required=True, help="its metrics: training and costs")
    parser.add_argument("--resume-dir", help="where a killed round's training goes on from")
    parser.add_argument(
        "--telemetry",
        help="the env's store of the teacher calls' latency (data/telemetry/<env>; not a DVC "
        "output)",
    )
    parser.add_argument(
        "--costs",
        help="what the round's teacher calls cost on this machine, as JSON for `dvc metrics "
        "show` (costs/rounds/<name>.json): the recorded latency and tokens",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        params = load_params(args.params)
        if args.round in params.rounds:
            set_threads(params, params.rounds[args.round].run)
        summary = run_round(
            args.round, params, args.data, args.caches, args.out, args.live, args.summary,
            resume_dir=args.resume_dir, telemetry_dir=args.telemetry, costs_path=args.costs,
        )  # fmt: skip
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    costs = ", ".join(f"{k} {v}" for k, v in asdict(summary).items())  # calls_made_now too
    print(f"round {args.round}: {costs}")
    if args.costs:
        print(cost_line(args.round, json.loads(Path(args.costs).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
