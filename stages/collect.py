"""DVC stage `collect@<env>`: roll out the behaviour policy of params.yaml into rollout shards.

python -m stages.collect --params params.yaml --env CarRacing-v3 --out data/rollouts/CarRacing-v3
"""

from __future__ import annotations

import argparse
import logging
import sys

from pipeline.core.config import ConfigError, load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.learn.methods.table import load_policy
from pipeline.teach.rollouts.collect import collect
from pipeline.teach.teachers import make_teacher


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--params", default="params.yaml", help="params file (default: %(default)s)"
    )
    parser.add_argument("--env", required=True, help="env id, one of params.yaml's `envs`")
    parser.add_argument("--out", required=True, help="rollout directory to write")
    parser.add_argument(
        "--telemetry", help="where the acting teacher's call latency is kept (not a DVC output)"
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="delete rollouts in --out made with other settings instead of failing",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        params = load_params(args.params)
        if args.env not in params.envs:
            raise ConfigError(f"--env {args.env!r} is not in {args.params} `envs`: {params.envs}")
        collect_cfg = params.collect[args.env]
        # the acting teacher (collect.<env>.teacher), not the labelling one (label.teacher)
        teacher = (
            make_teacher(collect_cfg.teacher, f"collect.{args.env}.teacher", load_policy)
            if collect_cfg.uses_teacher
            else None
        )
        manifest = collect(
            args.env,
            params.env[args.env],
            collect_cfg,
            args.out,
            teacher=teacher,
            replace=args.replace,
            telemetry_dir=args.telemetry,
            load_policy=load_policy,
        )
    except PipelineError as exc:
        print_error(exc)
        return 2
    totals = manifest["totals"]
    print(
        f"{args.env}: {totals['episodes']} episodes, {totals['steps']} steps, "
        f"{totals['samples']} samples in {totals['shards']} shards -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
