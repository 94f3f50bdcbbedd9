"""dvc.lock's code deps against the tree: find the stale ones, and refresh them without a rebuild.

Every stage of dvc.yaml lists the package code it imports as deps (`pipeline/learn/agents`, ...),
so a change to that code moves their hashes, and the quick start's check (`vlmrl-lockcheck`,
pipeline/tools/reproducibility.py) then reports each moved hash as a problem against the
committed lock. Two ways to commit a lock that matches the code:

- `dvc repro` on the machine the lock was built on (`dvc.lock.machine.json`): every stage whose
  deps moved runs again, and its outputs are checked byte for byte.
- Where the change cannot alter an output (a code path the default pipeline never takes, a
  docstring) and that machine is not at hand: `python -m pipeline.tools.code_deps --refresh`
  writes the code deps' new hashes into each stage's lock entry and leaves its outputs' hashes as
  they were. The claim that the outputs are unchanged is then the committer's, and the quick
  start's check tests it on CI's machine: exactly where its kernels are the lock's, within the
  return tolerance elsewhere.

A code dep is a Python module or package (a `.py` file, a directory with an `__init__.py`) that
no stage writes: data deps, params and inputs such as `corrections/` are never refreshed.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StaleDep:
    stage: str  # the stage, as `dvc repro` takes it (train@cartpole-swingup-erpv)
    path: str  # the dep, as dvc.yaml names it
    locked: str  # its hash in dvc.lock
    current: str  # its hash in the tree


def _code_deps(repo):
    """(stage, dep) for every code dep of every stage of `repo` (a dvc Repo)."""
    from dvc.dependency import Dependency

    stages = list(repo.index.stages)
    written = {str(out.fs_path) for stage in stages for out in stage.outs}
    for stage in stages:
        for dep in stage.deps:
            if type(dep) is not Dependency:
                continue  # params, repo imports and database deps are subclasses, not code
            path = str(dep.fs_path)
            if any(path == out or path.startswith(out + "/") or out.startswith(path + "/")
                   for out in written):  # fmt: skip
                continue  # a data dep: a stage's output or a folder of them
            if path.endswith(".py") or (Path(path) / "__init__.py").is_file():
                yield stage, dep


def _stale(repo):
    """(stage, dep, the tree's hash) for every code dep of `repo` whose hash dvc.lock names wrong."""
    for stage, dep in _code_deps(repo):
        current = dep.get_hash()
        if current != dep.hash_info:
            yield stage, dep, current


def _found(stage, dep, current) -> StaleDep:
    return StaleDep(stage.name, dep.def_path, dep.hash_info.value, current.value)


def stale_code_deps(root: str | Path = ".") -> list[StaleDep]:
    """The code deps whose hash in the tree at `root` differs from dvc.lock's: each one the quick
    start's check would report as a problem."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return [_found(*found) for found in _stale(repo)]


def refresh_code_deps(root: str | Path = ".") -> list[StaleDep]:
    """Write the tree's hash of every stale code dep into its stage's dvc.lock entry; every other
    entry, outputs included, stays as it was. Returns what it changed."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo, repo.lock:
        stale, dirty = [], {}
        for stage, dep, current in _stale(repo):
            stale.append(_found(stage, dep, current))
            dep.hash_info, dep.meta = current, dep.get_meta()
            dirty[stage.name] = stage
        for stage in dirty.values():
            stage.dump(update_pipeline=False)  # the lock entry alone, from the stage in memory
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.tools.code_deps",
        description="List the code deps whose hash in dvc.lock is stale (the quick start's "
        "check reports each as a problem); with --refresh, write their new hashes into dvc.lock "
        "and leave every output's hash as it is. Refresh only after a change that cannot alter "
        "an output; otherwise run `dvc repro` on the lock's machine (dvc.lock.machine.json).",
    )
    parser.add_argument("--refresh", action="store_true", help="write the new hashes")
    parser.add_argument("root", nargs="?", default=".", help="the repository (.)")
    args = parser.parse_args(argv)
    if not (Path(args.root) / "dvc.lock").is_file():
        print(f"error: no dvc.lock in {args.root}: run from the repository root", file=sys.stderr)
        return 2
    stale = (refresh_code_deps if args.refresh else stale_code_deps)(args.root)
    for dep in stale:
        print(f"{dep.stage}: {dep.path} {dep.locked} -> {dep.current}")
    stages = len({dep.stage for dep in stale})
    if args.refresh:
        print(f"refreshed {len(stale)} code dep(s) in {stages} stage(s); outputs left as locked")
        return 0
    print(
        f"{len(stale)} stale code dep(s) in {stages} stage(s)"
        + (": `--refresh` after a change that cannot alter an output" if stale else "")
    )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
