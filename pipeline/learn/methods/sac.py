"""Method `sac`: SAC + DeepMDP (pipeline.learn.agents.sac), ERPv's base agent and the SAC baseline of
ERPv tables 1-2; plain SAC with `aux_weight: 0`."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from pipeline.core.config import TrainRun
from pipeline.learn.agents.off_policy import OffPolicyAgent, SACParams
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.methods.base import TrainInputs
from pipeline.learn.methods.off_policy import OffPolicyMethod


class SAC(OffPolicyMethod):
    name = "sac"
    params_class = SACParams
    deployed_agent = SACAgent

    def build_agent(
        self, env: gym.Env, hp: SACParams, run: TrainRun, inputs: TrainInputs
    ) -> tuple[OffPolicyAgent, dict[str, Any]]:
        return SACAgent.for_env(env, hp, seed=run.seed), {}


METHOD = SAC()
