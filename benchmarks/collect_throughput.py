"""Collection throughput per env: env + behaviour alone vs the full collect (PNG + JSON encode,
tar write, fsync, hashing). The ratio between the two, measured in the same run, is the writer's
overhead.

    python benchmarks/collect_throughput.py                      # the default envs of params.yaml
    python benchmarks/collect_throughput.py --envs cheetah-run --episodes 2
"""

from __future__ import annotations

import argparse
import tempfile
import time

from pipeline.core.config import load_params
from pipeline.core.envs import make_env
from pipeline.teach.labels.cache import LabelCache
from pipeline.teach.rollouts.behaviours import make_behaviour
from pipeline.teach.rollouts.collect import collect, episode_seed
from pipeline.teach.teachers import make_teacher


def acting_teacher(collect_cfg):
    """The teacher that acts in `teacher` / `rae` phases, as stages/collect.py builds it."""
    return make_teacher(collect_cfg.teacher) if collect_cfg.uses_teacher else None


def steps_per_s_without_writing(env_id, env_cfg, collect_cfg, cache_dir) -> tuple[int, float]:
    env = make_env(env_id, env_cfg)
    teacher = acting_teacher(collect_cfg)
    cache = LabelCache(cache_dir) if teacher is not None else None
    behaviour = make_behaviour(collect_cfg, env.action_space, env_id, teacher, cache)
    steps, start = 0, time.perf_counter()
    for episode in range(collect_cfg.episodes):
        seed = episode_seed(collect_cfg.seed, episode)
        obs, info = env.reset(seed=seed)
        behaviour.reset(seed)
        done = False
        while not done:
            action, _ = behaviour.act(obs, info)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            steps += 1
    elapsed = time.perf_counter() - start
    env.close()
    return steps, steps / elapsed


def steps_per_s_with_writing(env_id, env_cfg, collect_cfg) -> tuple[int, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        teacher = acting_teacher(collect_cfg)
        manifest = collect(env_id, env_cfg, collect_cfg, tmp, teacher=teacher, progress=False)
        elapsed = time.perf_counter() - start
    steps = manifest["totals"]["steps"]
    nbytes = sum(s["bytes"] for s in manifest["shards"])
    return steps, steps / elapsed, nbytes // manifest["totals"]["samples"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--envs", nargs="*", help="env ids (default: params.yaml `envs`)")
    parser.add_argument("--episodes", type=int, help="override each env's episode budget")
    args = parser.parse_args()
    params = load_params(args.params)
    env_ids = args.envs or params.envs
    print(
        f"{'env':<26} {'steps':>6} {'no write':>10} {'write':>10} {'write/no':>9} {'B/sample':>9}"
    )
    for env_id in env_ids:
        env_cfg = params.env[env_id]
        collect_cfg = params.collect[env_id]
        if args.episodes:
            collect_cfg = collect_cfg.model_copy(update={"episodes": args.episodes})
        with tempfile.TemporaryDirectory() as cache_dir:  # the teacher's answers, unshared
            steps, bare = steps_per_s_without_writing(env_id, env_cfg, collect_cfg, cache_dir)
        steps_w, written, per_sample = steps_per_s_with_writing(env_id, env_cfg, collect_cfg)
        assert steps == steps_w, "both runs must play the same episodes"
        print(
            f"{env_id:<26} {steps:>6} {bare:>8.0f}/s {written:>8.0f}/s {written / bare:>9.2f} "
            f"{per_sample:>9}"
        )


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
