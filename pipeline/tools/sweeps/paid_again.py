"""Which stages every experiment of a table runs again, and how to pay them once.

DVC's run cache restores a stage that has run before with the same code, data and params, except
a stage with a `persist: true` output (`dvc.stage.cache._can_hash`, dvc 3.x). collect, label,
masks and teacher_eval persist: they keep partial work and answer caches between runs. A table
whose params change such a stage's params (`env.<id>.image_size`, `collect.<id>.episodes`, a
teacher) therefore runs that stage, and each persisting stage that reads its outputs, in every
one of its experiments, though each run writes the same bytes. P2's experiments on 99da6e6
(`frames_cartpole.yaml`) each collected its 40 pixel episodes again: about 11 minutes of a
2.5-hour run. Its later runs go on 248aba7, which commits them (`benchmarks/background.yaml`).

Paying them once is DVC's usual way: put those params in params.yaml, `dvc repro` the stages and
commit. The experiments then find the stages unchanged, and check their outputs out of the cache.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline.tools.sweeps.table import Table, _leaves, _merge, cell_params, teacher_params

_ABSENT = object()


@dataclass(frozen=True)
class PaidAgain:
    """Stages that these experiments each run again, in the order they run, and the table's
    params that make them differ from params.yaml (dotted path, value)."""

    stages: tuple[str, ...]
    experiments: tuple[str, ...]
    params: tuple[tuple[str, Any], ...]


def _get(params: Mapping[str, Any], dotted: str) -> Any:
    node: Any = params
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _under(path: str, key: str) -> bool:
    return path == key or path.startswith(key + ".")


def paid_again(table: Table, repo: Path) -> list[PaidAgain]:
    """The table's experiments grouped by the persisting stages they run again and the params
    behind them (cells with the same stage-one params share a group). Reads the repository's
    dvc.yaml and params.yaml; runs nothing."""
    from dvc.repo import Repo

    base = yaml.safe_load((repo / "params.yaml").read_text()) or {}
    targets: list[tuple[str, str, dict[str, Any]]] = [
        (cell, f"dataset@{spec.train['env']}", cell_params(table, cell, table.seeds[0]))
        for cell, spec in table.cells.items()
    ]
    targets += [
        (table.teacher_experiment(group), f"teacher_eval@{table.cells[group].train['env']}",
         teacher_params(table, group))
        for group in table.teacher_groups()
    ]  # fmt: skip
    groups: dict[str, PaidAgain] = {}
    with Repo(str(repo)) as dvc_repo:
        graph = dvc_repo.index.graph
        by_name = {stage.name: stage for stage in graph.nodes}
        for name, target, params in targets:
            if target not in by_name:  # an env the table adds to `envs`: all its stage one
                env = target.partition("@")[2]
                changed = [f"{env}'s stage one (not in {repo / 'params.yaml'}'s envs)"]
                keys = ["envs", f"env.{env}", f"collect.{env}", f"label.per_env.{env}"]
            else:
                changed, keys = _changed(graph, by_name[target], base, _merge(base, params))
            if not changed:
                continue
            leaves = tuple((p, v) for p, v in _leaves(params)
                           if any(_under(p, k) for k in keys) and _get(base, p) != v)  # fmt: skip
            key = repr((changed, leaves))
            runs = (
                (name,)
                if name not in table.cells
                else tuple(table.experiment(name, seed) for seed in table.seeds)
            )
            found = groups.get(key)
            groups[key] = PaidAgain(
                tuple(changed), (found.experiments if found else ()) + runs, leaves
            )
    return list(groups.values())


def _changed(
    graph: Any, target: Any, base: Mapping[str, Any], merged: Mapping[str, Any]
) -> tuple[list[str], list[str]]:
    """The persisting stages among `target` and the stages it reads that `merged` params run
    again (their own params differ from `base`, or a stage they read runs again), in the order
    they run, and the params keys that differ."""
    import networkx as nx
    from dvc.dependency.param import ParamsDependency

    # the target's stages, dependencies first (an edge runs from a stage to what it reads)
    upstream = {target, *nx.descendants(graph, target)}
    order = [s for s in reversed(list(nx.topological_sort(graph))) if s in upstream]
    changed: list[str] = []
    keys: list[str] = []
    for stage in order:
        own = [k for d in stage.deps if isinstance(d, ParamsDependency)
               for k in d.params if _get(base, k) != _get(merged, k)]  # fmt: skip
        reads_changed = any(s.name in changed for s in graph.successors(stage))
        if any(out.persist for out in stage.outs) and (own or reads_changed):
            changed.append(stage.name)
            keys += own
    return changed, keys


def format_paid_again(found: list[PaidAgain], params_path: Path) -> str:
    """What `check`, `queue` and `resume` say of `paid_again`'s findings ('' when none)."""
    lines = []
    for group in found:
        names = group.experiments
        who = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        lines.append(
            f"note: {len(names)} experiment(s) ({who}) each run {', '.join(group.stages)} again, "
            "paying again what the first paid: DVC's run cache restores no stage with a "
            "persisting output, and these params differ from params.yaml's:"
        )
        lines += [f"  {path}: {json.dumps(value)}" for path, value in group.params]
    if lines:
        lines.append(
            f"To pay a group's stages once, set its params in {params_path}, `dvc repro` the "
            "stages, commit, and queue from that commit (docs/benchmarks.md, 'What the run cache "
            "cannot restore')."
        )
    return "\n".join(lines)


def print_paid_again(table: Table, repo: Path) -> None:
    """Say which persisting stages every experiment of `table` would pay for again, at the
    commit checked out in `repo`, and how to pay them once (nothing when none)."""
    note = format_paid_again(paid_again(table, repo), repo / "params.yaml")
    if note:
        print(f"{table.table}: {note}", flush=True)
