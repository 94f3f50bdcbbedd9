"""Every field of every params.yaml section is documented beside it (CleanRL's per-field
docstrings): a field without a description fails here, whichever section or method it is in."""

from __future__ import annotations

import typing

from pydantic import BaseModel

from pipeline.core.config import Params
from pipeline.learn.methods.table import METHODS


def _models(root: type[BaseModel]) -> set[type[BaseModel]]:
    """`root` and every model its fields hold (through X | None, list[X], dict[str, X])."""
    seen: set[type[BaseModel]] = set()
    todo: list[type[BaseModel]] = [root]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for field in model.model_fields.values():
            stack = [field.annotation]
            while stack:
                t = stack.pop()
                if isinstance(t, type) and issubclass(t, BaseModel):
                    todo.append(t)
                stack.extend(typing.get_args(t))
    return seen


def _sections() -> set[type[BaseModel]]:
    models = _models(Params)
    for method in METHODS.values():
        models |= _models(method.params_class)
    return models


def test_every_field_has_a_description():
    missing = sorted(
        f"{model.__name__}.{name}"
        for model in _sections()
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    )
    assert not missing, f"fields without a description: {missing}"


def test_the_walk_reaches_nested_and_method_sections():
    names = {m.__name__ for m in _sections()}
    # nested in a stage section, a method's params, a method's nested network params
    assert {"TeacherConfig", "HFTeacherConfig", "DrQParams", "SemoreNetworkParams"} <= names
