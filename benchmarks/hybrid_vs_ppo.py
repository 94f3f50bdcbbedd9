"""Hybrid VLM-PPO's table 2 on our runs (seed 000, sec. 4): baseline PPO (native reward) vs PPO
with the kinematic reward of eq. 1 only vs the full hybrid (eq. 2) on MountainCar-v0, state
observations for the policy; the hybrid's potential reads 84x84 frames through the prototype cache
built from the default pipeline's label table (scripted teacher).

For every (variant, seed): steps until the moving mean of the last `--window` training episodes'
native returns first reaches -190 / -160 / -130, then a deployment evaluation of the agent alone
(deterministic, teacher and shaping detached). Prints the table (medians over seeds; a seed that
never reaches a threshold counts as not reached), writes per-seed and aggregated learning-curve
PNGs (the paper's figures 3 and 4) and the raw results. Results are saved after each run, and a
rerun with the same --out skips finished runs.

    python -m benchmarks.hybrid_vs_ppo --seeds 5 --steps 300000 --workers 2 --out reports/hybrid_vs_ppo
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from pipeline.config import TrainRun, load_params
from pipeline.evaluation import evaluate_policy, load_policy, plot_curves
from pipeline.io import atomic_write_json
from pipeline.training import TrainInputs, train_ppo_run

ENV = "MountainCar-v0"
THRESHOLDS = (-190.0, -160.0, -130.0)
VARIANTS = {
    "ppo": {"method": "ppo"},
    "kinematic": {"method": "hybrid_ppo", "reward_terms": ["env", "kinematic"]},
    "hybrid": {"method": "hybrid_ppo"},
}
PAPER = {  # seed 000, table 2 and sec. 4.4
    "ppo": {"-190": 196_717, "-160": 219_679, "-130": 272_448, "reach": 0.6, "success": 0.6},
    "hybrid": {"-190": 158_069, "-160": 158_069, "-130": 200_379, "reach": 1.0, "success": 1.0},
}


def steps_to(curve: list[tuple[int, float]], threshold: float, window: int) -> int | None:
    """First step at which the mean of the last `window` episode returns is >= threshold."""
    rets = [r for _, r in curve]
    for i in range(window - 1, len(curve)):
        if np.mean(rets[i - window + 1 : i + 1]) >= threshold:
            return curve[i][0]
    return None


def _run_one(job: dict) -> dict:
    import torch

    torch.set_num_threads(1)  # small MLPs: one thread per run, runs in parallel processes
    params = load_params(job["params"])
    run = TrainRun(env=ENV, steps=job["steps"], seed=job["seed"], **VARIANTS[job["variant"]])
    inputs = TrainInputs(Path(job["rollouts"]), Path(job["labels"]))
    agent, curve, meta = train_ppo_run(job["name"], run, params, inputs, progress=False)
    agent_dir = Path(job["out"]) / "agents" / job["name"]
    agent.save(agent_dir, meta)
    result = evaluate_policy(
        load_policy(agent_dir), ENV, params.env[ENV], job["eval_episodes"], seed=10_000
    )
    return {
        **{k: job[k] for k in ("name", "variant", "seed", "steps")},
        "curve": curve,
        "steps_to": {str(int(t)): steps_to(curve, t, job["window"]) for t in THRESHOLDS},
        "deploy_success": result.success_rate,
        "deploy_length": result.length_mean,
        "deploy_return": result.return_mean,
    }


def _median_steps(values: list[int | None]) -> str:
    reached = [v for v in values if v is not None]
    if not reached:
        return "not reached"
    # a seed that never reached counts as +inf: the median is defined only if most seeds reached
    ordered = sorted(reached) + [None] * (len(values) - len(reached))
    mid = ordered[(len(ordered) - 1) // 2]
    return f"{mid:,}" if mid is not None else "not reached (median)"


def print_table(results: list[dict], window: int) -> None:
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in results)]
    rows = []
    for v in variants:
        rs = [r for r in results if r["variant"] == v]
        row = {"variant": v, "seeds": len(rs)}
        for t in THRESHOLDS:
            row[str(int(t))] = _median_steps([r["steps_to"][str(int(t))] for r in rs])
        row["reach"] = sum(r["steps_to"]["-130"] is not None for r in rs) / len(rs)
        row["success"] = statistics.mean(r["deploy_success"] for r in rs)
        row["length"] = statistics.mean(r["deploy_length"] for r in rs)
        rows.append(row)
    print(
        f"\nMountainCar-v0, {results[0]['steps']:,} steps per run; steps to a threshold = first "
        f"step where the mean native return of the last {window} training episodes reaches it "
        f"(median over seeds)\n"
    )
    header = f"{'':22}" + "".join(f"{r['variant']:>16}" for r in rows)
    header += "".join(f"{'paper ' + k:>16}" for k in PAPER)
    print(header)
    lines = [(f"Steps to reach {t}", str(t)) for t in ("-190", "-160", "-130")]
    for label, key in lines:
        cells = "".join(f"{r[key]:>16}" for r in rows)
        paper = "".join(f"{PAPER[k][key]:>16,}" for k in PAPER)
        print(f"{label:22}{cells}{paper}")
    print(
        f"{'Seeds reaching -130':22}"
        + "".join(f"{r['reach']:>16.0%}" for r in rows)
        + "".join(f"{PAPER[k]['reach']:>16.0%}" for k in PAPER)
    )
    print(
        f"{'Deployment success':22}"
        + "".join(f"{r['success']:>16.0%}" for r in rows)
        + "".join(f"{PAPER[k]['success']:>16.0%}" for k in PAPER)
    )
    print(
        f"{'Deployment ep. length':22}"
        + "".join(f"{r['length']:>16.1f}" for r in rows)
        + f"{'':>16}{'~125':>16}"
    )
    print(f"{'Seeds':22}" + "".join(f"{r['seeds']:>16}" for r in rows))


def plot_aggregate(results: list[dict], path: Path, steps: int) -> None:
    """Figure 4: mean +- std over seeds of each variant's curve, on a common step grid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0, steps, 200)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for i, v in enumerate(VARIANTS):
        curves = [r["curve"] for r in results if r["variant"] == v and r["curve"]]
        if not curves:
            continue
        ys = []
        for c in curves:
            s, ret = np.asarray(c, dtype=np.float64).T
            k = min(10, len(ret))
            smooth = np.convolve(ret, np.ones(k) / k, mode="valid")
            ys.append(np.interp(grid, s[k - 1 :], smooth, left=-200.0))
        ys = np.stack(ys)
        mean, std = ys.mean(0), ys.std(0)
        ax.plot(grid, mean, color=f"C{i}", label=f"{v} ({len(curves)} seeds)")
        ax.fill_between(grid, mean - std, mean + std, color=f"C{i}", alpha=0.2)
    ax.set_xlabel("env steps")
    ax.set_ylabel("native return (mean of 10 episodes)")
    ax.set_title("MountainCar-v0: aggregated learning curves (mean +- std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--rollouts", default=f"data/rollouts/{ENV}")
    parser.add_argument("--labels", default=f"data/labels/{ENV}.parquet")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("reports/hybrid_vs_ppo"))
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    done = json.loads(results_path.read_text()) if results_path.exists() else {}
    jobs = [
        {
            "name": f"{v}-seed{s}",
            "variant": v,
            "seed": s,
            "steps": args.steps,
            "params": args.params,
            "rollouts": args.rollouts,
            "labels": args.labels,
            "out": str(args.out),
            "window": args.window,
            "eval_episodes": args.eval_episodes,
        }
        for s in range(args.seeds)
        for v in args.variants
    ]
    todo = [j for j in jobs if done.get(j["name"], {}).get("steps") != args.steps]
    print(f"{len(jobs) - len(todo)} runs already done, {len(todo)} to run")
    # spawn, not fork: a forked child inherits torch's thread pool state and can crawl or hang
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for result in pool.map(_run_one, todo):
            done[result["name"]] = result
            atomic_write_json(results_path, done)
            print(
                f"{result['name']}: steps to -130 {result['steps_to']['-130']}, deployment "
                f"success {result['deploy_success']:.0%}, length {result['deploy_length']:.1f}",
                flush=True,
            )
    results = [done[j["name"]] for j in jobs]
    for v in args.variants:  # figure 3: one panel per variant, one line per seed
        plot_curves(
            {f"seed {r['seed']}": r["curve"] for r in results if r["variant"] == v},
            f"MountainCar-v0, {v}: per-seed learning curves",
            args.out / f"seeds_{v}.png",
        )
    plot_aggregate(results, args.out / "aggregate.png", args.steps)
    print_table(results, args.window)
    print(f"\nfigures and results.json in {args.out}")


if __name__ == "__main__":
    main()
