"""DVC stage `check_params`: validate the whole params.yaml before any other stage runs.

Every stage depends on its output, so DVC runs it first and stops at a bad value with the
project's message (one line per problem: the key, the bad value, the allowed values or the fix)
before it deletes any other stage's outputs or reaches a params key that does not exist. It
reads each listed env's corrections file (`corrections/<env>.jsonl`, which the label stage
overlays) for the same reason, and parses each answer as the label stage will (against the env's
rollouts, where they exist): a malformed line or an answer that is no valid label stops the
pipeline here, not after DVC has deleted the env's label table. Its output is constant, so a valid change of params reruns only
the stages that read it.

    python -m stages.check_params --params params.yaml --out data/params_checked.json \\
        --rollouts data/rollouts --critics data/critics --teachers data/policy_teachers
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pipeline.core.config import load_params
from pipeline.core.envs.dmc import dmc_task_problem
from pipeline.core.errors import PipelineError, print_error
from pipeline.core.io import atomic_write_json
from pipeline.learn.methods.table import check_params, policy_teacher_spec
from pipeline.teach.labelling.corrections import (
    check_corrections,
    corrections_path,
    read_corrections,
)
from pipeline.teach.labels.tasks import schema_problems
from pipeline.teach.rollouts.format import MANIFEST_NAME
from pipeline.teach.rollouts.reader import load_manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", required=True, help="marker file to write when params are valid")
    parser.add_argument(
        "--corrections", default="corrections", help="directory of <env>.jsonl corrections"
    )
    parser.add_argument(
        "--rollouts",
        type=Path,
        default=Path("data/rollouts"),
        help="directory of <env> rollouts: where one exists, each correction's answer is parsed "
        "against its action space, as the label stage will",
    )
    parser.add_argument(
        "--critics",
        type=Path,
        help="directory to write each env's resolved C_V settings to (<env>.json: "
        "pipeline.learn.methods.erpv.critic_spec), what pretrain_critic@<env> depends on",
    )
    parser.add_argument(
        "--teachers",
        type=Path,
        help="directory to write each env's resolved policy teacher to (<env>.json: "
        "`policy_teachers.<env>` with its method's hyper-parameters, or none), what "
        "policy_teacher@<env> depends on",
    )
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        check_params(params)
    except PipelineError as exc:
        print_error(f"{exc}\nNothing was run: fix {args.params} and rerun.")
        return 2
    for where, teacher in params.teachers():
        key = teacher.openai.api_key_env if teacher.backend == "openai" and teacher.openai else None
        if key and not os.environ.get(key):
            print(
                f"warning: {where}.openai.api_key_env: ${key} is not set here; a stage that "
                "must call this teacher will stop until it is (cached answers need no key)",
                file=sys.stderr,
            )
    problems = []
    for env_id in params.envs:  # what the config alone cannot check: labels that parse back,
        problems += schema_problems(env_id, f"env.{env_id}.labels")  # tasks that exist
        make = params.env[env_id].make
        if make is not None and make.dm_control:
            problems += filter(
                None, [dmc_task_problem(make.dm_control, f"env.{env_id}.make.dm_control")]
            )
    if problems:
        print_error("\n".join(problems) + f"\nNothing was run: fix {args.params} and rerun.")
        return 2
    for env_id in params.envs:
        path = corrections_path(env_id, args.corrections)
        manifest = args.rollouts / env_id / MANIFEST_NAME
        try:
            if manifest.exists():  # the label stage will parse them against these rollouts
                check_corrections(path, env_id, load_manifest(manifest.parent)["action_space"])
            else:  # no rollouts yet: no label table for DVC to delete either
                read_corrections(path)
        except PipelineError as exc:
            print_error(f"{exc}\nNothing was run: fix {path} and rerun.")
            return 2
    if args.critics is not None:  # one file per env: its C_V stage reruns on its own
        from pipeline.learn.methods.erpv import critic_spec  # (torch: check_params loaded it)

        args.critics.mkdir(parents=True, exist_ok=True)
        for env_id in params.envs:
            atomic_write_json(args.critics / f"{env_id}.json", critic_spec(params, env_id))
    if args.teachers is not None:  # one file per env: its teacher stage reruns on its own
        args.teachers.mkdir(parents=True, exist_ok=True)
        for env_id in params.envs:
            atomic_write_json(args.teachers / f"{env_id}.json", policy_teacher_spec(params, env_id))
    atomic_write_json(
        args.out, {"params": "valid"}
    )  # constant: dependants rerun on their own params
    print(f"{args.params}: valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
