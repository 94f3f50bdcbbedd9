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

`--teacher DIR --rounds N`: DAgger (Ross et al., 2011) with the labelling teacher
(a policy teacher's checkpoint, `models/teachers/<env>`). Each round the clone plays
`--round-episodes` episodes of its own (seeds from `--round-seed`, none an evaluation's), the
teacher labels every step with its deterministic action at the env's state there, and a fresh
clone is fitted to the dataset's rows plus every round's (what the clone read at those steps:
the state, or the stacked frames of a pixel clone); each round's clone is evaluated as the
first. Where
the rounds' clones return much more than the first, and more than with `--round-behaviour
random` (as many teacher labels, of uniform random actions' states: the control), the teacher's
knowledge is in its labels of the states a policy of its own reaches.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.label_probe import Probe, fit, labelled_rows, write_results
from pipeline.core.config import load_params
from pipeline.core.envs.wrappers import resize_frame
from pipeline.core.stacking import FrameStacker
from pipeline.learn.evaluation import Policy, evaluate_policy


def clone_policy(
    model: Probe, obs: str, frame_stack: int, size: int | None,
    seen: list[tuple[np.ndarray, np.ndarray]] | None = None,
    uniform: tuple[np.ndarray, np.ndarray] | None = None, seed: int = 0,
) -> Policy:  # fmt: skip
    """The trained probe as a deterministic policy over the env's observation dict: frames
    resized to the dataset's `size` where the env renders another, stacked as labelled_rows
    stacks them (restarting at each episode's first observation). `seen`: each step's input
    row and the env's state are appended to it. `uniform` (low, high): act uniformly at random
    in those bounds instead (seeded by `seed`), the rows stacked all the same."""
    stacker = FrameStacker(frame_stack, obs)
    fresh = [True]
    rng = np.random.default_rng(seed)

    def begin(o: dict[str, np.ndarray]) -> None:
        fresh[0] = True

    def act(o: dict[str, np.ndarray]) -> np.ndarray:
        x = o[obs]
        if size is not None and x.shape[0] != size:
            x = resize_frame(x, size)
        x = np.asarray(stacker.reset(x) if fresh[0] else stacker.step(x))
        fresh[0] = False
        if seen is not None:
            seen.append((x, np.asarray(o["state"], dtype=np.float32)))
        if uniform is not None:
            return rng.uniform(*uniform).astype(np.float32)
        with torch.inference_mode():
            return model(torch.from_numpy(x)[None])[0].numpy()

    return Policy(act, obs, {}, begin)


def visited_rows(
    model: Probe, obs: str, frame_stack: int, size: int | None, env_id: str, env_cfg: Any,
    episodes: int, seed: int, uniform: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """What the clone reads at every step of `episodes` episodes from `seed` on (its input rows,
    as labelled_rows gives them) and the env's state there, (N, ...) and (N, D); with `uniform`
    (low, high), those of uniform random actions in those bounds instead (seeded)."""
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    policy = clone_policy(model, obs, frame_stack, size, seen, uniform, seed)
    evaluate_policy(policy, env_id, env_cfg, episodes, seed)
    return np.stack([x for x, _ in seen]), np.stack([state for _, state in seen])


def teacher_labels(teacher: Policy, states: np.ndarray) -> np.ndarray:
    """The teacher's deterministic action at each state, (N, A): what the `policy` backend
    answers an action prompt at reliability 1 (a state agent stacks nothing)."""
    out = []
    for state in states:
        obs = {"state": state}
        teacher.begin(obs)
        out.append(np.asarray(teacher.act(obs), dtype=np.float32).reshape(-1))
    return np.stack(out)


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
    parser.add_argument("--teacher", type=Path, help="the labelling policy teacher's checkpoint")
    parser.add_argument("--rounds", type=int, default=0, help="DAgger rounds (with --teacher)")
    parser.add_argument("--round-episodes", type=int, default=10)
    parser.add_argument("--round-seed", type=int, default=20000)
    parser.add_argument(
        "--round-behaviour", choices=["clone", "random"], default="clone",
        help="who plays a round's episodes: the clone (DAgger), or uniform random actions (the "
        "control: as many teacher labels, at states that no policy of its own chose)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.rounds and args.teacher is None:
        raise SystemExit("--rounds: give --teacher DIR (a state agent: it labels the env's "
                         "state at each step the clone takes)")  # fmt: skip
    teacher, uniform = None, None
    if args.rounds:
        from pipeline.learn.methods.table import load_policy

        teacher = load_policy(args.teacher, True)
        if teacher.obs != "state" or teacher.meta.get("env") != args.env:
            raise SystemExit(f"{args.teacher}: not a state agent of {args.env}")
        if args.round_behaviour == "random":  # the control acts in the teacher's action bounds
            uniform = (np.asarray(teacher.meta["action_low"], np.float32),
                       np.asarray(teacher.meta["action_high"], np.float32))  # fmt: skip
    torch.set_num_threads(1)
    params = load_params(args.params)
    if args.env not in params.env:
        raise SystemExit(f"{args.params}: no `env.{args.env}` section")
    eval_seed = args.eval_seed
    if eval_seed is None:
        eval_seed = params.evaluate.seed if params.evaluate is not None else 0
    results: dict[str, Any] = {}
    env_cfg = params.env[args.env]

    def returns(model: Probe, kind: str, size: int | None, progress: str | None = None):
        policy = clone_policy(model, kind, args.frame_stack, size)
        return evaluate_policy(
            policy, args.env, env_cfg, args.episodes, eval_seed, progress=progress
        ).returns

    for kind in args.kinds:
        inputs, labels, _ = labelled_rows(args.dataset, kind, args.frame_stack)
        size = inputs.shape[-1] if kind == "pixels" else None
        every = np.arange(len(labels))
        for seed in args.seeds:
            model = fit(kind, inputs, labels, every, args.steps, args.batch, args.hidden, seed)
            model.eval()
            row = clone_row(
                model, inputs, labels, returns(model, kind, size, f"clone {kind} s{seed}")
            )
            results[f"{kind}, seed {seed}"] = row
            print(f"{kind:6s} s{seed}: return {row['return_mean']:.1f} +- {row['return_std']:.1f} "
                  f"(ddof 1, {args.episodes} episodes); training rows: sign agreement "
                  f"{row['sign_agreement_on_the_training_rows']:.3f}, MSE "
                  f"{row['mse_on_the_training_rows']:.3f}", flush=True)  # fmt: skip
            x, y = inputs, labels
            for r in range(1, args.rounds + 1):
                assert teacher is not None
                read, states = visited_rows(model, kind, args.frame_stack, size, args.env,
                                            env_cfg, args.round_episodes,
                                            args.round_seed + 1000 * r, uniform)  # fmt: skip
                x, y = (
                    np.concatenate([x, read]),
                    np.concatenate([y, teacher_labels(teacher, states)]),
                )
                model = fit(kind, x, y, np.arange(len(y)), args.steps, args.batch, args.hidden,
                            seed).eval()  # fmt: skip
                row = {
                    **clone_row(model, x, y, returns(model, kind, size)),
                    "teacher_labels": len(y) - len(labels),
                }
                results[f"{kind}, seed {seed}, round {r}"] = row
                print(f"  round {r}: {row['teacher_labels']} teacher labels of the rounds' "
                      f"states; return {row['return_mean']:.1f} +- {row['return_std']:.1f}",
                      flush=True)  # fmt: skip
        for r in range(args.rounds + 1):
            at = "" if r == 0 else f", round {r}"
            means = [results[f"{kind}, seed {s}{at}"]["return_mean"] for s in args.seeds]
            std = float(np.std(means, ddof=1)) if len(means) > 1 else 0.0
            results[f"{kind}{at}, over clones"] = {"return_mean": float(np.mean(means)),
                                                   "return_std_ddof1": std, "clones": len(means)}  # fmt: skip
    if args.out:
        write_results(args.out, args, results)


if __name__ == "__main__":
    main()
