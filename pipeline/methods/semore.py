"""Method `semore` (seed 001): the dual-stream agent (pipeline.agents.semore) reads the dataset's
masks (eq. 4-7) and judge labels (the selective replay), and its ablations (`variant`)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from pipeline.agents.off_policy import OffPolicyAgent
from pipeline.agents.replay import OfflinePool
from pipeline.agents.semore import (
    SemoreAgent,
    SemoreParams,
    reasonable_indices,
    selective_probability,
    selective_sample,
)
from pipeline.config import TrainRun
from pipeline.dataset.transitions import OfflineTransitions
from pipeline.methods.base import TrainInputs
from pipeline.methods.off_policy import OffPolicyMethod


def selective_pool(hp: SemoreParams, offline: OfflineTransitions) -> OfflinePool | None:
    """Semore's selective replay, offline: the offline rows of update i come from the
    transitions the teacher judged reasonable with probability `selective_probability(i)`
    (1 -> `selective_end` over `selective_steps` updates, then all transitions). The paper
    filters what enters its buffer online; here the judgements exist for dataset rows only."""
    everything = np.arange(len(offline))
    reasonable = reasonable_indices(offline["judge"])
    if hp.selective_steps == 0 or len(reasonable) == 0:
        return None

    def pool(update: int, rng: np.random.Generator) -> np.ndarray | None:
        p = selective_probability(update, hp.selective_start, hp.selective_end, hp.selective_steps)
        if p == 0.0:
            return None
        return selective_sample(rng, everything, reasonable, hp.batch_size, p)

    return pool


class Semore(OffPolicyMethod):
    name = "semore"
    params_class = SemoreParams
    labels = ("mask", "judge")
    deployed_agent = SemoreAgent

    def build_agent(
        self, env: gym.Env, hp: SemoreParams, run: TrainRun, inputs: TrainInputs
    ) -> tuple[OffPolicyAgent, dict[str, Any]]:
        return SemoreAgent.for_env(env, hp, seed=run.seed), {}

    def offline_pool(self, hp: SemoreParams, offline: OfflineTransitions) -> OfflinePool | None:
        return selective_pool(hp, offline)


METHOD = Semore()
