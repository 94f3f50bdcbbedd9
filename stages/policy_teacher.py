"""DVC stage `policy_teacher@<env>`: train `policy_teachers.<env>` of params.yaml online, the agent
that a `policy` teacher of that env answers with (a teacher of known quality); write its
checkpoint and learning curve. An env that `policy_teachers` does not list gets a marker.

    python -m stages.policy_teacher --params params.yaml --env cartpole-swingup \\
        --out models/teachers/cartpole-swingup --live plots/teachers/cartpole-swingup \\
        --summary metrics/teachers/cartpole-swingup.json \\
        --resume-dir .resume/teachers/cartpole-swingup
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pipeline.core.config import load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.learn.training import train_policy_teacher


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--env", required=True, help="env id (a key of policy_teachers, or not)")
    parser.add_argument("--out", required=True, type=Path, help="checkpoint directory to write")
    parser.add_argument(
        "--live", required=True, help="curve directory (dvclive's layout): the learning curve"
    )
    parser.add_argument("--summary", required=True, help="last values of the metrics (JSON)")
    parser.add_argument(
        "--resume-dir",
        help="where the training keeps its resume state (outside DVC's outputs); a killed run "
        "goes on from there",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        params = load_params(args.params)
        curve = train_policy_teacher(
            args.env, params, args.out, args.live, args.summary, args.resume_dir
        )
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    if args.env not in params.policy_teachers:
        print(f"{args.out}: {args.env} is not in policy_teachers: no teacher (marker written)")
        return 0
    tail = [r for _, r in curve[-10:]]
    last = (
        f"mean return of the last {len(tail)} episodes {sum(tail) / len(tail):.1f}"
        if tail
        else "no episode finished"
    )
    print(f"{args.out}: policy teacher trained, {len(curve)} episodes; {last}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
