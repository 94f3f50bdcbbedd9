"""Envs mid-episode as plain data, for a resume state that holds no pickle (pipeline.learn.agents.resume):
what pickle would keep of them (every instance attribute of every object they reach: cart
states, time limits, episode statistics, RNG states, a shaping wrapper's lock), as nested
dicts, lists, numbers, strings, arrays and tensors that pipeline.learn.agents.state_io encodes.

Restoring writes those values into envs the code has just built the same way (same factory,
same settings: the resume state's fingerprint says so); it never creates an object that the
data names, so a resume state can hold values but no code. Code (functions, methods, classes,
modules) and immutable settings (dtypes, devices, paths) are not saved: the factory rebuilds
them. What neither holds plain values nor is code (a pygame surface, a lock, a C object) cannot
be saved: `capture` raises TypeError naming where it sits.
"""

from __future__ import annotations

import enum
import types
from collections import deque
from pathlib import PurePath
from typing import Any

import numpy as np
import torch

_CODE = (
    types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
    types.BuiltinMethodType, types.MethodWrapperType, type,
)  # fmt: skip
# immutable settings, not state: the factory rebuilds them as they were
_SETTINGS = (np.dtype, torch.dtype, torch.device, PurePath, complex, range, slice)
_PLAIN = (bool, int, float, str)
_KINDS = ("v", "scalar", "bytes", "generator", "random_state", "enum", "kept", "seen", "deque",
          "list", "tuple", "set", "dict", "object")  # fmt: skip


def _type_name(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def capture(obj: Any) -> Any:
    """`obj` (e.g. a vector env's list of envs) as plain data; TypeError where something in it
    has no plain form."""
    return _capture(obj, "envs", set())


def _capture(value: Any, where: str, seen: set[int]) -> Any:
    if value is None or type(value) in _PLAIN:
        return {"v": value}
    if isinstance(value, np.generic):  # kept a numpy scalar: its dtype decides promotions
        return {"scalar": value.item(), "dtype": value.dtype.str}
    if isinstance(value, (np.ndarray, torch.Tensor)):
        if isinstance(value, np.ndarray) and value.dtype == object:
            raise TypeError(f"{where}: an object array has no plain form")
        return {"v": value}
    if isinstance(value, np.random.Generator):
        return {"generator": value.bit_generator.state}
    if isinstance(value, np.random.RandomState):
        return {"random_state": value.get_state(legacy=False)}
    if isinstance(value, enum.Enum):
        return {"enum": value.name}
    if isinstance(value, bytes):
        return {"bytes": np.frombuffer(value, np.uint8).copy()}
    if isinstance(value, _CODE + _SETTINGS) or (callable(value) and not hasattr(value, "__dict__")):
        return {"kept": True}
    if isinstance(value, deque):
        items = [_capture(v, f"{where}[{i}]", seen) for i, v in enumerate(value)]
        return {"deque": items, "maxlen": value.maxlen}
    if isinstance(value, (list, tuple)):
        items = [_capture(v, f"{where}[{i}]", seen) for i, v in enumerate(value)]
        return {"tuple" if isinstance(value, tuple) else "list": items}
    if isinstance(value, (set, frozenset)):
        return {"set": [_capture(v, f"{where}{{}}", seen) for v in sorted(value, key=repr)]}
    if isinstance(value, dict):
        pairs = []
        for key, item in value.items():
            if not (key is None or type(key) in _PLAIN):
                raise TypeError(f"{where}: a dict key {type(key).__name__} has no plain form")
            pairs.append([key, _capture(item, f"{where}[{key!r}]", seen)])
        return {"dict": pairs}
    if not hasattr(value, "__dict__"):
        raise TypeError(f"{where}: {type(value).__name__} holds no plain values")
    if id(value) in seen:  # shared: captured where first met; the fresh envs share it too
        return {"seen": True}
    seen.add(id(value))
    attrs = {name: _capture(item, f"{where}.{name}", seen) for name, item in vars(value).items()}
    return {"object": _type_name(value), "attrs": attrs}


class EnvStateMismatch(ValueError):
    """Saved envs that do not fit the envs just built (the code changed since they were saved)."""


def restore(current: Any, saved: Any) -> Any:
    """The value `saved` (from `capture`) describes, written into `current` (freshly built, the
    same way) where it is an object: its attributes are set, in place. Returns the value to keep
    where `current` sits."""
    return _restore(current, saved, "envs")


def _restore(current: Any, node: dict[str, Any], where: str) -> Any:
    kind = next((k for k in _KINDS if k in node), None)
    payload = node.get(kind)
    if kind == "v":
        if isinstance(current, torch.nn.Parameter) and isinstance(payload, torch.Tensor):
            with torch.no_grad():  # an optimiser may hold the parameter: keep it, copy values in
                current.copy_(payload)
            return current
        return payload
    if kind == "scalar":
        return np.dtype(node["dtype"]).type(payload)
    if kind == "bytes":
        return payload.tobytes()
    if kind in ("kept", "seen"):
        return current
    if kind == "generator":
        if not isinstance(current, np.random.Generator):
            raise EnvStateMismatch(f"{where}: saved an RNG, the env holds {type(current).__name__}")
        current.bit_generator.state = payload
        return current
    if kind == "random_state":
        if not isinstance(current, np.random.RandomState):
            raise EnvStateMismatch(f"{where}: saved a RandomState, found {type(current).__name__}")
        current.set_state(payload)
        return current
    if kind == "enum":
        if not isinstance(current, enum.Enum):
            raise EnvStateMismatch(f"{where}: saved an enum, found {type(current).__name__}")
        return type(current)[payload]
    if kind in ("list", "tuple", "deque", "set"):
        olds = list(current) if isinstance(current, (list, tuple, deque)) else []
        items = [
            _restore(olds[i] if i < len(olds) else None, item, f"{where}[{i}]")
            for i, item in enumerate(payload)
        ]
        if kind == "deque":
            return deque(items, maxlen=node["maxlen"])
        if kind == "set":
            return type(current)(items) if isinstance(current, (set, frozenset)) else set(items)
        if kind == "list" and isinstance(current, list):
            current[:] = items  # in place: whoever shares the list sees it
            return current
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        olds = current if isinstance(current, dict) else {}
        items = {key: _restore(olds.get(key), item, f"{where}[{key!r}]") for key, item in payload}
        if isinstance(current, dict):
            current.clear()
            current.update(items)  # in place, keeping its type (OrderedDict, defaultdict)
            return current
        return items
    if kind == "object":
        if _type_name(current) != payload:
            raise EnvStateMismatch(
                f"{where}: saved a {payload}, the env just built holds a {_type_name(current)}"
            )
        attrs = vars(current)
        for name, item in node["attrs"].items():
            attrs[name] = _restore(attrs.get(name), item, f"{where}.{name}")
        return current
    raise EnvStateMismatch(f"{where}: unknown node {kind!r}")
