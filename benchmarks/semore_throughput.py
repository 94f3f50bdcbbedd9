"""Gradient updates per second of Semore (pipeline.learn.methods.semore) against pixel SAC on the same
encoder, same frame size and batch, measured in one process, one thread: the cost of the second
stream, the similarity loss and the cross-attention.

Rows (all `SemoreAgent` variants, so the update loop is the same code; `sac-agent` is the repo's
SACAgent with the same sizes, as a check that the `sac` variant costs what SACAgent costs):
- `sac` (aux_weight 0): plain pixel SAC, 3 stacked frames into one encoder;
- `sac+deepmdp` (aux_weight 1): SAC + DeepMDP heads (the repo's `sac` method on pixels);
- `m1` ... `m4`: Semore table 2's ablations, `m4` the full method.

Each update's batch is pre-built (random uint8 frames, every row with a mask): batch sampling and
PNG decoding are not timed. Passes of the variants are interleaved and the best pass is kept,
which damps a busy neighbour on a shared CPU.

    python -m benchmarks.semore_throughput [--size 64] [--batch 128] [--hidden 1024] \
        [--updates 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from pipeline.learn.methods.semore import SemoreAgent, SemoreParams

SPACE = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)  # CarRacing-v3: steer, gas, brake


def semore_params(hidden: int, batch: int, variant: str, aux_weight: float) -> SemoreParams:
    """Table-6-like sizes (ERPv, whose SAC Semore builds on) and this module's choices."""
    network = {
        "obs": "pixels", "frame_stack": 3, "feature_dim": 50, "hidden_dim": hidden,
        "encoder_layers": 4, "encoder_filters": 32, "transition_hidden_dim": 512,
        "transition_learn_sigma": False, "log_std_min": -10.0, "log_std_max": 2.0,
        "attention_dim": 32, "attention_stride": 5,
    }  # fmt: skip
    return SemoreParams(
        network=network, batch_size=batch, gamma=0.99, actor_lr=1e-3, critic_lr=1e-3,
        alpha_lr=1e-4, model_lr=1e-3, adam_betas=(0.9, 0.999), critic_tau=0.01,
        encoder_tau=0.05, actor_update_freq=2, target_update_freq=2, init_temperature=0.1,
        aux_weight=aux_weight, start_steps=1000, update_every=1, offline_fraction=1.0,
        replay_capacity=100_000, log_every=1000, variant=variant, similarity_weight=1.0,
        transition_weight=1.0, reward_weight=1.0, ssim_alpha=0.84, ssim_window=11,
        ssim_sigma=1.5, selective_start=1.0, selective_end=0.5, selective_steps=10_000,
    )  # fmt: skip


def random_batch(size: int, batch: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randint(0, 256, (batch, 9, size, size), dtype=torch.uint8, generator=g),
        "next_obs": torch.randint(0, 256, (batch, 9, size, size), dtype=torch.uint8, generator=g),
        "action": torch.rand(batch, 3, generator=g) * 2 - 1,
        "reward": torch.randn(batch, generator=g),
        "done": torch.zeros(batch),
        "mask": (torch.rand(batch, 1, size, size, generator=g) > 0.8).to(torch.uint8) * 255,
        "has_mask": torch.ones(batch, dtype=torch.bool),
    }


def sac_agent_runner(size: int, hidden: int, batch: dict[str, torch.Tensor]) -> Callable | None:
    """The repo's SACAgent at the same sizes."""
    from pipeline.learn.agents.off_policy import NetworkParams, SACParams
    from pipeline.learn.agents.sac import SACAgent

    network = NetworkParams(obs="pixels", frame_stack=3, hidden_dim=hidden)
    agent = SACAgent(
        (size, size, 3), SPACE, SACParams(network=network, batch_size=len(batch["obs"]))
    )
    sac_batch = {k: batch[k] for k in ("obs", "next_obs", "action", "reward", "done")}

    def run(n: int) -> None:
        for _ in range(n):
            agent.update(sac_batch)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=64, help="frame side in pixels")
    parser.add_argument("--batch", type=int, default=128, help="batch size (table 6: 128)")
    parser.add_argument("--hidden", type=int, default=1024, help="actor / Q width (table 6: 1024)")
    parser.add_argument("--updates", type=int, default=20, help="updates per timed pass")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many passes")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    batch = random_batch(args.size, args.batch, seed=0)
    rows: dict[str, Callable[[int], Any]] = {}
    for name, variant, aux in (
        ("sac", "sac", 0.0), ("sac+deepmdp", "sac", 1.0),
        ("m1", "m1", 1.0), ("m2", "m2", 1.0), ("m3", "m3", 1.0), ("m4", "m4", 1.0),
    ):  # fmt: skip
        agent = SemoreAgent((args.size, args.size, 3), SPACE, semore_params(
            args.hidden, args.batch, variant, aux))  # fmt: skip

        def run(n: int, agent: SemoreAgent = agent) -> None:
            for _ in range(n):
                agent.update(batch)

        rows[name] = run
    sac_run = sac_agent_runner(args.size, args.hidden, batch)
    if sac_run is not None:
        rows["sac-agent"] = sac_run

    for run in rows.values():
        run(3)  # warm up (allocator, lazy init)
    best = dict.fromkeys(rows, 0.0)
    for _ in range(args.repeats):
        for name, run in rows.items():
            start = time.perf_counter()
            run(args.updates)
            best[name] = max(best[name], args.updates / (time.perf_counter() - start))
    print(
        f"{args.size}x{args.size} frames, batch {args.batch}, hidden {args.hidden}, "
        f"{args.threads} thread(s); best of {args.repeats} x {args.updates} updates"
    )
    print(f"{'variant':<12} {'updates/s':>10} {'vs sac':>8}")
    for name, rate in best.items():
        print(f"{name:<12} {rate:>10.2f} {rate / best['sac']:>7.2f}x")
    if sac_run is None:
        print("(sac-agent skipped: pipeline.learn.agents.sac has no SACConfig any more)")


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
