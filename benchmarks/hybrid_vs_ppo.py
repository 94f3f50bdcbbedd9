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

The default labels are the pipeline's `data/labels/MountainCar-v0.parquet`; the other teachers
relabel the same rollouts (milestone task only, the same query interval) with the label stage's
function into `<out>/work/` (benchmarks.sweep.prepare_data), once. Every (variant, seed) cell
trains with pipeline.training.train_run (benchmarks.sweep.run_cells); steps until the mean of the
last `--window` training episodes' native returns first reaches -190 / -160 / -130; then
deterministic deployment episodes of the agent alone (load_agent + deployed + play_episodes:
teacher and shaping detached): success, length, and the steps spent right of x = 0.1 in episodes
that never reach the flag (the hovering that eq. 1 as printed pays for). Prints the table with
95 % bootstrap intervals of the medians, writes figures 3 (per seed) and 4 (aggregated), and
results.json. Each cell's result is saved to `<out>/cells/<cell>.json` when its run ends; a rerun
with the same --out skips finished cells, `--cell NAME` reruns one from scratch, `--only NAME` runs
it alone and resumes a killed run (`--list-cells` names them), and `--time-budget` stops starting
runs after that many seconds (for machines whose commands are cut off).

    python -m benchmarks.hybrid_vs_ppo --prepare-only --out reports/hybrid_vs_ppo
    python -m benchmarks.hybrid_vs_ppo --seeds 10 --steps 300000 --workers 16 --out reports/hybrid_vs_ppo
    python -m benchmarks.hybrid_vs_ppo --seeds 10 --workers 16 \\
        --variants ppo_cleanrl ppo_no_obs_norm ppo_no_reward_norm   # why the paper's PPO is slow
    python -m benchmarks.hybrid_vs_ppo --seeds 10 --steps 300000 --out reports/hybrid_vs_ppo \\
        --cell hybrid_kinpot-seed3   # rerun one cell

The table prints steps to each threshold over 10- and 100-episode windows (rl-zoo3 reports
100-episode means).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from benchmarks.sweep import Cell, Trained, add_sweep_arguments, prepare_data, run_cells
from pipeline.curves import steps_to

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
DEPLOY_SEED = 10_000


def table_cells(args: argparse.Namespace) -> list[Cell]:
    """One cell per (seed, variant): the run's method and reward terms, the variant's section
    overrides, and which teacher's labels it reads."""
    cells = []
    for s in range(args.seeds):
        for v in args.variants:
            spec = ALL_VARIANTS[v]
            run = {"env": ENV, "steps": args.steps, "seed": s}
            run |= {k: spec[k] for k in ("method", "reward_terms") if k in spec}
            if spec["method"] == "hybrid_ppo":
                overrides = {
                    "hybrid_ppo": {
                        "kinematic": spec.get("kinematic", "reward"),
                        "position_table_spacing": TABLE_SPACING,
                    }
                }
            else:
                overrides = {"ppo": spec.get("ppo", {})}
            info = {"variant": v, "eval_episodes": args.eval_episodes}
            cells.append(Cell(f"{v}-seed{s}", run, overrides, spec.get("labels"), info))
    return cells


def prepare(params: Any, args: argparse.Namespace, teacher: str | None):
    """The default label table (None), or the rollouts relabelled by TEACHERS[teacher]."""
    from pipeline.config import LabelConfig, TeacherConfig

    label = None
    if teacher is not None:
        label = LabelConfig(
            teacher=TeacherConfig(**TEACHERS[teacher]),
            tasks={"milestone": params.label.tasks["milestone"]},
            batch_size=256,
            max_transport_failure_rate=0.0,
        )
    return prepare_data(ENV, params, args.data, args.out / "work", label, dataset=False)


class HoverCount(gym.Wrapper):
    """Per episode: the steps whose new state is right of HOVER_X, and whether it terminated
    (reached the flag)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.right: list[int] = []
        self.reached: list[bool] = []

    def reset(self, **kwargs: Any) -> Any:
        self.right.append(0)
        self.reached.append(False)
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.right[-1] += int(obs["state"][0] > HOVER_X)
        self.reached[-1] = bool(terminated)
        return obs, reward, terminated, truncated, info


def finish(cell: Cell, params: Any, agent_dir: Path, trained: Trained) -> dict[str, Any]:
    """Deterministic deployment episodes of the agent alone on the native reward."""
    from pipeline.envs import make_env
    from pipeline.evaluation import deployed, play_episodes
    from pipeline.methods.table import load_agent

    env = HoverCount(make_env(ENV, params.env[ENV], pixels=False))
    try:
        result = play_episodes(
            env,
            deployed(load_agent(agent_dir)),
            cell.info["eval_episodes"],
            DEPLOY_SEED,
            success_defined=True,
        )
    finally:
        env.close()
    hover = [right for right, reached in zip(env.right, env.reached, strict=True) if not reached]
    return {
        "name": cell.name,
        "variant": cell.info["variant"],
        "seed": cell.run["seed"],
        "steps": cell.run["steps"],
        "curve": trained.curve,
        "train_seconds": trained.seconds,
        "resumed_from": trained.resumed_from,
        "env_steps_per_s": trained.steps_timed(cell.run["steps"]) / trained.seconds,
        "deploy_success": result.success_rate,
        "deploy_length": result.length_mean,
        "hover_steps": float(np.mean(hover)) if hover else 0.0,
    }


def with_steps_to(result: dict[str, Any], window: int) -> dict[str, Any]:
    return {
        **result,
        "steps_to": {str(int(t)): steps_to(result["curve"], t, window) for t in THRESHOLDS},
    }


def describe(result: dict[str, Any], window: int) -> str:
    return (
        f"to -130 {with_steps_to(result, window)['steps_to']['-130']}, deployment success "
        f"{result['deploy_success']:.0%}, hover {result['hover_steps']:.1f}, "
        f"{result['env_steps_per_s']:.0f} steps/s"
    )


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data", help="root of rollouts/ and labels/")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(ALL_VARIANTS))
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--prepare-only", action="store_true", help="relabel, train nothing")
    parser.add_argument("--out", type=Path, default=Path("reports/hybrid_vs_ppo"))
    add_sweep_arguments(parser, workers=1)
    args = parser.parse_args(argv)

    from pipeline.config import load_params
    from pipeline.curves import plot_curves
    from pipeline.io import atomic_write_json

    params = load_params(args.params)
    args.out.mkdir(parents=True, exist_ok=True)
    cells = table_cells(args)
    if args.prepare_only:  # the labels of every teacher
        for cell in {c.name.rsplit("-seed", 1)[0]: c for c in cells}.values():
            prepare(params, args, cell.data)
        print(f"prepared {args.out}: labels {sorted(TEACHERS)}", flush=True)
        return 0
    sweep = run_cells(
        cells,
        args,
        params=args.params,
        out=args.out,
        prepare=lambda teacher: prepare(params, args, teacher),
        finish=finish,
        describe=lambda r: describe(r, args.window),
    )
    if sweep is None:  # --list-cells
        return 0
    results = [with_steps_to(r, args.window) for r in sweep.ordered(cells)]
    atomic_write_json(args.out / "results.json", {r["name"]: r for r in results})
    if sweep.missing:
        return 1
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
    return 1 if sweep.failures else 0


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
