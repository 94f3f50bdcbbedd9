"""What are a dataset's action labels worth to an agent that imitates them? Behaviour cloning, no
RL: label_probe's encoder and tanh head (pixels: DrQ's encoder over the stacked frames; state:
the state's) regress the teacher's label a_v (MSE) on every labelled row of a dataset, then act
deterministically in the env for an evaluation: its return beside the teacher's own (acting
alone, `teacher_eval`) and a random policy's.

The labels are the teacher's actions at the states the collection visited. Where the clone
returns little although the teacher acting alone returns much, the labels do not hold the
teacher's knowledge where the agent will need it (the states its own policy reaches), and a
term that pulls an actor toward them can at best bring it what the clone shows; where the state
clone returns much and the pixel clone does not, the labels are there and the frames are the
obstacle.

    python -m benchmarks.clone_probe --dataset data/datasets/cartpole-swingup \\
        --params params.yaml --env cartpole-swingup --steps 3000 --seeds 0 1 2 \\
        --out reports/clone_probe.json

Each (kind, seed) is one clone: trained with that seed, evaluated over `--episodes` episodes
from `--eval-seed` (default: params' `evaluate.seed`); std over episodes and over clones ddof 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.label_probe import Probe, fit, labelled_rows
from pipeline.core.config import load_params
from pipeline.core.envs.wrappers import resize_frame
from pipeline.core.stacking import FrameStacker
from pipeline.learn.evaluation import Policy, evaluate_policy


def clone_policy(model: Probe, obs: str, frame_stack: int, size: int | None) -> Policy:
    """The trained probe as a deterministic policy over the env's observation dict: frames
    resized to the dataset's `size` where the env renders another, stacked as labelled_rows
    stacks them (restarting at each episode's first observation)."""
    stacker = FrameStacker(frame_stack, obs)
    fresh = [True]

    def begin(o: dict[str, np.ndarray]) -> None:
        fresh[0] = True

    def act(o: dict[str, np.ndarray]) -> np.ndarray:
        x = o[obs]
        if size is not None and x.shape[0] != size:
            x = resize_frame(x, size)
        x = stacker.reset(x) if fresh[0] else stacker.step(x)
        fresh[0] = False
        with torch.inference_mode():
            return model(torch.from_numpy(np.asarray(x))[None])[0].numpy()

    return Policy(act, obs, {}, begin)


def clone_row(
    model: Probe, inputs: np.ndarray, labels: np.ndarray, returns: list[float]
) -> dict[str, Any]:
    """How the clone fits its training rows, and what it returned acting."""
    with torch.inference_mode():
        pred = torch.cat(
            [model(torch.from_numpy(c)) for c in np.array_split(inputs, max(1, len(inputs) // 256))]
        ).numpy()
    return {
        "rows": len(labels),
        "sign_agreement_on_the_training_rows": float((np.sign(pred) == np.sign(labels)).mean()),
        "mse_on_the_training_rows": float(((pred - labels) ** 2).mean()),
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns, ddof=1)) if len(returns) > 1 else 0.0,
        "returns": [float(r) for r in returns],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--params", type=Path, required=True, help="the env's settings")
    parser.add_argument("--env", required=True)
    parser.add_argument("--kinds", nargs="+", choices=["state", "pixels"],
                        default=["state", "pixels"])  # fmt: skip
    parser.add_argument("--frame-stack", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--eval-seed", type=int, help="default: params' evaluate.seed")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    params = load_params(args.params)
    if args.env not in params.env:
        raise SystemExit(f"{args.params}: no `env.{args.env}` section")
    eval_seed = args.eval_seed
    if eval_seed is None:
        eval_seed = params.evaluate.seed if params.evaluate is not None else 0
    results: dict[str, Any] = {}
    for kind in args.kinds:
        inputs, labels, _ = labelled_rows(args.dataset, kind, args.frame_stack)
        size = inputs.shape[-1] if kind == "pixels" else None
        rows = np.arange(len(labels))
        for seed in args.seeds:
            model = fit(kind, inputs, labels, rows, args.steps, args.batch, args.hidden, seed)
            model.eval()
            policy = clone_policy(model, kind, args.frame_stack, size)
            played = evaluate_policy(
                policy, args.env, params.env[args.env], args.episodes, eval_seed,
                progress=f"clone {kind} s{seed}",
            )  # fmt: skip
            row = clone_row(model, inputs, labels, played.returns)
            results[f"{kind}, seed {seed}"] = row
            print(f"{kind:6s} s{seed}: return {row['return_mean']:.1f} +- {row['return_std']:.1f} "
                  f"(ddof 1, {args.episodes} episodes); training rows: sign agreement "
                  f"{row['sign_agreement_on_the_training_rows']:.3f}, MSE "
                  f"{row['mse_on_the_training_rows']:.3f}", flush=True)  # fmt: skip
        means = [results[f"{kind}, seed {s}"]["return_mean"] for s in args.seeds]
        std = float(np.std(means, ddof=1)) if len(means) > 1 else 0.0
        results[f"{kind}, over clones"] = {"return_mean": float(np.mean(means)),
                                           "return_std_ddof1": std, "clones": len(means)}  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shown = {k: [str(x) for x in v] if isinstance(v, list) else str(v)
                 for k, v in vars(args).items()}  # fmt: skip
        args.out.write_text(json.dumps({"args": shown, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
