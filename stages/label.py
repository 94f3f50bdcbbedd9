"""DVC stage `label@<env>`: ask the env's teacher of params.yaml (`label.teacher`, or its own
`label.per_env.<env>.teacher`) about the env's rollouts, through the label cache, and write the
label table.

    python -m stages.label --params params.yaml --rollouts data/rollouts/CarRacing-v3 \\
        --cache data/label_cache/CarRacing-v3 --out data/labels/CarRacing-v3.parquet \\
        --corrections corrections/CarRacing-v3.jsonl
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys

from pipeline.core.config import ConfigError, load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.core.io import atomic_write_json
from pipeline.learn.methods.table import load_policy
from pipeline.teach.labelling.label import estimate_prompts, label_metrics, label_rollouts
from pipeline.teach.labels.cost import ERPV_SECONDS_PER_CALL, estimate_cost
from pipeline.teach.rollouts.reader import load_manifest
from pipeline.teach.teachers import make_teacher


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--rollouts", required=True, help="rollout directory written by collect")
    parser.add_argument("--cache", required=True, help="label cache directory (kept across runs)")
    parser.add_argument("--out", required=True, help="label table to write (parquet)")
    parser.add_argument(
        "--corrections",
        help="a person's corrections to overlay on the teacher's answers (corrections/<env>.jsonl; "
        "a missing file holds none)",
    )
    parser.add_argument(
        "--telemetry", help="where the calls' latency and attempts are kept (not a DVC output)"
    )
    parser.add_argument(
        "--metrics",
        help="what the labels cost, as JSON for `dvc metrics show` (costs/label/<env>.json): "
        "the prompts a fresh build asks, this run's calls, and the recorded cost of the "
        "table's answers on this machine (seconds, tokens)",
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="print what a run would ask the teacher (prompts per task, how many the cache "
        "answers, the calls left) and exit: no call, nothing written",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        params = load_params(args.params)
        if params.label is None:
            raise ConfigError(f"{args.params} has no `label` section")
        env_id = load_manifest(args.rollouts)["env_id"]
        cfg = params.label.for_env(env_id)
        # the `policy` teacher acts with an agent that this stage loads (stage one imports
        # nothing of stage two); Ray's actors build their teacher the same way
        build = functools.partial(
            make_teacher, cfg.teacher, params.label.teacher_path(env_id), load_policy
        )
        if args.estimate:
            counts = estimate_prompts(args.rollouts, cfg, build(), args.cache)
            for task, row in counts.items():
                print(f"{task}: {row['prompts']} prompts, {row['cached']} answered by the "
                      f"cache, {row['to_ask']} to ask")  # fmt: skip
            total = sum(row["to_ask"] for row in counts.values())
            print(f"{args.rollouts}: {total} teacher calls to make with {cfg.teacher.backend} "
                  f"({params.label.teacher_path(env_id)}); nothing was asked")  # fmt: skip
            print(estimate_cost(total, args.metrics, cfg.budget))
            return 0
        summary = label_rollouts(
            args.rollouts, cfg, build(), args.cache, args.out,
            telemetry_dir=args.telemetry, corrections=args.corrections, ray_build=build,
        )  # fmt: skip
        if args.metrics:
            atomic_write_json(
                args.metrics, label_metrics(env_id, args.out, summary, args.telemetry)
            )
    except (PipelineError, OSError) as exc:
        print_error(exc)
        return 2
    statuses = ", ".join(f"{s} {n}" for s, n in summary.statuses.most_common())
    print(
        f"{args.out}: {summary.rows} rows; {summary.queried} prompts, {summary.cache_hits} from "
        f"the cache, {summary.teacher_calls} teacher calls; {statuses}"
    )
    print(
        f"{args.out}: {summary.cost_line()} (ERPv table 14's Qwen2-VL-7B: "
        f"{ERPV_SECONDS_PER_CALL} s per call)"
    )
    if summary.corrected or summary.corrections_unused:
        print(
            f"{args.corrections}: {summary.corrected} answers replaced by a person's correction"
            + (f", {summary.corrections_unused} corrections of frames or tasks not queried "
               "under label.tasks (unused)" if summary.corrections_unused else "")
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
