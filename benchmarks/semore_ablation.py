"""Semore table 2 on our runs: pixel SAC (same encoder) vs the ablations M1-M4 on CarRacing-v3,
trained by the pipeline's own `train` code on the default pipeline's labelled dataset (masks and
judge labels from stage one; no teacher or segmenter is called).

A preset (`benchmarks/params/semore_cpu.yaml`, `semore_paper.yaml`) is merged over params.yaml's
`semore` section and sets the budget. Each run writes `runs/<variant>-seed<k>.json` when done and
keeps a resume state in `resume/<run>/` while it trains, so a killed benchmark goes on where it
stopped (finished runs skipped, the unfinished one resumed, bit for bit). Prints the table: final
deterministic evaluation return (mean +- std over seeds), the first step whose eval return
reaches `--threshold` (median), beside the paper's ordering (M1 < M2 < M3 < M4, Semore > SAC),
and a uniformly random policy on the same evaluation episodes (what "learned nothing" scores).

    python -m benchmarks.semore_ablation --preset benchmarks/params/semore_cpu.yaml \\
        --seeds 3 --workers 2 --out reports/semore_ablation
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ENV = "CarRacing-v3"
VARIANTS = ["sac", "m1", "m2", "m3", "m4"]
PAPER_ORDER = "M1 < M2 < M3 < M4 (full Semore), Semore > SAC (Semore table 2, CARLA tasks)"


def load_preset(params_path: str, preset: str) -> tuple[Any, int]:
    """params.yaml with the preset's `semore` keys merged in; the preset's step budget."""
    from pipeline.config import parse_params

    raw = yaml.safe_load(Path(params_path).read_text())
    over = yaml.safe_load(Path(preset).read_text())
    semore = dict(raw["semore"])  # `<<: *sac` is already merged by the YAML loader
    semore.update(over.get("semore", {}))
    raw["semore"] = semore
    return parse_params(raw, source=f"{params_path} + {preset}"), int(over["steps"])


def _run_one(job: dict) -> dict:
    import torch

    from pipeline.config import TrainRun
    from pipeline.evaluation import deployed, evaluate_policy
    from pipeline.io import atomic_write_json
    from pipeline.training import TrainInputs, train_sac_run

    torch.set_num_threads(job["threads"])
    params, steps = load_preset(job["params"], job["preset"])
    hp = params.semore.model_copy(update={"variant": job["variant"]})
    params = params.model_copy(update={"semore": hp})
    run = TrainRun(env=ENV, method="semore", steps=steps, seed=job["seed"])
    inputs = TrainInputs(Path(job["rollouts"]), Path(job["labels"]), dataset=Path(job["dataset"]))
    out = Path(job["out"])
    started = time.perf_counter()
    agent, curve, logs, _ = train_sac_run(
        job["name"], run, params, inputs, progress=False, resume_dir=out / "resume" / job["name"]
    )
    seconds = time.perf_counter() - started
    final = evaluate_policy(
        deployed(agent), ENV, params.env[ENV], job["eval_episodes"], seed=10_000
    )
    result = {
        **{k: job[k] for k in ("name", "variant", "seed")},
        "steps": steps,
        "curve": curve,
        "eval": [(row["step"], row["eval_return"]) for row in logs if "eval_return" in row],
        "final_return": final.return_mean,
        "train_seconds": seconds,
    }
    atomic_write_json(out / "runs" / f"{job['name']}.json", result)
    return result


def random_reference(params_path: str, preset: str, seeds: int, episodes: int) -> dict:
    """Uniform random actions on the evaluation episodes of the runs (seed 10,000 on): the score
    of an agent that learned nothing, one mean per action seed."""
    from pipeline.envs import PIXELS, make_env
    from pipeline.evaluation import Policy, evaluate_policy

    params, _ = load_preset(params_path, preset)
    space = make_env(ENV, params.env[ENV]).action_space
    finals = []
    for seed in range(seeds):
        space.seed(seed)
        policy = Policy(lambda obs, space=space: space.sample(), PIXELS, {})
        finals.append(evaluate_policy(policy, ENV, params.env[ENV], episodes, 10_000).return_mean)
    return {"variant": "random", "final_returns": finals}


def steps_to(evals: list[tuple[int, float]], threshold: float) -> int | None:
    return next((int(s) for s, r in evals if r >= threshold), None)


def table(results: list[dict], threshold: float, reference: dict | None = None) -> str:
    lines = [
        f"{ENV}, {results[0]['steps']:,} agent steps per run; final return: deterministic "
        f"evaluation after training (mean +- std over seeds); steps to {threshold:g}: first "
        "periodic evaluation reaching it (median; '-' if no seed did)",
        "",
        f"{'variant':10}{'seeds':>6}{'final return':>22}{'steps to ' + format(threshold, 'g'):>16}"
        f"{'train s':>10}",
    ]
    means = {}
    for v in VARIANTS:
        rs = [r for r in results if r["variant"] == v]
        if not rs:
            continue
        finals = np.array([r["final_return"] for r in rs])
        means[v] = finals.mean()
        reached = [s for r in rs if (s := steps_to(r["eval"], threshold)) is not None]
        median = f"{int(np.median(reached)):,} ({len(reached)}/{len(rs)})" if reached else "-"
        lines.append(
            f"{v:10}{len(rs):>6}{f'{finals.mean():.1f} +- {finals.std():.1f}':>22}{median:>16}"
            f"{np.mean([r['train_seconds'] for r in rs]):>10.0f}"
        )
    if reference is not None:
        finals = np.array(reference["final_returns"])
        lines.append(
            f"{'random':10}{len(finals):>6}{f'{finals.mean():.1f} +- {finals.std():.1f}':>22}"
            f"{'':>16}{'':>10}   (uniform actions, same evaluation episodes)"
        )
    order = " < ".join(sorted(means, key=means.get))
    lines += ["", f"ours, by mean final return: {order}", f"paper: {PAPER_ORDER}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--preset", default="benchmarks/params/semore_cpu.yaml")
    parser.add_argument("--rollouts", default=f"data/rollouts/{ENV}")
    parser.add_argument("--labels", default=f"data/labels/{ENV}.parquet")
    parser.add_argument("--dataset", default=f"data/datasets/{ENV}")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=100.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--out", type=Path, default=Path("reports/semore_ablation"))
    args = parser.parse_args()

    _, steps = load_preset(args.params, args.preset)  # fail early on a bad preset
    jobs = [
        {
            "name": f"{v}-seed{s}", "variant": v, "seed": s, "params": args.params,
            "preset": args.preset, "rollouts": args.rollouts, "labels": args.labels,
            "dataset": args.dataset, "out": str(args.out), "threads": args.threads,
            "eval_episodes": args.eval_episodes,
        }
        for s in range(args.seeds)
        for v in args.variants
    ]  # fmt: skip
    done: dict[str, dict] = {}
    for job in jobs:
        path = args.out / "runs" / f"{job['name']}.json"
        if path.exists():
            result = json.loads(path.read_text())
            if result["steps"] == steps:
                done[job["name"]] = result
    todo = [j for j in jobs if j["name"] not in done]
    print(f"{len(done)} runs already done, {len(todo)} to run ({steps:,} steps each)", flush=True)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        for result in pool.map(_run_one, todo):
            done[result["name"]] = result
            print(
                f"{result['name']}: final return {result['final_return']:.1f} "
                f"({result['train_seconds']:.0f} s)",
                flush=True,
            )
    reference_path = args.out / "runs" / "random.json"
    if reference_path.exists():
        reference = json.loads(reference_path.read_text())
    else:
        reference = random_reference(args.params, args.preset, args.seeds, args.eval_episodes)
        reference_path.write_text(json.dumps(reference, indent=2) + "\n")
    text = table([done[j["name"]] for j in jobs], args.threshold, reference)
    (args.out / "table.txt").write_text(text + "\n")
    print("\n" + text)


if __name__ == "__main__":
    main()
