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

Every (env, method, seed) cell trains with pipeline.training.train_run in a spawned
single-thread worker (benchmarks.sweep.run_cells) and is evaluated as deployed (load_agent +
deployed: deterministic, teacher detached) on `--eval-episodes` episodes from seed 10,000. Each
cell's result goes to `<out>/cells/<cell>.json` when its run ends and a rerun skips the cells that
have one; `<out>/results.json` gathers them. `--cell NAME` reruns one cell (`--list-cells` names
them). Prints one table (final eval return mean +- std over seeds, steps to the THRESHOLDS below,
MCC deployment success) and writes aggregated learning curves and ERPv's Q_f / alpha per env (PNG).

    python -m benchmarks.erpv_vs_sac --steps 10000 --seeds 3 --workers 2 --out reports/erpv_vs_sac
    python -m benchmarks.erpv_vs_sac --steps 10000 --seeds 3 --out reports/erpv_vs_sac \\
        --cell cartpole-swingup-erpv-constant-seed1
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.sweep import (
    Cell,
    Trained,
    add_sweep_arguments,
    prepare_data,
    run_cells,
    steps_to,
)
from pipeline.config import Params, load_params
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


def steps_to(curve: list[tuple[int, float]], threshold: float, window: int) -> int | None:
    """First step at which the mean of the last `window` episode returns is >= threshold."""
    rets = [r for _, r in curve]
    for i in range(window - 1, len(curve)):
        if np.mean(rets[i - window + 1 : i + 1]) >= threshold:
            return int(curve[i][0])
    return None


def median_steps(values: list[int | None]) -> int | None:
    """Median over seeds with "not reached" counted as +inf (None when the median is not
    reached, i.e. when fewer than half of the seeds reached)."""
    if not values:
        return None
    ordered = sorted(v for v in values if v is not None) + [None] * values.count(None)
    return ordered[(len(ordered) - 1) // 2]


def with_start_steps(params: Params, start_steps: int | None) -> Params:
    """params with `sac.start_steps` and `erpv.start_steps` replaced (None: unchanged)."""
    if start_steps is None:
        return params
    update = {}
    for section in ("sac", "erpv"):
        hp = getattr(params, section)
        if hp is not None:
            update[section] = hp.model_copy(update={"start_steps": start_steps})
    return params.model_copy(update=update)


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


# ---- data prep (main process) ------------------------------------------------------------------


def _dataset_rollouts_sha(dataset: Path) -> str | None:
    return read_info(dataset).get("sources", {}).get("rollout_manifest_sha256")


def prepare_env(env_id: str, params: Params, args: argparse.Namespace) -> dict[str, Any]:
    """The datasets and C_V of both teachers for `env_id` under <out>/work/<env>/; cached."""
    from pipeline.curves import write_training_log
    from pipeline.training import pretrain_critic

    work = args.out / "work" / env_id
    prep_path = work / "prep.json"
    if prep_path.exists():
        prep = json.loads(prep_path.read_text())
        print(f"{env_id}: data prep found in {work} (delete it to redo)")
        return prep
    rollouts = Path(args.data) / "rollouts" / env_id
    labels = Path(args.data) / "labels" / f"{env_id}.parquet"
    default_dataset = Path(args.data) / "datasets" / env_id
    rollouts_sha = sha256_file(rollouts / MANIFEST_NAME)
    if _dataset_rollouts_sha(default_dataset) != rollouts_sha:
        raise SystemExit(
            f"{default_dataset} was not built from the current {rollouts}: run `dvc repro "
            f"dataset@{env_id}` first (both teachers must label the same rollouts)"
        )
    t0 = time.perf_counter()
    prep: dict[str, Any] = {"env": env_id, "rollouts": str(rollouts), "labels": str(labels)}

    # scripted: a snapshot of the default dataset (data/ may be rebuilt while runs read it)
    scripted = work / "scripted"
    if scripted.exists():
        shutil.rmtree(scripted)  # a half-done prep
    shutil.copytree(default_dataset, scripted / "dataset")
    prep["scripted"] = {"dataset": str(scripted / "dataset"), "critics": str(scripted / "critics")}

    # constant: ERPv's Worst Model labels the same rollouts -> masks -> dataset
    constant = work / "constant"
    if constant.exists():
        shutil.rmtree(constant)
    constant.mkdir(parents=True)
    label_stats = _constant_dataset(env_id, params, rollouts, constant)
    prep["constant"] = {
        "dataset": str(constant / "dataset"),
        "critics": str(constant / "critics"),
        "labels": label_stats,
    }

    for teacher in ("scripted", "constant"):
        logs = pretrain_critic(
            env_id,
            params,
            Path(prep[teacher]["dataset"]),
            Path(prep[teacher]["critics"]) / env_id,
            progress=False,
        )
        write_training_log(
            work / teacher / "critic_live", work / teacher / "critic.json", rows=logs
        )
        prep[teacher]["critic_last_log"] = logs[-1] if logs else {}
        print(f"{env_id}: C_V ({teacher} labels) pre-trained; last log row {logs[-1]}")
    prep["rollout_manifest_sha256"] = rollouts_sha
    prep["prep_s"] = round(time.perf_counter() - t0, 1)
    atomic_write_json(prep_path, prep)
    print(f"{env_id}: data prep done in {prep['prep_s']:.0f} s -> {work}")
    return prep


def _constant_dataset(env_id: str, params: Params, rollouts: Path, work: Path) -> dict[str, Any]:
    """Label `rollouts` with the constant teacher, compute masks, build the dataset in `work`."""
    from pipeline.dataset.build import build_dataset
    from pipeline.labelling.label import label_rollouts
    from pipeline.masks import make_mask_backend
    from pipeline.masks.compute import compute_masks
    from pipeline.teachers import make_teacher

    if params.label is None or params.masks is None or params.dataset is None:
        raise SystemExit("params.yaml needs `label`, `masks` and `dataset` sections")
    label_cfg = params.label.model_copy(
        update={"teacher": params.label.teacher.model_copy(update={"backend": "constant"})}
    )
    summary = label_rollouts(
        rollouts,
        label_cfg,
        make_teacher(label_cfg.teacher),
        work / "label_cache",
        work / "labels.parquet",
        progress=False,
    )
    # the constant teacher names no objects: no masks; computed anyway so that the dataset's
    # masks belong to its own labels, as the masks stage would make them
    masks = compute_masks(
        rollouts,
        work / "labels.parquet",
        make_mask_backend(params.masks),
        work / "mask_cache",
        work / "masks.parquet",
        batch_size=params.masks.batch_size,
        progress=False,
    )
    build_dataset(
        rollouts,
        work / "labels.parquet",
        work / "masks.parquet",
        work / "dataset",
        shard_max_samples=params.dataset.shard_max_samples,
    )
    stats = {
        "rows": summary.rows,
        "teacher_calls": summary.teacher_calls,
        "statuses": dict(summary.statuses),
        "frames_with_masks": masks.statuses["ok"],
    }
    print(f"{env_id}: constant-teacher labels {stats}")
    return stats


# ---- one run (spawned worker) ------------------------------------------------------------------


def _run_one(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    from pipeline.evaluation import evaluate_policy, load_policy
    from pipeline.training import TrainInputs, train_sac_run

    torch.set_num_threads(1)  # small MLPs: one thread per run, runs in parallel processes
    params = with_start_steps(load_params(job["params"]), job["start_steps"])
    method, teacher = METHODS[job["method"]]
    env_id = job["env"]
    run = TrainRun(env=env_id, method=method, steps=job["steps"], seed=job["seed"])
    inputs = TrainInputs(
        Path(job["rollouts"]),
        Path(job["labels"]),
        dataset=Path(job["dataset"]),
        critics=Path(job["critics"]) if teacher is not None else None,
    )
    t0 = time.perf_counter()
    agent, curve, logs, meta = train_sac_run(job["name"], run, params, inputs, progress=False)
    train_s = time.perf_counter() - t0
    agent_dir = Path(job["out"]) / "agents" / job["name"]
    agent.save(agent_dir, {**meta, "benchmark_method": job["method"], "teacher": teacher})
    t1 = time.perf_counter()
    result = evaluate_policy(
        load_policy(agent_dir), env_id, params.env[env_id], job["eval_episodes"], seed=EVAL_SEED
    )
    hp = params.sac if method == "sac" else params.erpv
    assert hp is not None
    updates = max(0, job["steps"] - hp.start_steps + 1)
    return {
        **{k: job[k] for k in ("name", "env", "method", "seed", "steps", "eval_episodes")},
        "start_steps": hp.start_steps,
        "curve": curve,
        "logs": logs,
        "steps_to": {str(t): steps_to(curve, t, job["window"]) for t in THRESHOLDS.get(env_id, ())},
        "window": job["window"],
        "eval_return_mean": result.return_mean,
        "eval_return_std": result.return_std,
        "eval_returns": result.returns,
        "eval_length_mean": result.length_mean,
        "success_rate": result.success_rate,
        "train_s": train_s,
        "eval_s": time.perf_counter() - t1,
        "updates": updates,
        "updates_per_s": updates / train_s if train_s > 0 else None,
        "env_steps_per_s": job["steps"] / train_s if train_s > 0 else None,
    }


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
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("reports/erpv_vs_sac"))
    args = parser.parse_args(argv)
    command = "python -m benchmarks.erpv_vs_sac " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    import torch

    torch.set_num_threads(1)  # the CPU is shared with the workers
    params = with_start_steps(load_params(args.params), args.start_steps)
    args.out.mkdir(parents=True, exist_ok=True)
    preps = {env_id: prepare_env(env_id, params, args) for env_id in args.envs}

    results_path = args.out / "results.json"
    done = json.loads(results_path.read_text()) if results_path.exists() else {}
    jobs = []
    for s in range(args.seeds):
        for env_id in args.envs:
            for m in args.methods:
                teacher = METHODS[m][1] or "scripted"  # sac: the dataset is not read (online)
                jobs.append(
                    {
                        "name": f"{env_id}-{m}-seed{s}",
                        "env": env_id,
                        "method": m,
                        "seed": s,
                        "steps": args.steps,
                        "start_steps": args.start_steps,
                        "params": args.params,
                        "rollouts": preps[env_id]["rollouts"],
                        "labels": preps[env_id]["labels"],
                        "dataset": preps[env_id][teacher]["dataset"],
                        "critics": preps[env_id][teacher]["critics"],
                        "out": str(args.out),
                        "window": args.window,
                        "eval_episodes": args.eval_episodes,
                    }
                )

    def finished(job: dict[str, Any]) -> bool:
        r = done.get(job["name"], {})
        hp = params.sac if METHODS[job["method"]][0] == "sac" else params.erpv
        assert hp is not None
        return (
            r.get("steps") == job["steps"]
            and r.get("start_steps") == hp.start_steps
            and r.get("eval_episodes") == job["eval_episodes"]
            and r.get("window") == job["window"]
        )

    todo = [j for j in jobs if not finished(j)]
    print(f"{len(jobs) - len(todo)} runs already done, {len(todo)} to run", flush=True)
    failures = 0
    t0 = time.perf_counter()
    # spawn, not fork: a forked child inherits torch's thread pool state and can crawl or hang
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_run_one, j): j for j in todo}
        for future in as_completed(futures):
            job = futures[future]
            try:
                result = future.result()
            except Exception as exc:  # report and go on: the other runs are still worth having
                failures += 1
                print(f"{job['name']}: FAILED: {type(exc).__name__}: {exc}", flush=True)
                continue
            done[result["name"]] = result
            atomic_write_json(results_path, done)
            reached = ", ".join(
                f">={t}: {v if v is not None else 'not reached'}"
                for t, v in result["steps_to"].items()
            )
            print(
                f"{result['name']}: eval return {result['eval_return_mean']:.1f}, steps to {reached}"
                + (
                    f", success {result['success_rate']:.0%}"
                    if result["success_rate"] is not None
                    else ""
                )
                + f"; {result['train_s']:.0f} s, {result['updates_per_s']:.1f} updates/s "
                f"[{time.perf_counter() - t0:.0f} s elapsed]",
                flush=True,
            )

    results = [done[j["name"]] for j in jobs if j["name"] in done and finished(j)]
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
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
