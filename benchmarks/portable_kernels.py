"""What pinning torch's kernels for cross-machine bytes cost, and what the reproducibility policy
(pipeline/tools/reproducibility.py) regained: updates per second of our agents with the pinned kernels
the train stage ran before (MKL's COMPATIBLE branch, convolutions on ATen's im2col and that BLAS
instead of oneDNN) against the native ones it runs now (MKL's AUTO branch, oneDNN's
convolutions: `pipeline.core.kernels.training_torch`), at one torch thread as the stages train.

Rows (each timed in a process of its own, as MKL reads its branch once; the two kernel sets
alternate `--repeats` times and each keeps its best pass, so a busy machine slows them alike):
- `state sac`: the state envs' agent (pipeline.learn.agents.sac, hidden 256, batch 128, DeepMDP on),
  on Pendulum-v1's 3-dim states;
- `pixels drq 64/2/256`: the CPU pixel preset's agent (64x64, stride-2 encoder, hidden 256);
- `pixels drq 84/1/1024`: DrQ's network at 84x84 (batch 128), slow here: few updates.

    python -m benchmarks.portable_kernels [--updates 200 20 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from pipeline.core.kernels import training_torch

ROWS = ("state sac", "pixels drq 64/2/256", "pixels drq 84/1/1024")
MODES = {"pinned": "COMPATIBLE", "native": "AUTO"}  # MKL_CBWR per kernel set


def update_fn(row: str) -> Callable[[], None]:
    """One update of `row`'s agent on a batch from a replay of random data."""
    if row == "state sac":
        from benchmarks.update_throughput import _random_steps
        from pipeline.learn.agents.off_policy import NetworkParams, SACParams
        from pipeline.learn.agents.replay import ReplayBuffer
        from pipeline.learn.agents.sac import SACAgent

        steps = _random_steps(5_000, seed=0)
        cfg = SACParams(network=NetworkParams(obs="state", hidden_dim=256), batch_size=128)
        agent = SACAgent((3,), _pendulum_space(), cfg)
        buffer = ReplayBuffer("state", (3,), 1, len(steps) + 10)
        for i, (obs, action, reward, next_obs, terminated, _) in enumerate(steps):
            if i == 0 or steps[i - 1][4] or steps[i - 1][5]:
                buffer.begin_episode(obs)
            buffer.add(action, reward, next_obs, terminated)
        rng = np.random.default_rng(0)
        return lambda: agent.update(buffer.sample(cfg.batch_size, rng))
    from benchmarks.pixel_throughput import our_agent, ours, random_frames

    size, stride, hidden = (int(x) for x in row.split()[-1].split("/"))
    agent, _ = our_agent("drq", (size, stride, hidden), batch=128, device="cpu")
    frames, starts = random_frames(1_000, size, seed=0)
    return ours(agent, frames, starts, None, 0.0)


def _pendulum_space():
    import gymnasium as gym

    return gym.make("Pendulum-v1").action_space


def worker(row: str, mode: str, updates: int) -> float:
    """Updates/s of `row` in this process, with `mode`'s torch settings (MKL's branch came with
    the environment)."""
    training_torch(1)
    if mode == "pinned":  # the former policy's convolutions: ATen's im2col and MKL
        torch.backends.mkldnn.enabled = False
    run = update_fn(row)
    run()  # warm up (allocator, lazy init)
    start = time.perf_counter()
    for _ in range(updates):
        run()
    return updates / (time.perf_counter() - start)


def measure(row: str, mode: str, updates: int) -> float:
    env = {**os.environ, "MKL_CBWR": MODES[mode]}
    env.pop("VLMRL_NATIVE_KERNELS", None)
    cmd = [sys.executable, "-m", "benchmarks.portable_kernels", "--worker", row, mode]
    out = subprocess.run(
        [*cmd, "--updates", *[str(updates)] * 3],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{row} ({mode}) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["rate"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--updates", type=int, nargs=3, default=[200, 20, 3], metavar="N",
                        help="updates per timed pass, per row")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="passes per kernel set (best kept)")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument("--worker", nargs=2, metavar=("ROW", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        row, mode = args.worker
        print(json.dumps({"rate": worker(row, mode, args.updates[0])}))
        return
    print("| 1 thread | pinned (before) | native (now) | native / pinned |")
    print("|---|---|---|---|")
    for row in args.rows:
        updates = args.updates[ROWS.index(row)]
        best = dict.fromkeys(MODES, 0.0)
        for _ in range(args.repeats):
            for mode in MODES:
                best[mode] = max(best[mode], measure(row, mode, updates))
        ratio = best["native"] / best["pinned"]
        print(f"| {row} | {best['pinned']:.2f} | {best['native']:.2f} | {ratio:.2f}x |", flush=True)


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
