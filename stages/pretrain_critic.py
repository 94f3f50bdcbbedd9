"""DVC stage `pretrain_critic@<env>`: ERPv's VLM critic C_V, trained offline by TD on the env's
labelled RAE dataset (next-state actions from the cached labels), then frozen. Writes the
checkpoint (safetensors + JSON with its config and data hashes) in <out>/erpv/, a marker in
<out>/<method>/ for every other method (train@<run> depends on its own method's folder), and the
TD-loss curve.

    python -m stages.pretrain_critic --params params.yaml --env cartpole-swingup \\
        --dataset data/datasets/cartpole-swingup --out models/critic/cartpole-swingup \\
        --live plots/critic/cartpole-swingup --summary metrics/critic/cartpole-swingup.json \\
        --resume-dir .resume/critic/cartpole-swingup
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pipeline.core.config import load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.core.kernels import training_torch
from pipeline.learn.critic import pretrain_critic, write_critic_markers, write_no_critic
from pipeline.learn.curves import write_training_log
from pipeline.learn.methods.erpv import VARIANTS, critic_dir, critic_params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--env", required=True, help="env id (listed in critic.envs)")
    parser.add_argument("--dataset", required=True, type=Path, help="the env's labelled dataset")
    parser.add_argument("--out", required=True, type=Path, help="checkpoint directory to write")
    parser.add_argument(
        "--live", required=True, help="curve directory (dvclive's layout): the TD-loss curve"
    )
    parser.add_argument("--summary", required=True, help="last values of the metrics (JSON)")
    parser.add_argument(
        "--resume-dir",
        type=Path,
        help="where a killed pre-training keeps its resume state (outside DVC's outputs); a rerun "
        "goes on from it. Each variant uses variants/<name>/ under it",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        params = load_params(args.params)
        if params.critic is None or args.env not in params.critic.envs:
            write_no_critic(args.out, args.env)
            write_training_log(args.live, args.summary)  # empty: nothing was trained
            print(f"{args.out}: {args.env} is not in critic.envs: no C_V (marker written)")
            return 0
        # the same bytes from run to run on one machine: see `threads` and pipeline/core/kernels.py
        training_torch(critic_params(params, args.env).threads)
        out = critic_dir(args.out)
        logs = pretrain_critic(args.env, params, args.dataset, out, resume_dir=args.resume_dir)
        write_training_log(args.live, args.summary, rows=logs)
        last = logs[-1] if logs else {}
        print(f"{out}: C_V pre-trained; last log row {last}")
        # the env's further C_V (critic.variants.<env>), each beside its own curves
        for name in params.critic.variants.get(args.env, {}):
            training_torch(critic_params(params, args.env, name).threads)
            out = critic_dir(args.out, name)
            resume_dir = None if args.resume_dir is None else args.resume_dir / VARIANTS / name
            logs = pretrain_critic(
                args.env, params, args.dataset, out, variant=name, resume_dir=resume_dir
            )
            write_training_log(
                Path(args.live) / VARIANTS / name, out / "curves_summary.json", rows=logs
            )
            print(f"{out}: C_V {name!r} pre-trained; last log row {logs[-1] if logs else {}}")
        write_critic_markers(args.out, args.env)  # what the other methods' runs depend on
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
