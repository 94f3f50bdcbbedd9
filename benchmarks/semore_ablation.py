"""Semore table 2 on our runs: pixel SAC (same encoder) vs the ablations M1-M4 on CarRacing-v3,
trained by the pipeline's own `train` code (pipeline.training.train_run) on the default pipeline's
labelled dataset (masks and judge labels from stage one; no teacher or segmenter is called).

A preset (`benchmarks/params/semore_cpu.yaml`, `semore_paper.yaml`) is merged over params.yaml's
`semore` section and sets the budget. The cells run through benchmarks.sweep.run_cells: each
writes `runs/<variant>-seed<k>.json` when done and keeps a resume state in `resume/<run>/` while
it trains, so a killed benchmark goes on where it stopped (finished runs skipped, the unfinished
one resumed, bit for bit); `--cell NAME` reruns one from scratch, `--only NAME` runs it alone and
resumes it (`--list-cells` names them). Prints the table:
final deterministic evaluation return of the deployed agent (mean +- std over seeds), the first
step whose eval return reaches `--threshold` (median), beside the paper's ordering (M1 < M2 < M3 <
M4, Semore > SAC), and a uniformly random policy on the same evaluation episodes (what "learned
nothing" scores).

    python -m benchmarks.semore_ablation --preset benchmarks/params/semore_cpu.yaml \\
        --seeds 3 --workers 2 --out reports/semore_ablation
    python -m benchmarks.semore_ablation --preset benchmarks/params/semore_cpu.yaml \\
        --seeds 3 --out reports/semore_ablation --cell m2-seed1
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.sweep import Cell, Trained, add_sweep_arguments, prepare_data, run_cells
from pipeline.curves import steps_to

ENV = "CarRacing-v3"
VARIANTS = ["sac", "m1", "m2", "m3", "m4"]
PAPER_ORDER = "M1 < M2 < M3 < M4 (full Semore), Semore > SAC (Semore table 2, CARLA tasks)"
EVAL_SEED = 10_000


def read_preset(preset: str | Path) -> tuple[dict[str, Any], int]:
    """The preset's `semore` keys (merged over params.yaml's section) and its step budget."""
    over = yaml.safe_load(Path(preset).read_text())
    return dict(over.get("semore", {})), int(over["steps"])


def load_preset(params_path: str, preset: str) -> tuple[Any, int]:
    """params.yaml with the preset's `semore` keys merged in; the preset's step budget."""
    from pipeline.config import parse_params

    raw = yaml.safe_load(Path(params_path).read_text())
    semore, steps = read_preset(preset)
    raw["semore"] = {**raw["semore"], **semore}  # `<<: *sac` is already merged by the loader
    return parse_params(raw, source=f"{params_path} + {preset}"), steps


def table_cells(args: argparse.Namespace) -> list[Cell]:
    semore, steps = read_preset(args.preset)
    return [
        Cell(
            name=f"{v}-seed{s}",
            run={"env": ENV, "method": "semore", "steps": steps, "seed": s},
            overrides={"semore": {**semore, "variant": v}},
            info={"variant": v, "eval_episodes": args.eval_episodes},
        )
        for s in range(args.seeds)
        for v in args.variants
    ]


def finish(cell: Cell, params: Any, agent_dir: Path, trained: Trained) -> dict[str, Any]:
    """The deployed agent's deterministic evaluation after training."""
    from pipeline.evaluation import deployed, evaluate_policy
    from pipeline.methods.table import load_agent

    episodes = cell.info["eval_episodes"]
    final = evaluate_policy(
        deployed(load_agent(agent_dir)), ENV, params.env[ENV], episodes, seed=EVAL_SEED
    )
    return {
        "name": cell.name,
        "variant": cell.info["variant"],
        "seed": cell.run["seed"],
        "steps": cell.run["steps"],
        "curve": trained.curve,
        "eval": [
            (int(row["step"]), row["eval_return"]) for row in trained.logs if "eval_return" in row
        ],
        "final_return": final.return_mean,
        "train_seconds": trained.seconds,
        "resumed_from": trained.resumed_from,
    }


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
        finals.append(
            evaluate_policy(policy, ENV, params.env[ENV], episodes, EVAL_SEED).return_mean
        )
    return {"variant": "random", "final_returns": finals}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--preset", default="benchmarks/params/semore_cpu.yaml")
    parser.add_argument("--data", default="data", help="root of rollouts/, labels/, datasets/")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=Path("reports/semore_ablation"))
    add_sweep_arguments(parser, workers=1)
    args = parser.parse_args(argv)

    params, _ = load_preset(args.params, args.preset)  # fail early on a bad preset
    cells = table_cells(args)
    sweep = run_cells(
        cells,
        args,
        params=args.params,
        out=args.out,
        prepare=lambda _: prepare_data(ENV, params, args.data, args.out / "work"),
        finish=finish,
        describe=lambda r: f"final return {r['final_return']:.1f} ({r['train_seconds']:.0f} s)",
        results_dir="runs",
    )
    if sweep is None:  # --list-cells
        return 0
    results = sweep.ordered(cells)
    if not results:
        print("no finished runs")
        return 1
    reference_path = args.out / "runs" / "random.json"
    if reference_path.exists():
        reference = json.loads(reference_path.read_text())
    else:
        reference = random_reference(args.params, args.preset, args.seeds, args.eval_episodes)
        reference_path.write_text(json.dumps(reference, indent=2) + "\n")
    text = table(results, args.threshold, reference)
    (args.out / "table.txt").write_text(text + "\n")
    print("\n" + text)
    return 1 if sweep.failures or sweep.missing else 0


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
