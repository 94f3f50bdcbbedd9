"""The code that builds a brought env, as a file DVC can depend on.

A brought env (`env.<id>.make`: a factory `module:function`, or a gymnasium id with a
`package` to import first) is built by code that dvc.yaml cannot name: its module path is a
params value, and a stage's deps are fixed paths. The `env_code` stage runs on every `dvc repro`
(`always_changed`) and writes, per env, what that code is (`data/env_code/<env>.json`):

- a module inside the project: the sha256 of every Python file of its top-level package (or of
  the module's own file, when it is a lone module), so editing the factory or anything it
  imports from its package changes the file;
- a module installed elsewhere: its distribution's name and version;
- a shipped env: nothing but its id (the pipeline's own env code is a dep of its stages already).

Each env's stages that build the env (collect, teacher_eval, policy_teacher, train, evaluate)
depend on its file: the bytes change exactly when the env's code does, so an edit reruns that
env's stages alone, and an unchanged file reruns nothing (DVC compares the dep's hash).

Modules are found with `importlib.util.find_spec`, which imports a submodule's parent packages
(as the stages will when they build the env) but not the module itself.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

from pipeline.core.errors import PipelineError


class EnvCodeError(PipelineError, ValueError):
    """A brought env's module cannot be found; the message names the key and the module."""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def module_code(module: str, root: Path, key: str) -> dict[str, Any]:
    """What `module` is: its project files' sha256 (relative to `root`), or the distribution it
    comes from. `key`: the params key that names it, for the error."""
    top = module.split(".")[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:  # a parent package that fails to import
        raise EnvCodeError(f"{key}: module {module!r} cannot be imported: {exc}") from exc
    if spec is None or spec.origin is None:
        raise EnvCodeError(
            f"{key}: no module {module!r} here: install it, or put it in the project "
            f"({root}) so that the stages can import it"
        )
    origin = Path(spec.origin).resolve()
    root = root.resolve()
    if not origin.is_relative_to(root) or ".venv" in origin.relative_to(root).parts:
        dists = importlib.metadata.packages_distributions().get(top, [])
        return {
            "module": module,
            "distributions": {d: importlib.metadata.version(d) for d in sorted(set(dists))},
        }
    top_spec = importlib.util.find_spec(top)
    locations = list(top_spec.submodule_search_locations or []) if top_spec else []
    if locations:  # a package: every Python file under it, in path order
        files = sorted(p for loc in locations for p in Path(loc).resolve().rglob("*.py"))
    else:
        files = [origin]
    return {
        "module": module,
        "files": {p.relative_to(root).as_posix(): _digest(p) for p in files},
    }


def env_code(env_id: str, make: Any | None, root: Path) -> dict[str, Any]:
    """`data/env_code/<env>.json` of one env: `make` is its `env.<id>.make` section (None for a
    shipped env)."""
    out: dict[str, Any] = {"env": env_id}
    if make is None:
        return out
    modules = []
    if make.package:
        modules.append(("package", make.package))
    if make.factory:
        modules.append(("factory", make.factory.split(":")[0]))
    for field, module in modules:
        out[field] = module_code(module, root, f"env.{env_id}.make.{field}")
    return out
