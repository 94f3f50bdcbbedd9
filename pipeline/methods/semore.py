"""Method `semore` (seed 001): the dual-stream agent (pipeline.agents.semore) reads the dataset's
masks (eq. 4-7) and judge labels (the selective replay), and its ablations (`variant`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from pipeline.agents.off_policy import OffPolicyAgent
from pipeline.agents.replay import OfflinePool
from pipeline.agents.semore import (
    SemoreAgent,
    SemoreParams,
    reasonable_indices,
    selective_insert,
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
        offline["judge"], offline.part, entries,
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
