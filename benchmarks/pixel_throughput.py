"""Pixel updates per second: our SAC-family update (replay sampling included) against a reference
DrQ update written here after the authors' code, at the same sizes and batch, in the same run.

The reference is adapted from denisyarats/drq (`drq.py`, `replay_buffer.py`; MIT licence,
Copyright (c) 2020 Denis Yarats): its encoder (3x3 convs, the first stride 2, Linear + LayerNorm
+ tanh), actor and critic, its update (critic every step; actor, alpha and the whole critic's
targets every 2nd; the actor's head on conv features recomputed from obs and detached, the
critic re-run on the actor's action) and its replay (obs and next_obs stored stacked, uint8, the
batch converted to float). kornia is not a dependency: the augmentation is DrQ-v2's
`RandomShiftsAug` (facebookresearch/drqv2, MIT), the same +-pad whole-pixel shift. `--k` sets
DrQ's K = M (target and Q loss averaged over K augmentations; the paper's table 1 uses 2, our
`drq` and DrQ-v2 1).

Rows, per size (`--configs`):
- `reference DrQ (K=M=k)`: the above;
- `ours: drq`: pipeline.methods.drq's agent and pipeline.agents.replay.ReplayBuffer (frames once
  as uint8, stacked by a gather, shift on uint8), aux_weight 0 as the paper's agent;
- `ours: sac + DeepMDP`: the same without the shift, with ERPv's DeepMDP heads (its base agent);
- `ours: erpv`: that plus VPG + VER on a batch half from a labelled dataset (C_V forward, the
  transition model's confidence): ERPv's extra work;
- `ours: semore m4`: the dual-stream encoder, cross-attention and eq. 5 on masked rows.

Each row fills its replay with the same random frames (episodes of 125 steps) and is timed on
`--updates` updates, the rows interleaved `--repeats` times (best pass kept), so a busy
machine slows them alike. Ratios are against the reference with K = M = 1 (equal work per
augmentation).

    python -m benchmarks.pixel_throughput --threads 2
    python -m benchmarks.pixel_throughput --configs 84:1:1024 --k 1 2
"""

from __future__ import annotations

import argparse
import copy
import math
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.agents.erpv import ERPvAgent, ERPvParams, VLMCritic
from pipeline.agents.off_policy import NetworkParams
from pipeline.agents.replay import ReplayBuffer
from pipeline.agents.semore import SemoreAgent, SemoreParams
from pipeline.dataset.stacking import stack_window
from pipeline.dataset.transitions import (
    JUDGE_SPEC,
    OfflineTransitions,
    action_label_specs,
    mask_specs,
)
from pipeline.methods.drq import DrQAgent, DrQParams

SPACE = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)  # cartpole-swingup: one action
EPISODE = 125  # cartpole-swingup at action repeat 8


# ---- the reference: DrQ (denisyarats/drq), trimmed to the update path ---------------------------


def _weight_init(m: nn.Module) -> None:  # drq/utils.py: weight_init
    if isinstance(m, nn.Linear):
        nn.init.orthogonal_(m.weight.data)
        m.bias.data.fill_(0.0)
    elif isinstance(m, nn.Conv2d):
        m.weight.data.fill_(0.0)
        m.bias.data.fill_(0.0)
        mid = m.weight.size(2) // 2
        nn.init.orthogonal_(m.weight.data[:, :, mid, mid], nn.init.calculate_gain("relu"))


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:  # drq/utils.py: mlp, depth 2
    return nn.Sequential(
        nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, n_out),
    )  # fmt: skip


class RefEncoder(nn.Module):
    """drq.py: Encoder (stride of the later layers a parameter here, as ours)."""

    def __init__(self, shape: tuple[int, int, int], feature_dim: int, stride: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            [nn.Conv2d(shape[0], 32, 3, stride=2)]
            + [nn.Conv2d(32, 32, 3, stride=stride) for _ in range(3)]
        )
        with torch.no_grad():
            n = self.forward_conv(torch.zeros(1, *shape)).shape[1]
        self.head = nn.Sequential(nn.Linear(n, feature_dim), nn.LayerNorm(feature_dim))

    def forward_conv(self, obs: torch.Tensor) -> torch.Tensor:
        conv = obs / 255.0
        for layer in self.convs:
            conv = torch.relu(layer(conv))
        return conv.view(conv.size(0), -1)

    def forward(self, obs: torch.Tensor, detach: bool = False) -> torch.Tensor:
        h = self.forward_conv(obs)
        if detach:
            h = h.detach()
        return torch.tanh(self.head(h))

    def copy_conv_weights_from(self, source: RefEncoder) -> None:
        for i in range(len(self.convs)):
            self.convs[i].weight = source.convs[i].weight  # tie
            self.convs[i].bias = source.convs[i].bias


class RefActor(nn.Module):
    """drq.py: Actor (SquashedNormal written out: tanh of a reparameterised Gaussian)."""

    def __init__(self, shape, feature_dim: int, hidden: int, stride: int) -> None:
        super().__init__()
        self.encoder = RefEncoder(shape, feature_dim, stride)
        self.trunk = _mlp(feature_dim, hidden, 2)
        self.apply(_weight_init)

    def forward(self, obs: torch.Tensor, detach_encoder: bool = False):
        mu, log_std = self.trunk(self.encoder(obs, detach=detach_encoder)).chunk(2, dim=-1)
        log_std = -10.0 + 0.5 * 12.0 * (torch.tanh(log_std) + 1)  # bounds [-10, 2]
        std = log_std.exp()
        eps = torch.randn_like(mu)
        u = mu + std * eps
        action = torch.tanh(u)
        log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1, True)
        log_prob = log_prob - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1, True)
        return action, log_prob


class RefCritic(nn.Module):
    """drq.py: Critic (double Q on the encoder's features)."""

    def __init__(self, shape, feature_dim: int, hidden: int, stride: int) -> None:
        super().__init__()
        self.encoder = RefEncoder(shape, feature_dim, stride)
        self.Q1 = _mlp(feature_dim + 1, hidden, 1)
        self.Q2 = _mlp(feature_dim + 1, hidden, 1)
        self.apply(_weight_init)

    def forward(self, obs, action, detach_encoder: bool = False):
        oa = torch.cat([self.encoder(obs, detach=detach_encoder), action], dim=-1)
        return self.Q1(oa), self.Q2(oa)


class RandomShiftsAug(nn.Module):
    """drqv2.py: RandomShiftsAug (float frames, grid_sample)."""

    def __init__(self, pad: int) -> None:
        super().__init__()
        self.pad = pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, _ = x.size()
        x = F.pad(x, (self.pad,) * 4, "replicate")
        eps = 1.0 / (h + 2 * self.pad)
        arange = torch.linspace(-1.0 + eps, 1.0 - eps, h + 2 * self.pad, device=x.device)[:h]
        arange = arange.unsqueeze(0).repeat(h, 1).unsqueeze(2)
        base_grid = torch.cat([arange, arange.transpose(1, 0)], dim=2)
        base_grid = base_grid.unsqueeze(0).repeat(n, 1, 1, 1)
        shift = torch.randint(0, 2 * self.pad + 1, size=(n, 1, 1, 2), device=x.device).float()
        shift *= 2.0 / (h + 2 * self.pad)
        return F.grid_sample(x, base_grid + shift, padding_mode="zeros", align_corners=False)


class RefDrQ:
    """drq.py: DRQAgent.update with replay_buffer.py's sampling, K = M = `k`."""

    def __init__(self, frames: np.ndarray, starts: np.ndarray, size: int, stride: int,
                 hidden: int, batch: int, k: int) -> None:  # fmt: skip
        shape = (9, size, size)
        self.critic = RefCritic(shape, 50, hidden, stride)
        self.critic_target = copy.deepcopy(self.critic)
        self.actor = RefActor(shape, 50, hidden, stride)
        self.actor.encoder.copy_conv_weights_from(self.critic.encoder)
        self.log_alpha = torch.tensor(math.log(0.1), requires_grad=True)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=1e-3)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=1e-3)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=1e-3)
        self.aug, self.batch, self.k, self.step = RandomShiftsAug(4), batch, k, 0
        # replay_buffer.py stores every obs and next_obs stacked: (N, 9, H, W) uint8 twice
        idx = np.arange(len(frames) - 1)
        idx = idx[starts[idx + 1] == starts[idx]]  # transitions within an episode
        stack = stack_window(idx, starts[idx], 3)
        chw = np.ascontiguousarray(frames.transpose(0, 3, 1, 2))
        self.obses = chw[stack].reshape(len(idx), 9, size, size)
        self.next_obses = chw[stack_window(idx + 1, starts[idx + 1], 3)].reshape(
            len(idx), 9, size, size
        )
        self.actions = np.random.default_rng(0).uniform(-1, 1, (len(idx), 1)).astype(np.float32)
        self.rewards = np.random.default_rng(1).uniform(0, 1, (len(idx), 1)).astype(np.float32)
        self.rng = np.random.default_rng(0)

    def sample(self):
        idxs = self.rng.integers(0, len(self.obses), size=self.batch)
        obses = torch.as_tensor(self.obses[idxs]).float()
        next_obses = torch.as_tensor(self.next_obses[idxs]).float()
        obses_aug, next_obses_aug = obses.clone(), next_obses.clone()
        obses, next_obses = self.aug(obses), self.aug(next_obses)
        obses_aug, next_obses_aug = self.aug(obses_aug), self.aug(next_obses_aug)
        action = torch.as_tensor(self.actions[idxs])
        reward = torch.as_tensor(self.rewards[idxs])
        return obses, action, reward, next_obses, obses_aug, next_obses_aug

    def update(self) -> None:
        obs, action, reward, next_obs, obs_aug, next_obs_aug = self.sample()
        alpha = self.log_alpha.exp()
        with torch.no_grad():
            targets = []
            for nxt in [next_obs, next_obs_aug][: self.k]:
                next_action, log_prob = self.actor(nxt)
                tq1, tq2 = self.critic_target(nxt, next_action)
                targets.append(reward + 0.99 * (torch.min(tq1, tq2) - alpha.detach() * log_prob))
            target_q = sum(targets) / len(targets)
        loss = 0.0
        for o in [obs, obs_aug][: self.k]:
            q1, q2 = self.critic(o, action)
            loss = loss + F.mse_loss(q1, target_q) + F.mse_loss(q2, target_q)
        self.critic_opt.zero_grad()
        loss.backward()
        self.critic_opt.step()
        self.step += 1
        if self.step % 2 == 0:
            pi, log_prob = self.actor(obs, detach_encoder=True)
            aq1, aq2 = self.critic(obs, pi, detach_encoder=True)
            actor_loss = (alpha.detach() * log_prob - torch.min(aq1, aq2)).mean()
            self.actor_opt.zero_grad()
            actor_loss.backward()
            self.actor_opt.step()
            alpha_loss = (alpha * (-log_prob - (-1.0)).detach()).mean()
            self.alpha_opt.zero_grad()
            alpha_loss.backward()
            self.alpha_opt.step()
            with torch.no_grad():  # utils.soft_update_params(critic, critic_target, 0.01)
                for p, t in zip(
                    self.critic.parameters(), self.critic_target.parameters(), strict=True
                ):
                    t.data.copy_(0.01 * p.data + 0.99 * t.data)


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


def rows_for(config: tuple[int, int, int], batch: int, ks: list[int], n_frames: int):
    size, stride, hidden = config
    frames, starts = random_frames(n_frames, size, seed=0)
    offline = labelled_offline(frames, starts)
    net = network(config)
    common = {"network": net, "batch_size": batch, "device": "cpu"}
    shape = (size, size, 3)
    drq = DrQAgent(shape, SPACE, DrQParams(**common, aux_weight=0.0, image_pad=4))
    sac = DrQAgent(
        shape, SPACE, DrQParams(**common, image_pad=4).model_copy(update={"image_pad": 0})
    )
    erpv_cfg = ERPvParams(**common, offline_fraction=0.5)
    critic = VLMCritic(shape, SPACE.low, SPACE.high, net).freeze()
    erpv = ERPvAgent(shape, SPACE, erpv_cfg, critic)
    # Semore's eq. 5 compares feature maps by SSIM: the small encoder keeps 3 layers (7x7 maps
    # at 64x64) with a 5x5 window and attends per position (the preset's semore section)
    small = {"encoder_layers": 3, "attention_stride": 1, "attention_dim": 32}
    semore_net = {**net.model_dump(), "attention_dim": 32, "attention_stride": 5}
    semore_net |= small if stride == 2 else {}
    semore = SemoreAgent(shape, SPACE, SemoreParams(
        **{**common, "network": semore_net}, variant="m4", offline_fraction=0.5,
        ssim_window=5 if stride == 2 else 11))  # fmt: skip
    rows: dict[str, Callable[[], None]] = {}
    for k in ks:
        ref = RefDrQ(frames, starts, size, stride, hidden, batch, k)
        rows[f"reference DrQ (K=M={k})"] = ref.update
    rows["ours: drq"] = ours(drq, frames, starts, None, 0.0)
    rows["ours: sac + DeepMDP"] = ours(sac, frames, starts, None, 0.0)
    rows["ours: erpv (VPG + VER)"] = ours(erpv, frames, starts, offline, 0.5)
    rows["ours: semore m4"] = ours(semore, frames, starts, offline, 0.5)
    return rows


def main() -> None:
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
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for text in args.configs:
        config = tuple(int(v) for v in text.split(":"))
        rows = rows_for(config, args.batch, args.k, args.frames)  # type: ignore[arg-type]
        for run in rows.values():
            for _ in range(3):  # warm up (allocator, lazy init)
                run()
        best = dict.fromkeys(rows, 0.0)
        for _ in range(args.repeats):
            for name, run in rows.items():
                start = time.perf_counter()
                for _ in range(args.updates):
                    run()
                best[name] = max(best[name], args.updates / (time.perf_counter() - start))
        size, stride, hidden = config
        print(
            f"\n{size}x{size} frames x 3 stacked, encoder 4 convs x 32 filters (later stride "
            f"{stride}), hidden {hidden}, batch {args.batch}; torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads; best of {args.repeats} x {args.updates} updates"
        )
        base = best[f"reference DrQ (K=M={args.k[0]})"]
        for name, rate in best.items():
            print(f"  {name:<28} {rate:8.2f} updates/s  {rate / base:5.2f}x")


if __name__ == "__main__":
    main()
