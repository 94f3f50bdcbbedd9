"""Labelling rounds vs the static dataset vs SAC (issue 28), on state observations of DMC
cartpole-swingup: the same total env steps per arm, several seeds, and the teacher calls each
arm paid.

- `sac`: the `sac` section, `--steps` agent steps, online only;
- `erpv-static`: ERPv, `--steps` agent steps on the pipeline's static labelled dataset (RAE
  episodes, the scripted teacher) and its C_V;
- `erpv-rounds`: ERPv for `--static-steps`, then `--rounds` labelling rounds (pipeline.rounds):
  each round, the agent collects `--round-episodes` episodes (counted in the env-step budget),
  the teacher answers their frames in batch through the cache, and the agent trains on for the
  rest of the round's share of the budget, warm-started, on the static dataset plus every
  round's part.

State, not the pixel preset, because a pixel arm costs about 20 minutes per seed on this 2-core
CPU (issue 25) and this comparison needs 3 arms x 3 seeds x 4 trainings.

Data: the default pipeline's cartpole-swingup rollouts, labels, label cache, dataset and C_V,
read from `--data` (a copy of a repository's data/ and models/critic/: the rounds write beside
them, in the repository layout, under `--out`). Each cell's result is `<out>/cells/<cell>.json`;
a rerun skips finished cells. Every agent is evaluated as deployed (deterministic) on
`--eval-episodes` episodes from seed 10,000.

    python -m benchmarks.rounds --data /tmp/rb --out /tmp/rounds_bench --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
import yaml

from pipeline.agents.checkpoint import read_meta
from pipeline.config import parse_params
from pipeline.evaluation import deployed, evaluate_policy
from pipeline.io import atomic_write_json
from pipeline.methods.base import TrainInputs
from pipeline.methods.table import load_agent
from pipeline.rounds import SECONDS_PER_VLM_CALL, run_round
from pipeline.training import train_run

ENV = "cartpole-swingup"
EVAL_SEED = 10_000
ARMS = ("sac", "erpv-static", "erpv-rounds")


def _params(base: dict[str, Any], args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """params.yaml's sections with this seed's runs and rounds."""
    raw = {k: v for k, v in base.items() if k not in ("train", "rounds")}
    per_round = args.steps - args.static_steps
    round_steps = per_round // args.rounds - args.round_episodes * args.episode_steps
    if round_steps < 1:
        raise SystemExit("--steps leaves the rounds no training steps: raise it")
    raw["train"] = {
        f"sac-s{seed}": {"env": ENV, "method": "sac", "steps": args.steps, "seed": seed},
        f"erpv-static-s{seed}": {"env": ENV, "method": "erpv", "steps": args.steps, "seed": seed},
        f"erpv-rounds-s{seed}": {
            "env": ENV, "method": "erpv", "steps": args.static_steps, "seed": seed,
            "overrides": {"save_training_state": True},
        },
    }  # fmt: skip
    run = f"erpv-rounds-s{seed}"
    raw["rounds"] = {}
    for k in range(1, args.rounds + 1):
        before = f"{run}-r{k - 1}"
        raw["rounds"][f"{run}-r{k}"] = {
            "run": run, "env": ENV, "method": "erpv", "round": k,
            "previous_agent": f"models/rounds/{before}" if k > 1 else f"models/{run}",
            "previous_data": f"data/rounds/{before}" if k > 1 else f"data/datasets/{ENV}",
            "episodes": args.round_episodes, "steps": round_steps, "seed": 1000 * seed + k,
        }  # fmt: skip
    return raw


def _evaluate(model: Path, params, episodes: int) -> float:
    agent = load_agent(model)
    return evaluate_policy(deployed(agent), ENV, params.env[ENV], episodes, EVAL_SEED).return_mean


def _train(name: str, params, episodes: int) -> dict[str, Any]:
    inputs = TrainInputs(
        Path("data/rollouts") / ENV, Path("data/labels") / f"{ENV}.parquet",
        Path("data/datasets") / ENV, Path("models/critic"),
    )  # fmt: skip
    started = time.perf_counter()
    train_run(name, params, inputs, f"models/{name}", f"plots/{name}", f"metrics/{name}.json",
              progress=False)  # fmt: skip
    seconds = time.perf_counter() - started
    return {"final_return": _evaluate(Path("models") / name, params, episodes),
            "train_s": round(seconds, 1), "updates": _updates(Path("models") / name)}  # fmt: skip


def _updates(model: Path) -> int:
    """Gradient updates the agent has had (rounds go on counting from the run's)."""
    return int(read_meta(model)["update_step"])


def run_cell(arm: str, seed: int, args: argparse.Namespace, base: dict[str, Any]) -> dict:
    params = parse_params(_params(base, args, seed))
    name = f"{arm}-s{seed}"
    if arm != "erpv-rounds":
        result = _train(name, params, args.eval_episodes)
        return {**result, "env_steps": args.steps, "round_teacher_calls": 0}
    result = _train(name, params, args.eval_episodes)
    evals, rounds = [result["final_return"]], []
    env_steps = args.static_steps
    for k in range(1, args.rounds + 1):
        r = f"{name}-r{k}"
        summary = run_round(
            r, params, f"data/rounds/{r}", f"data/round_caches/{r}", f"models/rounds/{r}",
            f"plots/rounds/{r}", f"metrics/rounds/{r}.json", progress=False,
        )  # fmt: skip
        env_steps += summary.env_steps_collected + params.rounds[r].steps
        evals.append(_evaluate(Path("models/rounds") / r, params, args.eval_episodes))
        rounds.append(summary.__dict__)
    return {
        "final_return": evals[-1], "eval_after_each_round": evals, "env_steps": env_steps,
        "updates": _updates(Path("models/rounds") / f"{name}-r{args.rounds}"),
        "round_teacher_calls": sum(r["teacher_calls"] for r in rounds), "rounds": rounds,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--data", type=Path, required=True, help="holds data/ and models/critic/")
    parser.add_argument("--out", type=Path, default=Path("reports/rounds"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4000, help="env steps per arm")
    parser.add_argument("--static-steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--round-episodes", type=int, default=2)
    parser.add_argument("--episode-steps", type=int, default=125, help="agent steps per episode")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    args = parser.parse_args(argv)
    base = yaml.safe_load(args.params.read_text())
    torch.set_num_threads(1)
    out = args.out.resolve()
    (out / "cells").mkdir(parents=True, exist_ok=True)
    for part in ("data", "models"):
        if not (out / part).exists():
            shutil.copytree(args.data / part, out / part)
    os.chdir(out)  # the rounds read and write the repository layout
    for seed in range(args.seeds):
        for arm in args.arms:
            cell = out / "cells" / f"{arm}-s{seed}.json"
            if cell.exists():
                continue
            result = run_cell(arm, seed, args, base)
            atomic_write_json(cell, {"arm": arm, "seed": seed, **result})
            print(f"{arm} seed {seed}: {result['final_return']:.1f} ({result['env_steps']} steps)")
    static_calls = pl.read_parquet(Path("data/labels") / f"{ENV}.parquet")["queried"].sum()
    lines = [
        f"{ENV}, state observations, {args.steps} env steps per arm ({args.static_steps} static "
        f"+ {args.rounds} rounds of {args.round_episodes} collected episodes and training for "
        f"erpv-rounds), deterministic eval on {args.eval_episodes} episodes from seed "
        f"{EVAL_SEED}; mean +- std over seeds. Teacher calls: the static dataset's {static_calls} "
        f"prompts (every arm but sac reads them) plus each arm's rounds; at ERPv table 14's "
        f"{SECONDS_PER_VLM_CALL} s per Qwen2-VL-7B call.",
        "",
        f"{'arm':<14}{'seeds':>6}{'final return':>20}{'env steps':>11}{'updates':>9}"
        f"{'calls':>8}{'VLM s':>9}  per seed",
    ]
    for arm in ARMS:
        cells = [json.loads(p.read_text()) for p in sorted((out / "cells").glob(f"{arm}-s*.json"))]
        if not cells:
            continue
        finals = np.array([c["final_return"] for c in cells])
        calls = (0 if arm == "sac" else static_calls) + np.mean(
            [c["round_teacher_calls"] for c in cells]
        )
        lines.append(
            f"{arm:<14}{len(cells):>6}{finals.mean():>11.1f} +- {finals.std():<6.1f}"
            f"{int(np.mean([c['env_steps'] for c in cells])):>11}"
            f"{int(np.mean([c.get('updates', -1) for c in cells])):>9}{calls:>8.0f}"
            f"{calls * SECONDS_PER_VLM_CALL:>9.0f}  " + ", ".join(f"{f:.1f}" for f in finals)
        )
        if arm == "erpv-rounds":
            per_round = np.array([c["eval_after_each_round"] for c in cells])
            lines.append(
                "  eval after static, r1..r" + str(args.rounds) + ": "
                + ", ".join(f"{m:.1f} +- {s:.1f}" for m, s in
                            zip(per_round.mean(0), per_round.std(0), strict=True))
            )  # fmt: skip
    table = "\n".join(lines)
    (out / "table.txt").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
