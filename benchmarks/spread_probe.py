"""What pulls a trained SAC-family actor's spread, term by term, no training. On random batches
of the dataset's labelled rows, one reparameterised sample a_r ~ pi(s) and the slope of each term
of the actor's loss (eq. 4 and 10) along a shift of its log-std:

- `entropy`: alpha log pi(a_r|s), eq. 10's first term (descent raises the spread);
- `q`: -min Q(s, a_r), eq. 10's second term;
- `vpg`: lambda_1 L_V, eq. 3-4, with the run's gate scaling and weight (`fixed` or `q_scaled`),
  on the labelled rows. eq. 3 compares a_v with the *sampled* a_r, so E[||a_v - a_r||^2]
  holds pi's variance: where the gate opens, the term can pull the spread down, whatever a_v is.

Each figure is d L / d delta at delta = 0, where delta shifts every row's raw log-std output
(before the actor's squash) by the same amount: a positive value means gradient descent on that
term lowers the spread. The rows are the dataset's labelled ones only, not the agent's own replay
(the other part of each training batch, which a checkpoint does not keep), so the terms need not
cancel here. Also: the entropy estimate -log pi on those rows against the target -|A| of eq. 11,
the mean log-std and the share of rows whose mean action sits near a bound.

Run it on an erpv agent with its C_V (an experiment's models/ and data/ checked out first), or
on any SAC-family agent without `--critics` (its `vpg` is then absent):

    python -m benchmarks.spread_probe --agent models/frames-cartpole-erpv-vpg-policy \\
        --critics models/critic --variant pixels --image-size 64 \\
        --dataset data/datasets/cartpole-swingup --env cartpole-swingup
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import run_main
from pipeline.core.io import atomic_write_json

TERMS = ("entropy", "q", "vpg")


def actor_terms(agent: Any, obs: Any, a_v: Any, critic: Any, config: dict[str, Any],
                noise_seed: int, shift: float = 0.0) -> tuple[dict[str, Any], Any, Any, Any]:  # fmt: skip
    """The actor's loss terms on one batch (`entropy`, `q`, and `vpg` when `critic` is given),
    with the raw log-std output shifted by `shift`, from the noise that `noise_seed` draws: (terms,
    the actor head's output as a leaf, log pi, the squashed mean)."""
    import torch

    from pipeline.learn.methods.erpv import vpg_loss

    head: dict[str, torch.Tensor] = {}

    def as_leaf(_module: Any, _inputs: Any, out: torch.Tensor) -> torch.Tensor:
        leaf = out.detach().requires_grad_(True)
        head["out"] = leaf
        half = out.shape[-1] // 2
        return leaf + torch.cat([torch.zeros_like(out[:, :half]),
                                 torch.full_like(out[:, half:], shift)], dim=-1)  # fmt: skip

    with torch.no_grad():
        h = agent.features(obs)
    handle = agent.actor.trunk.register_forward_hook(as_leaf)
    try:
        with torch.random.fork_rng():
            torch.manual_seed(noise_seed)
            a_r, log_pi, mean = agent.actor(h)  # a_r ~ pi, reparameterised
    finally:
        handle.remove()
    alpha = agent.alpha.detach()
    terms = {"entropy": (alpha * log_pi).mean(), "q": -agent.critic.q_min(h, a_r).mean()}
    if critic is not None:
        with torch.no_grad():
            q_v = critic(obs, a_v)
            q_r = agent.critic.q_min(h, a_r)
        l_v, _ = vpg_loss(q_v, q_r, a_v, a_r, config.get("gate_scaling", "per_critic"))
        weight = float(config.get("lambda_1", 10.0))
        if config.get("vpg_weight", "fixed") == "q_scaled":
            weight *= float(q_r.abs().mean())  # as training weighs it: no gradient
        terms["vpg"] = weight * l_v
    return terms, head["out"], log_pi, mean


def labelled_batches(agent: Any, dataset: Path, image_size: int | None, batches: int,
                     batch_size: int, seed: int) -> Iterator[tuple[Any, Any]]:  # fmt: skip
    """`batches` random batches of the dataset's labelled rows as the agent reads them: (its
    input, stacked within episodes as the replay buffer stacks frames; a_v in [-1, 1])."""
    import torch

    from pipeline.core.stacking import stack_window, to_channels
    from pipeline.dataset.transitions import load_offline_transitions, with_frame_size

    obs_kind = agent.cfg.network.obs
    offline = load_offline_transitions(dataset, obs_kind, ("action",))
    if image_size is not None:
        offline = with_frame_size(offline, image_size)
    frames, a_v = np.asarray(offline.obs), np.asarray(offline["a_v"])
    labelled = np.flatnonzero(np.asarray(offline["has_label"]))
    rng = np.random.default_rng(seed)
    for _ in range(batches):
        rows = rng.choice(labelled, size=min(batch_size, len(labelled)), replace=False)
        index = offline.obs_index[rows]
        if obs_kind == "pixels":
            window = stack_window(index, offline.episode_start[index], agent.frame_stack)
            obs = torch.as_tensor(to_channels(frames[window]))
        else:
            obs = torch.as_tensor(frames[index], dtype=torch.float32)
        labels = torch.as_tensor(a_v[rows], dtype=torch.float32)
        yield obs, agent.scale.normalise(labels).clamp(-1, 1)


def spread_probe(agent_dir: Path, dataset: Path, env_id: str, critics: Path | None = None,
                 seed: int = 0, batches: int = 20, batch_size: int = 128,
                 variant: str | None = None, image_size: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Per term, d loss / d delta (the module doc) over `batches` random batches of the
    dataset's labelled rows (mean and std over batches, ddof 1), with the entropy estimate,
    alpha, the mean log-std and the near-bound share; `vpg` only with `critics` (C_V)."""
    import torch

    from pipeline.learn.agents.checkpoint import read_meta
    from pipeline.learn.methods.erpv import VLMCritic, critic_dir
    from pipeline.learn.methods.table import load_agent

    agent = load_agent(agent_dir)
    config = read_meta(agent_dir).get("config", {})
    critic = None if critics is None else VLMCritic.load(critic_dir(critics / env_id, variant))
    grads: dict[str, list[float]] = {t: [] for t in TERMS}
    entropy: list[float] = []
    log_std: list[float] = []
    saturated: list[float] = []  # rows whose mean action is within 0.05 of a bound
    alpha = float(agent.alpha.detach())
    action_dim = 0
    rows = labelled_batches(agent, dataset, image_size, batches, batch_size, seed)
    for batch, (obs, a_v) in enumerate(rows):
        terms, out, log_pi, mean = actor_terms(agent, obs, a_v, critic, config, seed + batch)
        action_dim = out.shape[-1] // 2
        for name, loss in terms.items():
            (grad,) = torch.autograd.grad(loss, out, retain_graph=True)
            grads[name].append(float(grad[:, action_dim:].sum()))  # d loss / d delta
        squashed = torch.tanh(out.detach()[:, action_dim:])  # as Actor.forward squashes it
        lo, hi = agent.actor.log_std_min, agent.actor.log_std_max
        log_std.append(float((lo + 0.5 * (hi - lo) * (squashed + 1)).mean()))
        saturated.append(float((mean.detach().abs() > 0.95).float().mean()))
        entropy.append(float(-log_pi.detach().mean()))
    summary = {
        name: {"mean": float(np.mean(v)), "std_ddof1": float(np.std(v, ddof=1)), "per_batch": v}
        for name, v in grads.items()
        if v
    }
    return {
        "alpha": alpha,
        "entropy": float(np.mean(entropy)),
        "log_std": float(np.mean(log_std)),
        "saturated_mean": float(np.mean(saturated)),
        "target_entropy": -float(action_dim),
        "grad_log_std": summary,
        "batches": batches,
        "batch_size": batch_size,
    }


def format_probe(probe: dict[str, Any]) -> str:
    lines = [
        f"alpha {probe['alpha']:.4f}; entropy estimate {probe['entropy']:.3f} (target "
        f"{probe['target_entropy']:.0f}); log-std {probe['log_std']:.3f}; mean action within "
        f"0.05 of a bound on {probe['saturated_mean']:.3f} of rows; over {probe['batches']} "
        f"batches of {probe['batch_size']} labelled rows",
        "| term | d loss / d delta, delta added to every raw log-std (mean +- std over batches, ddof 1) |",
        "|---|---|",
    ]
    for name, g in probe["grad_log_std"].items():
        lines.append(f"| {name} | {g['mean']:+.4g} +- {g['std_ddof1']:.2g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agent", type=Path, required=True, help="a SAC-family agent's directory")
    parser.add_argument("--critics", type=Path, help="models/critic: an erpv agent's C_V")
    parser.add_argument("--dataset", type=Path, required=True, help="the env's dataset")
    parser.add_argument("--env", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--variant", help="the C_V variant the agent trained with (pixels)")
    parser.add_argument("--image-size", type=int, help="the frame size the run trained on")
    parser.add_argument("--out", type=Path, help="JSON of the probe")
    args = parser.parse_args(argv)
    probe = spread_probe(args.agent, args.dataset, args.env, args.critics, args.seed,
                         args.batches, variant=args.variant, image_size=args.image_size)  # fmt: skip
    print(format_probe(probe))
    if args.out is not None:
        atomic_write_json(args.out, {"agent": str(args.agent), "env": args.env, "probe": probe})
        print(f"{args.out}: written")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
