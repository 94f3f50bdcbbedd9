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
term lowers the spread. Each figure is a mean over one set of rows: the dataset's labelled rows,
and with `--state` the agent's own (a checkpoint does not keep its replay). A training batch mixes
the two (`offline_fraction`), and eq. 4 takes L_pi's mean over the whole batch but L_V's over its
labelled rows alone, so the batch's slope is about the two sets' `entropy` and `q` averaged by
that fraction plus the dataset rows' whole `vpg`. Also, per set: the entropy estimate -log pi
against the target -|A| of eq. 11, the mean log-std and the share of rows whose mean action sits
near a bound.

`--state DIR` probes a run partway: the networks of one of its resume states (under a queued
table's resume root, `<root>/<run>/<fingerprint>/`, saved every `resume_every` steps) replace the
checkpoint's, which gives the architecture, and the state's online replay adds the agent's own
rows (no label there: no `vpg`; in a labelling-rounds run, read as unlabelled).

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
        # eq. 3 on the action the run pulled: the sample, or tanh(mu) (`vpg_action: mean`)
        pulled = mean if config.get("vpg_action", "sampled") == "mean" else a_r
        l_v, _ = vpg_loss(q_v, q_r, a_v, pulled, config.get("gate_scaling", "per_critic"))
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


def resume_networks(agent: Any, directory: Path) -> dict[str, Any]:
    """Put the networks and alpha of the resume state in `directory` (a run's state at some
    step) into `agent`, built from a checkpoint of the same architecture; returns the state,
    whose online replay holds the agent's own rows up to that step."""
    import torch

    from pipeline.learn.agents.resume import Resume, read_header

    header = read_header(directory)
    if header is None:
        raise ValueError(f"{directory}: no resume state (state.json) to probe")
    state = Resume(directory, header["fingerprint"], 1).load()  # its own fingerprint: any run's
    if state is None:
        raise ValueError(f"{directory}: its resume state cannot be read (the warning says why)")
    with torch.no_grad():
        for name, weights in state["agent"]["modules"].items():
            getattr(agent, name).load_state_dict(weights)
        agent.log_alpha.copy_(state["agent"]["log_alpha"])
    return state


def own_batches(agent: Any, replay: dict[str, Any], batches: int, batch_size: int,
                seed: int) -> Iterator[tuple[Any, None]]:  # fmt: skip
    """Random batches of a resume state's online replay (the rows the agent collected), stacked
    as the replay buffer stacks them; no label (a_v None)."""
    import torch

    from pipeline.core.stacking import stack_window, to_channels

    frames, starts = np.asarray(replay["obs"]), np.asarray(replay["episode_start"])
    index = np.asarray(replay["obs_index"])
    rng = np.random.default_rng(seed)
    for _ in range(batches):
        rows = index[rng.choice(len(index), size=min(batch_size, len(index)), replace=False)]
        if agent.cfg.network.obs == "pixels":
            window = stack_window(rows, starts[rows], agent.frame_stack)
            yield torch.as_tensor(to_channels(frames[window])), None
        else:
            yield torch.as_tensor(frames[rows], dtype=torch.float32), None


def term_slopes(agent: Any, rows: Iterator[tuple[Any, Any]], critic: Any,
                config: dict[str, Any], seed: int) -> dict[str, Any]:  # fmt: skip
    """Over the batches `rows` gives: each term's d loss / d delta (mean and std over batches,
    ddof 1, and each batch's), the entropy estimate, the mean log-std, the near-bound share."""
    import torch

    grads: dict[str, list[float]] = {}
    entropy: list[float] = []
    log_std: list[float] = []
    saturated: list[float] = []  # rows whose mean action is within 0.05 of a bound
    for batch, (obs, a_v) in enumerate(rows):
        with_critic = critic if a_v is not None else None  # no label, no L_V
        terms, out, log_pi, mean = actor_terms(agent, obs, a_v, with_critic, config, seed + batch)
        half = out.shape[-1] // 2
        for name, loss in terms.items():
            (grad,) = torch.autograd.grad(loss, out, retain_graph=True)
            grads.setdefault(name, []).append(float(grad[:, half:].sum()))  # d loss / d delta
        squashed = torch.tanh(out.detach()[:, half:])  # as Actor.forward squashes it
        lo, hi = agent.actor.log_std_min, agent.actor.log_std_max
        log_std.append(float((lo + 0.5 * (hi - lo) * (squashed + 1)).mean()))
        saturated.append(float((mean.detach().abs() > 0.95).float().mean()))
        entropy.append(float(-log_pi.detach().mean()))
    return {
        "entropy": float(np.mean(entropy)),
        "log_std": float(np.mean(log_std)),
        "saturated_mean": float(np.mean(saturated)),
        "grad_log_std": {
            name: {"mean": float(np.mean(v)), "std_ddof1": float(np.std(v, ddof=1)), "per_batch": v}
            for name, v in grads.items()
        },
    }


def spread_probe(agent_dir: Path, dataset: Path, env_id: str, critics: Path | None = None,
                 seed: int = 0, batches: int = 20, batch_size: int = 128,
                 variant: str | None = None, image_size: int | None = None,
                 state: Path | None = None,
                 vpg_action: str | None = None) -> dict[str, Any]:  # fmt: skip
    """`term_slopes` on `batches` random batches of the dataset's labelled rows (`vpg` only with
    `critics`, C_V) and, with `state` (a resume state of the run: its networks replace the
    checkpoint's), on as many batches of the agent's own rows up to that state's step.
    `vpg_action` (`sampled`, `mean`) replaces the checkpoint's: a state of a run whose setting
    differs from the checkpoint that gives the architecture."""
    from pipeline.learn.agents.checkpoint import read_meta
    from pipeline.learn.methods.erpv import VLMCritic, critic_dir
    from pipeline.learn.methods.table import load_agent

    agent = load_agent(agent_dir)
    config = read_meta(agent_dir).get("config", {})
    if vpg_action is not None:
        config = {**config, "vpg_action": vpg_action}
    critic = None if critics is None else VLMCritic.load(critic_dir(critics / env_id, variant))
    resumed = None if state is None else resume_networks(agent, state)
    labelled = labelled_batches(agent, dataset, image_size, batches, batch_size, seed)
    probe = {
        "alpha": float(agent.alpha.detach()),
        "target_entropy": float(agent.target_entropy),
        "step": None if resumed is None else int(resumed["step"]),
        "vpg_action": config.get("vpg_action", "sampled"),
        "batches": batches,
        "batch_size": batch_size,
        "rows": {"dataset": term_slopes(agent, labelled, critic, config, seed)},
    }
    if resumed is not None:
        own = own_batches(agent, resumed["buffer"], batches, batch_size, seed)
        probe["rows"]["own"] = term_slopes(agent, own, critic, config, seed)
    return probe


def format_probe(probe: dict[str, Any]) -> str:
    at = "the checkpoint" if probe["step"] is None else f"the resume state at step {probe['step']}"
    lines = [f"{at}: alpha {probe['alpha']:.4f}, target entropy {probe['target_entropy']:.0f}; "
             f"{probe['batches']} batches of {probe['batch_size']} rows"]  # fmt: skip
    for kind, r in probe["rows"].items():
        lines += [
            f"\n{kind} rows: entropy estimate {r['entropy']:.3f}; log-std {r['log_std']:.3f}; "
            f"mean action within 0.05 of a bound on {r['saturated_mean']:.3f} of rows",
            "| term | d loss / d delta, delta added to every raw log-std (mean +- std over "
            "batches, ddof 1) |",
            "|---|---|",
        ]
        for name, g in r["grad_log_std"].items():
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
    parser.add_argument("--state", type=Path, help="a resume state of the run (its directory): "
                        "its networks, and its own rows beside the dataset's")  # fmt: skip
    parser.add_argument("--vpg-action", choices=("sampled", "mean"),
                        help="eq. 3's action as the run had it, where the agent's differs "
                        "(default: the agent's)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="JSON of the probe")
    args = parser.parse_args(argv)
    probe = spread_probe(args.agent, args.dataset, args.env, args.critics, args.seed,
                         args.batches, variant=args.variant, image_size=args.image_size,
                         state=args.state, vpg_action=args.vpg_action)  # fmt: skip
    print(format_probe(probe))
    if args.out is not None:
        atomic_write_json(args.out, {"agent": str(args.agent), "env": args.env, "probe": probe})
        print(f"{args.out}: written")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
