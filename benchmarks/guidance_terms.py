"""How hard ERPv's policy guidance pulls on the actor, against SAC's own actor loss.

ERPv's actor loss is eq. 4, L_pi + lambda_1 L_V: SAC's (eq. 10, E[alpha log pi - Q_r]) plus the
VLM-guided term (eq. 3, E[q_f ||a_v - a_r||^2], gated by q_f = max(0, Q_v - Q_r) after min-max
scaling, with Q_v = C_V(o, a_v) from the frozen VLM critic). `benchmarks.temperature_terms`
splits the temperature's gradient from the logs; the actor's cannot be read from logs, so this
loads each finished erpv cell's final agent (`<out>/agents/<cell>`: actor, critic, encoder), its
C_V and its labelled dataset as the sweep built them, draws batches from the dataset (the
offline half of a training batch; C_V and a_v exist there only), and takes the two terms'
gradients on the actor's parameters separately:

    python -m benchmarks.guidance_terms reports/pixels --cells 'erpv*' --batches 32

Per cell: the gradient norms of L_pi and of lambda_1 L_V (means over the batches), their ratio
and cosine, the share of labelled rows whose gate is open, and the mean distance ||a_v - a_r||.
Cells of other methods (no guidance) are refused by name. Trains nothing; reads the sweep's
`params.yaml`, results, agents and data (`benchmarks.pixels.prepare`, which finds them built).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.sweep import cell_params, finished_cells


def term_gradients(agent: Any, batch: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """The gradients of eq. 4's two terms on `agent`'s actor parameters for one batch (flat
    vectors: L_pi's, lambda_1 L_V's), formed as the agent's own `update_actor_and_alpha` forms
    them (features detached, one sample a_r ~ pi for both), and the guidance's metrics."""
    import torch

    params = [p for p in agent.actor.parameters() if p.requires_grad]
    b = {k: v.to(agent.device) for k, v in batch.items()}
    with torch.no_grad():
        h = agent.features(b["obs"])
    pi, log_pi, _ = agent.actor(h)
    q_pi = agent.critic.q_min(h, pi)
    actor_loss = (agent.alpha.detach() * log_pi - q_pi).mean()  # eq. 10: L_pi
    guidance, metrics = agent.policy_guidance(h, pi, q_pi, b)  # lambda_1 L_V (eq. 3-4)
    if guidance is None:
        raise ValueError("no labelled row in the batch: no guidance term to measure")
    flat = []
    for loss, retain in ((actor_loss, True), (guidance, False)):
        grads = torch.autograd.grad(loss, params, retain_graph=retain, allow_unused=True)
        flat.append(torch.cat([torch.zeros_like(p).flatten() if g is None else g.flatten()
                               for g, p in zip(grads, params, strict=True)]))  # fmt: skip
    mask, a_v = agent._labelled_a_v(b)  # the rows and normalised a_v the guidance read
    metrics["distance"] = (a_v - pi[mask].detach()).norm(dim=-1).mean()
    metrics["labelled"] = mask.float().mean()
    return flat[0], flat[1], metrics


def gradient_terms(agent: Any, batch: dict[str, Any]) -> dict[str, float]:
    """`term_gradients`' norms and cosine, the share of labelled rows whose gate is open and the
    mean ||a_v - a_r|| (normalised actions)."""
    g_pi, g_v, metrics = term_gradients(agent, batch)
    norm_pi, norm_v = float(g_pi.norm()), float(g_v.norm())
    cosine = float(g_pi @ g_v) / (norm_pi * norm_v) if norm_pi and norm_v else math.nan
    return {
        "grad_pi": norm_pi,
        "grad_v": norm_v,
        "cosine": cosine,
        "gate_open": float(metrics["vpg/gate_open"]),
        "distance": float(metrics["distance"]),
        "labelled": float(metrics["labelled"]),
    }


def load_guided(
    method: Any, params: Any, name: str, inputs: Any, agent_dir: Path
) -> tuple[Any, Any]:
    """Run `name` of `params` as trained into `agent_dir` on `inputs`: its agent (with C_V) and
    a replay holding its labelled dataset alone. A run without policy guidance is refused."""
    from pipeline.agents.off_policy import env_obs_shape
    from pipeline.agents.replay import ReplayBuffer
    from pipeline.dataset.transitions import load_offline_transitions
    from pipeline.envs import make_env

    run = params.train[name]
    hp = method.params(params, run)
    if not hasattr(hp, "lambda_1"):
        raise SystemExit(f"{name}: a {run.method} run has no policy guidance (ERPv's eq. 4)")
    env = make_env(run.env, params.env[run.env], pixels=hp.network.obs != "state")
    try:
        agent, _ = method.build_agent(env, hp, run, inputs)
        agent.load_weights(agent_dir)
        offline = load_offline_transitions(inputs.dataset, hp.network.obs, method.labels)
        buffer = ReplayBuffer(
            hp.network.obs,
            env_obs_shape(env, hp.network),
            int(np.prod(env.action_space.shape)),
            2,  # no online step: every row from the dataset
            frame_stack=hp.network.frame_stack,
            offline=offline,
            offline_fraction=1.0,
            device=agent.device,
        )
    finally:
        env.close()
    return agent, buffer


def agent_terms(
    method: Any,
    params: Any,
    name: str,
    inputs: Any,
    agent_dir: Path,
    batches: int,
    batch_size: int | None = None,
) -> dict[str, float]:
    """Means over `batches` dataset batches of `gradient_terms` for run `name` (`load_guided`),
    as the logs average their windows (the min-max scaled gate swings from a few % to ~40%
    between batches); ratio = grad_v / grad_pi of the means."""
    import torch

    agent, buffer = load_guided(method, params, name, inputs, agent_dir)
    seed = params.train[name].seed
    torch.manual_seed(seed)  # the actor's samples a_r
    rng = np.random.default_rng(seed)
    rows = [gradient_terms(agent, buffer.sample(batch_size or agent.cfg.batch_size, rng))
            for _ in range(batches)]  # fmt: skip
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    mean["ratio"] = mean["grad_v"] / mean["grad_pi"] if mean["grad_pi"] else math.inf
    mean["lambda_1"] = agent.cfg.lambda_1
    return mean


def cell_terms(out: Path, name: str, batches: int, batch_size: int | None) -> dict[str, float]:
    """`agent_terms` of the finished cell `name` of the `benchmarks.pixels` sweep in `out`: its
    params (the cell's overrides applied), final agent and data as the sweep built them."""
    from benchmarks.pixels import ARMS, prepare, table_cells
    from pipeline.config import load_params
    from pipeline.methods.table import get_method

    agent_dir = out / "agents" / name
    if not (agent_dir / "agent.json").exists():
        raise FileNotFoundError(f"{name}: no final agent in {agent_dir} (is the cell finished?)")
    result = json.loads((out / "runs" / f"{name}.json").read_text())
    if result["arm"] not in ARMS:
        raise SystemExit(f"{name}: arm {result['arm']!r} is not one of benchmarks.pixels' arms")
    ns = argparse.Namespace(arms=[result["arm"]], seeds=result["seed"] + 1, eval_episodes=5)
    (cell,) = [c for c in table_cells(ns, result["steps"]) if c.name == name]
    params = cell_params(out / "params.yaml", cell)
    inputs = prepare(load_params(out / "params.yaml"), out, cell.data)  # built by the sweep
    method = get_method(params.train[name].method)
    return agent_terms(method, params, name, inputs, agent_dir, batches, batch_size)


def table(rows: dict[str, dict[str, float]]) -> str:
    head = (f"{'cell':24}{'lambda_1':>9}{'|g L_pi|':>10}{'|g l1 L_V|':>12}{'ratio':>8}"
            f"{'cosine':>8}{'gate open':>11}{'|a_v - a_r|':>13}")  # fmt: skip
    lines = [head]
    for name, r in rows.items():
        lines.append(
            f"{name:24}{r['lambda_1']:>9g}{r['grad_pi']:>10.3f}{r['grad_v']:>12.3f}"
            f"{r['ratio']:>8.2f}{r['cosine']:>8.2f}{r['gate_open']:>11.0%}{r['distance']:>13.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path, help="a benchmarks.pixels --out with finished cells")
    parser.add_argument("--cells", nargs="*", default=["erpv*"], help="names or patterns")
    parser.add_argument("--batches", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=None, help="default: the cell's")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.batches < 1:
        raise SystemExit(f"--batches must be >= 1, got {args.batches}")
    import torch

    torch.set_num_threads(args.threads)
    cells = finished_cells(args.out, args.cells)
    print(
        f"means over {args.batches} dataset batches of the gradients on the actor's parameters: "
        "SAC's L_pi (eq. 10) and lambda_1 L_V (eq. 3-4); gate open: labelled rows with q_f > 0"
    )
    print(table({n: cell_terms(args.out, n, args.batches, args.batch_size) for n in cells}))
    return 0


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
