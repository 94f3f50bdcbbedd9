"""DVC stage `teacher_eval@<env>`: the env's labelling teacher (`label.teacher`, or its own
`label.per_env.<env>.teacher`) acting alone for N episodes at each query interval of
`teacher_eval.every_k`, beside uniform random actions on the same seeds: ERPv's "Only VLMs" (VBE)
row, the competence of the teacher whose labels the agents read.

    python -m stages.teacher_eval --params params.yaml --env cartpole-swingup \\
        --cache data/teacher_eval_cache/cartpole-swingup \\
        --read-cache data/label_cache/cartpole-swingup \\
        --read-cache data/rollouts/cartpole-swingup/teacher_cache \\
        --out metrics/teacher/cartpole-swingup.json
"""

from __future__ import annotations

import argparse
import sys

from pipeline.core.config import ConfigError, load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.core.io import atomic_write_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--env", required=True, help="env id (listed in params.yaml `envs`)")
    parser.add_argument(
        "--cache", required=True, help="this stage's own label cache (kept across runs)"
    )
    parser.add_argument(
        "--read-cache",
        action="append",
        default=[],
        help="a label cache read but never written (the label stage's, collect's teacher "
        "answers); repeatable. Answers found there cost nothing.",
    )
    parser.add_argument("--out", required=True, help="metrics JSON to write")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        if params.teacher_eval is None:
            raise ConfigError(f"{args.params} has no `teacher_eval` section")
        if params.label is None:
            raise ConfigError(f"{args.params} has no `label` section: no teacher to evaluate")
        if args.env not in params.env:
            raise ConfigError(f"{args.params}: no `env.{args.env}` section")
        teacher_cfg = params.label.for_env(args.env).teacher
        if teacher_cfg.backend == "policy":
            from pipeline.core.kernels import training_torch

            training_torch(1)  # a policy teacher answers with the same bytes from run to run
        from pipeline.learn.methods.table import load_policy
        from pipeline.teach.teacher_eval import evaluate_teacher
        from pipeline.teach.teachers import make_teacher

        cfg = params.teacher_eval
        teacher = make_teacher(teacher_cfg, load_policy=load_policy)
        metrics, calls = evaluate_teacher(
            args.env, params.env[args.env], teacher_cfg, teacher, args.cache,
            args.read_cache, cfg.every_k, cfg.episodes, cfg.seed,
        )  # fmt: skip
    except (PipelineError, OSError, ValueError) as exc:
        print_error(f"teacher_eval@{args.env}: {exc}")
        return 2
    atomic_write_json(args.out, metrics)
    floor = metrics["random"]
    for row in metrics["teacher_rows"]:
        success = f", success {row['success_rate']:.0%}" if "success_rate" in row else ""
        p = row["welch_p_vs_random"]
        print(
            f"{args.env} teacher {row['policy']}: return {row['return_mean']:.1f} +- "
            f"{row['return_std']:.1f} (std ddof=1, {row['episodes']} episodes){success}; random "
            f"{floor['return_mean']:.1f} +- {floor['return_std']:.1f}; Welch p "
            f"{'n/a' if p is None else f'{p:.3g}'}; {row['prompts']} prompts"
        )
    print(f"{args.out}: {calls} teacher calls made by this run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
