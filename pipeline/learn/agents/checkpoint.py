"""One checkpoint layout for every agent (and C_V): a directory holding

- `agent.json`: what to rebuild (`architecture`), the agent's config, shapes and action bounds,
  the training step, and what the train stage adds (run, env, method, data hashes);
- `agent.safetensors`: every tensor, named `<module>.<parameter>`.

Both are written atomically; the JSON is written last, so a directory with an `agent.json` is a
complete checkpoint. `pipeline.learn.methods.table.load_agent` reads any agent's back.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import SafetensorError

from pipeline.core.errors import PipelineError
from pipeline.core.io import atomic_write_bytes
from pipeline.core.policy import AGENT_JSON, AGENT_WEIGHTS

if TYPE_CHECKING:  # torch is imported where tensors are read or written: `read_meta` and the
    # constants serve stages that never load a network (collect, check_params)
    import torch
    from torch import nn

# 2: one layout for all agents (was model.safetensors + config.json for SAC, agent.* for PPO)
# 3: the weights' metadata holds agent.json's sha256 (an edited agent.json is refused)
FORMAT_VERSION = 3
AGENT_JSON_SHA256 = "agent_json_sha256"  # the key in agent.safetensors' `__metadata__`


class CheckpointError(PipelineError, ValueError):
    """A directory is not a checkpoint this code reads; the message says what to do."""


def module_tensors(modules: dict[str, nn.Module]) -> dict[str, torch.Tensor]:
    """Every module's state as one flat, contiguous CPU tensor dict, keys `<name>.<key>`."""
    return {
        f"{name}.{key}": value.detach().contiguous().cpu()
        for name, module in modules.items()
        for key, value in module.state_dict().items()
    }


def check_tensors(
    expected: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor], source: str | Path
) -> None:
    """`tensors` (read from `source`) hold exactly the keys of `expected`, each with its dtype and
    shape. `load_state_dict` alone would cast an edited dtype silently (an F32 header changed to
    I32 loads and plays worse) and fail on a shape with a traceback that names no file."""
    fix = f"restore it with `dvc checkout {Path(source).parent}` or retrain it (`dvc repro`)"
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{source}: tensors missing {missing[:3]}, unexpected {unexpected[:3]}: not the "
            f"weights of this agent's networks; {fix}"
        )
    for key, want in expected.items():
        got = tensors[key]
        if got.dtype != want.dtype or got.shape != want.shape:
            raise CheckpointError(
                f"{source}: tensor {key} is {got.dtype} {tuple(got.shape)}, the network needs "
                f"{want.dtype} {tuple(want.shape)}; {fix}"
            )


def load_module_tensors(
    modules: dict[str, nn.Module],
    tensors: dict[str, torch.Tensor],
    source: str | Path,
    others: dict[str, torch.Tensor] | None = None,
) -> None:
    """Inverse of `module_tensors`: every key, dtype and shape checked first (`check_tensors`);
    `others`: the tensors saved beside the modules' (e.g. log_alpha), checked the same way and
    left for the caller to load."""
    expected = {
        f"{name}.{key}": value for name, module in modules.items()
        for key, value in module.state_dict().items()
    }  # fmt: skip
    check_tensors({**expected, **(others or {})}, tensors, source)
    for name, module in modules.items():
        prefix = f"{name}."
        state = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        module.load_state_dict(state, strict=True)


def load_module(module: nn.Module, tensors: dict[str, torch.Tensor], source: str | Path) -> None:
    """`module.load_state_dict(tensors)` after `check_tensors`."""
    check_tensors(module.state_dict(), tensors, source)
    module.load_state_dict(tensors, strict=True)


def write_checkpoint(
    directory: str | Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]
) -> None:
    """Weights first, then `agent.json` (the marker of a complete checkpoint)."""
    from safetensors.torch import save as save_safetensors

    directory = Path(directory)
    # atomic_write_json's bytes, hashed into the weights: agent.json and the weights they were
    # written with are one checkpoint, and an edit to either half is refused (`read_meta`)
    text = json.dumps({**meta, "format_version": FORMAT_VERSION}, indent=2, sort_keys=True) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()
    atomic_write_bytes(
        directory / AGENT_WEIGHTS, save_safetensors(tensors, metadata={AGENT_JSON_SHA256: digest})
    )
    atomic_write_bytes(directory / AGENT_JSON, text.encode())


def read_meta(directory: str | Path) -> dict[str, Any]:
    """`agent.json` of a checkpoint, checked for its format version."""
    path = Path(directory) / AGENT_JSON
    if not path.exists():
        raise CheckpointError(
            f"{path} does not exist: {directory} is not an agent checkpoint (train it first: "
            f"`dvc repro`)"
        )
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise CheckpointError(
            f"{path} is not valid JSON ({exc}): the checkpoint is damaged; restore it with "
            f"`dvc checkout {directory}` or retrain it (`dvc repro`)"
        ) from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: expected a JSON object; retrain it (`dvc repro`)")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format {meta.get('format_version')}, this code reads "
            f"{FORMAT_VERSION}; retrain it (`dvc repro`)"
        )
    weights = Path(directory) / AGENT_WEIGHTS
    if weights.exists():  # (a missing one is named where the weights are read)
        recorded = _weights_metadata(weights).get(AGENT_JSON_SHA256)
        if recorded != hashlib.sha256(path.read_bytes()).hexdigest():
            raise CheckpointError(
                f"{path} is not the agent.json its weights ({weights.name}) were written with "
                f"(edited since, or from another checkpoint): its values (action bounds, "
                f"shapes, config) cannot be trusted; restore it with `dvc checkout {directory}` "
                "or retrain it (`dvc repro`)"
            )
    return meta


def _weights_metadata(weights: Path) -> dict[str, str]:
    """The `__metadata__` of a safetensors file, from its header alone (no tensor is read, and
    no torch import: stages that only read agent.json call this)."""
    fix = f"restore it with `dvc checkout {weights.parent}` or retrain it (`dvc repro`)"
    try:
        with weights.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 2 <= size <= 100_000_000:
                raise ValueError(f"a header of {size:,} bytes")
            header = json.loads(f.read(size))
        metadata = header.get("__metadata__") or {}
        if not isinstance(metadata, dict):
            raise ValueError("__metadata__ is not an object")
    except (OSError, ValueError, AttributeError, RecursionError) as exc:
        raise CheckpointError(f"{weights} is damaged ({exc}); {fix}") from None
    return metadata


def weights_path(directory: str | Path) -> Path:
    return Path(directory) / AGENT_WEIGHTS


def read_checkpoint(directory: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(agent.json, tensors) of a checkpoint written by `write_checkpoint`."""
    from safetensors.torch import load as load_safetensors

    meta = read_meta(directory)
    weights = Path(directory) / AGENT_WEIGHTS
    fix = f"restore it with `dvc checkout {directory}` or retrain it (`dvc repro`)"
    if not weights.exists():
        raise CheckpointError(f"{weights} does not exist: the checkpoint is incomplete; {fix}")
    try:
        return meta, load_safetensors(weights.read_bytes())
    except SafetensorError as exc:
        raise CheckpointError(f"{weights} is damaged ({exc}); {fix}") from None
