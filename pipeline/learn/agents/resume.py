"""A training loop's resume state (DrQ-v2 calls it a snapshot): everything an interrupted run needs
to go on exactly, kept in a directory outside the stage's DVC outputs (DVC deletes outputs before
a rerun) and removed when the run ends.

Files, read without unpickling anything (pipeline.learn.agents.state_io's encoding):

- `state.<sha256[:16]>.safetensors`: every tensor and array, named by its content, so a new save
  never overwrites the tensors the current `state.json` points at;
- `state.json`: the fingerprint, the tensors file's name and sha256, what the state is of
  (`about`: run, seed and steps, where known; `vlmrl-sweep status` reads it), and the nesting
  and plain values of the state (steps, curve, logs, RNG states). Written last, atomically: the marker of a
  complete state. The fingerprint is checked here, before any tensor is read; `peek` reads this
  file alone.

A resume state is a private cache: a damaged one, one of an older format (`state.pt`, a pickle,
never read) or one of other settings is named in a warning and the run starts over, which costs
time but never a wrong result. There is nothing to fix by hand.

Not to be confused with the agent *checkpoint* (pipeline.learn.agents.checkpoint: the trained agent a
stage writes) or the collect stage's actor file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from pipeline.core.errors import PipelineError
from pipeline.core.io import atomic_write_bytes, atomic_write_json
from pipeline.learn.agents.state_io import decode_plain, decode_state, encode_state

log = logging.getLogger(__name__)

# 2: safetensors + JSON (1 was `state.pt`, a torch pickle)
FORMAT_VERSION = 2


def fingerprint(material: dict[str, Any]) -> str:
    """sha256 of a JSON-able description of everything a run depends on (settings, data hashes)."""
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


class ResumeStateError(ValueError):
    """A resume state's files are damaged or of another format; the message names the file."""


class ResumeSaveError(PipelineError, OSError):
    """A resume state could not be written (a full disk, a read-only folder); the last complete
    state is still there."""


def read_header(directory: str | Path) -> dict[str, Any] | None:
    """`state.json` of the resume state in `directory`, checked for its format; None where there
    is none. ResumeStateError where it is damaged or of another format."""
    path = Path(directory) / Resume.STATE
    if not path.exists():
        return None
    try:
        header = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ResumeStateError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("format_version") != FORMAT_VERSION:
        found = header.get("format_version") if isinstance(header, dict) else None
        raise ResumeStateError(f"{path}: resume state format {found}, this code reads "
                               f"{FORMAT_VERSION}")  # fmt: skip
    for key, kind in (("fingerprint", str), ("tensors", str), ("tensors_sha256", str)):
        if not isinstance(header.get(key), kind):
            raise ResumeStateError(f"{path}: no {key!r}")
    if "/" in header["tensors"] or "\\" in header["tensors"] or header["tensors"].startswith("."):
        raise ResumeStateError(f"{path}: tensors file {header['tensors']!r} is not a file name")
    return header


def read_plain(directory: str | Path) -> dict[str, Any] | None:
    """The state's plain values (every tensor and array None), from `state.json` alone; None
    where there is no state. ResumeStateError where it is damaged."""
    header = read_header(directory)
    if header is None:
        return None
    try:
        state = decode_plain(header.get("state"))
    except (ValueError, KeyError, TypeError) as exc:
        raise ResumeStateError(f"{Path(directory) / Resume.STATE}: damaged ({exc})") from None
    if not isinstance(state, dict):
        raise ResumeStateError(f"{Path(directory) / Resume.STATE}: damaged (not a state)")
    return state


class Resume:
    """The resume state of one run in `directory`, tagged with `fingerprint`: a changed run never
    resumes another's state. `every`: steps (SAC family) or updates (PPO) between saves; the loops
    read it. Written atomically (see the module doc). With `keep_final`, a finished run keeps its
    final state (`finish`): run again, it loads it and trains no step."""

    STATE = "state.json"  # the marker of a complete state
    OLD_STATE = "state.pt"  # format 1: a pickle, never read

    def __init__(
        self,
        directory: str | Path,
        fingerprint: str,
        every: int,
        about: dict[str, Any] | None = None,
        keep_final: bool = False,
    ) -> None:
        if every < 1:
            raise ValueError(f"resume state every {every} steps: must be >= 1")
        self.directory, self.fingerprint, self.every = Path(directory), fingerprint, every
        self.about = dict(about or {})  # what it is a state of (run, seed, steps): for status
        self.keep_final = keep_final

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None: none, or one this run cannot go on from (a warning says
        which file and why; the run starts over and its next save replaces the files)."""
        old = self.directory / self.OLD_STATE
        if old.exists():
            log.warning(
                "%s is a resume state of an older version (a pickle, which this code never "
                "reads): deleted; the run starts over",
                old,
            )
            old.unlink()
        path = self.directory / self.STATE
        try:
            header = read_header(self.directory)
            if header is None:
                return None
            if header["fingerprint"] != self.fingerprint:  # before any tensor is read
                log.warning("%s belongs to other settings or data: starting over", path)
                return None
            state = self._decode(header)
        except ResumeStateError as exc:
            log.warning(
                "%s; a resume state is this run's private cache: starting over (the next save "
                "replaces it)",
                exc,
            )
            return None
        log.info("resuming %s from step %d", self.directory, state["step"])
        return state

    def _decode(self, header: dict[str, Any]) -> dict[str, Any]:
        tensors_path = self.directory / header["tensors"]
        try:
            data = tensors_path.read_bytes()
        except FileNotFoundError:
            raise ResumeStateError(f"{tensors_path} does not exist") from None
        if hashlib.sha256(data).hexdigest() != header["tensors_sha256"]:
            raise ResumeStateError(
                f"{tensors_path} is damaged (its sha256 is not the recorded one)"
            )
        try:
            state = decode_state(header.get("state"), load_safetensors(data))
        except (ValueError, KeyError, TypeError, SafetensorError) as exc:
            raise ResumeStateError(f"{self.directory / self.STATE} is damaged ({exc})") from None
        if not isinstance(state, dict):
            raise ResumeStateError(f"{self.directory / self.STATE} is damaged (not a state)")
        return state

    def save(self, state: dict[str, Any]) -> None:
        """Tensors under a new name first, then `state.json` naming them, then the old tensors
        go: killed at any point, the directory holds one complete state."""
        skeleton, tensors = encode_state(state)
        data = save_safetensors(tensors)
        digest = hashlib.sha256(data).hexdigest()
        name = f"state.{digest[:16]}.safetensors"
        header = {
            "format_version": FORMAT_VERSION,
            "fingerprint": self.fingerprint,
            "tensors": name,
            "tensors_sha256": digest,
            "about": self.about,
            "state": skeleton,
        }
        try:
            atomic_write_bytes(self.directory / name, data)
            atomic_write_json(self.directory / self.STATE, header)
        except OSError as exc:  # ENOSPC, EROFS, EACCES: nothing half-written stays
            try:
                current = read_header(self.directory)
            except ResumeStateError:
                current = None
            if current is None or current.get("tensors") != name:  # not the state's tensors
                (self.directory / name).unlink(missing_ok=True)
            raise ResumeSaveError(
                f"cannot save the resume state in {self.directory} ({exc.strerror or exc}, "
                f"{len(data):,} bytes of tensors): free space there or set VLMRL_RESUME_ROOT to "
                "another folder, then rerun; the run goes on from its last complete state"
            ) from exc
        for stale in self.directory.glob("state.*.safetensors"):
            if stale.name != name:
                stale.unlink(missing_ok=True)

    def clear(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def finish(self) -> None:
        """The run has finished: its state goes, unless it is kept (`keep_final`)."""
        if not self.keep_final:
            self.clear()
