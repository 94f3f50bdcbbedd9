"""A training state (networks, optimisers, the replay's online part: nested dicts of tensors,
arrays and numbers) as files that load without unpickling: every tensor and array in one
safetensors file, the nesting and the plain values in a JSON skeleton beside it.

What a labelling round resumes from is a DVC output that may be shared (a remote, a colleague's
cache), so it must be as safe to read as an agent checkpoint. A training loop's resume state
(pipeline.learn.agents.resume) uses the same encoding (`encode_state`, `decode_state`) in files of its
own, and reads its plain values alone (`decode_plain`) before any tensor.
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

from pipeline.core.errors import PipelineError
from pipeline.core.io import atomic_write_bytes, atomic_write_json


class StateFileError(PipelineError, ValueError):
    """A training state's files are missing or damaged; the message names them and the fix."""


def _store(tensor: torch.Tensor, tensors: dict[str, torch.Tensor], memo: dict[Any, str]) -> str:
    """The key of `tensor` in `tensors`. A tensor met twice (an encoder that actor and critic
    share) is stored once and comes back as one tensor, as pickle kept it; another view of
    memory already stored is copied (safetensors refuses tensors that share memory)."""
    if tensor.numel() == 0:
        key = str(len(tensors))
        tensors[key] = tensor
        return key
    storage = tensor.untyped_storage().data_ptr()
    view = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride())
    if view in memo:
        return memo[view]
    if ("storage", storage) in memo:
        tensor = tensor.clone()
        storage = tensor.untyped_storage().data_ptr()
        view = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride())
    key = str(len(tensors))
    tensors[key] = tensor
    memo[view], memo[("storage", storage)] = key, key
    return key


def _encode(value: Any, tensors: dict[str, torch.Tensor], memo: dict[Any, str]) -> Any:
    if isinstance(value, torch.Tensor):
        return {"tensor": _store(value.detach().cpu().contiguous(), tensors, memo)}
    if isinstance(value, np.ndarray):
        return {"ndarray": _store(torch.from_numpy(np.ascontiguousarray(value)), tensors, memo)}
    if isinstance(value, dict):  # keys may be ints (optimiser states): kept with their type
        return {
            "dict": [
                [_encode(k, tensors, memo), _encode(v, tensors, memo)] for k, v in value.items()
            ]
        }
    if isinstance(value, (list, tuple)):
        kind = "tuple" if isinstance(value, tuple) else "list"
        return {kind: [_encode(v, tensors, memo) for v in value]}
    if isinstance(value, np.generic):
        return {"value": value.item()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"a training state holds {type(value).__name__}, which has no safe encoding")


def _decode(node: dict[str, Any], tensors: dict[str, torch.Tensor] | None) -> Any:
    ((kind, payload),) = node.items()
    if kind in ("tensor", "ndarray") and tensors is None:
        return None  # decode_plain: the values alone
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


def encode_state(state: dict[str, Any]) -> tuple[Any, dict[str, torch.Tensor]]:
    """(skeleton, tensors): the JSON-able nesting and plain values, and every tensor and array
    (CPU, contiguous) under the key the skeleton names. TypeError for what has no safe encoding."""
    tensors: dict[str, torch.Tensor] = {}
    return _encode(state, tensors, {}), tensors


def decode_state(skeleton: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of `encode_state`. ValueError, KeyError or TypeError where the two do not fit."""
    if not isinstance(skeleton, dict):
        raise TypeError(f"a state skeleton is a JSON object, got {type(skeleton).__name__}")
    return _decode(skeleton, tensors)


def decode_plain(skeleton: Any) -> Any:
    """`decode_state` without the tensors: every tensor and array comes back as None. What a
    status command or a fingerprint check reads, at the cost of the JSON alone."""
    if not isinstance(skeleton, dict):
        raise TypeError(f"a state skeleton is a JSON object, got {type(skeleton).__name__}")
    return _decode(skeleton, None)


def save_state(directory: str | Path, name: str, state: dict[str, Any]) -> None:
    """`<name>.safetensors` (every tensor and array) and `<name>.json` (the rest), atomically;
    the JSON last, as the marker of a complete state."""
    directory = Path(directory)
    skeleton, tensors = encode_state(state)
    atomic_write_bytes(directory / f"{name}.safetensors", save_safetensors(tensors))
    atomic_write_json(directory / f"{name}.json", skeleton)


def has_state(directory: str | Path, name: str) -> bool:
    return (Path(directory) / f"{name}.json").exists()


def load_plain_state(directory: str | Path, name: str) -> dict[str, Any]:
    """`load_state` without the tensors (each comes back as None): the JSON alone."""
    path = Path(directory) / f"{name}.json"
    fix = f"restore {directory} with `dvc checkout` or rebuild it with `dvc repro`"
    try:
        return decode_plain(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise StateFileError(f"{path} does not exist: {fix}") from None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as exc:
        raise StateFileError(f"{path} is not a training state ({exc}): {fix}") from None


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
    except (
        ValueError,
        KeyError,
        TypeError,
        SafetensorError,
        UnicodeDecodeError,
        RecursionError,
    ) as exc:
        raise StateFileError(
            f"{skeleton_path} / {tensors_path.name} is not a training state ({exc}): {fix}"
        ) from None
