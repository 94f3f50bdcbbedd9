"""A training state (networks, optimisers, the replay's online part: nested dicts of tensors,
arrays and numbers) as files that load without unpickling: every tensor and array in one
safetensors file, the nesting and the plain values in a JSON skeleton beside it.

What a labelling round resumes from is a DVC output that may be shared (a remote, a colleague's
cache), so it must be as safe to read as an agent checkpoint; the resume state under `.resume/`
stays a pickle because it is never shared (tests/test_attack_surface.py lists why).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from pipeline.errors import PipelineError
from pipeline.io import atomic_write_bytes, atomic_write_json


class StateFileError(PipelineError, ValueError):
    """A training state's files are missing or damaged; the message names them and the fix."""


def _encode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        key = str(len(tensors))
        tensors[key] = value.detach().cpu().contiguous()
        return {"tensor": key}
    if isinstance(value, np.ndarray):
        key = str(len(tensors))
        tensors[key] = torch.from_numpy(np.ascontiguousarray(value))
        return {"ndarray": key}
    if isinstance(value, dict):  # keys may be ints (optimiser states): kept with their type
        return {"dict": [[_encode(k, tensors), _encode(v, tensors)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {
            "tuple" if isinstance(value, tuple) else "list": [_encode(v, tensors) for v in value]
        }
    if isinstance(value, np.generic):
        return {"value": value.item()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"a training state holds {type(value).__name__}, which has no safe encoding")


def _decode(node: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Any:
    ((kind, payload),) = node.items()
    if kind == "tensor":
        return tensors[payload]
    if kind == "ndarray":
        return tensors[payload].numpy()
    if kind == "dict":
        return {_decode(k, tensors): _decode(v, tensors) for k, v in payload}
    if kind in ("list", "tuple"):
        items = [_decode(v, tensors) for v in payload]
        return tuple(items) if kind == "tuple" else items
    if kind == "value":
        return payload
    raise ValueError(f"unknown node {kind!r}")


def save_state(directory: str | Path, name: str, state: dict[str, Any]) -> None:
    """`<name>.safetensors` (every tensor and array) and `<name>.json` (the rest), atomically;
    the JSON last, as the marker of a complete state."""
    directory, tensors = Path(directory), {}
    skeleton = _encode(state, tensors)
    atomic_write_bytes(directory / f"{name}.safetensors", save_safetensors(tensors))
    atomic_write_json(directory / f"{name}.json", skeleton)


def has_state(directory: str | Path, name: str) -> bool:
    return (Path(directory) / f"{name}.json").exists()


def load_state(directory: str | Path, name: str) -> dict[str, Any]:
    """What `save_state` wrote, with no unpickling; damaged files are named with the fix."""
    skeleton_path = Path(directory) / f"{name}.json"
    tensors_path = Path(directory) / f"{name}.safetensors"
    fix = f"restore {directory} with `dvc checkout` or rebuild it with `dvc repro`"
    try:
        skeleton = json.loads(skeleton_path.read_text(encoding="utf-8"))
        tensors = load_safetensors(tensors_path.read_bytes())
        return _decode(skeleton, tensors)
    except FileNotFoundError as exc:
        raise StateFileError(f"{exc.filename} does not exist: {fix}") from None
    except (ValueError, KeyError, TypeError, SafetensorError, UnicodeDecodeError) as exc:
        raise StateFileError(
            f"{skeleton_path} / {tensors_path.name} is not a training state ({exc}): {fix}"
        ) from None
