"""A trained agent as stage one acts with it: a deployed policy, and how a stage loads one.

Stage one acts with trained agents in two places: the `policy` teacher answers label prompts with
an agent's action, and collect's `checkpoint` behaviour plays one. Both take a `PolicyLoader`
from their stage, which builds it with stage two's `load_policy` (the method table rebuilds the
agent from `agent.json` + `agent.safetensors`), so stage one's code imports nothing of stage two
(tests/test_layers.py). The agent directory's file names are the contract between the wings.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

AGENT_JSON = "agent.json"  # an agent directory's metadata: method, env, architecture
AGENT_WEIGHTS = "agent.safetensors"  # ... and its weights (no code)


class DeployedPolicy(Protocol):
    """An agent acting as deployed: over the env's observation dict, frames stacked (and
    resized) as in training, restarting at each episode's first observation."""

    @property
    def obs(self) -> str:
        """The observation key it reads: `state` or `pixels`."""
        ...

    @property
    def meta(self) -> dict[str, Any]:
        """Its agent.json: the env it was trained on (`env`), its method, ..."""
        ...

    def begin(self, obs: Mapping[str, np.ndarray]) -> None:
        """The next observation starts an episode."""
        ...

    def act(self, obs: Mapping[str, np.ndarray]) -> Any:
        """The action for one observation (no batch axis)."""
        ...


class PolicyLoader(Protocol):
    """Loads the agent in `directory` (a `models/<run>`) as a deployed policy: deterministic (as
    deployed) or sampling from its policy."""

    def __call__(self, directory: str | Path, deterministic: bool = True) -> DeployedPolicy: ...


def needs_loader(load_policy: PolicyLoader | None, what: str) -> PolicyLoader:
    """`load_policy`, refused where a stage gave none: the code that acts with an agent is
    stage one's, the code that rebuilds it stage two's, and only a stage holds both."""
    if load_policy is None:
        raise ValueError(
            f"{what} acts with a trained agent, which stage one loads only through its stage: "
            "pass load_policy=pipeline.learn.methods.table.load_policy"
        )
    return load_policy
