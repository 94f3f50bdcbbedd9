"""One way back from a checkpoint directory to an acting agent, whatever trained it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from pipeline.agents.checkpoint import CheckpointError, read_meta
from pipeline.agents.ppo import ARCHITECTURE as PPO_ARCHITECTURE
from pipeline.agents.ppo import ActorCritic
from pipeline.agents.sac import SACAgent
from pipeline.agents.semore import SemoreAgent


class Agent(Protocol):
    """What every agent offers at deployment. `act` takes the agent's input for one step: the
    `obs_kind` entry of the env's observation dict, stacked over `frame_stack` frames
    (`pipeline.dataset.stacking.FrameStacker`)."""

    obs_kind: str
    frame_stack: int

    def act(self, obs: np.ndarray, deterministic: bool = False) -> Any: ...

    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> None: ...


def load_agent(directory: str | Path, device: torch.device | str = "cpu") -> Agent:
    """Rebuild the agent saved in `directory` (its `agent.json` says which); ERPv agents come
    back as the SAC networks they deploy (C_V is a training-time guide only)."""
    meta = read_meta(directory)
    architecture = meta.get("architecture")
    if architecture == PPO_ARCHITECTURE:
        return ActorCritic.load(directory)
    if architecture == "sac":
        return SACAgent.load(directory, device=device)
    if architecture == SemoreAgent.algorithm:
        return SemoreAgent.load(directory, device=device)
    raise CheckpointError(
        f"{Path(directory) / 'agent.json'}: unknown agent architecture {architecture!r} "
        f"(known: {PPO_ARCHITECTURE}, sac, {SemoreAgent.algorithm})"
    )
