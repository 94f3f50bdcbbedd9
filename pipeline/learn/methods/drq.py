"""Method `drq`: pixel SAC with random-shift augmentation (Kostrikov, Yarats & Fergus 2020, "Image
Augmentation Is All You Need"), the DrQ baseline of ERPv tables 1-2 and Semore table 1.

Each update shifts obs and next_obs by a random whole-pixel offset of up to `image_pad` pixels,
each row and each of the two independently (the paper's K = M = 1 setting, which DrQ-v2 keeps;
table 1's K = M = 2 averaging of the target and the Q loss over augmentations is not done here).
The shift is the SAC family's (`image_pad`, pipeline.learn.agents.augment): DrQ is SAC with it on, and
a saved agent is SAC's networks. Acting sees the frames unshifted.

The actor is DrQ's (`actor_encoder: own`): the authors' actor builds an encoder of its own whose
convs are tied to the critic's (`copy_conv_weights_from`) and reads it detached after the convs,
so its FC + LayerNorm head is trained by the actor's loss. SAC-AE's and ERPv's actor reads the
critic encoder's whole output instead (`shared`, the other methods' setting).
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
from pydantic import Field, model_validator

from pipeline.core.config import TrainRun
from pipeline.learn.agents.off_policy import OffPolicyAgent, SACParams
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.methods.base import TrainInputs
from pipeline.learn.methods.off_policy import OffPolicyMethod


class DrQParams(SACParams):
    """DrQ (`drq`): the SAC settings (merged from `sac` with `<<: *sac`) on pixels, with the
    augmentation on. The paper's agent is plain SAC: `aux_weight: 0`."""

    image_pad: int = Field(
        default=4, ge=1, description="Random shift in pixels each way (DrQ: 4 at 84x84)."
    )
    actor_encoder: Literal["shared", "own"] = Field(
        default="own",
        exclude_if=lambda v: v == "shared",
        description="DrQ's actor (drq.py's `Actor` with `copy_conv_weights_from`): its own FC + "
        "LayerNorm + tanh head over the critic's conv map, detached (`own`); `shared` reads the "
        "critic encoder's features as SAC-AE's actor does.",
    )

    @model_validator(mode="after")
    def _pixels(self) -> DrQParams:
        if self.network.obs != "pixels":
            raise ValueError("DrQ augments frames: set `network.obs: pixels`")
        return self


class DrQAgent(SACAgent):
    """SAC whose every update sees randomly shifted frames (`image_pad` >= 1)."""

    algorithm = "drq"
    params_class = DrQParams
    cfg: DrQParams


class DrQ(OffPolicyMethod):
    name = "drq"
    params_class = DrQParams
    deployed_agent = SACAgent

    def build_agent(
        self, env: gym.Env, hp: DrQParams, run: TrainRun, inputs: TrainInputs
    ) -> tuple[OffPolicyAgent, dict[str, Any]]:
        return DrQAgent.for_env(env, hp, seed=run.seed), {}


METHOD = DrQ()
