"""Semore (seed 001): dual-stream (semantic, motion) SAC whose encoders are guided by the cached
VLM masks and judge labels. Nothing here calls a teacher or a segmenter: masks and judgements come
with the batch, read from the dataset.

Batch contract (`SemoreAgent.update`; the keys of `ReplayBuffer.sample` plus three):

| key | shape, dtype | what |
|---|---|---|
| `obs` | (B, 3k, H, W) uint8 | o_{t-k+1}..o_t, oldest first on channels (k = `frame_stack`, 3 in the paper); an episode's first frame is repeated before it, as `FrameStacker` does. `obs.unflatten(1, (k, 3))` is the (B, k, 3, H, W) view |
| `next_obs` | (B, 3k, H, W) uint8 | o_{t-k+2}..o_{t+1} |
| `action` | (B, A) float | a_t in env units |
| `reward`, `done` | (B,) float | r_t, terminated (truncation is not done) |
| `mask` | (B, 1, H, W) uint8 (0..255) or float (0..1), optional | eq. 4's mask map of o_t (the sum of the phrase masks, clipped) |
| `has_mask` | (B,) bool, optional | the row has a mask; absent: no row has one |
| `judge` | (B,) int, optional, not read by `update` | -1 unknown, 0 unreasonable, 1 reasonable: read by the selective sampler, which draws the rows |

Rows without a mask (online transitions, dataset frames whose `objects` label named nothing or
failed) get no similarity loss and their attention uses F_s, exactly as at deployment.

Design choices the paper leaves open (written here once):

- **F_v (eq. 5).** "F_v is obtained by input M into the semantic encoder". We feed the *masked
  current frame* o_t * M (the mask broadcast over RGB), not M itself: the semantic encoder's first
  layer reads RGB statistics, and a bare 0/1 map would be an input it never sees at deployment,
  whereas o_t * M is a frame whose only visible content is the key objects, so aligning F_s(o_t)
  with F_v says "keep what the key objects produce, suppress the rest". F_v goes through the
  *target* (Polyak-averaged) semantic encoder under `no_grad`: a stop-gradient target as in
  BYOL / SPR, so eq. 5 cannot be lowered by moving F_v towards F_s (both sides of one encoder
  with gradients would invite the collapse F_s = F_v = constant).
- **Similarity loss (eq. 5).** Zhao et al. 2016's mix, alpha (1 - SSIM) + (1 - alpha) L1 with
  alpha = 0.84, but *single-scale*: MS-SSIM downsamples by 2 four times, so a 35x35 (84x84 frames)
  or 25x25 (64x64) map would shrink to 2x2 / 1x1 at the 5th scale, smaller than any window. One
  scale with an 11x11 Gaussian window (sigma 1.5, Wang et al. 2004), valid convolution, per
  channel. Both maps are divided by the per-row maximum of F_v (detached) first: SSIM's
  constants C1 = 0.01^2, C2 = 0.03^2 assume a data range of 1, and the division makes the loss
  blind to the global scale of the features (shrinking every activation cannot lower it).
- **Attention (eq. 6-7) and deployment.** During training, rows with a mask compute the
  semantic side's attention weights from F_v; everything else, and the deployed agent, from F_s
  (which eq. 5 pulls towards F_v). F_v only weighs, never enters the values (the paper: "it is the
  semantic features and motion features that interact"). Gradients: none into F_v; the attention
  convs, the motion encoder (keys, values) and the semantic encoder (values, residual) all learn
  from the critic's loss through the attention. `act` takes no mask at all.
- **Transition constraint (eq. 8).** P(z_m,t, a_t) predicts z_m,t+1, the next observation's
  motion latent from the online encoder under no_grad (as sac.py's DeepMDP target);
  squared L2 averaged over features (`transition_nll` with sigma = 1).
- **Reward head (eq. 9).** R([z_t, a_t]) -> r_t, squared error, as DeepMDP's reward loss.
- **SAC (eq. 10-11) and eq. 12.** Critic on z = [z_s, z_m]; the encoder is trained by
  L_Q + w_sim L_sim + w_trans L_trans + w_rew L_rew (eq. 12, `similarity_weight`,
  `transition_weight`, `reward_weight`); the actor reads z detached (SAC-AE), alpha as in sac.py.

Ablations (`variant`, Semore table 2), what each builds and trains:

| variant | semantic input | motion stream | eq. 5 | eq. 6-7 | eq. 8 | eq. 9 |
|---|---|---|---|---|---|---|
| `sac` | the k-frame stack | - | - | - | `aux_weight` (on z) | `aux_weight` |
| `m1` | the k-frame stack | - | - | - | - | yes |
| `m2` | current frame | yes, concatenated | - | - | - | yes |
| `m3` | current frame | yes | yes | - | - | yes |
| `m4` (Semore) | current frame | yes | yes | yes | yes (on z_m) | yes |

`sac` is the pixel SAC baseline on the same encoder (StreamEncoder on the stack is PixelEncoder
layer for layer); with `aux_weight: 0` it is plain SAC, as Semore table 1's.

Selective replay, offline equivalent. The paper adds an online (observation, action) pair to the
buffer only if the VLM judged it reasonable, with a probability that decays from 1; at 0.5 the
selection stops and everything is added. Here judge labels exist for dataset transitions only, so
the selection moves from insertion to sampling: each row of update `step`'s batch is drawn from the
judged-reasonable transitions with probability `selective_probability(step)`, linear from
`selective_start` (1) to `selective_end` (0.5) over `selective_steps` updates, and from all
transitions otherwise; after `selective_steps`, from all transitions. `selective_sample` draws
the indices.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.agents.checkpoint import (
    CheckpointError,
    load_module_tensors,
    module_tensors,
    read_checkpoint,
    read_meta,
    write_checkpoint,
)
from pipeline.agents.networks import (
    Actor,
    Critic,
    RewardModel,
    SemoreEncoder,
    TransitionModel,
    transition_nll,
)
from pipeline.agents.sac import (
    ActionScale,
    ResumableAgent,
    adam,
    box_bounds,
    frozen,
    sac_alpha_loss,
    soft_update,
)
from pipeline.config import SemoreParams

# What each variant builds (see the module docstring's table).
_VARIANTS: dict[str, dict[str, Any]] = {
    "sac": {"semantic_input": "stack", "motion": False, "interaction": False, "similarity": False,
            "transition": True},
    "m1": {"semantic_input": "stack", "motion": False, "interaction": False, "similarity": False,
           "transition": False},
    "m2": {"semantic_input": "current", "motion": True, "interaction": False, "similarity": False,
           "transition": False},
    "m3": {"semantic_input": "current", "motion": True, "interaction": False, "similarity": True,
           "transition": False},
    "m4": {"semantic_input": "current", "motion": True, "interaction": True, "similarity": True,
           "transition": True},
}  # fmt: skip


# --- eq. 5: the similarity loss -------------------------------------------------------------


def gaussian_window(size: int, sigma: float) -> torch.Tensor:
    """Normalised 1-D Gaussian (size,); SSIM's 2-D window (Wang et al. 2004) is its outer product,
    applied here as two 1-D passes (2 * size instead of size^2 multiplies per output)."""
    x = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    return g / g.sum()


def ssim(
    x: torch.Tensor, y: torch.Tensor, window: int = 11, sigma: float = 1.5, data_range: float = 1.0
) -> torch.Tensor:
    """Single-scale SSIM per row: maps (B, C, h, w) -> (B,), the mean of the SSIM map over
    channels and the valid window positions. C1 = (0.01 L)^2, C2 = (0.03 L)^2 (Wang et al.)."""
    if min(x.shape[-2:]) < window:
        raise ValueError(f"feature maps {tuple(x.shape[-2:])} are smaller than the window {window}")
    c = x.shape[1]
    g = gaussian_window(window, sigma).to(x)
    # the five local moments in one depthwise, separable, valid convolution
    stats = torch.cat([x, y, x * x, y * y, x * y], dim=1)  # (B, 5C, h, w)
    stats = F.conv2d(stats, g.view(1, 1, window, 1).expand(5 * c, 1, window, 1), groups=5 * c)
    stats = F.conv2d(stats, g.view(1, 1, 1, window).expand(5 * c, 1, 1, window), groups=5 * c)
    mu_x, mu_y, xx, yy, xy = stats.chunk(5, dim=1)  # (B, C, h', w') each
    var_x, var_y, cov = xx - mu_x**2, yy - mu_y**2, xy - mu_x * mu_y
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    ssim_map = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / (
        (mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2)
    )
    return ssim_map.flatten(1).mean(-1)  # (B,)


def similarity_loss(
    f_s: torch.Tensor,
    f_v: torch.Tensor,
    alpha: float = 0.84,
    window: int = 11,
    sigma: float = 1.5,
) -> torch.Tensor:
    """Semore eq. 5 per row, (B,): alpha (1 - SSIM) + (1 - alpha) L1 between F_s and the
    knowledge-aware F_v (Zhao et al. 2016's mix, single scale; see the module docstring), both
    divided by the row's max of F_v (detached: a scale, not a target to move)."""
    scale = f_v.detach().flatten(1).amax(-1).clamp_min(1e-6)[:, None, None, None]  # (B, 1, 1, 1)
    x, y = f_s / scale, f_v / scale
    l1 = (x - y).abs().flatten(1).mean(-1)  # (B,)
    return alpha * (1.0 - ssim(x, y, window, sigma)) + (1.0 - alpha) * l1


# --- selective replay, offline equivalent -----------------------------------------------------


def selective_probability(step: int, start: float = 1.0, end: float = 0.5, steps: int = 0) -> float:
    """Share of update `step`'s batch drawn from judged-reasonable transitions: linear from
    `start` at step 0 to `end` at step `steps`, then 0 (all transitions). `steps` 0: always 0."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if steps <= 0 or step > steps:
        return 0.0
    return start + (end - start) * step / steps


def selective_sample(
    rng: np.random.Generator,
    candidates: np.ndarray,
    reasonable: np.ndarray,
    batch_size: int,
    p: float,
) -> np.ndarray:
    """`batch_size` indices: each, with probability `p`, uniform over `reasonable` (the indices
    judged reasonable), otherwise uniform over `candidates` (all indices, judged or not); with
    replacement. An empty `reasonable` draws everything from `candidates`."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    if len(candidates) == 0:
        raise ValueError("no candidate transitions to sample from")
    out = candidates[rng.integers(0, len(candidates), size=batch_size)]
    if len(reasonable) and p > 0:
        pick = rng.random(batch_size) < p  # (B,) rows from the reasonable pool
        out[pick] = reasonable[rng.integers(0, len(reasonable), size=int(pick.sum()))]
    return out


def reasonable_indices(judge: np.ndarray) -> np.ndarray:
    """Indices of the transitions judged reasonable (judge == 1; -1 unknown, 0 unreasonable)."""
    return np.flatnonzero(np.asarray(judge) == 1)


# --- the agent ---------------------------------------------------------------------------------


class SemoreAgent(ResumableAgent):
    """Semore (or one of its ablations, `params.variant`) on SAC. `obs_shape` is one env frame
    (H, W, 3); `act` takes the stacked input (`FrameStacker`), `update` a batch of the module
    docstring's contract."""

    algorithm = "semore"

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_space: gym.spaces.Box,
        params: SemoreParams,
        *,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        if len(obs_shape) != 3 or obs_shape[2] != 3:
            raise ValueError(f"Semore reads (H, W, 3) frames, got shape {tuple(obs_shape)}")
        self.params = params
        net = params.network
        self.switches = _VARIANTS[params.variant]
        self.device = torch.device(device)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.input_shape = (3 * net.frame_stack, self.obs_shape[0], self.obs_shape[1])
        self.scale = ActionScale(*box_bounds(action_space), self.device)
        action_dim = len(self.scale.low_np)
        self.target_entropy = -float(action_dim)  # SAC: H_bar = -|A|
        sw = self.switches
        # eq. 12's weights as this variant uses them; 0 = the term is not computed
        self.w_similarity = params.similarity_weight if sw["similarity"] else 0.0
        if params.variant == "sac":
            self.w_transition = self.w_reward = params.aux_weight
        else:
            self.w_transition = params.transition_weight if sw["transition"] else 0.0
            self.w_reward = params.reward_weight
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the global RNG
            torch.manual_seed(seed)
            self.encoder = SemoreEncoder(
                self.input_shape,
                semantic_input=sw["semantic_input"],
                motion=sw["motion"],
                interaction=sw["interaction"],
                num_layers=net.encoder_layers,
                num_filters=net.encoder_filters,
                feature_dim=net.feature_dim,
                attention_dim=net.attention_dim,
                attention_stride=net.attention_stride,
            )
            z_dim = self.encoder.feature_dim
            self.critic = Critic(z_dim, action_dim, net.hidden_dim)
            self.actor = Actor(z_dim, action_dim, net.hidden_dim, net.log_std_min, net.log_std_max)
            self.transition: TransitionModel | None = None
            if sw["transition"]:
                # eq. 8 on z_m (Semore); the baseline's DeepMDP transition on its whole z
                t_dim = net.feature_dim
                self.transition = TransitionModel(
                    t_dim, action_dim, net.transition_hidden_dim, net.transition_learn_sigma
                )
            self.reward_model = RewardModel(z_dim + action_dim, net.transition_hidden_dim)  # eq. 9
        if self.w_similarity > 0:
            side = min(self.encoder.semantic.map_shape[1:])
            if side < params.ssim_window:
                raise ValueError(
                    f"ssim_window {params.ssim_window} exceeds the {side}x{side} feature map of "
                    f"{self.obs_shape[:2]} frames; lower it"
                )
        self.encoder_target = copy.deepcopy(self.encoder)
        self.critic_target = copy.deepcopy(self.critic)
        for module in self._modules().values():
            module.to(self.device)
        self.log_alpha = torch.tensor(
            math.log(params.init_temperature), device=self.device, requires_grad=True
        )
        betas = params.adam_betas
        self.critic_optimizer = adam(
            [*self.encoder.parameters(), *self.critic.parameters()], params.critic_lr, betas
        )
        heads = [*self.reward_model.parameters()]
        if self.transition is not None:
            heads += [*self.transition.parameters()]
        self.model_optimizer = adam(heads, params.model_lr, betas)
        self.actor_optimizer = adam(self.actor.parameters(), params.actor_lr, betas)
        self.alpha_optimizer = adam([self.log_alpha], params.alpha_lr, betas)
        self.update_step = 0

    def _modules(self) -> dict[str, nn.Module]:
        modules = {
            "encoder": self.encoder,
            "critic": self.critic,
            "encoder_target": self.encoder_target,
            "critic_target": self.critic_target,
            "actor": self.actor,
            "reward_model": self.reward_model,
        }
        if self.transition is not None:
            modules["transition"] = self.transition
        return modules

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {
            "critic": self.critic_optimizer,
            "model": self.model_optimizer,
            "actor": self.actor_optimizer,
            "alpha": self.alpha_optimizer,
        }

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """One stacked observation (`FrameStacker` output, (3k, H, W) uint8) -> an action in env
        units, (A,). No mask: the attention weighs with F_s, as deployed."""
        x = torch.as_tensor(np.asarray(obs), device=self.device)
        if tuple(x.shape) != self.input_shape:
            raise ValueError(
                f"act() expects one observation of shape {self.input_shape}, got {tuple(x.shape)}"
            )
        action, _, _ = self.actor(self.encoder(x.unsqueeze(0))["z"], deterministic)
        return self.scale.unnormalise(action)[0].cpu().numpy()

    def knowledge_map(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """F_v (B, C, h, w): the masked current frame o_t * M through the target semantic
        encoder, without gradient (module docstring)."""
        m = mask.float() / 255.0 if mask.dtype == torch.uint8 else mask.float()  # (B, 1, H, W)
        with torch.no_grad():
            frame = self.encoder_target.semantic_frames(obs) * m  # (B, 3, H, W)
            return self.encoder_target.semantic.feature_map(frame)

    def update(self, batch: dict[str, torch.Tensor], step: int | None = None) -> dict[str, float]:
        """One gradient step of eq. 12 (critic + encoder + heads); every `actor_update_freq`
        steps the actor and alpha (eq. 11); every `target_update_freq` steps the targets.
        `step` is the update's index (0, 1, ...; default: the next one); returns float metrics."""
        self.update_step = (self.update_step if step is None else step) + 1
        b = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        action = self.scale.normalise(b["action"].float())  # (B, A)
        f_v = has_mask = None
        if (self.w_similarity > 0 or self.encoder.attention is not None) and "mask" in b:
            has_mask = b.get("has_mask", torch.ones(len(action), dtype=torch.bool))
            has_mask = has_mask.to(self.device).bool()  # (B,)
            if has_mask.any():
                f_v = self.knowledge_map(b["obs"], b["mask"])
            else:
                has_mask = None
        feats = self.encoder(b["obs"], f_v, has_mask)
        with torch.no_grad():
            next_feats = self.encoder(b["next_obs"])  # the actor's next action, eq. 8's target
            next_z_target = self.encoder_target(b["next_obs"])["z"]
        metrics = self.update_critic(feats, action, b, next_feats, next_z_target, f_v, has_mask)
        if self.update_step % self.params.actor_update_freq == 0:
            metrics |= self.update_actor_and_alpha(feats["z"].detach())
        if self.update_step % self.params.target_update_freq == 0:
            soft_update(self.critic_target, self.critic, self.params.critic_tau)
            soft_update(self.encoder_target, self.encoder, self.params.encoder_tau)
        values = torch.stack([v.detach().float() for v in metrics.values()]).tolist()  # one sync
        return dict(zip(metrics, values, strict=True))

    def update_critic(
        self,
        feats: dict[str, torch.Tensor],
        action: torch.Tensor,
        b: dict[str, torch.Tensor],
        next_feats: dict[str, torch.Tensor],
        next_z_target: torch.Tensor,
        f_v: torch.Tensor | None,
        has_mask: torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        z, reward, done = feats["z"], b["reward"].float(), b["done"].float()
        with torch.no_grad():
            next_action, next_log_pi, _ = self.actor(next_feats["z"])
            # eq. 10: V(s') = E[Q~(s', a') - alpha log pi(a'|s')]
            next_v = self.critic_target.q_min(next_z_target, next_action) - self.alpha * next_log_pi
            target = reward + self.params.gamma * (1.0 - done) * next_v  # (B,)
        q1, q2 = self.critic(z, action)
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)  # eq. 10 on both heads
        loss = critic_loss
        metrics = {"critic_loss": critic_loss, "q": q1.mean()}
        p = self.params
        if self.w_similarity > 0 and f_v is not None and has_mask is not None:
            per_row = similarity_loss(feats["f_s"], f_v, p.ssim_alpha, p.ssim_window, p.ssim_sigma)
            sim = per_row[has_mask].mean()  # eq. 5 on the rows with a mask only
            loss = loss + self.w_similarity * sim
            metrics |= {"similarity_loss": sim, "mask_rows": has_mask.float().mean()}
        if self.w_transition > 0 and self.transition is not None:
            key = "z" if self.params.variant == "sac" else "z_m"
            mu, sigma = self.transition(feats[key], action)  # eq. 8: P(z_m,t, a_t)
            transition_loss = transition_nll(next_feats[key], mu, sigma).mean()
            loss = loss + self.w_transition * transition_loss
            metrics["transition_loss"] = transition_loss
        if self.w_reward > 0:
            reward_pred = self.reward_model(torch.cat([z, action], dim=-1))  # eq. 9: R(z_t, a_t)
            reward_loss = F.mse_loss(reward_pred, reward)
            loss = loss + self.w_reward * reward_loss
            metrics["reward_loss"] = reward_loss
        metrics["loss"] = loss  # eq. 12 (the encoder's objective)
        self.critic_optimizer.zero_grad(set_to_none=True)
        self.model_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.critic_optimizer.step()
        self.model_optimizer.step()
        return metrics

    def update_actor_and_alpha(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        pi, log_pi, _ = self.actor(z)  # (B, A), (B,)
        with frozen(self.critic):
            q_pi = self.critic.q_min(z, pi)  # (B,)
            actor_loss = (self.alpha.detach() * log_pi - q_pi).mean()  # eq. 11
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
        self.actor_optimizer.step()
        alpha_loss = sac_alpha_loss(self.alpha, log_pi, self.target_entropy)
        self.alpha_optimizer.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_optimizer.step()
        return {
            "actor_loss": actor_loss,
            "alpha_loss": alpha_loss,
            "alpha": self.alpha.detach(),
            "entropy": -log_pi.detach().mean(),
        }

    # --- the agent interface shared with the SAC family (pipeline.agents.load) --------------

    @property
    def cfg(self) -> SemoreParams:
        return self.params

    @property
    def obs_kind(self) -> str:
        return "pixels"

    @property
    def frame_stack(self) -> int:
        return self.params.network.frame_stack

    # --- checkpoints (pipeline.agents.checkpoint's layout) -----------------------------------

    def checkpoint_meta(self) -> dict[str, Any]:
        return {
            "architecture": self.algorithm,
            "algorithm": self.algorithm,
            "config": self.params.model_dump(mode="json"),
            "obs_shape": list(self.obs_shape),
            "action_low": self.scale.low_np.tolist(),
            "action_high": self.scale.high_np.tolist(),
            "update_step": self.update_step,
        }

    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> None:
        """Every network, the targets and log_alpha, with `checkpoint_meta()` and `meta`.
        Optimiser states are not kept (as sac.py: acting, evaluation, warm starts)."""
        tensors = module_tensors(self._modules())
        tensors["log_alpha"] = self.log_alpha.detach().cpu().reshape(1)
        write_checkpoint(path, tensors, {**(meta or {}), **self.checkpoint_meta()})

    def load_weights(self, path: str | Path) -> None:
        """Load a checkpoint saved by an agent with the same params and observation shape."""
        meta, tensors = read_checkpoint(path)
        if meta.get("architecture") != self.algorithm:
            raise CheckpointError(f"{path}: a {meta.get('architecture')!r} checkpoint, not semore")
        if meta["config"] != self.params.model_dump(mode="json") or meta["obs_shape"] != list(
            self.obs_shape
        ):
            raise CheckpointError(
                f"{path}: saved with other params or observation shape than this agent"
            )
        load_module_tensors(self._modules(), tensors)
        with torch.no_grad():
            self.log_alpha.copy_(tensors["log_alpha"][0])
        self.update_step = int(meta["update_step"])

    @classmethod
    def load(cls, path: str | Path, device: torch.device | str = "cpu") -> SemoreAgent:
        meta = read_meta(path)
        if meta.get("architecture") != cls.algorithm:
            raise CheckpointError(f"{path}: a {meta.get('architecture')!r} checkpoint, not semore")
        space = gym.spaces.Box(
            np.asarray(meta["action_low"], np.float32),
            np.asarray(meta["action_high"], np.float32),
        )
        params = SemoreParams.model_validate(meta["config"])
        agent = cls(tuple(meta["obs_shape"]), space, params, device=device)
        agent.load_weights(path)
        return agent
