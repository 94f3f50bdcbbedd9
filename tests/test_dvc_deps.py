"""dvc.yaml's code deps cover what each stage imports: a change to any module a stage runs reruns
the stage (issue: hand-written deps had drifted from the imports, leaving stale outputs marked up
to date)."""

import ast
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

PACKAGES = ("pipeline", "stages")


def _module_file(module: str) -> Path | None:
    """The project file of a dotted module name (a package's __init__.py), or None."""
    if not module.startswith(PACKAGES):
        return None
    path = REPO / module.replace(".", "/")
    if (path / "__init__.py").exists():
        return path / "__init__.py"
    if path.with_suffix(".py").exists():
        return path.with_suffix(".py")
    return None


def _imports(path: Path) -> set[str]:
    """Every project module `path` imports, function-local imports included."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base]) if base else ".".join(parts)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # submodules
    return found


def import_closure(entry: Path) -> set[Path]:
    """The project files `entry` runs: itself, what it imports, transitively, and the
    __init__.py of every package on the way (Python executes them too)."""
    seen: set[Path] = set()
    todo = [entry]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _imports(path):
            parts = module.split(".")
            for i in range(1, len(parts) + 1):  # parent packages' __init__.py run first
                target = _module_file(".".join(parts[:i]))
                if target is not None and target not in seen:
                    todo.append(target)
    return seen


def _stages() -> list[tuple[str, str, list[str]]]:
    """(stage, entry module, deps) of every stage in dvc.yaml (foreach bodies once)."""
    out = []
    for name, stage in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].items():
        body = stage.get("do", stage)
        match = re.search(r"python -m (stages\.\w+)", body["cmd"])
        assert match, f"stage {name}: no `python -m stages.<x>` in its cmd"
        out.append((name, match.group(1), [d for d in body.get("deps", []) if "$" not in d]))
    return out


@pytest.mark.parametrize(("stage", "entry", "deps"), _stages(), ids=[s[0] for s in _stages()])
def test_stage_deps_cover_its_import_closure(stage, entry, deps):
    # Python runs the entry's package first: stages/__init__.py (and what it imports)
    closure = import_closure(_module_file(entry)) | import_closure(REPO / "stages" / "__init__.py")
    if REPO / "pipeline" / "labels" / "tasks.py" in closure:  # reads the prompt templates
        closure.add(REPO / "pipeline" / "labels" / "prompts")
    covered = [REPO / d for d in deps]
    missing = sorted(
        str(path.relative_to(REPO))
        for path in closure
        if not any(path == dep or dep in path.parents for dep in covered)
    )
    assert not missing, f"dvc.yaml stage {stage} imports but does not depend on: {missing}"


def test_the_closure_follows_imports():
    """The closure finds a module reached only through another one (and function-local imports)."""
    closure = import_closure(REPO / "stages" / "train.py")
    assert REPO / "pipeline" / "training.py" in closure
    assert REPO / "pipeline" / "agents" / "sac.py" in closure
    assert REPO / "pipeline" / "shaping" / "potential.py" in closure  # through the method table
    assert REPO / "pipeline" / "__init__.py" in closure


def _deps(stage: str) -> list[Path]:
    return next([REPO / d for d in deps] for name, _, deps in _stages() if name == stage)


def _depends_on(stage: str, path: str) -> bool:
    target = REPO / path
    return any(d == target or d in target.parents or target in d.parents for d in _deps(stage))


def test_the_hybrid_reward_does_not_rerun_the_critics():
    """Editing pipeline/shaping (hybrid VLM-PPO's reward) must not rerun pretrain_critic@<env>,
    nor, through it, every ERPv run: C_V's stage imports ERPv's method alone."""
    closure = import_closure(_module_file("stages.pretrain_critic"))
    assert not any((REPO / "pipeline" / "shaping") in p.parents for p in closure)
    assert not _depends_on("pretrain_critic", "pipeline/shaping")
    assert not _depends_on("pretrain_critic", "pipeline/methods/hybrid_ppo.py")
    assert _depends_on("pretrain_critic", "pipeline/methods/erpv.py")  # the check can see deps


def test_compare_reads_curves_only():
    """compare draws the runs' curves: it depends on no agent, dataset or env code."""
    for code in ("pipeline/agents", "pipeline/methods", "pipeline/dataset", "pipeline/envs"):
        assert not _depends_on("compare", code), code
    assert _depends_on("compare", "pipeline/curves.py")
