"""Does the teacher's knowledge reach the agent? ERPv on state observations with the teacher's
own competence measured (teacher_eval, ERPv's VBE row) and the controls that isolate the labels.

E1  MountainCarContinuous-v0, two datasets: the pipeline's RAE rollouts (`data/rollouts/<env>`)
    and `--random-episodes` uniform-random episodes (none reaches the flag: checked and printed),
    each labelled at EVERY frame (`label.tasks: {action: 1}`) by the scripted teacher at
    reliability 1.0, and by the Worst Model (`constant`). Arms: sac (online only), sac-offline
    (sac reading the same dataset at erpv's offline fraction, no labels: the control; erpv with
    lambda_1 = lambda_2 = 0 trains the same bytes, tests/test_erpv_pipeline.py), erpv, vpg-only
    (lambda_2 = 0), ver-only (lambda_1 = 0), erpv-worst, erpv-joint and erpv-nogate (gate_scaling
    joint / none), erpv-vertext (ver_target text), erpv-qs1 / erpv-qs50 (vpg_weight q_scaled,
    lambda_1 1 / 50).
E2  No training: on each E1 erpv agent (RAE data) and its C_V, the gate's open rate and mean Q_f
    over dataset batches for a_v in {teacher label, zeros, uniform random, the agent's own
    action}, under each gate scaling.
E3  cartpole-swingup, the pipeline's RAE rollouts labelled at every frame by a `policy` teacher
    (a SAC agent trained here for `--expert-steps` steps) at reliability 1.0, 0.5 and 0.0 and by
    the Worst Model. Arms: sac, sac-offline, erpv per teacher, and erpv-l1k (lambda_1 = 1000:
    VPG's term at cartpole's Q scale, where lambda_1 = 10 makes |lambda_1 L_V| ~0.1 % of |L_pi|)
    with the reliability-1.0 and 0.0 teachers and the Worst Model, and erpv-qs1 (`vpg_weight:
    q_scaled`, lambda_1 = 1: L_V weighed by mean |Q_r|, the same setting as E1's erpv-qs1) and
    erpv-qs50 (lambda_1 = 50) with the reliability-1.0 and 0.0 teachers. Final return, steps to 700.

Every teacher is first evaluated acting alone (pipeline.teacher_eval, asked every step). Cells run
through benchmarks.sweep (one result file per cell; a rerun skips finished cells; `--only`,
`--cell`, `--list-cells`). Writes `<out>/table.txt`, `<out>/results.json` (every cell, raw),
`<out>/teacher_eval.json`, `<out>/e2_gate_probe.json` and `<out>/e3_reliability.png`.

    python -m benchmarks.teacher_knowledge --seeds 5 --steps 5000 --workers 2 \\
        --out benchmarks/results/teacher_knowledge
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

from benchmarks.erpv_vs_sac import EVAL_SEED, finish, median_steps, with_steps_to
from benchmarks.sweep import Cell, add_sweep_arguments, prepare_data, run_cells
from pipeline.config import CollectConfig, LabelConfig, Params, TeacherConfig, load_params
from pipeline.io import atomic_write_bytes, atomic_write_json
from pipeline.teacher_eval import welch_p

MCC, CARTPOLE = "MountainCarContinuous-v0", "cartpole-swingup"
SCRIPTED = {"backend": "scripted", "reliability": 1.0, "seed": 0}
CONSTANT = {"backend": "constant", "reliability": 1.0, "seed": 0}
RELIABILITIES = (1.0, 0.5, 0.0)
# arm -> (method, section overrides); the teacher and dataset come with the experiment
ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "sac": ("sac", {}),
    "sac-offline": ("sac", {"offline_fraction": 0.5}),
    "erpv": ("erpv", {}),
    "vpg-only": ("erpv", {"lambda_2": 0.0}),
    "ver-only": ("erpv", {"lambda_1": 0.0}),
    "erpv-joint": ("erpv", {"gate_scaling": "joint"}),
    "erpv-nogate": ("erpv", {"gate_scaling": "none"}),
    "erpv-vertext": ("erpv", {"ver_target": "text"}),
    "erpv-l1k": ("erpv", {"lambda_1": 1000.0}),
    # one lambda_1 for every reward scale: L_V weighed by lambda_1 * mean |Q_r| (pipeline/methods/erpv.py)
    "erpv-qs1": ("erpv", {"vpg_weight": "q_scaled", "lambda_1": 1.0}),
    "erpv-qs50": ("erpv", {"vpg_weight": "q_scaled", "lambda_1": 50.0}),
}
L1K_RELIABILITIES = (1.0, 0.0)  # E3's erpv-l1k arms: the best and the worst policy teacher
QS_RELIABILITIES = (1.0, 0.0)  # E3's erpv-qs1 and erpv-qs50 arms
DIAGNOSTICS = (
    "vpg/gate_open", "vpg/zeros/gate_open", "vpg/own/gate_open", "vpg/q_f", "vpg/zeros/q_f",
    "vpg/own/q_f", "vpg/dist_pi_a_v", "guidance/ratio", "alpha", "ver/alpha_target", "vpg/weight",
)  # fmt: skip


# ---- the table's cells ---------------------------------------------------------------------------


def experiment_rows() -> list[tuple[str, str, str, str, str]]:
    """(experiment, env, arm label, ARMS key, data key); data key: env:dataset:teacher."""
    rows = []
    for dataset in ("rae", "random"):
        e = "E1" if dataset == "rae" else "E1-random"
        arms = (
            [
                "sac",
                "sac-offline",
                "erpv",
                "vpg-only",
                "ver-only",
                "erpv-joint",
                "erpv-nogate",
                "erpv-vertext",
                "erpv-qs1",
                "erpv-qs50",
            ]
            if dataset == "rae"
            else ["sac-offline", "erpv"]
        )
        for arm in arms:
            rows.append((e, MCC, arm, arm, f"{MCC}:{dataset}:scripted"))
        rows.append((e, MCC, "erpv-worst", "erpv", f"{MCC}:{dataset}:constant"))
    for arm in ("sac", "sac-offline"):
        rows.append(("E3", CARTPOLE, arm, arm, f"{CARTPOLE}:rae:policy{1.0:g}"))
    for r in RELIABILITIES:
        rows.append(("E3", CARTPOLE, _arm(r), "erpv", f"{CARTPOLE}:rae:policy{r:g}"))
    rows.append(("E3", CARTPOLE, "erpv-worst", "erpv", f"{CARTPOLE}:rae:constant"))
    for r in L1K_RELIABILITIES:
        rows.append(
            ("E3", CARTPOLE, _arm(r, "erpv-l1k"), "erpv-l1k", f"{CARTPOLE}:rae:policy{r:g}")
        )
    rows.append(("E3", CARTPOLE, "erpv-l1k-worst", "erpv-l1k", f"{CARTPOLE}:rae:constant"))
    for arm in ("erpv-qs1", "erpv-qs50"):
        for r in QS_RELIABILITIES:
            rows.append(("E3", CARTPOLE, _arm(r, arm), arm, f"{CARTPOLE}:rae:policy{r:g}"))
    return rows


def _arm(reliability: float, arm: str = "erpv") -> str:
    """`arm`'s label under a policy teacher of `reliability` (a run name: no dot)."""
    return f"{arm}-policy{reliability:g}".replace(".", "p")


def table_cells(args: argparse.Namespace) -> list[Cell]:
    cells = []
    for experiment, env_id, label, arm, data in experiment_rows():
        if experiment.split("-")[0] not in args.experiments:
            continue
        method, overrides = ARMS[arm]
        for seed in range(args.seeds):
            cells.append(
                Cell(
                    name=f"{experiment}-{label}-seed{seed}",
                    run={"env": env_id, "method": method, "steps": args.steps, "seed": seed},
                    overrides={method: overrides},
                    data=data,
                    info={
                        "experiment": experiment,
                        "env": env_id,
                        "method": label,
                        "eval_episodes": args.eval_episodes,
                        "data": data,
                    },
                )
            )
    return cells


# ---- data ----------------------------------------------------------------------------------------


def teacher_config(teacher: str, expert: Path | None) -> dict[str, Any]:
    if teacher == "scripted":
        return SCRIPTED
    if teacher == "constant":
        return CONSTANT
    assert teacher.startswith("policy") and expert is not None
    reliability = float(teacher.removeprefix("policy"))
    return {"backend": "policy", "reliability": reliability, "seed": 0,
            "policy": {"checkpoint": str(expert)}}  # fmt: skip


def label_every_frame(params: Params, env_id: str, teacher: dict[str, Any]) -> LabelConfig:
    """The env's label settings with `teacher` asked the action of every frame (no other task:
    a policy teacher answers only actions and judgements)."""
    assert params.label is not None, "params.yaml needs a `label` section"
    base = params.label.for_env(env_id)
    return base.model_copy(
        update={"teacher": TeacherConfig.model_validate(teacher), "tasks": {"action": 1}}
    )


def random_rollouts(
    params: Params, env_id: str, root: Path, episodes: int
) -> tuple[Path, dict[str, Any]]:
    """`episodes` uniform-random episodes of `env_id` under `<root>/rollouts/<env>` (resumable:
    the collector extends what is there)."""
    from pipeline.rollouts.collect import collect

    cfg = CollectConfig(behaviour="random", episodes=episodes, seed=0, shard_max_samples=1000)
    manifest = collect(env_id, params.env[env_id], cfg, root / "rollouts" / env_id, progress=False)
    return root, manifest


def train_expert(params: Params, env_id: str, out: Path, steps: int) -> Path:
    """The `policy` teacher of E3: the `sac` section on state observations, seed 100."""
    from pipeline.config import TrainRun
    from pipeline.methods.base import TrainInputs
    from pipeline.methods.table import get_method

    directory = out / "work" / f"expert-{env_id}-{steps}"
    if (directory / "agent.json").exists():
        return directory
    run = TrainRun(env=env_id, method="sac", steps=steps, seed=100)
    unused = TrainInputs(Path("unused"), Path("unused"))  # online sac reads no data
    started = time.perf_counter()
    result = get_method("sac").train("expert", run, params, unused, progress=True)
    result.agent.save(directory, result.meta)
    print(f"{env_id}: expert ({steps} steps) in {time.perf_counter() - started:.0f} s -> "
          f"{directory}", flush=True)  # fmt: skip
    return directory


class Data:
    """The inputs of each data key, built once (benchmarks.sweep.prepare_data)."""

    def __init__(self, params: Params, args: argparse.Namespace) -> None:
        self.params, self.args = params, args
        self.expert: Path | None = None
        self.random_root = args.out / "work" / "random-data"
        self.random_checked = False

    def expert_dir(self) -> Path:
        if self.expert is None:
            self.expert = train_expert(self.params, CARTPOLE, self.args.out, self.args.expert_steps)
        return self.expert

    def __call__(self, key: str):
        env_id, dataset, teacher = key.split(":")
        expert = self.expert_dir() if teacher.startswith("policy") else None
        label = label_every_frame(self.params, env_id, teacher_config(teacher, expert))
        data = self.args.data
        if dataset == "random":
            data, manifest = random_rollouts(
                self.params, env_id, self.random_root, self.args.random_episodes
            )
            if not self.random_checked:
                self.random_checked = True
                print(f"{env_id} random dataset: {len(manifest['episodes'])} episodes, "
                      f"{_flag_reaches(data / 'rollouts' / env_id)} reach the flag", flush=True)  # fmt: skip
        return prepare_data(env_id, self.params, data, self.args.out / "work", label, critic=True)


def _flag_reaches(rollouts: Path) -> int:
    """Episodes of a MountainCar rollout directory that end terminated (at the flag)."""
    from pipeline.rollouts.reader import iter_rollouts

    return sum(1 for s in iter_rollouts(rollouts) if s.record.get("terminated"))


# ---- teachers acting alone -----------------------------------------------------------------------


def evaluate_teachers(params: Params, data: Data, args: argparse.Namespace) -> dict[str, Any]:
    """Each teacher of the table acting alone (asked every step), beside random actions."""
    from pipeline.teacher_eval import evaluate_teacher
    from pipeline.teachers import make_teacher

    path = args.out / "teacher_eval.json"
    done: dict[str, Any] = {}
    if path.exists():
        import json

        done = json.loads(path.read_text())
    wanted = sorted({(env, key.split(":")[2]) for _, env, _, _, key in experiment_rows()
                     if _experiment_of(env) in args.experiments})  # fmt: skip
    for env_id, teacher in wanted:
        name = f"{env_id}:{teacher}"
        if name in done:
            continue
        expert = data.expert_dir() if teacher.startswith("policy") else None
        cfg = TeacherConfig.model_validate(teacher_config(teacher, expert))
        metrics, _ = evaluate_teacher(
            env_id, params.env[env_id], cfg, make_teacher(cfg), args.out / "work" / env_id /
            "teacher_eval_cache", [], [1], args.teacher_episodes, EVAL_SEED,
        )  # fmt: skip
        done[name] = metrics
        atomic_write_json(path, done)
    return done


def _experiment_of(env_id: str) -> str:
    return "E1" if env_id == MCC else "E3"


# ---- E2: the gate on a trained agent ---------------------------------------------------------------


def gate_probe(agent_dir: Path, critics: Path, dataset: Path, env_id: str, seed: int = 0,
               batches: int = 50, batch_size: int = 64) -> dict[str, Any]:  # fmt: skip
    """Gate open rate and mean Q_f for a_v in {teacher, zeros, random, own} under each scaling,
    over `batches` random batches of the dataset's labelled rows (the batch is the scaling's
    population, as in training). Q_r = C_R(s, a_r), a_r ~ pi(s), as in training."""
    import torch

    from pipeline.dataset.transitions import load_offline_transitions
    from pipeline.methods.erpv import VLMCritic, vpg_gate
    from pipeline.methods.table import load_agent

    agent = load_agent(agent_dir)
    critic = VLMCritic.load(critics / env_id)
    offline = load_offline_transitions(dataset, "state", ("action",))
    labelled = np.flatnonzero(np.asarray(offline["has_label"]))
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    sums: dict[str, dict[str, list[float]]] = {}
    for _ in range(batches):
        rows = rng.choice(labelled, size=min(batch_size, len(labelled)), replace=False)
        obs = torch.as_tensor(np.asarray(offline.obs)[offline.obs_index[rows]], dtype=torch.float32)
        a_v = agent.scale.normalise(torch.as_tensor(np.asarray(offline["a_v"])[rows],
                                                    dtype=torch.float32)).clamp(-1, 1)  # fmt: skip
        with torch.no_grad():
            h = agent.features(obs)
            a_r, _, mean = agent.actor(h)  # a sample and the (squashed) mean
            q_r = agent.critic.q_min(h, a_r)
            candidates = {
                "teacher": a_v,
                "zeros": torch.zeros_like(a_v),
                "random": torch.rand_like(a_v) * 2 - 1,
                "own": mean,
            }
            for name, a in candidates.items():
                q_v = critic(obs, a)
                for scaling in ("per_critic", "joint"):
                    gate = vpg_gate(q_v, q_r, scaling)
                    s = sums.setdefault(f"{scaling}/{name}", {"open": [], "q_f": []})
                    s["open"].append(float((gate > 0).float().mean()))
                    s["q_f"].append(float(gate.mean()))
    return {k: {m: float(np.mean(v)) for m, v in d.items()} for k, d in sums.items()}


def e2_probes(results: list[dict[str, Any]], data: Data, out: Path) -> dict[str, Any]:
    """E2 on every E1 erpv agent, into `<out>/e2_gate_probe.json`. An agent that this code cannot
    load (a checkpoint of an older ERPv config) keeps the probe the file already holds for it,
    with a line saying so: the probe needs no training, but a table must not be lost to it."""
    import json

    from pipeline.agents.checkpoint import CheckpointError

    path = out / "e2_gate_probe.json"
    before = json.loads(path.read_text()) if path.exists() else {}
    probes = {}
    for r in results:
        if r["experiment"] == "E1" and r["method"] == "erpv":
            inputs = data(r["data"])
            try:
                probes[r["name"]] = gate_probe(
                    out / "agents" / r["name"], inputs.critics, inputs.dataset, MCC
                )
            except CheckpointError as exc:
                if r["name"] not in before:
                    raise
                probes[r["name"]] = before[r["name"]]
                print(f"E2: {r['name']}: kept the stored probe ({exc})", flush=True)
    atomic_write_json(path, probes)
    return probes


# ---- report ----------------------------------------------------------------------------------------


def _tail_mean(logs: list[dict[str, float]], key: str, share: float = 0.2) -> float | None:
    values = [row[key] for row in logs if key in row]
    if not values:
        return None
    return float(np.mean(values[-max(1, int(len(values) * share)) :]))


def format_tables(results: list[dict[str, Any]], teachers: dict[str, Any], window: int) -> str:
    lines = []
    for experiment in ("E1", "E1-random", "E3"):
        rs_e = [r for r in results if r["experiment"] == experiment]
        if not rs_e:
            continue
        env_id = rs_e[0]["env"]
        lines.append(f"\n{experiment} ({env_id}, data {rs_e[0]['data'].split(':')[1]})")
        head = (
            f"{'arm':16}{'n':>3}  {'final eval return':>20}  {'p vs sac-offline':>16}  "
            f"{'success':>7}  {'steps to T':>26}  "
            + "  ".join(
                f"{c:>10}"
                for c in ("open(a_v)", "open(0)", "open(own)", "|LV|/|Lpi|", "alpha", "vpg weight")
            )
        )
        lines += [head, "-" * len(head)]
        control = [r["eval_return_mean"] for r in rs_e if r["method"] == "sac-offline"]
        for arm in dict.fromkeys(r["method"] for r in rs_e):
            rs = [r for r in rs_e if r["method"] == arm]
            means = [r["eval_return_mean"] for r in rs]
            std = np.std(means, ddof=1) if len(means) > 1 else 0.0
            p = welch_p(means, control) if arm != "sac-offline" else None
            succ = [r["success_rate"] for r in rs if r["success_rate"] is not None]
            t = list(rs[0]["steps_to"])[-1]
            reached = [r["steps_to"][t] for r in rs]
            med = median_steps(reached)
            steps = f"{t}: {'never' if med is None else f'{med:,}'} [{sum(v is not None for v in reached)}/{len(rs)}]"
            diag = []
            for key in (*DIAGNOSTICS[:3], "guidance/ratio", "alpha", "vpg/weight"):
                vals = [v for r in rs if (v := _tail_mean(r["logs"], key)) is not None]
                diag.append(f"{np.mean(vals):>10.3f}" if vals else f"{'-':>10}")
            lines.append(
                f"{arm:16}{len(rs):>3}  {f'{np.mean(means):.1f} +- {std:.1f}':>20}  "
                f"{'-' if p is None else f'{p:.3g}':>16}  "
                f"{f'{np.mean(succ):.0%}' if succ else '-':>7}  {steps:>26}  " + "  ".join(diag)
            )
        for name, m in sorted(teachers.items()):
            if not name.startswith(env_id):
                continue
            (row,) = m["teacher_rows"]
            succ = f", success {row['success_rate']:.0%}" if "success_rate" in row else ""
            lines.append(
                f"  teacher acting alone {name.split(':')[1]:>12}: {row['return_mean']:.1f} +- "
                f"{row['return_std']:.1f}{succ} (random {m['random']['return_mean']:.1f})"
            )
    return "\n".join(lines)


def plot_reliability(results: list[dict[str, Any]], teachers: dict[str, Any], out: Path) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = [r for r in results if r["experiment"] == "E3"]
    if not rs:
        return
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ts = []
    for arm, label in (
        ("erpv", "erpv, lambda_1 10"),
        ("erpv-l1k", "erpv, lambda_1 1000"),
        ("erpv-qs1", "erpv, q_scaled lambda_1 1"),
        ("erpv-qs50", "erpv, q_scaled lambda_1 50"),
    ):
        xs, ys, es = [], [], []
        for rel in RELIABILITIES:
            vals = [r["eval_return_mean"] for r in rs if r["method"] == _arm(rel, arm)]
            if vals:
                xs.append(rel)
                ys.append(np.mean(vals))
                es.append(np.std(vals, ddof=1) if len(vals) > 1 else 0.0)
        if xs:
            # erpv-l1k has no 0.5 point: no line drawn through it
            style = "-" if arm == "erpv" else "none"
            ax.errorbar(xs, ys, yerr=es, marker="o", capsize=4, linestyle=style,
                        label=f"{label} (mean +- std)")  # fmt: skip
    for rel in RELIABILITIES:
        t = teachers.get(f"{CARTPOLE}:policy{rel:g}")
        if t:
            ts.append((rel, t["teacher_rows"][0]["return_mean"]))
    if ts:
        ax.plot(*zip(*ts, strict=True), "k^--", label="teacher acting alone")
    for arm, style in (
        ("sac-offline", "C2:"),
        ("sac", "C3:"),
        ("erpv-worst", "C4:"),
        ("erpv-l1k-worst", "C5:"),
    ):
        vals = [r["eval_return_mean"] for r in rs if r["method"] == arm]
        if vals:
            ax.axhline(np.mean(vals), color=style[:2], linestyle=":", label=f"{arm} (mean)")
    ax.set_xlabel("policy teacher reliability")
    ax.set_ylabel("final eval return (cartpole-swingup)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    atomic_write_bytes(out / "e3_reliability.png", buffer.getvalue())


# ---- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", type=Path, default=Path("data"), help="the pipeline's data/")
    parser.add_argument("--experiments", nargs="+", default=["E1", "E3"], choices=["E1", "E3"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5000, help="agent steps per run")
    parser.add_argument("--expert-steps", type=int, default=8000, help="E3's policy teacher")
    parser.add_argument("--random-episodes", type=int, default=2, help="E1's random dataset")
    parser.add_argument("--teacher-episodes", type=int, default=5)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--window", type=int, default=5, help="episodes of the moving mean")
    parser.add_argument("--out", type=Path, default=Path("reports/teacher_knowledge"))
    add_sweep_arguments(parser, workers=2)
    args = parser.parse_args(argv)
    command = "python -m benchmarks.teacher_knowledge " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    import torch

    torch.set_num_threads(1)
    params = load_params(args.params)
    args.out.mkdir(parents=True, exist_ok=True)
    data = Data(params, args)
    cells = table_cells(args)
    if not args.list_cells:
        teachers = evaluate_teachers(params, data, args)
    sweep = run_cells(
        cells, args, params=args.params, out=args.out, prepare=data, finish=finish,
    )  # fmt: skip
    if sweep is None:
        return 0
    results = [with_steps_to(r, args.window) for r in sweep.ordered(cells)]
    atomic_write_json(args.out / "results.json", {r["name"]: r for r in results})
    probes = e2_probes(results, data, args.out)
    plot_reliability(results, teachers, args.out)
    text = format_tables(results, teachers, args.window)
    if probes:
        keys = sorted(next(iter(probes.values())))
        text += "\n\nE2 gate probe (E1 erpv agents, mean over seeds; open rate / mean Q_f)\n"
        for k in keys:
            o = np.mean([p[k]["open"] for p in probes.values()])
            q = np.mean([p[k]["q_f"] for p in probes.values()])
            text += f"  {k:24} open {o:.3f}  Q_f {q:.4f}\n"
    header = (
        f"Teacher knowledge, state observations, {args.steps:,} agent steps per run, "
        f"{args.seeds} seeds; final eval return: mean +- std (ddof 1) over seeds of each seed's "
        f"{args.eval_episodes}-episode deterministic eval from seed {EVAL_SEED:,}; p: Welch's "
        f"t-test against sac-offline. Diagnostics: mean over the last 20 % of metric rows."
    )
    out_text = f"{header}\n{text}\n\ncommand: {command}\n"
    atomic_write_bytes(args.out / "table.txt", out_text.encode())
    print(out_text)
    return 1 if sweep.failures else 0


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
