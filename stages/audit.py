"""DVC stage `audit@<env>`: the static HTML label audit of an env's rollouts and label table.

    python -m stages.audit --params params.yaml --rollouts data/rollouts/CarRacing-v3 \\
        --labels data/labels/CarRacing-v3.parquet --masks data/masks/CarRacing-v3.parquet \\
        --out reports/audit/CarRacing-v3.html
"""

from __future__ import annotations

import argparse
import sys

from pipeline.core.config import register_brought_envs
from pipeline.core.errors import PipelineError, print_error
from pipeline.core.io import atomic_write_json
from pipeline.teach.labelling.audit import MAX_EMBEDDED_FRAMES, agreement_metrics, write_audit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--params",
        default="params.yaml",
        help="params whose brought envs (env.<id>.make) the page may show (read if present)",
    )
    parser.add_argument("--rollouts", required=True)
    parser.add_argument("--labels", required=True)
    parser.add_argument("--masks", help="mask table, to show masks over their frames")
    parser.add_argument("--out", required=True, help="HTML report to write")
    parser.add_argument(
        "--telemetry", help="call telemetry of the label stage: latency shown beside the page"
    )
    parser.add_argument(
        "--against",
        help="a second label table of the same rollouts (another teacher, e.g. a VLM vs the "
        "scripted reference): agreement, milestone confusion, action differences, worst frames",
    )
    parser.add_argument(
        "--metrics",
        help="the agreement with the scripted reference per task as JSON (metrics/audit/<env>"
        ".json: n, agree, rate; none for an env without a reference), read by the knowledge page",
    )
    parser.add_argument(
        "--max-frames",
        type=int,
        default=MAX_EMBEDDED_FRAMES,
        help="frames (thumbnails and exact prompts) the answer browser embeds (default "
        f"{MAX_EMBEDDED_FRAMES}); every row's answer, status and context is embedded regardless",
    )
    args = parser.parse_args(argv)
    try:
        register_brought_envs(args.params)
        audit = write_audit(
            args.rollouts, args.labels, args.out, args.masks, args.telemetry,
            against=args.against, max_frames=args.max_frames,
        )  # fmt: skip
        if args.metrics:
            atomic_write_json(args.metrics, agreement_metrics(audit))
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    agreement = ", ".join(f"{t} {100 * s['rate']:.0f} %" for t, s in audit["agreement"].items())
    print(
        f"{args.out}: {audit['queried']} answers audited; agreement with the reference: {agreement or 'n/a'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
