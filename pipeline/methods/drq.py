"""Method `drq`: pixel SAC with random-shift augmentation (Kostrikov, Yarats & Fergus 2020, "Image
Augmentation Is All You Need"), the DrQ baseline of ERPv tables 1-2 and Semore table 1.

Each update pads every frame stack of the batch by `image_pad` pixels (replicating the border)
and crops it back at a random offset, obs and next_obs independently (the paper's K = M = 1
setting, which DrQ-v2 keeps; table 1's K = M = 2 averaging of the target and the Q loss over
augmentations is not done here). The augmentation after DrQ-v2's `RandomShiftsAug`: an integer
shift of the sampling grid, so pixels move whole. Acting sees the frames unshifted; a saved agent
is SAC's networks.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from pipeline.agents.off_policy import OffPolicyAgent, SACParams, Tensors
from pipeline.agents.sac import SACAgent
from pipeline.config import TrainRun
from pipeline.methods.base import TrainInputs
from pipeline.methods.off_policy import OffPolicyMethod


class DrQParams(SACParams):
    """DrQ (`drq`): the SAC settings (merged from `sac` with `<<: *sac`) on pixels, plus the
    augmentation. The paper's agent is plain SAC: `aux_weight: 0`."""

    image_pad: int = Field(
        default=4, ge=1, description="Random shift in pixels each way (DrQ: 4 at 84x84)."
    )

    @model_validator(mode="after")
    def _pixels(self) -> DrQParams:
        if self.network.obs != "pixels":
            raise ValueError("DrQ augments frames: set `network.obs: pixels`")
        return self


def random_shift(x: torch.Tensor, pad: int) -> torch.Tensor:
    """Frames (B, C, H, W) shifted by a random integer offset in [-pad, pad] on each axis, per
    row, the border replicated; float output (uint8 values kept: the encoder scales by 1/255)."""
    n, _, h, w = x.shape
    x = F.pad(x.float(), (pad, pad, pad, pad), mode="replicate")  # (B, C, H + 2p, W + 2p)
    # pixel centres of the padded frame's top-left H x W window (align_corners: -1 and 1 are
    # the centres of its first and last pixels)
    ys = torch.linspace(-1.0, 1.0, h + 2 * pad, device=x.device)[:h]
    xs = torch.linspace(-1.0, 1.0, w + 2 * pad, device=x.device)[:w]
    grid = torch.stack(torch.meshgrid(ys, xs, indexing="ij")[::-1], dim=-1)  # (H, W, 2): x, y
    shift = torch.randint(0, 2 * pad + 1, (n, 1, 1, 2), device=x.device).float()  # (B, 1, 1, 2)
    step = torch.tensor([2.0 / (w + 2 * pad - 1), 2.0 / (h + 2 * pad - 1)], device=x.device)
    return F.grid_sample(x, grid + shift * step, mode="nearest", align_corners=True)


class DrQAgent(SACAgent):
    """SAC whose every update sees randomly shifted frames."""

    algorithm = "drq"
    params_class = DrQParams
    cfg: DrQParams

    def update(self, batch: Tensors) -> dict[str, float]:
        pad = self.cfg.image_pad
        shifted = {
            "obs": random_shift(batch["obs"].to(self.device), pad),
            "next_obs": random_shift(batch["next_obs"].to(self.device), pad),
        }
        return super().update(batch | shifted)


class DrQ(OffPolicyMethod):
    name = "drq"
    params_class = DrQParams
    deployed_agent = SACAgent

    def build_agent(
        self, env: gym.Env, hp: DrQParams, run: TrainRun, inputs: TrainInputs
    ) -> tuple[OffPolicyAgent, dict[str, Any]]:
        return DrQAgent.for_env(env, hp, seed=run.seed), {}


METHOD = DrQ()
