"""`vlmrl-play`: watch a trained agent on demand, as rl-zoo3's `enjoy` / `record_video` do: it
plays N episodes from a seed, deterministic and as deployed (the `evaluate` stage's code), prints
each episode's return and writes GIFs. Nothing here is a DVC output: use it on any checkpoint
(models/<run>, a round's, one a colleague sent), with more episodes or other seeds than the
stage's.

    vlmrl-play models/cartpole-swingup-sac --episodes 5 --seed 100
    vlmrl-play models/cartpole-swingup-sac --dataset data/datasets/cartpole-swingup

The env comes from params.yaml's `env.<id>` (`--params`), or from a dataset's recorded builder
(`--dataset`: what a colleague who pulled only the dataset and the agent has).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.core.config import ConfigError, EvaluateConfig, load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.core.kernels import training_torch


def main(argv: list[str] | None = None) -> int:
    from pipeline.dataset.env import dataset_env
    from pipeline.learn.agents.checkpoint import read_meta
    from pipeline.learn.evaluation import Recorder, deployed, evaluate_policy, write_clips
    from pipeline.learn.methods.table import load_agent

    defaults = EvaluateConfig(episodes=1, seed=0)
    parser = argparse.ArgumentParser(
        prog="vlmrl-play", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("agent", type=Path, help="a checkpoint directory (models/<run>)")
    parser.add_argument("--episodes", type=int, default=3, help="episodes to play (3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (0)")
    parser.add_argument(
        "--record", choices=["all", "median", "first", "none"], default="all",
        help="which episodes become GIFs: all (default), the median-return one, the first, none",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, help="folder for the GIFs (default: videos/play/<agent folder name>)"
    )
    parser.add_argument("--params", default="params.yaml", help="where env.<id> is (params.yaml)")
    parser.add_argument("--dataset", type=Path, help="build the env from this dataset instead")
    parser.add_argument("--fps", type=float, default=defaults.record_fps)
    parser.add_argument("--scale", type=int, default=defaults.record_scale)
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be at least 1")
    try:
        training_torch(1)  # the agent acts with the bytes it acts with in `evaluate`
        meta = read_meta(args.agent)
        policy = deployed(load_agent(args.agent), meta)
        env_id = meta["env"]
        if args.dataset is not None:
            data_env, env_cfg = dataset_env(args.dataset)
            if data_env != env_id:
                raise ConfigError(f"{args.agent} acts in {env_id}, {args.dataset} is {data_env}")
        else:
            params = load_params(args.params)
            if env_id not in params.env:
                raise ConfigError(
                    f"{args.params} has no `env.{env_id}` (the agent's env): pass --params with "
                    "one, or --dataset <its dataset>"
                )
            env_cfg = params.env[env_id]
        count = {"all": args.episodes, "none": 0}.get(args.record, 1)
        which = "median" if args.record == "median" else "first"
        record = Recorder(count, max_frames=10**6, which=which) if count else None
        result = evaluate_policy(
            policy, env_id, env_cfg, args.episodes, args.seed, progress=f"play {args.agent}",
            record=record,
        )  # fmt: skip
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    for i, (ret, length) in enumerate(zip(result.returns, result.lengths, strict=True)):
        print(f"episode {i} (seed {args.seed + i}): return {ret:.1f}, {length} steps")
    print(
        f"{args.agent} in {env_id}: return {result.return_mean:.1f} +- {result.return_std:.1f} "
        f"(std ddof=1) over {result.episodes} episodes"
    )
    if record is not None:
        out = args.out or Path("videos/play") / args.agent.resolve().name
        paths = write_clips(out, record.clips, record.clip_episodes, args.fps, args.scale)
        for path, i in zip(paths, record.clip_episodes, strict=True):
            print(f"  episode {i}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
