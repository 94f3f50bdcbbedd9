"""DVC stage `evaluate@<run>`: the trained agent alone, deterministic, N episodes (teacher and
shaping detached, as at deployment); metrics JSON for `dvc metrics show`.

    python -m stages.evaluate --params params.yaml --agent models/MountainCar-v0-ppo \\
        --out metrics/eval/MountainCar-v0-ppo.json
"""

from __future__ import annotations

import argparse
import sys

from pipeline.agents.checkpoint import read_meta
from pipeline.config import ConfigError, load_params
from pipeline.errors import PipelineError, print_error
from pipeline.evaluation import deployed, eval_metrics, evaluate_policy
from pipeline.io import atomic_write_json
from pipeline.kernels import portable_torch
from pipeline.methods.table import load_agent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--agent", required=True, help="checkpoint directory written by train")
    parser.add_argument("--out", required=True, help="metrics JSON to write")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        if params.evaluate is None:
            raise ConfigError(f"{args.params} has no `evaluate` section")
        portable_torch(1)  # the agent acts with the same bytes on every machine
        policy = deployed(load_agent(args.agent), read_meta(args.agent))
        env_id = policy.meta["env"]
        if env_id not in params.env:
            raise ConfigError(f"{args.params}: no `env.{env_id}` section for the agent's env")
        result = evaluate_policy(
            policy, env_id, params.env[env_id], params.evaluate.episodes, params.evaluate.seed,
            progress=f"evaluate {args.agent}",
        )  # fmt: skip
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    metrics = eval_metrics(result, policy.meta)
    atomic_write_json(args.out, metrics)
    success = f", success {result.success_rate:.0%}" if result.success_rate is not None else ""
    print(
        f"{args.agent}: return {result.return_mean:.1f} +- {result.return_std:.1f} over "
        f"{result.episodes} episodes, length {result.length_mean:.1f}{success}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
