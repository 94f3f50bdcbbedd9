"""A reference DrQ, written after the authors' code: `benchmarks.pixel_throughput` times its
update against our `drq`'s, the same sizes on the same frames.

Adapted from denisyarats/drq (`drq.py`, `replay_buffer.py`; MIT licence, Copyright (c) 2020 Denis
Yarats): its encoder (3x3 convs, the first stride 2, Linear + LayerNorm + tanh), its actor (an
encoder of its own whose convs are tied to the critic's, its head trained by the actor loss on
detached conv features) and critic, its update (critic every step; actor, alpha and the whole
critic's targets, encoder included, every 2nd step with tau 0.01; one lr of 1e-3 for all three
optimisers) and its replay (obs and next_obs stored stacked, uint8, converted to float per batch,
`not_done_no_max` in the target). kornia is not a dependency: the augmentation is DrQ-v2's
`RandomShiftsAug` (facebookresearch/drqv2, MIT), the same +-pad whole-pixel shift. K = M (target
and Q loss averaged over K augmentations) is a parameter: the paper's table 1 uses 2, our `drq`
and DrQ-v2 1.

`RefDrQv2Agent` is DrQ-v2's update written after facebookresearch/drqv2 (`drqv2.py`, MIT): one
conv pass of obs with gradient and one of next_obs without, no target encoder, the actor on the
detached features.

Its training run (the authors' loop on the pixel preset, the control that told our `drq` apart
from the preset's setting) answered its question and was retired: the answer, the figures and
the command at the commit that ran it are in docs/results/2026-11-27-drq-actor-head.md and
docs/results/benchmarks-pixels.md.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# ---- the networks (drq.py) -------------------------------------------------------------------


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

    def __init__(self, shape, feature_dim: int, hidden: int, stride: int, action_dim: int = 1):
        super().__init__()
        self.encoder = RefEncoder(shape, feature_dim, stride)
        self.trunk = _mlp(feature_dim, hidden, 2 * action_dim)
        self.apply(_weight_init)

    def forward(self, obs: torch.Tensor, detach_encoder: bool = False):
        """A sampled action (B, A) in [-1, 1] and its log-probability (B, 1)."""
        mu, log_std = self.trunk(self.encoder(obs, detach=detach_encoder)).chunk(2, dim=-1)
        log_std = -10.0 + 0.5 * 12.0 * (torch.tanh(log_std) + 1)  # bounds [-10, 2]
        std = log_std.exp()
        eps = torch.randn_like(mu)
        u = mu + std * eps
        action = torch.tanh(u)
        log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1, True)
        log_prob = log_prob - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1, True)
        return action, log_prob

    def mean(self, obs: torch.Tensor) -> torch.Tensor:
        """The distribution's mean action, tanh(mu) (drq.py: `act(obs, sample=False)`)."""
        mu, _ = self.trunk(self.encoder(obs)).chunk(2, dim=-1)
        return torch.tanh(mu)


class RefCritic(nn.Module):
    """drq.py: Critic (double Q on the encoder's features)."""

    def __init__(self, shape, feature_dim: int, hidden: int, stride: int, action_dim: int = 1):
        super().__init__()
        self.encoder = RefEncoder(shape, feature_dim, stride)
        self.Q1 = _mlp(feature_dim + action_dim, hidden, 1)
        self.Q2 = _mlp(feature_dim + action_dim, hidden, 1)
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


# ---- the agent and its replay (drq.py: DRQAgent; replay_buffer.py) ---------------------------


class RefDrQAgent:
    """drq.py: DRQAgent with K = M = `k`. Actions live in [-1, 1] (DMC's range). Offers what
    pipeline.learn.evaluation.deployed needs (`obs_kind`, `frame_stack`, `act`)."""

    obs_kind = "pixels"

    def __init__(self, shape: tuple[int, int, int], action_dim: int, *, stride: int,
                 hidden: int, k: int, pad: int = 4, lr: float = 1e-3,
                 device: torch.device | str = "cpu") -> None:  # fmt: skip
        self.device = torch.device(device)
        self.critic = RefCritic(shape, 50, hidden, stride, action_dim).to(self.device)
        self.critic_target = copy.deepcopy(self.critic)
        self.actor = RefActor(shape, 50, hidden, stride, action_dim).to(self.device)
        self.actor.encoder.copy_conv_weights_from(self.critic.encoder)
        self.log_alpha = torch.tensor(math.log(0.1), requires_grad=True, device=self.device)
        self.target_entropy = -float(action_dim)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=lr)
        self.aug, self.k, self.step = RandomShiftsAug(pad), k, 0
        self.frame_stack = shape[0] // 3

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = torch.as_tensor(np.asarray(obs), device=self.device).float().unsqueeze(0)
        action = self.actor.mean(x) if deterministic else self.actor(x)[0]
        return action.clamp(-1.0, 1.0)[0].cpu().numpy()

    def update(self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
               next_obs: torch.Tensor, not_done: torch.Tensor) -> dict[str, float]:  # fmt: skip
        """One update on a batch of stacked uint8 frames (B, 9, H, W): replay_buffer.py's float
        conversion and augmentation, then DRQAgent.update."""
        obs, next_obs = obs.float(), next_obs.float()
        obs_augs = [self.aug(obs.clone()) for _ in range(self.k)]
        next_augs = [self.aug(next_obs.clone()) for _ in range(self.k)]
        alpha = self.log_alpha.exp()
        with torch.no_grad():
            targets = []
            for nxt in next_augs:
                next_action, log_prob = self.actor(nxt)
                tq1, tq2 = self.critic_target(nxt, next_action)
                target_v = torch.min(tq1, tq2) - alpha.detach() * log_prob
                targets.append(reward + not_done * 0.99 * target_v)
            target_q = sum(targets) / len(targets)
        critic_loss = 0.0
        for o in obs_augs:
            q1, q2 = self.critic(o, action)
            critic_loss = critic_loss + F.mse_loss(q1, target_q) + F.mse_loss(q2, target_q)
        self.critic_opt.zero_grad()
        critic_loss.backward()
        self.critic_opt.step()
        metrics = {"critic_loss": float(critic_loss.detach()), "q": float(q1.detach().mean())}
        self.step += 1
        if self.step % 2 == 0:  # actor_update_frequency and critic_target_update_frequency: 2
            pi, log_prob = self.actor(obs_augs[0], detach_encoder=True)
            aq1, aq2 = self.critic(obs_augs[0], pi, detach_encoder=True)
            actor_loss = (alpha.detach() * log_prob - torch.min(aq1, aq2)).mean()
            self.actor_opt.zero_grad()
            actor_loss.backward()
            self.actor_opt.step()
            alpha_loss = (alpha * (-log_prob - self.target_entropy).detach()).mean()
            self.alpha_opt.zero_grad()
            alpha_loss.backward()
            self.alpha_opt.step()
            with torch.no_grad():  # utils.soft_update_params(critic, critic_target, 0.01)
                for p, t in zip(
                    self.critic.parameters(), self.critic_target.parameters(), strict=True
                ):
                    t.data.copy_(0.01 * p.data + 0.99 * t.data)
            metrics |= {"alpha": float(alpha.detach()), "entropy": float(-log_prob.detach().mean())}
        return metrics

    def training_state(self) -> dict[str, Any]:
        """What the next update depends on: networks, optimisers, alpha and the update count."""
        return {
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor": self.actor.state_dict(),  # its convs are the critic's (tied)
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
            "step": self.step,
        }

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor.load_state_dict(state["actor"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        self.step = state["step"]


# ---- DrQ-v2 (facebookresearch/drqv2, drqv2.py; MIT, Copyright (c) Facebook, Inc.) -----------


class RefV2Encoder(nn.Module):
    """drqv2.py: Encoder, the conv stack alone (frames / 255 - 0.5, flattened); the trunks
    (Linear + LayerNorm + tanh) are the actor's and the critic's own."""

    def __init__(self, shape: tuple[int, int, int], stride: int) -> None:
        super().__init__()
        self.convnet = nn.Sequential(
            nn.Conv2d(shape[0], 32, 3, stride=2), nn.ReLU(),
            *[m for _ in range(3) for m in (nn.Conv2d(32, 32, 3, stride=stride), nn.ReLU())],
        )  # fmt: skip
        side = (shape[1] - 3) // 2 + 1
        for _ in range(3):
            side = (side - 3) // stride + 1
        self.repr_dim = 32 * side * side
        self.apply(_weight_init)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.convnet(obs / 255.0 - 0.5).flatten(1)


def _trunk(repr_dim: int, feature_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(repr_dim, feature_dim), nn.LayerNorm(feature_dim), nn.Tanh())


class RefV2Actor(nn.Module):
    """drqv2.py: Actor (trunk, then a deterministic tanh mean; exploration noise of a fixed std,
    clipped, stands for its TruncatedNormal)."""

    def __init__(self, repr_dim: int, action_dim: int, feature_dim: int, hidden: int) -> None:
        super().__init__()
        self.trunk = _trunk(repr_dim, feature_dim)
        self.policy = _mlp(feature_dim, hidden, action_dim)
        self.apply(_weight_init)

    def forward(self, h: torch.Tensor, std: float, clip: float) -> torch.Tensor:
        mu = torch.tanh(self.policy(self.trunk(h)))
        noise = (torch.randn_like(mu) * std).clamp(-clip, clip)
        return (mu + noise).clamp(-1.0, 1.0)


class RefV2Critic(nn.Module):
    """drqv2.py: Critic (trunk, then two Q MLPs on [features, action])."""

    def __init__(self, repr_dim: int, action_dim: int, feature_dim: int, hidden: int) -> None:
        super().__init__()
        self.trunk = _trunk(repr_dim, feature_dim)
        self.Q1 = _mlp(feature_dim + action_dim, hidden, 1)
        self.Q2 = _mlp(feature_dim + action_dim, hidden, 1)
        self.apply(_weight_init)

    def forward(self, h: torch.Tensor, action: torch.Tensor):
        ha = torch.cat([self.trunk(h), action], dim=-1)
        return self.Q1(ha), self.Q2(ha)


class RefDrQv2Agent:
    """drqv2.py: DrQV2Agent's update (DDPG; no target encoder: the target critic reads the online
    encoder's features of next_obs; obs encoded once, the actor reads it detached; target
    critic every update with tau 0.01; std 0.2, clipped at 0.3). Every update trains the actor
    (drqv2's `update_every_steps: 2` counts env steps, not updates)."""

    def __init__(self, shape: tuple[int, int, int], action_dim: int, *, stride: int,
                 hidden: int, pad: int = 4, lr: float = 1e-4,
                 device: torch.device | str = "cpu") -> None:  # fmt: skip
        self.device = torch.device(device)
        self.encoder = RefV2Encoder(shape, stride).to(self.device)
        repr_dim = self.encoder.repr_dim
        self.actor = RefV2Actor(repr_dim, action_dim, 50, hidden).to(self.device)
        self.critic = RefV2Critic(repr_dim, action_dim, 50, hidden).to(self.device)
        self.critic_target = copy.deepcopy(self.critic)
        self.encoder_opt = torch.optim.Adam(self.encoder.parameters(), lr=lr)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=lr)
        self.aug = RandomShiftsAug(pad)

    def update(self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
               next_obs: torch.Tensor, not_done: torch.Tensor) -> dict[str, float]:  # fmt: skip
        obs = self.encoder(self.aug(obs.float()))
        with torch.no_grad():
            next_h = self.encoder(self.aug(next_obs.float()))
            next_action = self.actor(next_h, 0.2, 0.3)
            target_q = reward + not_done * 0.99 * torch.min(
                *self.critic_target(next_h, next_action)
            )
        q1, q2 = self.critic(obs, action)
        critic_loss = F.mse_loss(q1, target_q) + F.mse_loss(q2, target_q)
        self.encoder_opt.zero_grad(set_to_none=True)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        self.encoder_opt.step()
        h = obs.detach()
        actor_loss = -torch.min(*self.critic(h, self.actor(h, 0.2, 0.3))).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        with torch.no_grad():  # utils.soft_update_params(critic, critic_target, 0.01)
            for p, t in zip(self.critic.parameters(), self.critic_target.parameters(), strict=True):
                t.data.lerp_(p.data, 0.01)
        return {
            "critic_loss": float(critic_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
        }


class RefReplay:
    """replay_buffer.py: every obs and next_obs stored stacked, (N, 9, H, W) uint8 twice."""

    def __init__(self, shape: tuple[int, int, int], action_dim: int, capacity: int) -> None:
        self.obses = np.empty((capacity, *shape), np.uint8)
        self.next_obses = np.empty((capacity, *shape), np.uint8)
        self.actions = np.empty((capacity, action_dim), np.float32)
        self.rewards = np.empty((capacity, 1), np.float32)
        self.not_dones_no_max = np.empty((capacity, 1), np.float32)
        self.idx, self.full = 0, False

    def __len__(self) -> int:
        return len(self.obses) if self.full else self.idx

    def add(self, obs, action, reward: float, next_obs, done_no_max: bool) -> None:
        i = self.idx
        self.obses[i], self.next_obses[i], self.actions[i] = obs, next_obs, action
        self.rewards[i], self.not_dones_no_max[i] = reward, not done_no_max
        self.idx = (i + 1) % len(self.obses)
        self.full = self.full or self.idx == 0

    def sample(self, batch: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
        idxs = rng.integers(0, len(self), size=batch)
        return (
            torch.as_tensor(self.obses[idxs]), torch.as_tensor(self.actions[idxs]),
            torch.as_tensor(self.rewards[idxs]), torch.as_tensor(self.next_obses[idxs]),
            torch.as_tensor(self.not_dones_no_max[idxs]),
        )  # fmt: skip

    ARRAYS = ("obses", "next_obses", "actions", "rewards", "not_dones_no_max")

    def state(self) -> dict[str, Any]:
        """The filled part, for a resume state."""
        n = len(self)
        return {"idx": self.idx, "full": self.full} | {a: getattr(self, a)[:n] for a in self.ARRAYS}

    def load_state(self, state: dict[str, Any]) -> None:
        for name in self.ARRAYS:
            getattr(self, name)[: len(state[name])] = state[name]
        self.idx, self.full = state["idx"], state["full"]


# ---- the training run (train.py) -------------------------------------------------------------
