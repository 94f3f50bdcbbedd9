"""A params.yaml that survives DVC's round trip.

`dvc exp run -S key=value` (and so every `vlmrl-sweep` experiment) rewrites params.yaml with
ruamel.yaml's round-trip dumper, a YAML 1.2 writer, while the stages read it with PyYAML, a YAML
1.1 reader. Quotes that YAML 1.2 does not need go: a milestone written `"ON"` comes back `ON`,
which YAML 1.1 reads as the boolean True; long flow-style mappings are re-wrapped. Every
experiment of such a file then fails at its first stage, and `dvc queue status` says only
"Failed". `roundtrip_problems` rewrites the file as DVC would, in memory, and names each value
that the stages would then read differently, with its line: `vlmrl-sweep check` and `queue`
refuse such a file before anything is queued.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaves(value, (*path, i))
    else:
        yield path, node


def _line(tree: Any, path: tuple[Any, ...]) -> int | None:
    """1-based line of `path` in a ruamel round-trip tree (where the key or item starts)."""
    node, line = tree, None
    for part in path:
        try:
            if hasattr(node, "lc"):
                if isinstance(node, dict) and part in node:
                    line = node.lc.key(part)[0] + 1
                elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                    line = node.lc.item(part)[0] + 1
            node = node[part]
        except (KeyError, IndexError, TypeError, AttributeError):
            break
    return line


def roundtrip_problems(path: str | Path) -> list[str]:
    """Each value of `path` that the stages (PyYAML) read differently once DVC has rewritten the
    file (`dvc exp run -S`), one line each: its line, key, what it is now and what it becomes,
    and the fix; [] for a file that survives."""
    from dvc.utils.serialize._yaml import dumps_yaml, parse_yaml_for_update

    path = Path(path)
    text = path.read_text()
    before = yaml.safe_load(text)
    tree = parse_yaml_for_update(text, str(path))
    after_text = dumps_yaml(tree)
    try:
        after = yaml.safe_load(after_text)
    except yaml.YAMLError as exc:
        return [f"{path}: DVC's rewrite of it no longer parses ({exc}); write its flow-style "
                "mappings in block style"]  # fmt: skip
    old, new = dict(_leaves(before)), dict(_leaves(after))
    problems = []
    for key_path in sorted(old, key=str):  # a renamed key's new name is its old one's problem
        same = key_path in new and new[key_path] == old[key_path]
        if same and type(new[key_path]) is type(old[key_path]):  # 1 == True: types too
            continue
        line = _line(tree, key_path) or _line(tree, key_path[:-1])
        where = f"{path}:{line}" if line else str(path)
        key = ".".join(str(k) for k in key_path)
        if key_path not in new:
            # a key that YAML 1.1 reads as a boolean after the rewrite (`ON` -> True)
            problems.append(
                f"{where}: {key}: the key is read as {key_path[-1]!r} now but as another value "
                "after DVC rewrites the file; use a key that needs no quotes (e.g. POLE_UP, not "
                "ON)"
            )
            continue
        problems.append(
            f"{where}: {key}: {old[key_path]!r} now, {new[key_path]!r} after DVC rewrites "
            "the file (`dvc exp run -S`, vlmrl-sweep): write a value that YAML 1.1 and 1.2 read "
            "alike (not yes/no/on/off, even quoted)"
        )
    return problems
