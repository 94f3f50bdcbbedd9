"""A training loop's resume state (DrQ-v2 calls it a snapshot): everything an interrupted run needs
to go on exactly, kept in a directory outside the stage's DVC outputs (DVC deletes outputs before
a rerun) and removed when the run ends.

Not to be confused with the agent *checkpoint* (pipeline.agents.checkpoint: the trained agent a
stage writes) or the collect stage's actor file.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch

from pipeline.io import atomic_write_bytes

log = logging.getLogger(__name__)


def fingerprint(material: dict[str, Any]) -> str:
    """sha256 of a JSON-able description of everything a run depends on (settings, data hashes)."""
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


class Resume:
    """The resume state of one run in `directory`, tagged with `fingerprint`: a changed run never
    resumes another's state. `every`: steps (SAC family) or updates (PPO) between saves; the loops
    read it. Written atomically."""

    STATE = "state.pt"

    def __init__(self, directory: str | Path, fingerprint: str, every: int) -> None:
        if every < 1:
            raise ValueError(f"resume state every {every} steps: must be >= 1")
        self.directory, self.fingerprint, self.every = Path(directory), fingerprint, every

    def load(self) -> dict[str, Any] | None:
        path = self.directory / self.STATE
        if not path.exists():
            return None
        state = torch.load(io.BytesIO(path.read_bytes()), weights_only=False)  # our own file
        if state.get("fingerprint") != self.fingerprint:
            log.warning("%s belongs to other settings or data: starting over", path)
            return None
        log.info("resuming %s from step %d", self.directory, state["step"])
        return state

    def save(self, state: dict[str, Any]) -> None:
        buffer = io.BytesIO()
        torch.save({**state, "fingerprint": self.fingerprint}, buffer)
        atomic_write_bytes(self.directory / self.STATE, buffer.getvalue())

    def clear(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
