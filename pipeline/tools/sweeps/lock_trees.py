"""Which of a commit's dvc.lock trees this cache lacks where an experiment needs them.

After each stage of an experiment, DVC's executor asks DVC's filesystem whether each of the
stage's deps is an output (`_repro_and_track` and `dvc.stage.utils._get_stage_files`, dvc 3.x).
That filesystem reads dvc.lock when first used, and again only after a stage's command has run
(`unlocked_repo` resets the repo). For a dep inside another stage's directory output (a run's
`models/critic/<env>/<method>` inside C_V's `models/critic/<env>`) it loads that output's tree.
Where C_V and the run both come back from the run cache, no command runs between them, and the
lookup loads the tree the commit's lock names. If this cache lacks it (the lock was written on
another machine) the experiment fails there, before the stages after it: a rounds experiment
resumed after its train stage finished, or a run queued again. A run that trains reads the lock
again and is not affected. P2's two partial rounds runs failed so on 248aba7; 3dac41d is 248aba7
with its own experiments' C_V and dataset entries in dvc.lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline.tools.sweeps.table import Table

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where built: 5x faster


@dataclass(frozen=True)
class MissingTree:
    """A dep (`dep` of `stage`) inside the directory output `output` (of `writer`), whose tree
    as dvc.lock names it this cache lacks."""

    stage: str
    dep: str
    writer: str
    output: str


def missing_trees(repo: Path, envs: tuple[str, ...] = ()) -> list[MissingTree]:
    """Each directory output in the checkout `repo`'s dvc.lock that holds another stage's dep and
    whose tree (`<md5>.dir`) its DVC cache lacks. With `envs`, only outputs with one of those env
    ids in their path (a table's envs): a table's experiments run their own envs' stages. Reads
    the lock and the cache's listing (DVC's own lookup would build the repository's index, some
    seconds); runs nothing. `tests/tools/test_lock_trees.py` checks it against DVC's failure."""
    from dvc.repo import Repo

    path = repo / "dvc.lock"
    lock = (yaml.load(path.read_text(), Loader=_Loader) or {}) if path.exists() else {}
    stages = lock.get("stages") or {}
    outputs = {
        Path(out["path"]): (name, out["md5"])
        for name, stage in stages.items()
        for out in stage.get("outs") or []
        if str(out.get("md5", "")).endswith(".dir")
    }
    with Repo(str(repo)) as dvc_repo:
        cache = dvc_repo.cache.local
        found: list[MissingTree] = []
        seen: set[Path] = set()
        for name, stage in stages.items():
            for dep in stage.get("deps") or []:
                dep_path = Path(dep["path"])
                # the innermost output that holds the dep (a lookup per parent)
                output = next((o for o in dep_path.parents if o in outputs), None)
                if output is None or dep_path in seen:
                    continue
                seen.add(dep_path)
                if envs and not set(envs) & set(output.parts):
                    continue
                writer, md5 = outputs[output]
                if not Path(cache.oid_to_path(md5)).exists():
                    found.append(MissingTree(name, str(dep_path), writer, str(output)))
    return found


def format_missing_trees(found: list[MissingTree], repo: Path) -> str:
    """What `check`, `queue` and `resume` say of `missing_trees` ('' when none)."""
    if not found:
        return ""
    outputs = dict.fromkeys((f.output, f.writer) for f in found)
    lines = [
        f"note: {repo}'s dvc.lock names trees that this DVC cache lacks: "
        + ", ".join(f"{output} ({writer})" for output, writer in outputs)
        + ". An experiment here whose stage reading inside one of them (such as "
        f"{found[0].stage}, which reads {found[0].dep}) comes back from the run cache fails "
        "before the stages after it: a rounds experiment resumed after its train stage, a run "
        "queued again. Runs that train from the start are not affected.",
        "To give the commit trees this cache has: commit the stage's dvc.lock entry as one of "
        "the table's experiments wrote it here (`git show <experiment's commit>:dvc.lock`), or "
        "`dvc repro` the stage at this commit and commit the lock, or share the cache of the "
        "checkout that built them (`dvc cache dir --local <it>/.dvc/cache`) "
        "(docs/benchmarks.md, 'What the run cache cannot restore').",
    ]
    return "\n".join(lines)


def print_missing_trees(table: Table, repo: Path) -> None:
    """Say which of the checkout `repo`'s lock trees the table's experiments would fail on when
    the run cache restores a stage (nothing when none)."""
    envs = tuple(dict.fromkeys(spec.train["env"] for spec in table.cells.values()))
    note = format_missing_trees(missing_trees(repo, envs), repo)
    if note:
        print(f"{table.table}: {note}", flush=True)
