"""Pixel updates per second: our SAC-family update (replay sampling included) against a reference
DrQ update written after the authors' code, at the same sizes and batch, in the same run.

The reference is benchmarks.drq_reference's, adapted from denisyarats/drq (MIT; see there): its
encoder, actor and critic, its update and its replay (obs and next_obs stored stacked, uint8,
the batch converted to float and shifted). `--k` sets DrQ's K = M (target and Q loss averaged
over K augmentations; the paper's table 1 uses 2, our `drq` and DrQ-v2 1).

Rows, per size (`--configs`):
- `reference DrQ (K=M=k)`: the above;
- `reference DrQ-v2`: DrQ-v2's update (drqv2.py: no target encoder, obs encoded once for critic
  and actor; every update trains the actor) on the same replay;
- `ours: drq`: pipeline.learn.methods.drq's agent and pipeline.learn.agents.replay.ReplayBuffer (frames once
  as uint8, stacked by a gather, shift on uint8), aux_weight 0 as the paper's agent, with DrQ's
  actor (its own head over the critic's convs); `..., actor on the critic's features` the same
  with SAC-AE's actor (`actor_encoder: shared`);
- `ours: sac + DeepMDP`: the same without the shift, with ERPv's DeepMDP heads (its base agent);
- `ours: erpv`: that plus VPG + VER on a batch half from a labelled dataset (C_V forward, the
  transition model's confidence): ERPv's extra work; `..., the actor's loss into the encoder`
  the same with `actor_encoder: coupled` (one more encoder pass, forward and backward, per
  actor step);
- `ours: semore m4`: the dual-stream encoder, cross-attention and eq. 5 on masked rows.

Each row fills its replay with the same random frames (episodes of 125 steps) and is timed on
`--updates` updates, the rows interleaved `--repeats` times (best pass kept), so a busy
machine slows them alike. Ratios are against the reference with the first `--k` (K = M = 1 by
default: equal work per augmentation), then against DrQ-v2's (`x v2`).

    python -m benchmarks.pixel_throughput --threads 2
    python -m benchmarks.pixel_throughput --configs 84:1:1024 --k 1 2
    python -m benchmarks.pixel_throughput --device cuda --configs 84:1:1024 --flops \
        --compile default reduce-overhead     # on a GPU (benchmarks/device_pixels.sh)

On a GPU every row runs on the device (the reference's replay stays on the host, as DrQ's does,
and each batch moves); `--compile` adds rows of `ours: drq` (or of the agents `--compiled`
names) with the agents' `compile` setting per mode (torch.compile of every network;
`reduce-overhead` adds CUDA graphs, one iteration an update), and `--flops` counts
each row's FLOPs per update (FlopCounterMode) and the share of the GPU's data-sheet peak they
reach. A row that fails its warm-up is reported with its error; the others are timed.
"""

from __future__ import annotations

import argparse
import time
import typing
from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np
import torch

from benchmarks.drq_reference import RefDrQAgent, RefDrQv2Agent, RefReplay
from pipeline.core.stacking import stack_window
from pipeline.dataset.transitions import (
    JUDGE_SPEC,
    OfflineTransitions,
    action_label_specs,
    mask_specs,
)
from pipeline.learn.agents.off_policy import NetworkParams, SACParams
from pipeline.learn.agents.replay import ReplayBuffer
from pipeline.learn.methods.drq import DrQAgent, DrQParams
from pipeline.learn.methods.erpv import ERPvAgent, ERPvParams, VLMCritic
from pipeline.learn.methods.semore import SemoreAgent, SemoreParams

SPACE = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)  # cartpole-swingup: one action
EPISODE = 125  # cartpole-swingup at action repeat 8


# ---- the reference (benchmarks.drq_reference) on a replay of random frames ----------------------


class RefDrQ:
    """The reference agent's update with replay_buffer.py's sampling, K = M = `k`."""

    def __init__(self, frames: np.ndarray, starts: np.ndarray, size: int, stride: int,
                 hidden: int, batch: int, k: int, device: str = "cpu") -> None:  # fmt: skip
        self.agent = RefDrQAgent(
            (9, size, size), 1, stride=stride, hidden=hidden, k=k, device=device
        )
        self.batch = batch
        # replay_buffer.py stores every obs and next_obs stacked: (N, 9, H, W) uint8 twice
        idx = np.arange(len(frames) - 1)
        idx = idx[starts[idx + 1] == starts[idx]]  # transitions within an episode
        stack = stack_window(idx, starts[idx], 3)
        chw = np.ascontiguousarray(frames.transpose(0, 3, 1, 2))
        self.replay = RefReplay((9, size, size), 1, len(idx))
        self.replay.obses[:] = chw[stack].reshape(len(idx), 9, size, size)
        self.replay.next_obses[:] = chw[stack_window(idx + 1, starts[idx + 1], 3)].reshape(
            len(idx), 9, size, size
        )
        self.replay.actions[:] = np.random.default_rng(0).uniform(-1, 1, (len(idx), 1))
        self.replay.rewards[:] = np.random.default_rng(1).uniform(0, 1, (len(idx), 1))
        self.replay.not_dones_no_max[:] = 1.0
        self.replay.full = True
        self.rng = np.random.default_rng(0)

    def update(self) -> None:
        # replay_buffer.py samples on the host and moves the batch to the training device
        device = self.agent.device
        self.agent.update(*(t.to(device) for t in self.replay.sample(self.batch, self.rng)))


class RefDrQv2(RefDrQ):
    """DrQ-v2's update (benchmarks.drq_reference.RefDrQv2Agent) on the same stacked replay (its
    own replay stacks frames in DataLoader workers, off the training thread: not timed)."""

    def __init__(self, frames: np.ndarray, starts: np.ndarray, size: int, stride: int,
                 hidden: int, batch: int, device: str = "cpu") -> None:  # fmt: skip
        super().__init__(frames, starts, size, stride, hidden, batch, 1, device)
        self.agent = RefDrQv2Agent((9, size, size), 1, stride=stride, hidden=hidden, device=device)


# ---- ours ----------------------------------------------------------------------------------------


def random_frames(n: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` random frames (n, size, size, 3) uint8 in episodes of EPISODE steps, and each frame's
    episode start."""
    frames = np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)
    return frames, (np.arange(n) // EPISODE) * EPISODE


def labelled_offline(frames: np.ndarray, starts: np.ndarray) -> OfflineTransitions:
    """The frames as a dataset whose every transition has an a_v label, every frame a mask and a
    judge verdict (what ERPv and Semore read)."""
    idx = np.arange(len(frames) - 1)
    idx = idx[starts[idx + 1] == starts[idx]]
    rng = np.random.default_rng(2)
    n, hw = len(idx), frames.shape[1:3]
    specs = (*action_label_specs(1), *mask_specs(hw), JUDGE_SPEC)
    a_v = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
    fields = {
        "a_v": a_v, "has_label": np.ones(n, bool), "next_a_v": a_v, "has_next_label": np.ones(n, bool),
        "mask": ((rng.random((len(frames), 1, *hw)) > 0.8) * 255).astype(np.uint8),
        "has_mask": np.ones(len(frames), bool),
        "judge": np.ones(n, np.int8),
    }  # fmt: skip
    return OfflineTransitions(
        obs=frames, episode_start=starts, obs_index=idx,
        action=rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        reward=rng.uniform(0, 1, n).astype(np.float32), terminated=np.zeros(n, bool),
        specs=specs, fields=fields,
    )  # fmt: skip


def ours(agent, frames: np.ndarray, starts: np.ndarray, offline: OfflineTransitions | None,
         offline_fraction: float) -> Callable[[], None]:  # fmt: skip
    """One update of `agent` on a batch its replay draws (the loop's two calls)."""
    cfg = agent.cfg
    buffer = ReplayBuffer(
        "pixels", frames.shape[1:], 1, len(frames) + 10, offline=offline,
        offline_fraction=offline_fraction, device=agent.device,
    )  # fmt: skip
    actions = np.random.default_rng(0).uniform(-1, 1, (len(frames), 1)).astype(np.float32)
    for t, frame in enumerate(frames):
        if starts[t] == t:
            buffer.begin_episode(frame)
        else:
            buffer.add(actions[t], 0.5, frame, False)
    rng = np.random.default_rng(0)

    def run() -> None:
        agent.update(buffer.sample(cfg.batch_size, rng, update=agent.update_step))

    return run


def network(size_stride_hidden: tuple[int, int, int]) -> NetworkParams:
    _, stride, hidden = size_stride_hidden
    return NetworkParams(
        obs="pixels", frame_stack=3, feature_dim=50, hidden_dim=hidden, encoder_layers=4,
        encoder_filters=32, encoder_stride=stride, transition_hidden_dim=hidden,
    )  # fmt: skip


# our agents' rows: short name (--compiled) -> row label
OURS = {
    "drq": "drq",  # DrQ's actor: its own head on the critic's convs
    "drq-shared": "drq, actor on the critic's features",  # SAC-AE's actor (`actor_encoder: shared`)
    "sac": "sac + DeepMDP",
    "erpv": "erpv (VPG + VER)",
    "erpv-coupled": "erpv, the actor's loss into the encoder",  # `actor_encoder: coupled`
    "semore": "semore m4",
}
COMPILE_MODES = [
    m for m in typing.get_args(SACParams.model_fields["compile"].annotation) if m != "off"
]


def our_agent(name: str, config: tuple[int, int, int], batch: int, device: str,
              mode: str = "off"):  # fmt: skip
    """One of OURS at `config`, with the agents' `compile` setting `mode`; and whether it reads
    the labelled offline half of each batch."""
    size, stride, _ = config
    net = network(config)
    common = {"network": net, "batch_size": batch, "device": device, "compile": mode}
    shape = (size, size, 3)
    if name in ("drq", "drq-shared"):
        actor = "own" if name == "drq" else "shared"
        cfg = DrQParams(**common, aux_weight=0.0, image_pad=4, actor_encoder=actor)
        return DrQAgent(shape, SPACE, cfg), False
    if name == "sac":  # DrQ's params with the shift off (DrQParams asks for one), SAC's actor
        cfg = DrQParams(**common, image_pad=4, actor_encoder="shared")
        return DrQAgent(shape, SPACE, cfg.model_copy(update={"image_pad": 0})), False
    if name in ("erpv", "erpv-coupled"):
        critic = VLMCritic(shape, SPACE.low, SPACE.high, net).freeze()
        actor = "coupled" if name == "erpv-coupled" else "shared"
        cfg = ERPvParams(**common, offline_fraction=0.5, actor_encoder=actor)
        return ERPvAgent(shape, SPACE, cfg, critic), True
    # Semore's eq. 5 compares feature maps by SSIM: the small encoder keeps 3 layers (7x7 maps
    # at 64x64) with a 5x5 window and attends per position (the CPU pixel table's semore cells)
    small = {"encoder_layers": 3, "attention_stride": 1, "attention_dim": 32}
    semore_net = {**net.model_dump(), "attention_dim": 32, "attention_stride": 5}
    semore_net |= small if stride == 2 else {}
    return SemoreAgent(shape, SPACE, SemoreParams(
        **{**common, "network": semore_net}, variant="m4", offline_fraction=0.5,
        ssim_window=5 if stride == 2 else 11)), True  # fmt: skip


def rows_for(config: tuple[int, int, int], batch: int, ks: list[int], n_frames: int,
             device: str = "cpu", compile_modes: Sequence[str] = (),
             compiled: Sequence[str] = ("drq",)):  # fmt: skip
    """The reference's rows (K = M per `ks`), then each of OURS eagerly, each of `compiled`
    followed by its rows with the agents' `compile` setting in `compile_modes`."""
    size, stride, hidden = config
    frames, starts = random_frames(n_frames, size, seed=0)
    offline = labelled_offline(frames, starts)
    rows: dict[str, Callable[[], None]] = {}
    for k in ks:
        ref = RefDrQ(frames, starts, size, stride, hidden, batch, k, device)
        rows[f"reference DrQ (K=M={k})"] = ref.update
    rows["reference DrQ-v2"] = RefDrQv2(frames, starts, size, stride, hidden, batch, device).update
    for name, label in OURS.items():
        for mode in ["off", *(compile_modes if name in compiled else [])]:
            agent, reads_offline = our_agent(name, config, batch, device, mode)
            row = f"ours: {label}" + ("" if mode == "off" else f", compiled ({mode})")
            rows[row] = ours(agent, frames, starts, *((offline, 0.5) if reads_offline
                                                       else (None, 0.0)))  # fmt: skip
    return rows


# dense peaks in TFLOP/s (fp32 without tensor cores, bf16 tensor cores), NVIDIA's data sheets
PEAKS = {"H100": (67.0, 989.0), "H200": (67.0, 989.0), "A100": (19.5, 312.0)}


def flops_per_update(run: Callable[[], None]) -> float:
    """FLOPs of an update as torch's FlopCounterMode counts them (matmuls and convolutions,
    forward and backward), the mean of two: the actor trains every second update."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        run()
        run()
    return counter.get_total_flops() / 2


def warm_up(rows: dict[str, Callable[[], None]], calls: int) -> dict[str, str]:
    """Each row run `calls` times (allocator, lazy init, compilation, CUDA graph capture). A row
    that raises is taken out and its error returned by name, for the report."""
    failed = {}
    for name, run in list(rows.items()):
        try:
            for _ in range(calls):
                run()
        except Exception as exc:  # a row that cannot run is reported, not timed
            failed[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            del rows[name]
    return failed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--configs", nargs="+", default=["84:1:1024", "64:2:256"],
        help="size:stride:hidden of each configuration (84:1:1024 is DrQ's / ERPv's network at "
        "84x84; 64:2:256 the CPU pixel preset's)",
    )  # fmt: skip
    parser.add_argument("--batch", type=int, default=128, help="batch size (DrQ / ERPv: 128)")
    parser.add_argument("--k", type=int, nargs="+", default=[1], help="reference K = M values")
    parser.add_argument("--updates", type=int, default=20, help="updates per timed pass")
    parser.add_argument("--repeats", type=int, default=3, help="passes per row (best kept)")
    parser.add_argument("--frames", type=int, default=2000, help="random frames in the replay")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--device", default="cpu", help="torch device of every row (cpu, cuda)")
    parser.add_argument(
        "--compile", nargs="*", default=[], metavar="MODE", choices=COMPILE_MODES,
        help="also the agents of --compiled with the agents' `compile` setting in these modes "
        "(torch.compile of every network; reduce-overhead: with CUDA graphs)",
    )  # fmt: skip
    parser.add_argument(
        "--compiled", nargs="+", default=["drq"], choices=list(OURS), metavar="AGENT",
        help=f"which of ours get --compile's rows (default: drq; of {', '.join(OURS)})",
    )  # fmt: skip
    parser.add_argument("--warmup", type=int, default=3, help="untimed updates per row first")
    parser.add_argument(
        "--flops", action="store_true", help="count each row's FLOPs per update and report "
        "the rate they reach (and its share of the GPU's peak, where known)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: torch sees no CUDA device here")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    for text in args.configs:
        size, stride, hidden = (int(v) for v in text.split(":"))
        config = (size, stride, hidden)
        rows = rows_for(
            config, args.batch, args.k, args.frames, args.device, args.compile, args.compiled
        )
        flops = {}
        if args.flops:  # counted eagerly; a compiled row does its eager row's arithmetic
            eager = {n: n.split(", compiled (")[0] for n in rows}
            flops = {n: flops_per_update(run) for n, run in rows.items() if eager[n] == n}
            flops |= {n: flops[e] for n, e in eager.items() if e != n}
        failed = warm_up(rows, args.warmup)
        best = dict.fromkeys(rows, 0.0)
        for _ in range(args.repeats):
            for name, run in rows.items():
                sync()
                start = time.perf_counter()
                for _ in range(args.updates):
                    run()
                sync()
                best[name] = max(best[name], args.updates / (time.perf_counter() - start))
        where = (
            torch.cuda.get_device_name(device) if device.type == "cuda"
            else f"{torch.get_num_threads()} threads"
        )  # fmt: skip
        print(
            f"\n{size}x{size} frames x 3 stacked, encoder 4 convs x 32 filters (later stride "
            f"{stride}), hidden {hidden}, batch {args.batch}; torch {torch.__version__}, "
            f"{where}; best of {args.repeats} x {args.updates} updates"
        )
        base = best.get(f"reference DrQ (K=M={args.k[0]})")
        v2 = best.get("reference DrQ-v2")
        peaks = next((v for k, v in PEAKS.items() if k in where), None)
        for name, rate in best.items():
            line = f"  {name:<40} {rate:8.2f} updates/s"
            line += f"  {rate / base:5.2f}x" if base else ""
            line += f"  {rate / v2:5.2f}x v2" if v2 else ""
            if name in flops:
                tflops = flops[name] * rate / 1e12
                line += f"  {flops[name] / 1e9:7.1f} GFLOP/update  {tflops:7.3f} TFLOP/s"
                if peaks:
                    line += (
                        f"  ({100 * tflops / peaks[0]:.2f}% of fp32 peak, "
                        f"{100 * tflops / peaks[1]:.3f}% of bf16's)"
                    )
            print(line)
        for name, error in failed.items():
            print(f"  {name:<40} failed: {error}")


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
