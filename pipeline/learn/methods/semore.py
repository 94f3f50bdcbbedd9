"""Method `semore` (seed 001): the dual-stream (semantic, motion) SAC agent whose encoders the
dataset's cached VLM masks guide (eq. 4-7), the selective replay fed by its judge labels, and
table 2's ablations (`variant`); one module, as every method. Nothing here calls a teacher or a
segmenter: masks and judgements come with the batch, read from the dataset.

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

`semantic_input` replaces a variant's semantic input: `m2` with `stack` keeps both streams and
reads the whole stack in the semantic one, as `m1` does (an ablation beyond table 2: does m2 pay
for reading the current frame alone?).

`sac` is the pixel SAC baseline on the same encoder (its semantic stream on the stack is SAC's
PixelEncoder); with `aux_weight: 0` it is plain SAC, as Semore table 1's.

Selective replay, offline equivalent. The paper adds an online (observation, action) pair to the
buffer only if the VLM judged it reasonable, with a probability that decays from 1; at 0.5 the
selection stops and everything is added. Here judge labels exist for dataset transitions only, so
the selection moves from insertion to sampling: each row of update `step`'s batch is drawn from the
judged-reasonable transitions with probability `selective_probability(step)`, linear from
`selective_start` (1) to `selective_end` (0.5) over `selective_steps` updates, and from all
transitions otherwise; after `selective_steps`, from all transitions. `selective_sample` draws
the indices.

Selective replay at insertion (`selective_replay: insert`), the paper's placement, where labelling
rounds give the judge the agent's own pairs: each dataset part enters the replay at an update
(the static dataset at 0, round k's part, the pairs the previous agent collected, at round k's
first update), and each of its pairs that is not judged reasonable is left out with probability
`selective_probability(update)`, once, for the rest of training. `selective_insert` decides.
`selective_verdicts: reversed` swaps the verdicts in both placements (`read_verdicts`): a control
beyond the paper, the pool being what the judge rejected.

Why one module of this length: a method is one module (the method table imports it alone, and
train@<run> depends on its own method's module only), and a third of it is the design notes
below, kept beside the code they explain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from pipeline.core.config import TrainRun
from pipeline.dataset.transitions import OfflineTransitions
from pipeline.learn.agents.networks import (
    Actor,
    Critic,
    PixelEncoder,
    RewardModel,
    TransitionModel,
    transition_nll,
    weight_init,
)
from pipeline.learn.agents.off_policy import (
    CriticStep,
    NetworkParams,
    OffPolicyAgent,
    SACParams,
    Tensors,
)
from pipeline.learn.agents.replay import OfflinePool
from pipeline.learn.methods.base import TrainInputs
from pipeline.learn.methods.off_policy import OffPolicyMethod


class SemoreNetworkParams(NetworkParams):
    """Semore's networks (seed 001, "Feature Extraction", "Motion Enhancement and Interaction"):
    the SAC / ERPv network fields (`encoder_layers` / `encoder_filters` / `feature_dim` size each
    stream, `hidden_dim` the actor and Q heads, `transition_hidden_dim` the eq. 8 predictor and
    the eq. 9 reward head) plus the cross-attention of eq. 6-7. Pixels only."""

    attention_dim: int = Field(
        default=32,
        ge=1,
        description="Channels of the reduced maps F_v^, F_m^ that eq. 6 multiplies (not given in "
        "the paper; ours: 32).",
    )
    attention_stride: int = Field(
        default=5,
        ge=1,
        description="Kernel and stride of eq. 6's 'convolution layer for reducing the spatial "
        "complexity' (not given; ours: 5, so a 35x35 map at 84x84 frames becomes 7x7 = 49 tokens, "
        "a 25x25 map at 64x64 frames 5x5).",
    )

    @model_validator(mode="after")
    def _pixels_and_residuals(self) -> SemoreNetworkParams:
        if self.obs != "pixels":
            raise ValueError("Semore reads pixels: set `obs: pixels`")
        if self.frame_stack < 2:
            raise ValueError(
                "the motion stream reads residuals of adjacent frames: frame_stack must be >= 2 "
                "(the paper: 3 frames, 2 residuals)"
            )
        return self


SemoreVariant = Literal["sac", "m1", "m2", "m3", "m4"]


class SemoreParams(SACParams):
    """Semore (`semore`): the SAC settings (merged from `sac` with `<<: *sac`; `network` is a
    SemoreNetworkParams) plus eq. 5, 8, 9 and 12's weights, the similarity loss and the
    selective replay (`selective_*`). `aux_weight` is read by variant `sac` alone (the DeepMDP
    heads of the pixel SAC baseline); the Semore variants weigh eq. 8 and 9 apart."""

    network: SemoreNetworkParams = Field(
        default_factory=SemoreNetworkParams,
        description="The two streams' sizes and the cross-attention's (pixels only).",
    )
    variant: SemoreVariant = Field(
        default="m4",
        description="Table 2's ablations: m1 semantic stream alone on the stacked frames, no "
        "similarity loss; m2 semantic (current frame) + motion (residuals) concatenated; m3 m2 + "
        "the eq. 5 similarity loss; m4 m3 + motion supervision (eq. 8) and the cross-attention "
        "(eq. 6-7): full Semore. `sac`: plain pixel SAC on the same encoder (the baseline).",
    )
    semantic_input: Literal["current", "stack"] | None = Field(
        default=None,
        description="The semantic stream's input in place of the variant's (null: the "
        "variant's, the module docstring's table). An ablation beyond table 2: `stack` on m2 "
        "gives its semantic stream the whole stack, as m1's, beside the motion stream. Not with "
        "eq. 5 (m3, m4), whose knowledge map is the masked current frame.",
    )
    similarity_weight: float = Field(
        default=1.0,
        ge=0,
        description="Weight of the eq. 5 similarity loss in eq. 12 (not given; ours: 1).",
    )
    transition_weight: float = Field(
        default=1.0,
        ge=0,
        description="Weight of the eq. 8 transition constraint in eq. 12 (not given: 1).",
    )
    reward_weight: float = Field(
        default=1.0,
        ge=0,
        description="Weight of the eq. 9 reward head in eq. 12 (not given; DeepMDP: 1).",
    )
    ssim_alpha: float = Field(
        default=0.84,
        ge=0,
        le=1,
        description="Eq. 5 as Zhao et al. 2016's mix: alpha (1 - SSIM) + (1 - alpha) L1, "
        "single-scale (their value: 0.84).",
    )
    ssim_window: int = Field(
        default=11,
        ge=1,
        description="Side of SSIM's Gaussian window on the feature maps (Wang et al. 2004: 11); "
        "must not exceed the map side.",
    )
    ssim_sigma: float = Field(
        default=1.5, gt=0, description="Std of SSIM's Gaussian window (Zhao / Wang: 1.5)."
    )
    selective_start: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="Selective replay: share of each batch drawn from judged-reasonable "
        "transitions at the first update (the paper's initial probability: 1).",
    )
    selective_end: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share reached after `selective_steps` updates, after which batches are drawn "
        "from all transitions (the paper stops selecting at 0.5).",
    )
    selective_steps: int = Field(
        default=1000,
        ge=0,
        description="Updates over which the share decays linearly from start to end (not given "
        "in the paper; ours: 1,000); 0 turns selective replay off.",
    )
    selective_replay: Literal["sample", "insert"] = Field(
        default="sample",
        description="Where the judge selects. `sample`: each batch's offline rows, by the "
        "`selective_*` schedule (the offline equivalent). `insert`: the paper's placement, as each "
        "dataset part enters the replay (the static dataset at update 0, a labelling round's "
        "part of the agent's own pairs at the round's first update), a pair not judged "
        "reasonable is left out with the schedule's probability at that update, for the rest "
        "of training.",
        exclude_if=lambda v: v == "sample",  # agents saved before it existed load as before
    )
    selective_verdicts: Literal["as_judged", "reversed"] = Field(
        default="as_judged",
        description="The judge's verdicts as the selective replay reads them. `reversed`, a "
        "control beyond the paper: reasonable and unreasonable swapped (unknown stays unknown), "
        "so the pool is what the judge rejected, on the same data, labels and masks: it tells "
        "the judge's knowledge from the act of selecting.",
        exclude_if=lambda v: v == "as_judged",  # agents saved before it existed load as before
    )

    @model_validator(mode="after")
    def _actor_reads_the_interaction_features(self) -> SemoreParams:
        if self.actor_encoder != "shared":
            raise ValueError(
                "Semore's actor reads its two streams' interacted features (eq. 7): "
                "actor_encoder must be shared"
            )
        return self

    @model_validator(mode="after")
    def _selective_decays(self) -> SemoreParams:
        if self.selective_end > self.selective_start:
            raise ValueError(
                f"selective_end ({self.selective_end}) must not exceed selective_start "
                f"({self.selective_start}): the probability decays"
            )
        return self

    @model_validator(mode="after")
    def _semantic_input_fits_the_variant(self) -> SemoreParams:
        if self.semantic_input == "stack" and _VARIANTS[self.variant]["similarity"]:
            raise ValueError(
                f"semantic_input 'stack' with variant {self.variant}: eq. 5 compares the semantic "
                "map of the current frame with the masked current frame's; use m1 or m2, or "
                "leave semantic_input null"
            )
        return self


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


def selective_insert(
    judge: np.ndarray,
    part: np.ndarray,
    entries: Sequence[tuple[int, int]],
    start: float = 1.0,
    end: float = 0.5,
    steps: int = 0,
) -> np.ndarray:
    """The paper's selective addition: the indices of the transitions that enter the replay.
    Transition i belongs to dataset part `part[i]`, which entered at update `entries[k][0]`; a
    transition not judged reasonable (judge != 1: unreasonable or unknown) is left out with
    probability `selective_probability(update)`, drawn from a generator seeded with the part's
    `(seed, k)` (`entries[k][1]`), so a part keeps the same rows in every later round."""
    judge, part = np.asarray(judge), np.asarray(part)
    if judge.shape != part.shape:
        raise ValueError(f"judge {judge.shape} and part {part.shape} differ in shape")
    if len(part) and part.max() >= len(entries):
        raise ValueError(
            f"transitions of part {int(part.max())} but entries for {len(entries)} parts: give "
            "each dataset part the update it entered at"
        )
    keep = np.ones(len(judge), bool)
    for k, (update, seed) in enumerate(entries):
        p = selective_probability(update, start, end, steps)
        rows = np.flatnonzero((part == k) & (judge != 1))
        if p > 0 and len(rows):
            keep[rows[np.random.default_rng([seed, k]).random(len(rows)) < p]] = False
    return np.flatnonzero(keep)


def reasonable_indices(judge: np.ndarray) -> np.ndarray:
    """Indices of the transitions judged reasonable (judge == 1; -1 unknown, 0 unreasonable)."""
    return np.flatnonzero(np.asarray(judge) == 1)


def read_verdicts(judge: np.ndarray, verdicts: Literal["as_judged", "reversed"]) -> np.ndarray:
    """The judge column as the selective replay reads it: as judged, or with reasonable (1) and
    unreasonable (0) swapped and unknown (-1) kept (`selective_verdicts: reversed`)."""
    judge = np.asarray(judge)
    if verdicts == "as_judged":
        return judge
    return np.where(judge == -1, -1, 1 - judge).astype(judge.dtype)


# --- the agent ---------------------------------------------------------------------------------


# --- the encoder (eq. 6-7): dual streams and bidirectional cross-attention --------------------


class CrossAttention(nn.Module):
    """Semore eq. 6-7, bidirectional cross-attention between the semantic and the motion maps.

    - eq. 6: each map is reduced by a conv of kernel = stride = `stride` ("reducing the spatial
      complexity") to N = h' w' tokens of `dim` channels: Q_s = conv_s(query), K_m = conv_m(F_m),
      both (B, N, dim). One score matrix S = Q_s K_m^T / sqrt(dim), softmax over each axis:
      A_sm = softmax(S) (semantic positions attend over motion positions) and
      A_ms = softmax(S^T) (motion over semantic); every row of both sums to 1.
    - eq. 7: the interactions I_s = A_sm K_m (motion information gathered at semantic positions)
      and I_m = A_ms conv_s(F_s) (semantic features gathered at motion positions) go through a
      fully connected layer each (per token: dim -> C), are upsampled (nearest) to (h, w) and
      added to F_s and F_m.

    `query` is what the semantic side's attention weights are computed from: the knowledge-aware
    map F_v while training on a row with a mask, F_s otherwise (rows without a mask, deployment).
    The paper: "the semantics generated by VLM are only used to compute attention weights during
    training, while in reality, it is the semantic features and motion features that interact":
    F_v never enters the values, only the weights.
    """

    def __init__(self, channels: int, dim: int = 32, stride: int = 5) -> None:
        super().__init__()
        self.dim = dim
        self.reduce_s = nn.Conv2d(channels, dim, stride, stride=stride)
        self.reduce_m = nn.Conv2d(channels, dim, stride, stride=stride)
        self.fc_s = nn.Linear(dim, channels)  # eq. 7: FC on the interaction, semantic side
        self.fc_m = nn.Linear(dim, channels)  # eq. 7: motion side
        self.apply(weight_init)

    @staticmethod
    def _tokens(x: torch.Tensor) -> torch.Tensor:
        return x.flatten(2).transpose(1, 2)  # (B, dim, h', w') -> (B, N, dim)

    def forward(
        self, f_s: torch.Tensor, f_m: torch.Tensor, query: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(F_s', F_m', A_sm, A_ms) for maps (B, C, h, w): the enhanced maps, same shapes, and
        the attention maps (B, N, N)."""
        reduced = self.reduce_s(f_s)  # (B, dim, h', w')
        hw_r = reduced.shape[-2:]
        q_s = self._tokens(reduced if query is f_s else self.reduce_s(query))  # (B, N, dim)
        k_m = self._tokens(self.reduce_m(f_m))  # (B, N, dim)
        v_s = self._tokens(reduced)  # (B, N, dim)
        scores = q_s @ k_m.transpose(1, 2) / math.sqrt(self.dim)  # eq. 6, (B, N_s, N_m)
        a_sm = scores.softmax(dim=-1)  # (B, N, N), rows sum to 1
        a_ms = scores.transpose(1, 2).softmax(dim=-1)  # (B, N, N), rows sum to 1
        i_s = self.fc_s(a_sm @ k_m)  # (B, N, C)
        i_m = self.fc_m(a_ms @ v_s)  # (B, N, C)
        size = f_s.shape[-2:]

        def up(i: torch.Tensor) -> torch.Tensor:  # (B, N, C) -> (B, C, h, w)
            grid = i.transpose(1, 2).reshape(i.shape[0], i.shape[2], *hw_r)
            return nn.functional.interpolate(grid, size=size, mode="nearest")

        return f_s + up(i_s), f_m + up(i_m), a_sm, a_ms  # eq. 7


def motion_input(obs: torch.Tensor) -> torch.Tensor:
    """Semore's motion input: residuals of adjacent frames, newest first.

    obs (B, 3k, H, W), k frames oldest first on the channel axis (FrameStacker / ReplayBuffer
    layout), uint8 -> (B, 3(k-1), H, W) float in [-1, 1]: [o_t - o_{t-1}, o_{t-1} - o_{t-2}, ...].
    At an episode start the stack repeats the first frame, so the residuals there are zero."""
    x = obs.float() / 255.0
    frames = x.unflatten(1, (-1, 3))  # (B, k, 3, H, W)
    residuals = frames[:, 1:] - frames[:, :-1]  # (B, k-1, 3, H, W), oldest pair first
    return residuals.flip(1).flatten(1, 2)  # newest pair first


class SemoreEncoder(nn.Module):
    """The encoder of every Semore variant: z = [z_s, z_m] from a stacked observation.

    - semantic stream on the current frame (`semantic_input="current"`, 3 channels) or, when the
      motion stream is off (M1 and the SAC baseline, "a conventional multi-frame input visual RL"),
      on the whole stack (`"stack"`, 3k channels);
    - motion stream (`motion=True`) on `motion_input(obs)`;
    - cross-attention (`interaction=True`) between them before the projections.
    """

    def __init__(
        self,
        obs_shape: tuple[int, int, int],
        *,
        semantic_input: Literal["current", "stack"],
        motion: bool,
        interaction: bool,
        num_layers: int = 4,
        num_filters: int = 32,
        feature_dim: int = 50,
        attention_dim: int = 32,
        attention_stride: int = 5,
        stride: int = 1,
    ) -> None:
        super().__init__()
        channels, h, w = obs_shape
        if channels % 3 or len(obs_shape) != 3:
            raise ValueError(f"SemoreEncoder needs stacked RGB frames (3k, H, W), got {obs_shape}")
        if semantic_input not in ("current", "stack"):
            raise ValueError(f"semantic_input must be 'current' or 'stack', got {semantic_input!r}")
        if interaction and not motion:
            raise ValueError("the cross-attention needs the motion stream")
        if motion and channels < 6:
            raise ValueError("the motion stream needs at least 2 stacked frames")
        self.obs_shape = tuple(obs_shape)
        self.semantic_input = semantic_input
        sem_channels = 3 if semantic_input == "current" else channels
        args = (num_layers, num_filters, feature_dim, stride)
        self.semantic = PixelEncoder((sem_channels, h, w), *args)
        self.motion = PixelEncoder((channels - 3, h, w), *args) if motion else None
        self.attention: CrossAttention | None = None
        if interaction:
            map_hw = self.semantic.map_shape[1:]
            if min(map_hw) < attention_stride:
                raise ValueError(
                    f"feature maps {map_hw} are smaller than attention_stride {attention_stride}"
                )
            self.attention = CrossAttention(num_filters, attention_dim, attention_stride)
        self.feature_dim = feature_dim * (2 if motion else 1)  # |z|

    def semantic_frames(self, obs: torch.Tensor) -> torch.Tensor:
        """The semantic stream's input, float in [0, 1]: (B, 3, H, W) or (B, 3k, H, W)."""
        x = obs[:, -3:] if self.semantic_input == "current" else obs
        return x.float() / 255.0

    def forward(
        self,
        obs: torch.Tensor,
        f_v: torch.Tensor | None = None,
        use_f_v: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """obs (B, 3k, H, W) uint8; `f_v` (B, C, h, w) the knowledge-aware map, read by the
        attention's semantic weights on the rows where `use_f_v` (B,) bool holds (F_s elsewhere).
        Returns z (B, |z|), z_s, f_s (F_s before the interaction) and, when present, z_m, f_m,
        attention_sm / attention_ms (B, N, N)."""
        f_s = self.semantic.feature_map(self.semantic_frames(obs))  # (B, C, h, w)
        out = {"f_s": f_s}
        if self.motion is None:
            out["z_s"] = out["z"] = self.semantic.project(f_s)
            return out
        f_m = self.motion.feature_map(motion_input(obs))  # (B, C, h, w)
        out["f_m"] = f_m
        if self.attention is not None:
            query = f_s
            if f_v is not None and use_f_v is not None:
                query = torch.where(use_f_v[:, None, None, None], f_v, f_s)
            f_s, f_m, out["attention_sm"], out["attention_ms"] = self.attention(f_s, f_m, query)
        out["z_s"], out["z_m"] = self.semantic.project(f_s), self.motion.project(f_m)
        out["z"] = torch.cat([out["z_s"], out["z_m"]], dim=-1)  # (B, 2F): z = [z_s, z_m]
        return out


class SemoreAgent(OffPolicyAgent):
    """Semore (or one of its ablations, `cfg.variant`) on SAC. `obs_shape` is one env frame
    (H, W, 3); `act` takes the stacked input (`FrameStacker`), `update` a batch of the module
    docstring's contract."""

    algorithm = "semore"
    architecture = "semore"
    params_class = SemoreParams
    cfg: SemoreParams

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_space,
        cfg: SemoreParams,
        *,
        device: torch.device | str | None = None,
        seed: int = 0,
        trains: bool = True,
    ) -> None:
        if len(obs_shape) != 3 or obs_shape[2] != 3:
            raise ValueError(f"Semore reads (H, W, 3) frames, got shape {tuple(obs_shape)}")
        self.switches = sw = dict(_VARIANTS[cfg.variant])
        if cfg.semantic_input is not None:
            sw["semantic_input"] = cfg.semantic_input
        # eq. 12's weights as this variant uses them; 0 = the term is not computed
        self.w_similarity = cfg.similarity_weight if sw["similarity"] else 0.0
        if cfg.variant == "sac":
            self.w_transition = self.w_reward = cfg.aux_weight
        else:
            self.w_transition = cfg.transition_weight if sw["transition"] else 0.0
            self.w_reward = cfg.reward_weight
        super().__init__(obs_shape, action_space, cfg, device=device, seed=seed, trains=trains)

    def _build(self, action_dim: int) -> None:
        net, sw = self.cfg.network, self.switches
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
            stride=net.encoder_stride,
        )
        z_dim = self.encoder.feature_dim
        self.critic = Critic(z_dim, action_dim, net.hidden_dim)
        self.actor = Actor(z_dim, action_dim, net.hidden_dim, net.log_std_min, net.log_std_max)
        self.transition: TransitionModel | None = None
        if sw["transition"]:
            # eq. 8 on z_m (Semore); the baseline's DeepMDP transition on its whole z
            self.transition = TransitionModel(
                net.feature_dim, action_dim, net.transition_hidden_dim, net.transition_learn_sigma
            )
        self.reward_model = RewardModel(z_dim + action_dim, net.transition_hidden_dim)  # eq. 9
        if self.w_similarity > 0:
            side = min(self.encoder.semantic.map_shape[1:])
            if side < self.cfg.ssim_window:
                raise ValueError(
                    f"ssim_window {self.cfg.ssim_window} exceeds the {side}x{side} feature map of "
                    f"{self.obs_shape[:2]} frames; lower it"
                )

    def _heads(self) -> dict[str, nn.Module]:
        heads: dict[str, nn.Module] = {"reward_model": self.reward_model}
        if self.transition is not None:
            heads["transition"] = self.transition
        return heads

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """z = [z_s, z_m]; no mask: the attention weighs with F_s, as deployed."""
        return self.encoder(obs)["z"]

    def knowledge_map(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """F_v (B, C, h, w): the masked current frame o_t * M through the target semantic
        encoder, without gradient (module docstring)."""
        m = mask.float() / 255.0 if mask.dtype == torch.uint8 else mask.float()  # (B, 1, H, W)
        with torch.no_grad():
            frame = self.encoder_target.semantic_frames(obs) * m  # (B, 3, H, W)
            return self.encoder_target.semantic.feature_map(frame)

    def update_critic(self, batch: Tensors) -> CriticStep:
        """One gradient step of eq. 12: critic + encoder + heads."""
        b = batch
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
        z, reward, done = feats["z"], b["reward"].float(), b["done"].float()
        with torch.no_grad():
            next_action, next_log_pi, _ = self.actor(next_feats["z"])
            # eq. 10: V(s') = E[Q~(s', a') - alpha log pi(a'|s')]
            next_v = self.critic_target.q_min(next_z_target, next_action) - self.alpha * next_log_pi
            target = reward + self.cfg.gamma * (1.0 - done) * next_v  # (B,)
        q1, q2 = self.critic(z, action)
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)  # eq. 10 on both heads
        loss = critic_loss
        metrics = {"critic_loss": critic_loss, "q": q1.mean()}
        p = self.cfg
        if self.w_similarity > 0 and f_v is not None and has_mask is not None:
            per_row = similarity_loss(feats["f_s"], f_v, p.ssim_alpha, p.ssim_window, p.ssim_sigma)
            sim = per_row[has_mask].mean()  # eq. 5 on the rows with a mask only
            loss = loss + self.w_similarity * sim
            metrics |= {"similarity_loss": sim, "mask_rows": has_mask.float().mean()}
        if self.w_transition > 0 and self.transition is not None:
            key = "z" if p.variant == "sac" else "z_m"
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
        return CriticStep(metrics, z.detach(), next_feats["z"])


# --- the method -------------------------------------------------------------------------------


def selective_pool(hp: SemoreParams, offline: OfflineTransitions) -> OfflinePool | None:
    """Semore's selective replay, offline: the offline rows of update i come from the
    transitions the teacher judged reasonable with probability `selective_probability(i)`
    (1 -> `selective_end` over `selective_steps` updates, then all transitions). The paper
    filters what enters its buffer online; here the judgements exist for dataset rows only."""
    everything = np.arange(len(offline))
    reasonable = reasonable_indices(read_verdicts(offline["judge"], hp.selective_verdicts))
    if hp.selective_steps == 0 or len(reasonable) == 0:
        return None

    def pool(update: int, rng: np.random.Generator) -> np.ndarray | None:
        p = selective_probability(update, hp.selective_start, hp.selective_end, hp.selective_steps)
        if p == 0.0:
            return None
        return selective_sample(rng, everything, reasonable, hp.batch_size, p)

    return pool


def inserted_rows(
    hp: SemoreParams, offline: OfflineTransitions, entries: Sequence[tuple[int, int]]
) -> np.ndarray:
    """Semore's selective replay at insertion (`selective_replay: insert`): the offline rows that
    entered the replay, each part at its `(update, seed)` of `entries` (`selective_insert`)."""
    if len(entries) != int(offline.part.max(initial=0)) + 1:
        raise ValueError(
            f"{len(entries)} part entries for {int(offline.part.max(initial=0)) + 1} dataset "
            "parts: one (update, seed) per part, the static dataset first"
        )
    kept = selective_insert(
        read_verdicts(offline["judge"], hp.selective_verdicts), offline.part, entries,
        hp.selective_start, hp.selective_end, hp.selective_steps,
    )  # fmt: skip
    if len(kept) == 0:
        raise ValueError(
            "selective insertion left out every offline transition (none is judged reasonable "
            "and the first part entered with probability 1): label the `judge` task, lower "
            "`selective_start`, or use `selective_replay: sample`"
        )
    return kept


class Semore(OffPolicyMethod):
    name = "semore"
    params_class = SemoreParams
    labels = ("mask", "judge")
    teacher_tasks = ("objects", "judge")  # the masks of the `objects` phrases, the judge's verdicts
    deployed_agent = SemoreAgent

    def build_agent(
        self, env: gym.Env, hp: SemoreParams, run: TrainRun, inputs: TrainInputs
    ) -> tuple[OffPolicyAgent, dict[str, Any]]:
        return SemoreAgent.for_env(env, hp, seed=run.seed), {}

    def offline_pool(
        self, hp: SemoreParams, offline: OfflineTransitions, run: TrainRun, inputs: TrainInputs
    ) -> tuple[OfflinePool | None, dict[str, Any]]:
        if hp.selective_replay == "sample":
            return selective_pool(hp, offline), {}
        entries = inputs.part_entries or ((0, run.seed),)
        kept = inserted_rows(hp, offline, entries)
        chosen = {
            "selective_insert": {
                "entries": [list(e) for e in entries],
                "kept": [int((offline.part[kept] == k).sum()) for k in range(len(entries))],
                "of": [int((offline.part == k).sum()) for k in range(len(entries))],
            }
        }
        if len(kept) == len(offline):
            return None, chosen  # nothing was left out: uniform over all
        return lambda update, rng: kept, chosen


METHOD = Semore()
