"""What every params.yaml section shares: a frozen pydantic model that refuses unknown keys, and
error messages that name the key, the bad value and the fix."""

from __future__ import annotations

import difflib
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.core.errors import PipelineError

M = TypeVar("M", bound=BaseModel)


class ConfigError(PipelineError, ValueError):
    """params.yaml (or a section of it) is malformed; the message names the key and the fix."""


class Section(BaseModel):
    """Base of every typed section. Unknown keys are typos until proven otherwise; frozen so a stage
    cannot mutate its params; no number is NaN or infinite (`.inf` and `.nan` are valid YAML, and
    a learning rate of either passes every range check written as `gt=0`)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, protected_namespaces=(), allow_inf_nan=False
    )


def format_error(err: dict[str, Any], root: type[BaseModel], prefix: str = "") -> str:
    """One pydantic error as `<key path>: <problem>`; `prefix` is where `root` sits in params.yaml."""
    loc = ".".join([*([prefix] if prefix else []), *(str(part) for part in err["loc"])])
    if err["type"] == "extra_forbidden":
        allowed = allowed_keys(root, err["loc"][:-1])
        close = difflib.get_close_matches(str(err["loc"][-1]), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{loc}: unknown key{hint}; allowed keys: {', '.join(allowed)}"
    if err["type"] == "missing":
        return f"{loc}: missing required key"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{loc}: {msg} (got {err['input']!r})" if loc else msg


def allowed_keys(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Walk the model tree along `loc` to the model whose keys were wrong."""
    model: Any = root
    for part in loc:
        if isinstance(part, str) and hasattr(model, "model_fields") and part in model.model_fields:
            annotation = model.model_fields[part].annotation
            # `X | None` -> X; `dict[str, X]` -> X (a dict key, e.g. an env id, is skipped below)
            candidates = [annotation, *getattr(annotation, "__args__", ())]
            model = next((c for c in candidates if hasattr(c, "model_fields")), annotation)
    return sorted(model.model_fields) if hasattr(model, "model_fields") else []


def threads_field() -> Any:
    """The `threads` setting of every trainer's section (PPO's, the SAC family's, C_V's)."""
    return Field(
        default=0,
        ge=0,
        description="CPU threads of torch's intra-op pool while training (the train and "
        "pretrain_critic stages set it); 0: torch's default, one per core. The order of a "
        "reduction's partial sums follows the thread count, so weights are bitwise reproducible "
        "only at a fixed count: params.yaml sets 1, and a fresh clone on any machine rebuilds "
        "the committed dvc.lock.",
    )


def merge_settings(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides` over `base`, key by key; a mapping over a mapping is merged the same way (so
    `{network: {obs: pixels}}` changes one key of `network` and keeps the others)."""
    out = dict(base)
    for key, value in overrides.items():
        old = out.get(key)
        out[key] = (
            merge_settings(old, value)
            if isinstance(old, dict) and isinstance(value, dict)
            else value
        )
    return out


def validate_section(model: type[M], raw: Any, where: str, source: str = "params.yaml") -> M:
    """`raw` (the mapping under key `where` of params.yaml) as a `model`; every bad key at once in
    one ConfigError."""
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{source}: `{where}` must be a mapping of settings, got {type(raw).__name__}"
        )
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        lines = [format_error(e, model, where) for e in exc.errors()]
        raise ConfigError(f"{source} is invalid:\n  " + "\n  ".join(lines)) from None
