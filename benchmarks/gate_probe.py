"""E2 of the teacher-knowledge page: ERPv's VPG gate on a trained agent, no training. For a_v in
{the teacher's label, zeros, uniform random, the agent's own action}, the gate's open rate and
mean Q_f under each scaling (per_critic, joint), over random batches of the dataset's labelled
rows (the batch is the scaling's population, as in training; Q_r = C_R(s, a_r), a_r ~ pi(s)).
Does C_V rank the teacher's action above others where it matters?

Run it on any erpv agent: a default run, or an experiment's, restored into the workspace first
(`dvc exp apply mcc-guidance-erpv-s0` brings back its models/ and data/):

    python -m benchmarks.gate_probe --agent models/mcc-guidance-erpv \\
        --critics models/critic --dataset data/datasets/MountainCarContinuous-v0 \\
        --env MountainCarContinuous-v0 --out reports/gate_probe.json
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
               batches: int = 50, batch_size: int = 64) -> dict[str, Any]:  # fmt: skip
    """Gate open rate and mean Q_f for each candidate a_v under each scaling, over `batches`
    random batches of the dataset's labelled rows."""
    import torch

    from pipeline.dataset.transitions import load_offline_transitions
    from pipeline.learn.methods.erpv import VLMCritic, critic_dir, vpg_gate
    from pipeline.learn.methods.table import load_agent

    agent = load_agent(agent_dir)
    critic = VLMCritic.load(critic_dir(critics / env_id))
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
                for scaling in SCALINGS:
                    gate = vpg_gate(q_v, q_r, scaling)
                    s = sums.setdefault(f"{scaling}/{name}", {"open": [], "q_f": []})
                    s["open"].append(float((gate > 0).float().mean()))
                    s["q_f"].append(float(gate.mean()))
    return {k: {m: float(np.mean(v)) for m, v in d.items()} for k, d in sums.items()}


def format_probe(probe: dict[str, Any]) -> str:
    lines = ["| a_v | " + " | ".join(f"{s}: open / mean Q_f" for s in SCALINGS) + " |",
             "|---|" + "---|" * len(SCALINGS)]  # fmt: skip
    for name in CANDIDATES:
        cells = [f"{probe[f'{s}/{name}']['open']:.3f} / {probe[f'{s}/{name}']['q_f']:.3f}"
                 for s in SCALINGS]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
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
    parser.add_argument("--out", type=Path, help="JSON of the probe")
    args = parser.parse_args(argv)
    probe = gate_probe(args.agent, args.critics, args.dataset, args.env, args.seed, args.batches)
    print(format_probe(probe))
    if args.out is not None:
        atomic_write_json(args.out, {"agent": str(args.agent), "env": args.env, "probe": probe})
        print(f"{args.out}: written")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
