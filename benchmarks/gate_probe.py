"""E2 of the teacher-knowledge page: ERPv's VPG gate on a trained agent, no training. For a_v in
{the teacher's label, zeros, uniform random, the agent's own action}, the gate's open rate and
mean Q_f under each scaling (per_critic, joint), over random batches of the dataset's labelled
rows (the batch is the scaling's population, as in training; Q_r = C_R(s, a_r), a_r ~ pi(s)).
Does C_V rank the teacher's action above others where it matters?

For the teacher's a_v it also splits the rows by whether the agent's action (its mean) already
agrees with the label (||a_v - pi(s)||^2 < 1: the same sign in one dimension): the gate's open
rate on each side, and the row-level coupling E[Q_f gap] / (E[Q_f] E[gap]) (about 1: the gate
ignores the gap; near 0: it opens only where the actor already agrees, and VPG pulls nowhere).
A pixel agent reads its frames as it trained on them (`--image-size`, its C_V `--variant`).

Run it on any erpv agent: a default run, or an experiment's, restored into the workspace first
(`dvc exp apply mcc-guidance-erpv-s0` brings back its models/ and data/):

    python -m benchmarks.gate_probe --agent models/mcc-guidance-erpv \\
        --critics models/critic --dataset data/datasets/MountainCarContinuous-v0 \\
        --env MountainCarContinuous-v0 --out reports/gate_probe.json
    python -m benchmarks.gate_probe --agent models/frames-mcc-erpv --variant pixels \
        --image-size 64 --dataset data/datasets/MountainCarContinuous-v0 \
        --env MountainCarContinuous-v0
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import run_main
from pipeline.core.io import atomic_write_json

CANDIDATES = ("teacher", "zeros", "random", "own")
SCALINGS = ("per_critic", "joint")


def gate_probe(agent_dir: Path, critics: Path, dataset: Path, env_id: str, seed: int = 0,
               batches: int = 50, batch_size: int = 64, variant: str | None = None,
               image_size: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Gate open rate and mean Q_f for each candidate a_v under each scaling, over `batches`
    random batches of the dataset's labelled rows; for the teacher's a_v, the same split by
    whether the agent already agrees with the label, and the row-level coupling."""
    import torch

    from benchmarks.spread_probe import labelled_batches
    from pipeline.learn.methods.erpv import VLMCritic, critic_dir, vpg_gate
    from pipeline.learn.methods.table import load_agent

    agent = load_agent(agent_dir)
    critic = VLMCritic.load(critic_dir(critics / env_id, variant))
    torch.manual_seed(seed)
    sums: dict[str, dict[str, list[float]]] = {}
    split: dict[str, list[float]] = {"agree": [], "open_agree": [], "open_disagree": [],
                                     "q_f_gap": [], "q_f": [], "gap": []}  # fmt: skip
    for obs, a_v in labelled_batches(agent, dataset, image_size, batches, batch_size, seed):
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
                for scaling in SCALINGS:
                    gate = vpg_gate(q_v, q_r, scaling)
                    s = sums.setdefault(f"{scaling}/{name}", {"open": [], "q_f": []})
                    s["open"].append(float((gate > 0).float().mean()))
                    s["q_f"].append(float(gate.mean()))
            # the training gate (per_critic) on the teacher's a_v, against the gap it weighs
            gate = vpg_gate(critic(obs, a_v), q_r, "per_critic")
            gap = (a_v - a_r).pow(2).sum(-1)  # eq. 3's ||a_v - a_r||^2, a_r ~ pi as in training
            agree = (a_v - mean).pow(2).sum(-1) < 1.0
        split["agree"] += agree.tolist()
        split["open_agree"] += (gate[agree] > 0).tolist()
        split["open_disagree"] += (gate[~agree] > 0).tolist()
        split["q_f_gap"].append(float((gate * gap).mean()))
        split["q_f"].append(float(gate.mean()))
        split["gap"].append(float(gap.mean()))
    out: dict[str, Any] = {k: {m: float(np.mean(v)) for m, v in d.items()} for k, d in sums.items()}
    independent = np.array(split["q_f"]) * np.array(split["gap"])
    out["teacher_split"] = {
        "agree_share": float(np.mean(split["agree"])),
        "open_where_agrees": float(np.mean(split["open_agree"])) if split["open_agree"] else None,
        "open_where_disagrees": (
            float(np.mean(split["open_disagree"])) if split["open_disagree"] else None
        ),
        "coupling": (
            float(np.mean(split["q_f_gap"]) / independent.mean())
            if independent.mean() > 0
            else None
        ),
    }
    return out


def format_probe(probe: dict[str, Any]) -> str:
    lines = ["| a_v | " + " | ".join(f"{s}: open / mean Q_f" for s in SCALINGS) + " |",
             "|---|" + "---|" * len(SCALINGS)]  # fmt: skip
    for name in CANDIDATES:
        cells = [f"{probe[f'{s}/{name}']['open']:.3f} / {probe[f'{s}/{name}']['q_f']:.3f}"
                 for s in SCALINGS]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    t = probe["teacher_split"]
    shown = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    lines.append(
        f"\nteacher's a_v (per_critic): the agent agrees with the label on {t['agree_share']:.3f} "
        f"of rows; the gate opens on {shown(t['open_where_agrees'])} of those and on "
        f"{shown(t['open_where_disagrees'])} of the others; coupling E[Q_f gap] / "
        f"(E[Q_f] E[gap]) {shown(t['coupling'])}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agent", type=Path, required=True, help="an erpv agent's directory")
    parser.add_argument("--critics", type=Path, default=Path("models/critic"))
    parser.add_argument("--dataset", type=Path, required=True, help="the env's dataset")
    parser.add_argument("--env", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--variant", help="the C_V variant the agent trained with (pixels)")
    parser.add_argument("--image-size", type=int, help="the frame size the run trained on")
    parser.add_argument("--out", type=Path, help="JSON of the probe")
    args = parser.parse_args(argv)
    probe = gate_probe(args.agent, args.critics, args.dataset, args.env, args.seed, args.batches,
                       variant=args.variant, image_size=args.image_size)  # fmt: skip
    print(format_probe(probe))
    if args.out is not None:
        atomic_write_json(args.out, {"agent": str(args.agent), "env": args.env, "probe": probe})
        print(f"{args.out}: written")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
