"""DVC stage `train@<run>`: train the agent of params.yaml's `train.<run>` from the env's cached
labels; write its checkpoint and learning curve. Reads the env's dataset (and C_V), never stage
one's rollouts, label table or teacher.

    python -m stages.train --params params.yaml --run cartpole-swingup-erpv \\
        --dataset data/datasets/cartpole-swingup --critics models/critic \\
        --out models/cartpole-swingup-erpv --live plots/train/cartpole-swingup-erpv \\
        --summary metrics/train/cartpole-swingup-erpv.json
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pipeline.core.config import load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.learn.methods.base import TrainInputs
from pipeline.learn.training import set_threads, train_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--run", required=True, help="run name: a key of `train` in params.yaml")
    parser.add_argument(
        "--dataset", type=Path, help="the env's labelled dataset (SAC family, hybrid_ppo)"
    )
    parser.add_argument("--critics", type=Path, help="directory of pre-trained C_V, one per env")
    parser.add_argument("--out", required=True, help="checkpoint directory to write")
    parser.add_argument(
        "--live",
        required=True,
        help="curve directory (dvclive's layout): learning curve and training metrics",
    )
    parser.add_argument("--summary", required=True, help="last values of the metrics (JSON)")
    parser.add_argument(
        "--resume-dir",
        help="where a resumable run keeps its state (not a DVC output: DVC deletes outputs "
        "before a rerun); a killed run goes on from there",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        params = load_params(args.params)
        set_threads(params, args.run)
        inputs = TrainInputs(args.dataset, args.critics)
        curve = train_run(
            args.run, params, inputs, args.out, args.live, args.summary, args.resume_dir
        )
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    tail = [r for _, r in curve[-10:]]
    last = (
        f"mean return of the last {len(tail)} episodes {sum(tail) / len(tail):.1f}"
        if tail
        else "no episode finished"
    )
    print(f"{args.out}: {len(curve)} training episodes; {last}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
