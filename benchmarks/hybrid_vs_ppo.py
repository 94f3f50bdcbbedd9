"""Hybrid VLM-PPO's table 2 on our runs (seed 000, sec. 4), MountainCar-v0, state observations for
the policy; the potential reads 84x84 frames (through a table of their potentials by cart
position, pipeline.shaping.tabulated) and the prototype cache built from a label table.

Variants (`--variants`):
  ppo                PPO, native reward (rl-zoo3's tuned settings: params.yaml `ppo`)
  ppo_eq1            PPO + eq. 1 as printed (kinematic reward per step)
  hybrid             eq. 1-2 as printed, the default labels (scripted, reliability 0.8)
  hybrid_kinpot      ours: eq. 1's value as a PBRS potential instead of a per-step reward
  hybrid_kinpot_weak    ours, milestones from the scripted teacher at reliability 0.5
  hybrid_kinpot_random  ours, milestones from the `random` teacher (what do milestones add?)

For every (variant, seed): steps until the mean of the last `--window` training episodes' native
returns first reaches -190 / -160 / -130; then deterministic deployment episodes of the agent
alone (teacher and shaping detached): success, length, and the steps spent right of x = 0.1
in episodes that never reach the flag (the hovering that eq. 1 as printed pays for). Prints the
table with 95 % bootstrap intervals of the medians, writes figures 3 (per seed) and 4
(aggregated), and results.json. Results are saved after each run; a rerun with the same --out
skips finished runs, and `--time-budget` stops starting runs after that many seconds (for
machines whose commands are cut off).

    python -m benchmarks.hybrid_vs_ppo --prepare-only --out reports/hybrid_vs_ppo
    python -m benchmarks.hybrid_vs_ppo --seeds 10 --steps 300000 --workers 16 --out reports/hybrid_vs_ppo
    python -m benchmarks.hybrid_vs_ppo --seeds 10 --workers 16 \
        --variants ppo_cleanrl ppo_no_obs_norm ppo_no_reward_norm   # why the paper's PPO is slow

The table prints steps to each threshold over 10- and 100-episode windows (rl-zoo3 reports
100-episode means).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

ENV = "MountainCar-v0"
THRESHOLDS = (-190.0, -160.0, -130.0)
HOVER_X = 0.1  # right of this, eq. 1 pays >= 1 per step
VARIANTS: dict[str, dict[str, Any]] = {
    "ppo": {"method": "ppo"},
    "ppo_eq1": {"method": "hybrid_ppo", "reward_terms": ["env", "kinematic"]},
    "hybrid": {"method": "hybrid_ppo"},
    "hybrid_kinpot": {"method": "hybrid_ppo", "kinematic": "potential"},
    "hybrid_kinpot_weak": {"method": "hybrid_ppo", "kinematic": "potential", "labels": "weak"},
    "hybrid_kinpot_random": {
        "method": "hybrid_ppo",
        "kinematic": "potential",
        "labels": "random",
    },
}
# Why the paper's baseline is slow (ablations of our PPO, not table 2 rows): CleanRL's
# classic-control defaults (the previous baseline), and rl-zoo3's preset without each normaliser.
CLEANRL = {
    "num_envs": 8, "rollout_steps": 128, "gae_lambda": 0.95, "ent_coef": 0.01,
    "learning_rate": 2.5e-4, "anneal_lr": True, "normalize_obs": False, "normalize_reward": False,
}  # fmt: skip
ABLATIONS: dict[str, dict[str, Any]] = {
    "ppo_cleanrl": {"method": "ppo", "ppo": CLEANRL},
    "ppo_no_obs_norm": {"method": "ppo", "ppo": {"normalize_obs": False}},
    "ppo_no_reward_norm": {"method": "ppo", "ppo": {"normalize_reward": False}},
}
ALL_VARIANTS = {**VARIANTS, **ABLATIONS}
TEACHERS = {  # relabelled frames: the same rollouts, another teacher
    "weak": {"backend": "scripted", "reliability": 0.5, "seed": 0},
    "random": {"backend": "random", "reliability": 1.0, "seed": 0},
}
PAPER = {  # seed 000, table 2 and sec. 4.4
    "ppo": {"-190": 196_717, "-160": 219_679, "-130": 272_448, "reach": 0.6, "success": 0.6},
    "hybrid": {"-190": 158_069, "-160": 158_069, "-130": 200_379, "reach": 1.0, "success": 1.0},
}
TABLE_SPACING = 0.001


def steps_to(curve: list[tuple[int, float]], threshold: float, window: int) -> int | None:
    """First step at which the mean of the last `window` episode returns is >= threshold."""
    rets = [r for _, r in curve]
    for i in range(window - 1, len(curve)):
        if np.mean(rets[i - window + 1 : i + 1]) >= threshold:
            return curve[i][0]
    return None


def labels_path(out: Path, default: Path, which: str | None) -> Path:
    return default if which is None else out / "labels" / f"{which}.parquet"


def prepare(args: argparse.Namespace) -> None:
    """Relabel the rollouts with the other teachers (milestone task only, the same query
    interval) and build every position table once (the workers then need no renderer)."""
    from pipeline.config import LabelConfig, TeacherConfig, TrainRun, load_params
    from pipeline.labelling.label import label_rollouts
    from pipeline.teachers import make_teacher
    from pipeline.training import TrainInputs, ppo_env_factory

    params = load_params(args.params)
    every = params.label.tasks["milestone"]
    for name, teacher in TEACHERS.items():
        path = labels_path(args.out, args.labels, name)
        if not path.exists():
            cfg = LabelConfig(
                teacher=TeacherConfig(**teacher),
                tasks={"milestone": every},
                batch_size=256,
                max_transport_failure_rate=0.0,
            )
            label_rollouts(
                args.rollouts,
                cfg,
                make_teacher(cfg.teacher),
                args.out / "label_cache",
                path,
                progress=False,
            )
    for variant in args.variants:
        spec = ALL_VARIANTS[variant]
        if spec["method"] != "hybrid_ppo":
            continue
        run_params = _params_for(params, spec)
        run = TrainRun(env=ENV, steps=1, seed=0, **_run_fields(spec))
        inputs = TrainInputs(args.rollouts, labels_path(args.out, args.labels, spec.get("labels")))
        ppo_env_factory(run, run_params, inputs, args.out / "tables")  # builds and keeps them
    print(f"prepared {args.out}: labels {sorted(TEACHERS)}, position tables", flush=True)


def _run_fields(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: spec[k] for k in ("method", "reward_terms") if k in spec}


def _params_for(params: Any, spec: dict[str, Any]) -> Any:
    if spec["method"] != "hybrid_ppo":
        ppo = type(params.ppo)(**{**params.ppo.model_dump(), **spec.get("ppo", {})})
        return params.model_copy(update={"ppo": ppo})
    hybrid = params.hybrid_ppo.model_copy(
        update={
            "kinematic": spec.get("kinematic", "reward"),
            "position_table_spacing": TABLE_SPACING,
        }
    )
    return params.model_copy(update={"hybrid_ppo": hybrid})


def deploy(agent: Any, episodes: int, seed: int) -> dict[str, float]:
    """Deterministic episodes of the agent alone on the native env."""
    import gymnasium as gym

    env = gym.make(ENV)
    successes, lengths, hover = [], [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done, steps, right, success = False, 0, 0, False
        while not done:
            obs, _, terminated, truncated, _ = env.step(agent.act(obs, deterministic=True))
            steps += 1
            right += obs[0] > HOVER_X
            done, success = terminated or truncated, bool(terminated)
        successes.append(success)
        lengths.append(steps)
        if not success:
            hover.append(right)
    env.close()
    return {
        "deploy_success": float(np.mean(successes)),
        "deploy_length": float(np.mean(lengths)),
        "hover_steps": float(np.mean(hover)) if hover else 0.0,
    }


def _run_one(job: dict) -> dict:
    import torch

    from pipeline.config import TrainRun, load_params
    from pipeline.training import TrainInputs, train_ppo_run

    torch.set_num_threads(1)  # small MLPs: one thread per run, runs in parallel processes
    spec = ALL_VARIANTS[job["variant"]]
    params = _params_for(load_params(job["params"]), spec)
    run = TrainRun(env=ENV, steps=job["steps"], seed=job["seed"], **_run_fields(spec))
    out = Path(job["out"])
    inputs = TrainInputs(
        Path(job["rollouts"]), labels_path(out, Path(job["labels"]), spec.get("labels"))
    )
    started = time.perf_counter()
    agent, curve, meta = train_ppo_run(
        job["name"], run, params, inputs, progress=False, table_cache=out / "tables"
    )
    seconds = time.perf_counter() - started
    agent.save(out / "agents" / job["name"], meta)
    return {
        **{k: job[k] for k in ("name", "variant", "seed", "steps")},
        "curve": curve,
        "steps_to": {str(int(t)): steps_to(curve, t, job["window"]) for t in THRESHOLDS},
        "train_seconds": seconds,
        "env_steps_per_s": job["steps"] / seconds,
        **deploy(agent, job["eval_episodes"], seed=10_000),
    }


def median_with_ci(
    values: list[int | None], rng: np.random.Generator, resamples: int = 2000
) -> tuple[float, float, float]:
    """Median over seeds (a seed that never reached counts as +inf) and its 95 % percentile
    bootstrap interval over seeds."""
    x = np.array([np.inf if v is None else v for v in values], dtype=np.float64)
    with np.errstate(invalid="ignore"):  # medians of all-infinite resamples
        boot = np.median(rng.choice(x, (resamples, len(x)), replace=True), axis=1)
    return float(np.median(x)), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))


def _fmt_steps(v: float) -> str:
    return "never" if not np.isfinite(v) else f"{v / 1000:.0f}k"


def table(results: list[dict], variants: list[str], window: int) -> str:
    rng = np.random.default_rng(0)
    lines = [
        f"{ENV}, {results[0]['steps']:,} env steps per run. Steps to a threshold: first step where "
        f"the mean native return of the last {window} training episodes reaches it; median over "
        "seeds "
        "[95 % bootstrap interval; 'never' = a seed that did not reach it counts as infinite].",
        "",
    ]
    header = f"{'variant':22}{'seeds':>6}"
    header += "".join(f"{'to ' + str(int(t)):>24}" for t in THRESHOLDS)
    header += f"{'reach -130':>11}{'success':>9}{'length':>8}{'hover':>7}{'steps/s':>9}"
    lines.append(header)
    for v in variants:
        rs = [r for r in results if r["variant"] == v]
        if not rs:
            continue
        row = f"{v:22}{len(rs):>6}"
        for t in THRESHOLDS:
            m, lo, hi = median_with_ci([steps_to(r["curve"], t, window) for r in rs], rng)
            row += f"{_fmt_steps(m) + ' [' + _fmt_steps(lo) + ', ' + _fmt_steps(hi) + ']':>24}"
        reach = np.mean([steps_to(r["curve"], -130.0, window) is not None for r in rs])
        success = np.mean([r["deploy_success"] for r in rs])
        length = np.mean([r["deploy_length"] for r in rs])
        hover = np.mean([r["hover_steps"] for r in rs])
        speed = np.mean([r["env_steps_per_s"] for r in rs])
        row += f"{reach:>11.0%}{success:>9.0%}{length:>8.1f}{hover:>7.1f}{speed:>9.0f}"
        lines.append(row)
    for k, p in PAPER.items():
        row = f"{'paper ' + k:22}{'':>6}"
        row += "".join(f"{p[str(int(t))] / 1000:>23.0f}k" for t in THRESHOLDS)
        row += f"{p['reach']:>11.0%}{p['success']:>9.0%}"
        row += f"{'~125' if k == 'hybrid' else '':>8}"
        lines.append(row)
    lines += [
        "",
        "success / length: deterministic deployment episodes, agent alone; hover: mean steps right "
        f"of x = {HOVER_X} in deployment episodes that never reach the flag; steps/s: env steps "
        "per second of training, one process per run, runs in parallel on the same machine.",
    ]
    return "\n".join(lines)


def plot_aggregate(results: list[dict], variants: list[str], path: Path, steps: int) -> None:
    """Figure 4: mean +- std over seeds of each variant's curve, on a common step grid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0, steps, 200)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    for i, v in enumerate(variants):
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
        ax.fill_between(grid, mean - std, mean + std, color=f"C{i}", alpha=0.15)
    for t in THRESHOLDS:
        ax.axhline(t, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("env steps")
    ax.set_ylabel("native return (mean of 10 episodes)")
    ax.set_title(f"{ENV}: aggregated learning curves (mean +- std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--rollouts", type=Path, default=Path(f"data/rollouts/{ENV}"))
    parser.add_argument("--labels", type=Path, default=Path(f"data/labels/{ENV}.parquet"))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(ALL_VARIANTS))
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--time-budget", type=float, default=None, help="seconds")
    parser.add_argument("--prepare-only", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("reports/hybrid_vs_ppo"))
    args = parser.parse_args()

    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    prepare(args)
    if args.prepare_only:
        return
    from pipeline.evaluation import plot_curves
    from pipeline.io import atomic_write_json

    results_path = args.out / "results.json"
    done = json.loads(results_path.read_text()) if results_path.exists() else {}
    jobs = [
        {
            "name": f"{v}-seed{s}", "variant": v, "seed": s, "steps": args.steps,
            "params": args.params, "rollouts": str(args.rollouts), "labels": str(args.labels),
            "out": str(args.out), "window": args.window, "eval_episodes": args.eval_episodes,
        }
        for s in range(args.seeds)
        for v in args.variants
    ]  # fmt: skip
    todo = [j for j in jobs if done.get(j["name"], {}).get("steps") != args.steps]
    print(f"{len(jobs) - len(todo)} runs already done, {len(todo)} to run", flush=True)
    # spawn, not fork: a forked child inherits torch's thread pool state and can crawl or hang
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        pending, queue = set(), list(todo)
        while queue or pending:
            out_of_time = (
                args.time_budget is not None and time.monotonic() - started > args.time_budget
            )
            while queue and len(pending) < args.workers and not out_of_time:
                pending.add(pool.submit(_run_one, queue.pop(0)))
            if not pending:
                break
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                result = future.result()
                done[result["name"]] = result
                atomic_write_json(results_path, done)
                print(
                    f"{result['name']}: to -130 {result['steps_to']['-130']}, deployment success "
                    f"{result['deploy_success']:.0%}, hover {result['hover_steps']:.1f}, "
                    f"{result['env_steps_per_s']:.0f} steps/s",
                    flush=True,
                )
    missing = [j["name"] for j in jobs if j["name"] not in done]
    if missing:
        print(f"{len(missing)} runs left (time budget): rerun the same command to go on")
        return
    results = [done[j["name"]] for j in jobs]
    for v in args.variants:  # figure 3: one panel per variant, one line per seed
        plot_curves(
            {f"seed {r['seed']}": r["curve"] for r in results if r["variant"] == v},
            f"{ENV}, {v}: per-seed learning curves",
            args.out / f"seeds_{v}.png",
        )
    plot_aggregate(results, args.variants, args.out / "aggregate.png", args.steps)
    text = "\n\n".join(table(results, args.variants, w) for w in sorted({args.window, 100}))
    (args.out / "table.txt").write_text(text + "\n")
    print("\n" + text + f"\n\nfigures, table.txt and results.json in {args.out}")


if __name__ == "__main__":
    main()
