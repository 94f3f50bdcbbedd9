"""ERPv vs SAC (ERPv sec. 4, tables 1-4 in spirit; issue 4's bar) on state observations:
cartpole-swingup and MountainCarContinuous-v0, the default `sac` / `erpv` sections of params.yaml
(state obs, 256-unit heads), several seeds, three methods:

- `sac`: the `sac` section, online only (offline_fraction 0, as the paper's SAC);
- `erpv-scripted`: ERPv, C_V pre-trained on the default label table (the scripted teacher, the
  offline stand-in for a VLM) and half of each batch from that labelled dataset;
- `erpv-constant`: ERPv with ERPv table 4's Worst Model (`constant` teacher: every output 0)
  labelling THE SAME rollouts; its own label table, dataset and C_V. The paper's claim (4.4,
  table 4): even then ERPv stays "comparable to base RL".

Data (benchmarks.sweep.prepare_data, in the main process, under `<out>/work/<env>/`, each part
built once): the scripted cells read the pipeline's own `data/datasets/<env>` (checked to be built
from the current `data/rollouts/<env>`); the constant teacher's labels of those rollouts, their
masks and dataset are made by the label, masks and dataset stages' functions; one C_V per dataset
by pretrain_critic. Nothing under models/ is read.

Every (env, method, seed) cell trains with pipeline.training.train_run in a spawned single-thread
worker (benchmarks.sweep.run_cells) and is evaluated as deployed (load_agent + deployed:
deterministic, teacher detached) on `--eval-episodes` episodes from seed 10,000. Each cell's result
goes to `<out>/cells/<cell>.json` when its run ends and a rerun skips the cells that have one;
`<out>/results.json` gathers them. `--cell NAME` reruns one cell from scratch, `--only NAME` runs it
alone and resumes a killed run (`--list-cells` names them). Prints one table (final eval return mean
+- std over seeds, steps to the THRESHOLDS below, MCC deployment success) and writes aggregated
learning curves and ERPv's Q_f / alpha per env (PNG).

    python -m benchmarks.erpv_vs_sac --steps 10000 --seeds 3 --workers 2 --out reports/erpv_vs_sac
    python -m benchmarks.erpv_vs_sac --steps 10000 --seeds 3 --out reports/erpv_vs_sac \\
        --cell cartpole-swingup-erpv-constant-seed1
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.sweep import Cell, Trained, add_sweep_arguments, prepare_data, run_cells
from pipeline.config import Params, load_params
from pipeline.curves import median_steps, steps_to
from pipeline.io import atomic_write_bytes, atomic_write_json

ENVS = ("cartpole-swingup", "MountainCarContinuous-v0")
# method -> (train method, teacher whose labels ERPv reads; None: SAC reads no labels)
METHODS: dict[str, tuple[str, str | None]] = {
    "sac": ("sac", None),
    "erpv-scripted": ("erpv", "scripted"),
    "erpv-constant": ("erpv", "constant"),
}
# Native-return thresholds of "steps to T" (moving mean of the last `--window` training episodes).
# cartpole-swingup (1,000 env steps, reward in [0, 1] per env step, so at most 1,000): 200 is above
#   every RAE episode of the default dataset (67-194: random explorer + scripted teacher) and is
#   about what a policy that swings the pole round and round collects; 700 needs the pole swung up
#   and balanced for most of the episode (state SAC's plateau is about 800-850).
# MountainCarContinuous-v0 (+100 at the flag minus 0.1 * sum a^2 per step): 0 is the bar of the
#   issue: a mean of 5 episodes >= 0 needs flag reaches that outweigh the action costs (doing
#   nothing scores just below 0: never reached); 90 is gym's `reward_threshold` ("solved").
THRESHOLDS: dict[str, tuple[float, ...]] = {
    "cartpole-swingup": (200.0, 700.0),
    "MountainCarContinuous-v0": (0.0, 90.0),
}
EVAL_SEED = 10_000
GATE_KEYS = ("vpg/q_f", "vpg/gate_open", "alpha")  # ERPv fig. 5: Q_f and the entropy coefficient


# ---- pure helpers ------------------------------------------------------------------------------


def smoothed_on_grid(curve: list[tuple[int, float]], grid: np.ndarray, window: int) -> np.ndarray:
    """Moving mean of `window` episode returns, interpolated on `grid` (NaN before the first
    full window, held after the last episode)."""
    if len(curve) < window:
        return np.full(grid.shape, np.nan)
    steps, rets = np.asarray(curve, dtype=np.float64).T
    smooth = np.convolve(rets, np.ones(window) / window, mode="valid")
    return np.interp(grid, steps[window - 1 :], smooth, left=np.nan)


def nan_mean_std(ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column-wise mean and std over the non-NaN entries (NaN where a column has none)."""
    valid = ~np.isnan(ys)
    n = valid.sum(0)
    filled = np.where(valid, ys, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = filled.sum(0) / n
        var = (np.where(valid, ys - mean, 0.0) ** 2).sum(0) / n
    return mean, np.sqrt(var)


# ---- the table's cells ---------------------------------------------------------------------------


def table_cells(args: argparse.Namespace) -> list[Cell]:
    """One cell per (seed, env, method); `--start-steps` replaces sac's and erpv's start_steps."""
    overrides = {}
    if args.start_steps is not None:
        overrides = {s: {"start_steps": args.start_steps} for s in ("sac", "erpv")}
    return [
        Cell(
            name=f"{env_id}-{m}-seed{s}",
            run={"env": env_id, "method": METHODS[m][0], "steps": args.steps, "seed": s},
            overrides=overrides,
            # sac reads no labels (online only): its inputs are the scripted ones, unread
            data=f"{env_id}:{METHODS[m][1] or 'scripted'}",
            info={"env": env_id, "method": m, "eval_episodes": args.eval_episodes},
        )
        for s in range(args.seeds)
        for env_id in args.envs
        for m in args.methods
    ]


def prepare(params: Params, args: argparse.Namespace, key: str):
    """The inputs of `<env>:<teacher>`: the pipeline's own dataset (scripted) or the constant
    teacher's relabelling of the same rollouts, and the C_V of that dataset."""
    env_id, teacher = key.split(":")
    label = None
    if teacher == "constant":
        assert params.label is not None, "params.yaml needs a `label` section"
        label = params.label.for_env(env_id)
        label = label.model_copy(
            update={"teacher": label.teacher.model_copy(update={"backend": "constant"})}
        )
    return prepare_data(env_id, params, args.data, args.out / "work", label, critic=True)


def finish(cell: Cell, params: Params, agent_dir: Path, trained: Trained) -> dict[str, Any]:
    """The deployed agent (load_agent + deployed) on the eval episodes; the result's columns."""
    from pipeline.evaluation import deployed, evaluate_policy
    from pipeline.methods.table import get_method, load_agent

    episodes = cell.info["eval_episodes"]
    started = time.perf_counter()
    policy = deployed(load_agent(agent_dir))
    result = evaluate_policy(policy, cell.env, params.env[cell.env], episodes, seed=EVAL_SEED)
    eval_s = time.perf_counter() - started
    start_steps = get_method(cell.method).params(params).start_steps
    steps, train_s = cell.run["steps"], trained.seconds
    updates = max(0, steps - start_steps + 1)
    timed, timed_updates = trained.steps_timed(steps), trained.updates_timed(steps, start_steps)
    return {
        "name": cell.name,
        **cell.info,
        "seed": cell.run["seed"],
        "steps": steps,
        "start_steps": start_steps,
        "curve": trained.curve,
        "logs": trained.logs,
        "eval_return_mean": result.return_mean,
        "eval_return_std": result.return_std,
        "eval_returns": result.returns,
        "eval_length_mean": result.length_mean,
        "success_rate": result.success_rate,
        "train_s": train_s,
        "resumed_from": trained.resumed_from,
        "eval_s": eval_s,
        "updates": updates,
        "updates_per_s": timed_updates / train_s if train_s > 0 else None,
        "env_steps_per_s": timed / train_s if train_s > 0 else None,
    }


def with_steps_to(result: dict[str, Any], window: int) -> dict[str, Any]:
    """The result with its steps to each threshold over a `window`-episode moving mean."""
    thresholds = THRESHOLDS.get(result["env"], ())
    reached = {str(t): steps_to(result["curve"], t, window) for t in thresholds}
    return {**result, "steps_to": reached, "window": window}


def describe(result: dict[str, Any], window: int) -> str:
    reached = ", ".join(
        f">={t}: {v if v is not None else 'not reached'}"
        for t, v in with_steps_to(result, window)["steps_to"].items()
    )
    success = result["success_rate"]
    return (
        f"eval return {result['eval_return_mean']:.1f}, steps to {reached}"
        + (f", success {success:.0%}" if success is not None else "")
        + f"; {result['train_s']:.0f} s, {result['updates_per_s']:.1f} updates/s"
    )


# ---- report ------------------------------------------------------------------------------------


def _fmt_steps(values: list[int | None]) -> str:
    med = median_steps(values)
    reached = sum(v is not None for v in values)
    return f"{'not reached' if med is None else f'{med:,}'} [{reached}/{len(values)}]"


def format_table(results: list[dict[str, Any]], envs: list[str], methods: list[str]) -> str:
    """One table: per env and method, eval return over seeds, steps to the thresholds, MCC
    deployment success."""
    n_thr = max((len(THRESHOLDS.get(e, ())) for e in envs), default=0)
    head = (
        f"{'env':26}{'method':16}{'seeds':>6}  {'final eval return':>20}"
        + "".join(f"  {f'steps to T{i + 1} [reached]':>28}" for i in range(n_thr))
        + f"  {'deploy success':>15}  {'updates/s':>9}"
    )
    lines = [head, "-" * len(head)]
    for env_id in envs:
        thr = THRESHOLDS.get(env_id, ())
        for m in methods:
            rs = [r for r in results if r["env"] == env_id and r["method"] == m]
            if not rs:
                continue
            means = [r["eval_return_mean"] for r in rs]
            ret = f"{np.mean(means):.1f} +- {np.std(means):.1f}"
            cells = [f"{t:g}: " + _fmt_steps([r["steps_to"][str(t)] for r in rs]) for t in thr]
            cells += [""] * (n_thr - len(cells))
            succ = [r["success_rate"] for r in rs if r["success_rate"] is not None]
            success = f"{np.mean(succ):.0%}" if succ else "-"
            ups = [r["updates_per_s"] for r in rs if r.get("updates_per_s")]
            lines.append(
                f"{env_id:26}{m:16}{len(rs):>6}  {ret:>20}"
                + "".join(f"  {c:>28}" for c in cells)
                + f"  {success:>15}  {np.mean(ups) if ups else float('nan'):>9.1f}"
            )
    return "\n".join(lines)


def _save_fig(fig: Any, path: Path) -> None:
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def plot_env(results: list[dict[str, Any]], env_id: str, methods: list[str], out: Path) -> None:
    """<out>/curves_<env>.png (mean +- std over seeds of the smoothed training return) and
    <out>/gate_<env>.png (Q_f, gate opening and alpha over training, from the metric rows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs_env = [r for r in results if r["env"] == env_id]
    if not rs_env:
        return
    steps = max(r["steps"] for r in rs_env)
    window = rs_env[0]["window"]
    grid = np.linspace(0, steps, 200)
    colour = {m: f"C{i}" for i, m in enumerate(METHODS)}

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for m in methods:
        rs = [r for r in rs_env if r["method"] == m]
        if not rs:
            continue
        mean, std = nan_mean_std(np.stack([smoothed_on_grid(r["curve"], grid, window) for r in rs]))
        ax.plot(grid, mean, color=colour[m], label=f"{m} ({len(rs)} seeds)")
        ax.fill_between(grid, mean - std, mean + std, color=colour[m], alpha=0.2)
    for t in THRESHOLDS.get(env_id, ()):
        ax.axhline(t, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlim(0, steps)
    ax.set_xlabel("agent steps")
    ax.set_ylabel(f"native return (mean of last {window} episodes)")
    ax.set_title(f"{env_id}: training return, mean +- std over seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save_fig(fig, out / f"curves_{env_id}.png")

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), dpi=120)
    for ax, key in zip(axes, GATE_KEYS, strict=True):
        for m in methods:
            series = []
            for r in rs_env:
                if r["method"] != m:
                    continue
                pts = [(row["step"], row[key]) for row in r["logs"] if key in row]
                if pts:
                    s, v = np.asarray(pts, dtype=np.float64).T
                    series.append(np.interp(grid, s, v, left=np.nan, right=np.nan))
            if not series:
                continue
            mean, std = nan_mean_std(np.stack(series))
            ax.plot(grid, mean, color=colour[m], label=f"{m} ({len(series)})")
            ax.fill_between(grid, mean - std, mean + std, color=colour[m], alpha=0.2)
        ax.set_xlim(0, steps)
        ax.set_xlabel("agent steps")
        ax.set_title(
            {"vpg/q_f": "Q_f (eq. 3 gate, mean)", "vpg/gate_open": "share of Q_f > 0"}.get(key, key)
        )
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(f"{env_id}: ERPv's VPG gate and the entropy coefficient (fig. 5)")
    _save_fig(fig, out / f"gate_{env_id}.png")


# ---- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data", help="root of rollouts/, labels/, datasets/")
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10_000, help="agent steps per run")
    parser.add_argument(
        "--start-steps", type=int, default=None, help="override sac/erpv start_steps"
    )
    parser.add_argument("--window", type=int, default=5, help="episodes of the moving mean")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("reports/erpv_vs_sac"))
    add_sweep_arguments(parser, workers=2)
    args = parser.parse_args(argv)
    command = "python -m benchmarks.erpv_vs_sac " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    import torch

    torch.set_num_threads(1)  # the CPU is shared with the workers
    params = load_params(args.params)
    args.out.mkdir(parents=True, exist_ok=True)
    cells = table_cells(args)
    sweep = run_cells(
        cells,
        args,
        params=args.params,
        out=args.out,
        prepare=lambda key: prepare(params, args, key),
        finish=finish,
        describe=lambda r: describe(r, args.window),
    )
    if sweep is None:  # --list-cells
        return 0
    results = [with_steps_to(r, args.window) for r in sweep.ordered(cells)]
    atomic_write_json(args.out / "results.json", {r["name"]: r for r in results})
    if not results:
        print("no finished runs")
        return 1
    for env_id in args.envs:
        plot_env(results, env_id, args.methods, args.out)
    start = {r["method"]: r["start_steps"] for r in results}
    header = (
        f"ERPv vs SAC, state observations, {args.steps:,} agent steps per run (start_steps "
        f"{start}), deployment eval: {args.eval_episodes} deterministic episodes from seed "
        f"{EVAL_SEED:,}.\nfinal eval return: mean +- std over seeds of each seed's eval mean. "
        f"Steps to T: first agent step where the mean native return of the last {args.window} "
        f"training episodes >= T; median over seeds (a seed that never reached counts as never), "
        f"[seeds that reached]. Thresholds: "
        + "; ".join(f"{e}: {', '.join(f'{t:g}' for t in THRESHOLDS[e])}" for e in args.envs)
        + ".\ndeploy success: share of eval episodes that reach the flag (MountainCar only)."
    )
    table = format_table(results, args.envs, args.methods)
    text = f"{header}\n\n{table}\n\ncommand: {command}\n"
    atomic_write_bytes(args.out / "table.txt", text.encode())
    print("\n" + text)
    print(f"figures, table.txt and results.json in {args.out}")
    return 1 if sweep.failures else 0


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
