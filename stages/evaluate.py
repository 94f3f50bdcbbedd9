"""DVC stage `evaluate@<run>`: the trained agent alone, deterministic, N episodes (teacher and
shaping detached, as at deployment); metrics JSON for `dvc metrics show`, and with `--videos`
`evaluate.record_episodes` of the same episodes as GIFs (`evaluate.record_which`: by default the
median-return episode, not a lucky first one; `dvc plots show` draws them).

    python -m stages.evaluate --params params.yaml --agent models/MountainCar-v0-ppo \\
        --out metrics/eval/MountainCar-v0-ppo.json --videos videos/MountainCar-v0-ppo
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.core.config import ConfigError, load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.core.io import atomic_write_json
from pipeline.core.kernels import training_torch
from pipeline.learn.agents.checkpoint import read_meta
from pipeline.learn.evaluation import (
    Recorder,
    deployed,
    eval_metrics,
    evaluate_policy,
    write_clips,
)
from pipeline.learn.methods.table import load_agent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--agent", required=True, help="checkpoint directory written by train")
    parser.add_argument("--out", required=True, help="metrics JSON to write")
    parser.add_argument(
        "--videos", type=Path, help="directory for the recorded episodes' GIFs (none if left out)"
    )
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        if params.evaluate is None:
            raise ConfigError(f"{args.params} has no `evaluate` section")
        training_torch(1)  # the agent acts with the same bytes from run to run
        policy = deployed(load_agent(args.agent), read_meta(args.agent))
        env_id = policy.meta["env"]
        if env_id not in params.env:
            raise ConfigError(f"{args.params}: no `env.{env_id}` section for the agent's env")
        cfg = params.evaluate
        record = None
        if args.videos is not None:
            record = Recorder(
                cfg.record_episodes, cfg.record_every, cfg.record_max_frames, cfg.record_which
            )
        result = evaluate_policy(
            policy, env_id, params.env[env_id], cfg.episodes, cfg.seed,
            progress=f"evaluate {args.agent}", record=record,
        )  # fmt: skip
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    metrics = eval_metrics(result, policy.meta)
    atomic_write_json(args.out, metrics)
    success = f", success {result.success_rate:.0%}" if result.success_rate is not None else ""
    print(
        f"{args.agent}: return {result.return_mean:.1f} +- {result.return_std:.1f} (std ddof=1) "
        f"over {result.episodes} episodes, length {result.length_mean:.1f}{success}"
    )
    if record is not None:
        paths = write_clips(
            args.videos, record.clips, record.clip_episodes, cfg.record_fps, cfg.record_scale
        )
        which = "the median return's" if cfg.record_which == "median" else "the first"
        for path, frames, i in zip(paths, record.clips, record.clip_episodes, strict=True):
            print(
                f"  watch episode {i} ({which}; seed {cfg.seed + i}, return "
                f"{result.returns[i]:.1f}): {path} ({len(frames)} frames; open it in a browser "
                "or `dvc plots show`)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
