"""Can an actor's network read the teacher's action label from what it observes? A supervised
probe, no RL: the encoder of a run (pixels: DrQ's, frame stack k, as P1's cells; or the state)
and a tanh head regress the teacher's label a_v (MSE) on one episode of a dataset and are scored
on another: the share of held-out rows whose prediction has the label's sign, the held-out MSE
against that of predicting the training episode's mean label, and the sign agreement on the
training rows (a probe that fits those and not the held-out ones memorised). Where the pixel
probe cannot beat the mean label from frames while the state probe can, the label depends on
something this network does not read from these frames at this budget, and a term that pulls
the actor toward the labels has nothing there that it can learn.

    python -m benchmarks.label_probe --dataset data/datasets/MountainCarContinuous-v0 \\
        --steps 1500 --out reports/label_probe.json

A trained agent's encoder, frozen, is probed with `--agent models/<run>` (repeat for several):
the head alone learns from the features that agent's actor reads, computed over the same rows,
beside what its actor does there (its deterministic action against the label: sign agreement,
squared distance, and the action's spread over the rows);
`--kinds` chooses which encoders the probe trains from scratch (default: state and pixels;
`--kinds` with nothing after it: none).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pipeline.core.stacking import stack_window, to_channels
from pipeline.dataset.transitions import load_offline_transitions
from pipeline.learn.agents.networks import make_encoder


def labelled_rows(dataset: Path, obs: str, frame_stack: int):
    """(inputs per labelled row, a_v (N, A), episode id per row) of `dataset`."""
    data = load_offline_transitions(dataset, obs, ("action",))
    rows = np.flatnonzero(data["has_label"].reshape(len(data)))
    index = data.obs_index[rows]
    if obs == "pixels":
        window = stack_window(index, data.episode_start[index], frame_stack)
        inputs = to_channels(data.obs[window])  # (N, 3k, H, W) uint8
    else:
        inputs = data.obs[index].astype(np.float32)
    return inputs, data["a_v"][rows].astype(np.float32), data.episode_start[index]


def agent_readout(
    agent_dir: Path, inputs: np.ndarray, batch: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """What the actor of the agent in `agent_dir` (an off-policy, SAC-family agent) reads and
    does over `inputs` (`labelled_rows`' uint8 frames or states), in inference mode: the latent
    it reads, (N, F) (`actor_features`: the critic's encoder for a shared or coupled actor,
    its own head's for DrQ's), and its deterministic action in env units, (N, A)."""
    from pipeline.learn.methods.table import load_agent

    agent = load_agent(agent_dir)
    features, actions = [], []
    with torch.inference_mode():
        for i in range(0, len(inputs), batch):
            h = agent.actor_features(torch.from_numpy(inputs[i : i + batch]).to(agent.device))
            mean, _, _ = agent.actor(h, True)
            features.append(h.float().cpu())
            actions.append(agent.scale.unnormalise(mean).float().cpu())
    return torch.cat(features).numpy(), torch.cat(actions).numpy()


def actor_row(actions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """How the actor's deterministic actions (N, A) stand to the labels (N, A) on the same
    rows: the share with the label's sign, the mean squared distance, and how much the action
    varies over the rows (std over rows, ddof 1, mean over the action's dimensions)."""
    return {
        "rows": len(actions),
        "sign_agreement": float((np.sign(actions) == np.sign(labels)).mean()),
        "mse": float(((actions - labels) ** 2).mean()),
        "action_std": float(actions.std(0, ddof=1).mean()),
        "mean_action": float(actions.mean()),
    }


class Probe(nn.Module):
    """The encoder (pixels: uint8 frames in, scaled by the encoder itself, as in training) and a
    tanh head."""

    def __init__(self, obs: str, shape: tuple[int, ...], action_dim: int, hidden: int) -> None:
        super().__init__()
        # `features`: a trained encoder's outputs, frozen (`--features`): the head alone learns
        kind: Any = obs  # "pixels" or "state" where not "features"
        self.encoder: nn.Module = nn.Identity() if obs == "features" else make_encoder(kind, shape)
        width = shape[0] if obs == "features" else 50
        self.head = nn.Sequential(
            nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, action_dim), nn.Tanh()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def fit(obs: str, inputs, labels, train, steps: int, batch: int, hidden: int, seed: int) -> Probe:
    """A Probe regressing `labels` on `inputs` (MSE, Adam 1e-3) over the rows `train`, `steps`
    batches of `batch` rows drawn with replacement."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Probe(obs, inputs.shape[1:], labels.shape[1], hidden)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.from_numpy(inputs), torch.from_numpy(labels)
    for _ in range(steps):
        pick = torch.from_numpy(rng.choice(train, batch))
        loss = (model(x[pick]) - y[pick]).pow(2).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
    return model


def probe(obs: str, inputs, labels, train, test, steps: int, batch: int, hidden: int, seed: int):
    model = fit(obs, inputs, labels, train, steps, batch, hidden, seed)
    x, y = torch.from_numpy(inputs), torch.from_numpy(labels)
    with torch.no_grad():
        pred, fitted = (
            torch.cat([model(x[torch.from_numpy(c)]) for c in np.array_split(rows, 16)])
            for rows in (test, train)
        )
    held, seen = y[torch.from_numpy(test)], y[torch.from_numpy(train)]
    mean_label = seen.mean(0)
    return {
        "rows_train": len(train),
        "rows_test": len(test),
        "sign_agreement": float((torch.sign(pred) == torch.sign(held)).float().mean()),
        "sign_agreement_on_the_training_rows": float(
            (torch.sign(fitted) == torch.sign(seen)).float().mean()
        ),
        "mse": float((pred - held).pow(2).mean()),
        "mse_of_the_mean_label": float((mean_label - held).pow(2).mean()),
        "mean_abs_prediction": float(pred.abs().mean()),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--frame-stack", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--features", type=Path, action="append", default=[],
        help="a .npy of an agent's encoder outputs (N, F) for the labelled rows in the probe's "
        "order (`labelled_rows(..., 'pixels', k)`): the head alone learns from them, frozen; "
        "repeat for several agents",
    )  # fmt: skip
    parser.add_argument(
        "--agent", type=Path, action="append", default=[],
        help="a trained SAC-family agent's directory (agent.json, agent.safetensors): the "
        "latent its actor reads over the labelled rows, frozen, as --features, and its actor's "
        "deterministic actions scored against the labels; repeat for several agents",
    )  # fmt: skip
    parser.add_argument(
        "--kinds", nargs="*", choices=["state", "pixels"], default=["state", "pixels"],
        help="the encoders trained from scratch with the head (default: both; none: --kinds)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {}
    kinds = [  # (kind, its file or directory, whether that is an agent's)
        *((kind, None, False) for kind in args.kinds),
        *(("features", f, False) for f in args.features),
        *(("features", a, True) for a in args.agent),
    ]
    read: dict[str, tuple] = {}  # the dataset read once per kind: features reuse the pixels' rows
    for kind, features, agent in kinds:
        source = "pixels" if features else kind
        if source not in read:
            read[source] = labelled_rows(args.dataset, source, args.frame_stack)
        inputs, labels, episode = read[source]
        name = kind
        if features is not None:  # the spread: the features' std over rows (ddof 1), mean over F
            if agent:  # --agent: what its actor reads, and what it does with it
                inputs, actions = agent_readout(features, inputs)
                row = actor_row(actions, labels)
                results[f"{features.name}: its actor, every labelled row"] = row
                print(f"{features.name}: its actor's sign agreement {row['sign_agreement']:.3f}, "
                      f"MSE {row['mse']:.3f}, action std over rows {row['action_std']:.3g} "
                      f"(ddof 1), mean action {row['mean_action']:.3f}", flush=True)  # fmt: skip
            else:
                inputs = np.load(features, allow_pickle=False).astype(np.float32)
            if len(inputs) != len(labels):
                raise SystemExit(f"{features}: {len(inputs)} rows, the dataset {len(labels)}")
            name = f"{features.name} (spread {inputs.std(0, ddof=1).mean():.2g})"
        episodes = np.unique(episode)
        if len(episodes) < 2:
            raise SystemExit(
                f"{args.dataset}: one episode; the probe trains on one and tests on another"
            )
        for held_out in episodes[:2]:
            train, test = np.flatnonzero(episode != held_out), np.flatnonzero(episode == held_out)
            row = probe(kind, inputs, labels, train, test, args.steps, args.batch, args.hidden,
                        args.seed)  # fmt: skip
            results[f"{name}, held-out episode starting at row {held_out}"] = row
            print(f"{name:6s} held out {held_out:5d}: sign agreement {row['sign_agreement']:.3f} "
                  f"(training rows {row['sign_agreement_on_the_training_rows']:.3f}), "
                  f"MSE {row['mse']:.3f} (the mean label's {row['mse_of_the_mean_label']:.3f}), "
                  f"mean |prediction| {row['mean_abs_prediction']:.3f}", flush=True)  # fmt: skip
    if args.out:
        write_results(args.out, args, results)


def write_results(out: Path, args: argparse.Namespace, results: dict[str, Any]) -> None:
    """A probe's raw file: its command-line arguments (as strings) and its results."""
    out.parent.mkdir(parents=True, exist_ok=True)
    shown = {k: [str(x) for x in v] if isinstance(v, list) else str(v)
             for k, v in vars(args).items()}  # fmt: skip
    out.write_text(json.dumps({"args": shown, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
