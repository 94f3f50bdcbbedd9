"""The pixel benchmark: SAC (also with half of each batch from the offline dataset), DrQ, ERPv
(its paper's setting, with random shifts, with the Worst Model's labels, without VER, without
VPG) and Semore (m1-m4, its table 2's ablations) learning DMC cartpole-swingup from frames, on a
preset: by default `benchmarks/params/pixels_cpu_drqnet.yaml` (64x64, action repeat 8, DrQ's
network: the smallest setting measured to learn in 10k agent steps, about 50-75 minutes a run on
2 CPU cores);
`pixels_cpu.yaml` (the small all-stride-2 encoder, its update 2x faster) does not learn at that
budget, and `pixels_paper.yaml` is DrQ's 84x84 for a GPU (benchmarks/results/pixels/README.md).

Data (in this process, each part built once under `<out>/`): the preset's sections are merged
over params.yaml (`<out>/params.yaml`, a complete params file), the collect stage's function
(pipeline.rollouts.collect.collect) collects the preset's RAE episodes at the preset's frame size
into `<out>/data/rollouts/<env>`, and benchmarks.sweep.prepare_data labels them with the label
stage's function (the preset's `label.teacher`, or the `constant` Worst Model for
`erpv-constant`), computes masks, builds the dataset and pre-trains C_V on pixels with the
stages' functions. Nothing is read from the default pipeline's outputs.

Every (arm, seed) cell trains through pipeline.training.train_run in a spawned worker
(benchmarks.sweep.run_cells: one result file per cell, skipped on a rerun, a killed run resumed
from its resume state) and is evaluated as deployed (load_agent + deployed, deterministic) on
`--eval-episodes` episodes from seed 10,000. The report: final return mean +- std over seeds,
steps to 500 (first periodic evaluation >= 500, median over seeds), the published numbers beside
(ERPv table 2, DrQ), and the mean +- std curve of each arm's periodic evaluations (PNG).

    python -m benchmarks.pixels --seeds 3 --workers 2 --out reports/pixels
    python -m benchmarks.pixels --arms drq sac --seeds 1 --out reports/pixels --time-budget 3600
    python -m benchmarks.pixels --out reports/pixels --only 'drq-*'     # these cells, resumed
    python -m benchmarks.pixels --out reports/pixels --cell drq-seed0   # that cell from scratch
    python -m benchmarks.pixels --out reports/pixels --arms erpv sac --reevaluate 30
    python -m benchmarks.pixels --preset benchmarks/params/pixels_paper.yaml \
        --compile reduce-overhead --out reports/pixels_paper     # on a GPU: CUDA graphs

`--reevaluate N` trains nothing: it plays every finished cell's stored agent again on N episodes
(seeds 10,000 on, so the first are the result's own, checked to be equal) and reports each arm's
final return over N episodes per seed beside the result's own (`<out>/reevaluated.txt`). A final
return of 5 episodes spans 100-150 points within one seed at DrQ's sizes, as wide as the gap
between the arms; the result files and their specs are left as they are.
"""

from __future__ import annotations

import argparse
import copy
import json
import typing
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.sweep import (
    Cell,
    Trained,
    add_sweep_arguments,
    prepare_data,
    run_cells,
    worker_pool,
)
from pipeline.agents.off_policy import SACParams
from pipeline.config import Params, parse_params
from pipeline.curves import steps_to
from pipeline.io import atomic_write_bytes, atomic_write_json

ENV = "cartpole-swingup"
EVAL_SEED = 10_000
THRESHOLD = 500.0
# the fields every pixel result has (a sweep's, a reference run's, a joined file's rows)
RESULT_FIELDS = frozenset({"name", "arm", "seed", "steps", "eval", "final_return"})
LATE = 0.2  # the table's second measure: periodic evaluations over the last 20% of steps
# arm -> (method, teacher whose labels it reads, overrides of the method's section)
ARMS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "sac": ("sac", "scripted", {}),
    # the control for erpv's offline half: sac drawing half of each batch from the same labelled
    # RAE dataset (it reads no label), without C_V
    "sac-offline": ("sac", "scripted", {"offline_fraction": 0.5}),
    "drq": ("drq", "scripted", {}),
    "erpv": ("erpv", "scripted", {}),
    "erpv-shift": ("erpv", "scripted", {"image_pad": 4}),
    "erpv-constant": ("erpv", "constant", {}),
    # VPG alone: VER's target sigmoid(G) sits near 1 and lifts alpha in every erpv run
    "erpv-no-ver": ("erpv", "scripted", {"lambda_2": 0.0}),
    # VER alone: erpv-no-ver did not recover sac-offline's level at 5k steps
    "erpv-no-vpg": ("erpv", "scripted", {"lambda_1": 0.0}),
    # Semore table 2's ablations, in its order (m4 is Semore); each adds one part to the last
    "semore-m1": ("semore", "scripted", {"variant": "m1"}),
    "semore-m2": ("semore", "scripted", {"variant": "m2"}),
    "semore-m3": ("semore", "scripted", {"variant": "m3"}),
    "semore-m4": ("semore", "scripted", {"variant": "m4"}),
    # m2 with m1's semantic input (the stack): at 5k steps m1 scored ~60 above m2-m4;
    # is the cost that m2-m4's semantic stream reads the current frame alone?
    "semore-m2-stack": ("semore", "scripted", {"variant": "m2", "semantic_input": "stack"}),
}
# Published cartpole-swingup figures from pixels (84x84, action repeat 8), final return.
PUBLISHED = {
    "sac": "ERPv table 2: SAC 237 +- 49 (100k frames); CURL paper: pixel SAC 419 (100k)",
    "drq": "DrQ: 759 +- 92 at 100k frames (12.5k steps); its curves: 661 +- 134 at 10k steps",
    "erpv": "ERPv table 2: 855 +- 2 (100k frames)",
}
ARM_SECTIONS = ("sac", "drq", "erpv", "semore")
# drq at 10k steps, 3 seeds (std ddof 1): 522.9 +- 237.9 with this preset's network, 314.8 +- 69.5 with
# pixels_cpu.yaml's small one (benchmarks/results/pixels/README.md)
DEFAULT_PRESET = "benchmarks/params/pixels_cpu_drqnet.yaml"


def read_preset(preset: str | Path) -> tuple[dict[str, Any], int]:
    """The preset's sections (yaml merges resolved) and its step budget."""
    raw = yaml.safe_load(Path(preset).read_text())
    if not isinstance(raw, dict) or "steps" not in raw:
        raise SystemExit(f"{preset}: a preset is a mapping of params sections plus `steps`")
    steps = int(raw.pop("steps"))
    return raw, steps


def merged_params(params_path: str | Path, preset: dict[str, Any]) -> dict[str, Any]:
    """params.yaml with the preset merged in: `env` and `collect` per env id, every other section
    key by key; the env list is the preset's env alone and `train` empty (the cells fill it)."""
    raw = copy.deepcopy(yaml.safe_load(Path(params_path).read_text()))
    for section, value in preset.items():
        if section in ("env", "collect"):
            for env_id, keys in value.items():
                raw[section][env_id] = {**raw[section].get(env_id, {}), **keys}
        elif isinstance(value, dict) and isinstance(raw.get(section), dict):
            raw[section] = {**raw[section], **value}
        else:
            raw[section] = value
    raw["envs"] = [ENV]
    raw["train"] = {}
    raw["rounds"] = {}  # params.yaml's labelling rounds follow its own runs
    return raw


COMPILE_MODES = typing.get_args(SACParams.model_fields["compile"].annotation)


def with_compile(raw: dict[str, Any], mode: str | None) -> dict[str, Any]:
    """`raw` with every arm's method section set to `compile: mode` (None: as it is, so that
    results made before the setting existed keep their specs)."""
    if mode is None:
        return raw
    if mode not in COMPILE_MODES:
        raise SystemExit(f"--compile {mode!r}: one of {', '.join(COMPILE_MODES)}")
    out = dict(raw)
    for method in dict.fromkeys(m for m, _, _ in ARMS.values()):
        out[method] = {**(raw.get(method) or {}), "compile": mode}
    return out


def write_params(raw: dict[str, Any], path: Path) -> Params:
    """The merged params, checked, written where the cells read them."""
    params = parse_params(raw, source=str(path))
    atomic_write_bytes(path, yaml.safe_dump(raw, sort_keys=False).encode())
    return params


def collect_rollouts(params: Params, data: Path) -> Path:
    """stages/collect.py's function with the preset's env and collect settings (resumes)."""
    from pipeline.rollouts.collect import collect
    from pipeline.teachers import make_teacher

    cfg = params.collect[ENV]
    out = data / "rollouts" / ENV
    teacher = make_teacher(cfg.teacher) if cfg.uses_teacher else None
    manifest = collect(ENV, params.env[ENV], cfg, out, teacher=teacher, replace=True)
    print(f"{ENV}: {manifest['totals']} -> {out}", flush=True)
    return out


def data_key(arm: str) -> str:
    """What an arm's cells read: `<teacher>`, or `<teacher>+critic` for the arms that read C_V
    (erpv): the others never wait for a C_V to be pre-trained."""
    method, teacher, _ = ARMS[arm]
    return f"{teacher}+critic" if method == "erpv" else teacher


def prepare(params: Params, out: Path, key: str):
    """The inputs of `<teacher>[+critic]`: the preset's rollouts labelled by that teacher, their
    masks and dataset, and with `+critic` C_V."""
    assert params.label is not None, "params.yaml needs a `label` section"
    label = params.label.for_env(ENV)
    key, plus, _ = key.partition("+critic")
    if key == "constant":
        teacher = label.teacher.model_copy(update={"backend": "constant"})
        label = label.model_copy(update={"teacher": teacher})
    collect_rollouts(params, out / "data")
    return prepare_data(ENV, params, out / "data", out / "work", label, critic=bool(plus))


def table_cells(args: argparse.Namespace, steps: int) -> list[Cell]:
    return [
        Cell(
            name=f"{arm}-seed{s}",
            run={"env": ENV, "method": ARMS[arm][0], "steps": steps, "seed": s},
            overrides={ARMS[arm][0]: ARMS[arm][2]} if ARMS[arm][2] else {},
            data=data_key(arm),
            info={"arm": arm, "eval_episodes": args.eval_episodes},
        )
        for s in range(args.seeds)
        for arm in args.arms
    ]


def finish(cell: Cell, params: Params, agent_dir: Path, trained: Trained) -> dict[str, Any]:
    """The deployed agent's deterministic evaluation after training."""
    from pipeline.evaluation import deployed, evaluate_policy
    from pipeline.methods.table import get_method, load_agent

    hp = get_method(cell.method).params(params)
    final = evaluate_policy(
        deployed(load_agent(agent_dir)), ENV, params.env[ENV], cell.info["eval_episodes"],
        seed=EVAL_SEED,
    )  # fmt: skip
    updates = trained.updates_timed(cell.run["steps"], hp.start_steps)
    return {
        "name": cell.name,
        "arm": cell.info["arm"],
        "seed": cell.run["seed"],
        "steps": cell.run["steps"],
        "curve": trained.curve,
        "eval": [(int(r["step"]), r["eval_return"]) for r in trained.logs if "eval_return" in r],
        "final_return": final.return_mean,
        "final_returns": final.returns,
        "train_seconds": trained.seconds,
        "resumed_from": trained.resumed_from,
        "updates_per_s": updates / trained.seconds if trained.seconds > 0 else None,
    }


def _replay_final(params_path: str, agent_dir: str, episodes: int, threads: int) -> list[float]:
    """`finish`'s evaluation of one stored agent on `episodes` episodes (in a worker)."""
    import torch

    from pipeline.config import load_params
    from pipeline.evaluation import deployed, evaluate_policy
    from pipeline.methods.table import load_agent

    torch.set_num_threads(threads)
    params = load_params(params_path)
    policy = deployed(load_agent(agent_dir))
    return evaluate_policy(policy, ENV, params.env[ENV], episodes, seed=EVAL_SEED).returns


def reevaluate(
    cells: list[Cell], out: Path, episodes: int, *, workers: int = 1, threads: int = 1
) -> list[dict[str, Any]]:
    """Each cell with a result in `<out>/runs` and its agent in `<out>/agents`, evaluated again as
    `finish` does on `episodes` episodes (seeds EVAL_SEED, EVAL_SEED + 1, ...). The first episodes
    are the result's own: they must come out equal, or the agent and the result are not of one run
    (or evaluation is not deterministic here). One file per cell,
    `<out>/reevaluated/<cell>-n<episodes>.json`, kept as soon as it is played: a rerun plays only
    what is missing. Cells that fail either way are named together at the end (SystemExit)."""
    directory = out / "reevaluated"
    rows, todo = [], []
    for cell in cells:
        result_path = out / "runs" / f"{cell.name}.json"
        agent = out / "agents" / cell.name
        if not result_path.exists():
            continue
        if not (agent / "agent.json").exists():
            print(f"{cell.name}: its result has no agent in {agent}; not re-evaluated")
            continue
        try:
            result = json.loads(result_path.read_text())
        except json.JSONDecodeError as exc:
            raise SystemExit(f"{result_path}: not a readable result ({exc})") from exc
        path = directory / f"{cell.name}-n{episodes}.json"
        try:  # kept from an earlier run, for this very result
            row = json.loads(path.read_text())
            if row["result_final_returns"] == result["final_returns"]:
                rows.append(row)
                continue
        except (OSError, json.JSONDecodeError, KeyError):
            pass  # none, unreadable or of another shape: played again and replaced
        todo.append((cell, result, path, agent))
    print(f"{len(rows)} cells re-evaluated before, {len(todo)} to play", flush=True)
    failed = []
    with worker_pool(workers) as pool:
        jobs = {
            pool.submit(_replay_final, str(out / "params.yaml"), str(agent), episodes, threads): (
                cell,
                result,
                path,
            )
            for cell, result, path, agent in todo
        }
        for job in as_completed(jobs):  # each kept as it ends: a failed cell loses no other
            cell, result, path = jobs[job]
            try:
                returns = job.result()
            except Exception as exc:  # reported with its cell once the others have ended
                failed.append(f"{cell.name}: its agent could not be evaluated ({exc!r})")
                continue
            own = result["final_returns"][:episodes]
            if not np.allclose(returns[: len(own)], own, rtol=0.0, atol=1e-6):
                failed.append(
                    f"{cell.name}: its agent's first {len(own)} evaluation episodes return "
                    f"{np.round(returns[: len(own)], 1).tolist()}, its result says "
                    f"{np.round(own, 1).tolist()}: the agent in {out / 'agents' / cell.name} is "
                    f"not the one that result was made with (run it again: --cell {cell.name})"
                )
                continue
            row = {
                "name": cell.name,
                "arm": result["arm"],
                "seed": result["seed"],
                "episodes": episodes,
                "returns": returns,
                "final_return": float(np.mean(returns)),
                "result_final_returns": result["final_returns"],
            }
            atomic_write_json(path, row)
            print(
                f"{cell.name}: {row['final_return']:.1f} over {episodes} episodes "
                f"(its result: {result['final_return']:.1f} over {len(own)})",
                flush=True,
            )
            rows.append(row)
    if failed:
        raise SystemExit("\n".join(failed))
    order = {c.name: i for i, c in enumerate(cells)}
    return sorted(rows, key=lambda r: order[r["name"]])


def _sd(values: Any) -> str:
    """The sample std over seeds (ddof 1), or n/a for one seed."""
    return f"{np.std(values, ddof=1):.1f}" if len(values) > 1 else "n/a"


def reevaluation_table(rows: list[dict[str, Any]], arms: list[str]) -> str:
    """Final return over the re-evaluation's episodes beside the result's own, per arm: mean +-
    std over seeds of each seed's mean, the seeds' values, and the spread of one seed's episodes
    (their std, mean over seeds) that a final return of n episodes averages down by sqrt(n)."""
    episodes = rows[0]["episodes"]
    first = len(rows[0]["result_final_returns"])
    lines = [
        f"{ENV} from pixels: final return of each seed's agent over {episodes} deterministic "
        f"episodes (seeds {EVAL_SEED:,} on) beside its result's {first}; mean +- std over seeds (ddof 1)",
        "",
        f"{'arm':15}{'seeds':>6}{f'{episodes} episodes':>18}{f'{first} episodes':>18}"
        f"{'episode std':>13}   per seed ({episodes} episodes)",
    ]
    for arm in arms:
        rs = [r for r in rows if r["arm"] == arm]
        if not rs:
            continue
        many = np.array([r["final_return"] for r in rs])
        few = np.array([np.mean(r["result_final_returns"]) for r in rs])
        spread = np.mean([np.std(r["returns"]) for r in rs])
        lines.append(
            f"{arm:15}{len(rs):>6}{f'{many.mean():.1f} +- {_sd(many)}':>18}"
            f"{f'{few.mean():.1f} +- {_sd(few)}':>18}{spread:>13.1f}   "
            + ", ".join(f"{v:.1f}" for v in many)
        )
    return "\n".join(lines)


def read_extra(paths: list[Path], steps: int) -> list[dict[str, Any]]:
    """Results of runs made elsewhere, checked to be at this table's budget."""
    extra = []
    for path in paths:
        try:
            result = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SystemExit(f"--extra {path}: not a readable result file ({exc})") from exc
        missing = RESULT_FIELDS - set(result)
        if missing:
            raise SystemExit(f"--extra {path}: not a pixel result, it lacks {sorted(missing)}")
        if result["steps"] != steps:
            raise SystemExit(
                f"--extra {path}: a run of {result['steps']} steps; this table's runs have {steps}"
            )
        extra.append(result)
    return extra


def late_evaluation(curve: list[tuple[int, float]], steps: int) -> float | None:
    """Mean of a run's periodic evaluations over its last `LATE` share of steps (8k-10k of a 10k
    run: 5 evaluations at the presets' `eval_every` 500). The final return is one evaluation of
    the last weights and swings by 100+ between neighbouring evaluations at these budgets; this
    averages the curve's end instead. None if the run has no evaluation there (periodic
    evaluation off): the table shows "-"."""
    late = [v for s, v in curve if s >= (1 - LATE) * steps]
    return float(np.mean(late)) if late else None


def table(results: list[dict[str, Any]], arms: list[str]) -> str:
    lines = [
        f"{ENV} from pixels, {results[0]['steps']:,} agent steps per run; final return: "
        f"deterministic evaluation of the deployed agent after training (mean +- std over seeds, ddof 1); "
        f"last {LATE:.0%}: each run's mean periodic evaluation over its last {LATE:.0%} of steps "
        "(mean +- std over seeds, ddof 1); "
        f"steps to {THRESHOLD:g}: first periodic evaluation reaching it (median over the seeds "
        "that reached [how many]); train s: the mean of the runs made in one piece [how many, "
        "where a run was resumed: it times its last piece only]",
        "",
        f"{'arm':15}{'seeds':>6}{'final return':>20}{f'last {LATE:.0%}':>18}{'steps to 500':>16}"
        f"{'train s':>13}"
        f"{'upd/s':>7}   published (84x84)",
    ]
    for arm in arms:
        rs = [r for r in results if r["arm"] == arm]
        if not rs:
            continue
        finals = np.array([r["final_return"] for r in rs])
        lates = [late_evaluation(r["eval"], r["steps"]) for r in rs]
        late = "-" if None in lates else f"{np.mean(lates):.1f} +- {_sd(lates)}"
        reached = [s for r in rs if (s := steps_to(r["eval"], THRESHOLD)) is not None]
        median = f"{int(np.median(reached)):,} [{len(reached)}/{len(rs)}]" if reached else "-"
        whole = [r["train_seconds"] for r in rs if not r.get("resumed_from")]
        seconds = f"{np.mean(whole):.0f}" if whole else "-"
        seconds += f" [{len(whole)}/{len(rs)}]" if whole and len(whole) < len(rs) else ""
        lines.append(
            f"{arm:15}{len(rs):>6}{f'{finals.mean():.1f} +- {_sd(finals)}':>20}"
            f"{late:>18}{median:>16}"
            f"{seconds:>13}"
            f"{np.mean([r['updates_per_s'] for r in rs]):>7.1f}   {PUBLISHED.get(arm, '')}"
        )
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], arms: list[str], path: Path) -> None:
    """Each arm's periodic evaluation return, mean +- std over seeds (ddof 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = len(plt.rcParams["axes.prop_cycle"])  # past it the colours repeat: the style changes
    drawn = 0
    for arm in arms:
        rs = [r for r in results if r["arm"] == arm and r["eval"]]
        if not rs:
            continue
        steps = np.array([s for s, _ in rs[0]["eval"]])
        ys = np.array([[v for _, v in r["eval"]] for r in rs if len(r["eval"]) == len(steps)])
        mean = ys.mean(0)
        style = ("-", "--", ":")[min(drawn // colours, 2)]
        (line,) = ax.plot(steps, mean, ls=style, label=f"{arm} ({len(ys)} seeds)")
        if len(ys) > 1:  # the band: +- 1 sample std over seeds (ddof 1)
            std = ys.std(0, ddof=1)
            ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2)
        drawn += 1
    ax.axhline(THRESHOLD, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="agent steps (x8 env frames)", ylabel="eval return", title=f"{ENV}, pixels")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="agent steps per run (default: the preset's `steps`)",
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("reports/pixels"))
    parser.add_argument(
        "--extra",
        type=Path,
        nargs="+",
        default=[],
        metavar="RESULT",
        help="result files of runs made elsewhere (benchmarks.drq_reference) to report beside "
        "the cells: their arms are added to the table and the figure",
    )
    parser.add_argument(
        "--reevaluate",
        type=int,
        default=None,
        metavar="N",
        help="train nothing: evaluate every finished cell's agent again on N episodes and report "
        "them beside the results' own (<out>/reevaluated.txt)",
    )
    parser.add_argument(
        "--compile",
        default=None,
        choices=COMPILE_MODES,
        help="the agents' `compile` setting for every arm (on a GPU: reduce-overhead, CUDA "
        "graphs); each cell's spec records it. Default: the preset's (eager)",
    )
    add_sweep_arguments(parser, workers=1)
    args = parser.parse_args(argv)
    preset, steps = read_preset(args.preset)
    steps = args.steps if args.steps is not None else steps
    if args.reevaluate is not None:  # with the params the agents were trained with
        return report_reevaluation(table_cells(args, steps), args)
    extra = read_extra(args.extra, steps)  # before any run: a bad file is named at once
    args.out.mkdir(parents=True, exist_ok=True)
    params_path = args.out / "params.yaml"
    raw = with_compile(merged_params(args.params, preset), args.compile)
    params = write_params(raw, params_path)
    cells = table_cells(args, steps)
    sweep = run_cells(
        cells,
        args,
        params=params_path,
        out=args.out,
        prepare=lambda key: prepare(params, args.out, key),
        finish=finish,
        describe=lambda r: f"final return {r['final_return']:.1f} ({r['train_seconds']:.0f} s)",
        results_dir="runs",
    )
    if sweep is None:  # --list-cells
        return 0
    results = sweep.ordered(cells) + extra
    if not results:
        print("no finished runs")
        return 1
    arms = [*args.arms, *dict.fromkeys(r["arm"] for r in results if r["arm"] not in args.arms)]
    text = table(results, arms)
    print(text)
    atomic_write_bytes(args.out / "table.txt", (text + "\n").encode())
    atomic_write_json(args.out / "results.json", {r["name"]: r for r in results})
    plot(results, arms, args.out / "curves.png")
    return 0 if not sweep.failures else 1


def report_reevaluation(cells: list[Cell], args: argparse.Namespace) -> int:
    """`--reevaluate N`: `reevaluate` on `--out`, its table printed and written beside."""
    if args.reevaluate < 1:
        raise SystemExit(f"--reevaluate {args.reevaluate}: the number of episodes is at least 1")
    if not (args.out / "params.yaml").exists():
        raise SystemExit(f"--reevaluate: {args.out} has no params.yaml; no cell has run there")
    rows = reevaluate(cells, args.out, args.reevaluate, workers=args.workers, threads=args.threads)
    if not rows:
        print("no finished runs with an agent to re-evaluate")
        return 1
    text = reevaluation_table(rows, args.arms)
    print(text)
    atomic_write_bytes(args.out / "reevaluated.txt", (text + "\n").encode())
    atomic_write_json(args.out / "reevaluated.json", {r["name"]: r for r in rows})
    return 0


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
