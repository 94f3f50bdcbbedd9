"""docs/params.md, the params.yaml reference, is generated from the config classes' field
descriptions (pipeline/core/config and each method's params class) and kept current by this test.

    python -m tests.core.test_params_reference   # rewrite docs/params.md after changing a field
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from pipeline.core.config import Params
from pipeline.learn.methods.table import METHODS
from tests.conftest import REPO

PAGE = REPO / "docs" / "params.md"
HEADER = """# params.yaml reference

Every key params.yaml may set, with its type, default and meaning, generated from the config
classes (`pipeline/core/config/` for the stage sections, each method's params class for the method
sections) by `python -m tests.core.test_params_reference`; `tests/core/test_params_reference.py` fails when
this page and the code disagree. `check_params` refuses a key not listed here, naming the nearest
one. A method section's keys may also be set for one run under `train.<run>.overrides`.
"""


# what the keys of a mapping section stand for
KEY_NAMES = {"env": "env", "collect": "env", "per_env": "env", "train": "run", "rounds": "name"}


def _models(annotation: Any, name: str) -> tuple[str, type[BaseModel]] | None:
    """(suffix, model) when field `name` holds a model: directly, optionally, or as a dict's
    values (suffix `.<env>`, `.<run>`, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "", annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _models(inner[0], name) if len(inner) == 1 else None
    if origin is dict and len(args) == 2:
        found = _models(args[1], name)
        return (f".<{KEY_NAMES.get(name, 'key')}>" + found[0], found[1]) if found else None
    return None


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if typing.get_origin(annotation) is None else None
    text = text or str(annotation)
    return text.replace("typing.", "").replace("pipeline.core.config.", "").replace("|", "\\|")


def _default(field: Any) -> str:
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:  # a factory that takes the validated data
            return "computed"
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "see below"
    text = repr(value)
    return (text if len(text) <= 40 else text[:37] + "...").replace("|", "\\|")


def _rows(prefix: str, model: type[BaseModel], seen: set[type]) -> list[str]:
    rows, nested = [], []
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        description = " ".join((field.description or "").split()).replace("|", "\\|")
        found = _models(field.annotation, name)
        if found and found[1] not in seen:
            nested.append((key + found[0], found[1]))
            rows.append(f"| `{key}{found[0]}` | {found[1].__name__} | {_default(field)} | "
                        f"{description} |")  # fmt: skip
        else:
            rows.append(
                f"| `{key}` | {_type_name(field.annotation)} | {_default(field)} | {description} |"
            )
    for key, sub in nested:
        rows += _rows(key, sub, seen | {sub})
    return rows


def _table(title: str, prefix: str, model: type[BaseModel]) -> str:
    doc = " ".join((model.__doc__ or "").split())
    lines = [f"## {title}", "", doc, "", "| key | type | default | meaning |", "|---|---|---|---|"]
    return "\n".join([*lines, *_rows(prefix, model, {model})]) + "\n"


def render() -> str:
    parts = [HEADER]
    for name, field in Params.model_fields.items():
        found = _models(field.annotation, name)
        if found is None:
            description = " ".join((field.description or "").split())
            parts.append(f"## `{name}`\n\n{_type_name(field.annotation)}: {description}\n")
        else:
            parts.append(_table(f"`{name}`", name + found[0], found[1]))
    for method in METHODS:
        cls = METHODS[method].params_class
        parts.append(_table(f"`{method}` (method section, {cls.__name__})", method, cls))
    return "\n".join(parts)


def test_the_params_reference_is_current():
    assert PAGE.exists() and PAGE.read_text() == render(), (
        "docs/params.md is out of date: run `python -m tests.core.test_params_reference`"
    )


def test_the_reference_lists_nested_and_method_keys():
    page = render()
    for key in ("`label.teacher.openai.api_key_env`", "`env.<env>.image_size`", "`erpv.lambda_1`",
                "`erpv.vpg_weight`", "`ppo.clip_coef`", "`rounds.<name>.previous_agent`"):  # fmt: skip
        assert key in page, key


if __name__ == "__main__":
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(REPO)}")
