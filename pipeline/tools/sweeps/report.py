"""The report: each cell's seeds summarised, the pre-registered comparisons (Holm), the
teachers, mechanism diagnostics and the figures (`figures.py`); written beside `results.json`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pipeline.learn.curves import METRICS_SUBDIR, median_steps, parse_metric_tsv, steps_to
from pipeline.loops.knowledge import prompts_text, return_text, share_text
from pipeline.teach.labels.cost import read_label_cost
from pipeline.tools.experiments import SeedSummary, welch_p
from pipeline.tools.sweeps.figures import plot_cells, plot_curves
from pipeline.tools.sweeps.preregistration import Family
from pipeline.tools.sweeps.status import Status
from pipeline.tools.sweeps.table import SweepError, Table

# ---- the report ----------------------------------------------------------------------------------


def summaries(table: Table, found: Iterable[Status]) -> dict[str, SeedSummary]:
    """Each cell's done experiments as a SeedSummary (one value per seed)."""
    out = {}
    for cell in table.cells:
        done = [(f, f.value) for f in found if f.cell == cell and f.value is not None]
        if done:  # statuses gives a value to done experiments alone
            out[cell] = SeedSummary(
                (("cell", cell),), table.run(cell), tuple(v for _, v in done),
                tuple(f.seed for f, _ in done), tuple(f.name for f, _ in done),
            )  # fmt: skip
    return out


def read_cell_curve(fs: Any, table: Table, cell: str, name: str) -> list[tuple[int, float]] | None:
    """The curve `name` of one experiment of `cell` through the DVC filesystem `fs`, a rounds
    cell's rounds after its run (steps counted from the run's start); None if its run did not
    log it."""
    curve: list[tuple[int, float]] = []
    for i, (part, before) in enumerate(table.trainings(cell)):
        root = f"plots/train/{part}" if i == 0 else f"plots/rounds/{part}"
        path = f"{root}/{METRICS_SUBDIR}/{name}.tsv"
        if not fs.exists(path):
            if i == 0:
                return None
            raise FileNotFoundError(f"{path}: the run logged {name}, this round did not")
        curve += [
            (step + before, value) for step, value in parse_metric_tsv(fs.read_text(path), name)
        ]
    return curve


def second_half_mean(curve: list[tuple[int, float]], steps: int) -> float | None:
    """The mean of a run's logged values after half of its `steps` (None if none was logged)."""
    late = [v for step, v in curve if step > steps / 2]
    return float(np.mean(late)) if late else None


def read_curves(table: Table, found: list[Status], repo: Path) -> list[Status]:
    """`found` with each done experiment's curves (the thresholds' and the diagnostics'), its
    steps to the table's thresholds and its diagnostics, as DVC stored them (one
    DVCFileSystem at the experiment's revision: plots outputs are cached, so a pulled
    experiment needs `dvc exp pull` with its cache). A rounds cell's curves go on through its
    rounds; its steps to thresholds are not read (its rounds collect between trainings)."""

    from dvc.api import DVCFileSystem
    from dvc.exceptions import DvcException

    if not table.thresholds and not table.diagnostics:
        return found
    out = []
    for f in found:
        if f.state != "done" or f.seed is None or f.kept:  # a committed result holds its read
            out.append(f)
            continue
        rounds = table.cells[f.cell].rounds is not None
        names = ([table.curve] if table.thresholds else []) + list(table.diagnostics)
        try:
            fs = DVCFileSystem(str(repo), rev=f.rev)
            curves = {
                name: read_cell_curve(fs, table, f.cell, name) for name in dict.fromkeys(names)
            }
        except (OSError, KeyError, ValueError, DvcException) as exc:
            raise SweepError(f"{f.name}: cannot read its curves at {f.rev}: {exc}") from exc
        reached = None
        if table.thresholds and not rounds:
            curve = curves[table.curve]
            if curve is None:
                raise SweepError(f"{f.name}: its run logged no {table.curve} (at {f.rev})")
            reached = {f"{t:g}": steps_to(curve, t, table.window) for t in table.thresholds}
        steps = table.steps(f.cell)
        late = {name: None if curves[name] is None else second_half_mean(curves[name], steps)
                for name in table.diagnostics}  # fmt: skip
        out.append(dataclasses.replace(
            f, steps_to=reached, diagnostics=late if table.diagnostics else None,
            curves={name: [list(p) for p in c] for name, c in curves.items() if c is not None},
        ))  # fmt: skip
    return out


def read_teachers(table: Table, found: list[Status], repo: Path) -> list[Status]:
    """`found` with each done teacher experiment's `metrics/teacher/<env>.json` (its rows are a
    list, which `dvc exp show` leaves out) and what its label table paid (`label_cost`), read
    through one DVCFileSystem at the experiment's revision (the label table is a cached output:
    a pulled experiment needs `dvc exp pull` with its cache)."""
    import json

    from dvc.api import DVCFileSystem
    from dvc.exceptions import DvcException

    out = []
    for f in found:
        if f.state != "done" or f.seed is not None or f.kept:
            out.append(f)
            continue
        path = table.teacher_file(f.cell)
        try:
            fs = DVCFileSystem(str(repo), rev=f.rev)
            teacher = json.loads(fs.read_text(path))
            path = table.label_file(f.cell)
            with fs.open(path, "rb") as handle:
                labels = read_label_cost(handle)
        except (OSError, ValueError, pl.exceptions.PolarsError, DvcException) as exc:
            raise SweepError(f"{f.name}: cannot read {path} at {f.rev}: {exc}") from exc
        out.append(dataclasses.replace(f, teacher=teacher, labels=labels))
    return out


def format_diagnostics(table: Table, found: list[Status]) -> list[str]:
    """The table's diagnostics per cell: mean +- std over seeds (ddof 1) of each run's mean over
    the second half of its training."""
    if not table.diagnostics or not any(f.diagnostics for f in found):
        return []
    lines = [
        "",
        "Diagnostics: per run, the mean of the logged values after half of its training steps; "
        "per cell, mean +- std over seeds (ddof 1), [seeds]:",
        "",
        "| cell | " + " | ".join(table.diagnostics) + " |",
        "|---|" + "---|" * len(table.diagnostics),
    ]
    for cell in table.cells:
        runs = [f.diagnostics for f in found if f.cell == cell and f.diagnostics]
        row = f"| {cell} | "
        for name in table.diagnostics:
            values = [r[name] for r in runs if r.get(name) is not None]
            std = f" +- {np.std(values, ddof=1):.3g}" if len(values) > 1 else ""
            row += f"{np.mean(values):.3g}{std} [{len(values)}] | " if values else "| "
        lines.append(row.rstrip())
    return lines


def format_teachers(table: Table, found: list[Status]) -> list[str]:
    """The teacher experiments' rows: each teacher acting alone, per k, beside random, and what
    its labels of the cells' dataset paid."""
    read = [f for f in found if f.seed is None and f.teacher is not None]
    if not read:
        return []
    ks = sorted({r["policy"] for f in read for r in f.teacher["teacher_rows"]},
                key=lambda p: int(p.rpartition("=")[2]))  # fmt: skip
    groups = table.teacher_groups()
    judge = any(f.labels is not None and "reasonable" in f.labels for f in read)
    lines = [
        "Teachers acting alone (`teacher_eval@<env>`: the labelling teacher as the policy, "
        "asked every k-th agent step and its answer held in between; uniform random actions on "
        "the same episode seeds; return mean +- std over episodes, ddof 1; beside it the cells "
        "whose data it labels, including those whose method reads no labels), and what the "
        "teacher's labels of the cells' dataset cost (`label@<env>`: prompts by task, i.e. "
        "queried frames x tasks, what a fresh build pays; the share of answers that parsed"
        + ("; the share of judge rows judged reasonable: the selective pool" if judge else "")
        + "):",
        "",
        "| cells on its data | teacher | episodes | "
        + "".join(f"{k} | " for k in ks)
        + "random | label prompts | parsed |"
        + (" judged reasonable |" if judge else ""),
        "|---|---|---|" + "---|" * len(ks) + "---|---|---|" + ("---|" if judge else ""),
    ]
    for f in read:
        rows = {r["policy"]: r for r in f.teacher["teacher_rows"]}
        lines.append(
            f"| {', '.join(groups[f.cell])} | `{f.teacher['teacher_id']}` | "
            f"{f.teacher['episodes']} | "
            + "".join(f"{return_text(rows[k]) if k in rows else ''} | " for k in ks)
            + f"{return_text(f.teacher['random'])} | {_label_cells(f.labels)} |"
            + (f" {share_text((f.labels or {}).get('reasonable'))} |" if judge else "")
        )
    return ["", *lines]


def format_machines(found: list[Status]) -> list[str]:
    """Which machine ran which done experiment, once any is recorded: a table's seeds may come
    from several machines, whose networks agree within noise, not to the byte."""
    done = [f for f in found if f.state == "done"]
    if not any(f.machine for f in done):
        return []
    runs: dict[str | None, dict[str, list[str]]] = {}
    for f in done:
        cell = f"teacher of {f.cell}" if f.seed is None else f.cell
        runs.setdefault(f.machine, {}).setdefault(cell, []).append(
            "" if f.seed is None else f"s{f.seed}"
        )
    parts = [
        f"{machine or 'not recorded'}: "
        + "; ".join(f"{cell} {', '.join(seeds)}".rstrip() for cell, seeds in cells.items())
        for machine, cells in sorted(runs.items(), key=lambda item: item[0] is None)
    ]
    return ["", "Machines (the one whose queue ran each done experiment): " + " | ".join(parts)]


def _label_cells(labels: Mapping[str, Any] | None) -> str:
    """`label_cost` as two table cells: prompts by task, parsed share."""
    if labels is None:
        return " | "
    return f"{prompts_text(labels)} | {share_text(labels['parsed'])}"


def _steps_cell(found: list[Status], cell: str, threshold: str) -> str:
    """`median [reached/n]` of a cell's steps to `threshold`, "not reached" counted as +inf."""
    values = [f.steps_to[threshold] for f in found
              if f.cell == cell and f.state == "done" and f.steps_to is not None]  # fmt: skip
    if not values:
        return ""
    median = median_steps(values)
    reached = sum(v is not None for v in values)
    return f"{'never' if median is None else f'{median:,}'} [{reached}/{len(values)}]"


def format_preregistered(table: Table, cells: Mapping[str, SeedSummary]) -> list[str]:
    """The pre-registered family, then each amendment's, each on its own: every comparison's
    test, raw and Holm-adjusted p (Holm within its family), and the decision at alpha; then
    Mann-Whitney on the metric for each pair (secondary, Holm too)."""
    pre = table.preregistered
    if pre is None:
        return []
    lines = format_family(table, pre, cells, "Pre-registered")
    for k, amendment in enumerate(pre.amendments, 1):
        lines += format_family(
            table, amendment, cells,
            f"Amendment {k}, its own family, adding {', '.join(amendment.cells)} "
            f"({amendment.why})",
        )  # fmt: skip
    return lines


def format_family(
    table: Table, family: Family, cells: Mapping[str, SeedSummary], title: str
) -> list[str]:
    """One family's table (`format_preregistered`)."""
    from pipeline.tools.experiments import best_case_p, fisher_p, holm, mann_whitney_p

    rows, primary, secondary, best = [], [], [], []
    seeds = len(table.seeds)
    for cell, against in family.comparisons:
        a, b = cells.get(cell), cells.get(against)
        x = list(a.per_seed().values()) if a else []
        y = list(b.per_seed().values()) if b else []
        if family.test == "fisher" and x and y:
            k = (sum(v >= family.success for v in x), len(x))
            m = (sum(v >= family.success for v in y), len(y))
            primary.append(fisher_p(k, m, family.alternative))
            shown = f"{k[0]}/{k[1]} vs {m[0]}/{m[1]}"
        else:
            primary.append(mann_whitney_p(x, y, family.alternative) if x and y else None)
            shown = f"n {len(x)} vs {len(y)}"
        secondary.append(mann_whitney_p(x, y, family.alternative) if x and y else None)
        success = family.success if family.test == "fisher" else None
        best.append(best_case_p(x, y, seeds, family.alternative, success))
        rows.append((cell, against, shown, min(len(x), len(y))))
    adjusted, adjusted_mw = holm(primary), holm(secondary)
    # Holm's adjusted p only grows with any raw p, so this bounds each comparison's final one
    best_adjusted = holm(best)
    what = (f"seeds with {table.metric} >= {family.success:g}, Fisher's exact test"
            if family.test == "fisher" else f"{table.metric}, Mann-Whitney U")  # fmt: skip
    lines = [
        "",
        f"{title} ({family.alternative}, alpha {family.alpha:g}, Holm over "
        f"{len(family.comparisons)}): {family.hypothesis}",
        f"Primary: {family.primary} ({what}).",
        "",
        "| cell | against | primary | p | Holm p | at alpha | Mann-Whitney p (Holm) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (cell, against, shown, n), p, q, mw, mwq, b in zip(
        rows, primary, adjusted, secondary, adjusted_mw, best_adjusted, strict=True
    ):
        decision = (
            "" if q is None else ("detected" if q <= family.alpha else f"not detected at n = {n}")
        )
        if n < seeds and b is not None and (q is None or q > family.alpha):
            still = "still open" if b <= family.alpha else "cannot be detected"
            decision = "; ".join(filter(None, [decision, f"at n = {seeds} at best Holm p "
                                               f"{_p(b)}: {still}"]))  # fmt: skip
        lines.append(
            f"| {cell} | {against} | {shown} | {_p(p)} | {_p(q)} | {decision} | "
            f"{_p(mw)} ({_p(mwq)}) |"
        )
    if family.secondary:
        lines.append("Secondary: " + "; ".join(family.secondary) + ".")
    return lines


def _p(p: float | None) -> str:
    return "" if p is None else f"{p:.2g}"


def format_report(table: Table, found: list[Status]) -> str:
    """The table as markdown: n, mean +- std (ddof 1), Welch p against the control, steps to
    each threshold (when read), per seed."""
    cells = summaries(table, found)
    control = cells.get(table.control) if table.control else None
    steps = [f"{t:g}" for t in table.thresholds] if any(f.steps_to for f in found) else []
    rounds = any(c.rounds is not None for c in table.cells.values())
    lines = [
        f"| cell | n | {table.metric}: mean +- std (ddof 1) | p vs {table.control or '-'} | "
        + "".join(f"steps to {t} | " for t in steps)
        + ("round teacher calls (mean) | " if rounds else "")
        + "per seed |",
        "|---|---|---|---|" + "---|" * (len(steps) + rounds) + "---|",
    ]
    for cell in table.cells:
        s = cells.get(cell)
        if s is None:
            lines.append(f"| {cell} | 0 | | | " + "| " * (len(steps) + rounds) + "|")
            continue
        std = f"{s.std:.1f}" if s.n > 1 else "n/a"
        p = None if control is None or cell == table.control else welch_p(s, control)
        seeds = ", ".join(f"{seed}: {v:.1f}" for seed, v in sorted(s.per_seed().items()))
        reach = "".join(f"{_steps_cell(found, cell, t)} | " for t in steps)
        if rounds:
            calls = [f.round_calls for f in found if f.cell == cell and f.round_calls is not None]
            reach += f"{np.mean(calls):.0f} | " if calls else "0 | "
        lines.append(f"| {cell} | {s.n} | {s.mean:.1f} +- {std} | "
                     f"{'' if p is None else f'{p:.2g}'} | {reach}{seeds} |")  # fmt: skip
    lines += format_preregistered(table, cells)
    lines += format_diagnostics(table, found)
    lines += format_teachers(table, found)
    lines += format_machines(found)
    left = [f for f in found if f.state != "done"]
    if left:
        lines.append("")
        lines.append("Not in the table: " + "; ".join(f"{f.name} {f.state}"
                                                      + (f" ({f.why})" if f.why else "")
                                                      for f in left))  # fmt: skip
    lines.append("")
    lines.append("p: Welch's two-sided t-test (unequal variances) over per-seed values.")
    if steps:
        lines.append(
            f"Steps to T: the first training step at which the mean of the last {table.window} "
            f"`{table.curve}` values reaches T; the median over seeds, a seed that never reaches "
            "it counted as infinite, [seeds that reach it / seeds]."
        )
    return "\n".join(lines)


def git_root(path: Path) -> Path | None:
    """The root of the git repository that holds `path` (None outside one)."""
    for root in path.resolve().parents:
        if (root / ".git").exists():
            return root
    return None


def repo_path(path: Path) -> str:
    """`path` relative to the root of the git repository that holds it (where results files
    name it, so that they name no directory of the machine they were made on), else as given."""
    root = git_root(path)
    return str(path) if root is None else path.resolve().relative_to(root).as_posix()


def write_report(table: Table, table_path: Path, found: list[Status], out: Path) -> str:
    """`out/table.md`, `out/<metric>.png`, `out/curves.png` (`plot_curves`, where a done run
    logged a curve) and `out/results.json` (every experiment of the table
    with its state, revision, seed and value, and the table file as read, by its path in its
    repository)."""
    from pipeline.core.io import atomic_write_bytes, atomic_write_json

    out.mkdir(parents=True, exist_ok=True)
    text = format_report(table, found)
    atomic_write_bytes(out / "table.md", (text + "\n").encode())
    cells = summaries(table, found)
    plot_cells(table, cells, out / f"{table.metric}.png")
    if not plot_curves(table, found, cells, out / "curves.png"):
        (out / "curves.png").unlink(missing_ok=True)  # none of the curves it drew is done now
    atomic_write_json(out / "results.json", {
        "table": repo_path(table_path),
        "spec": table.model_dump(mode="json"),
        "experiments": [vars(f) for f in found],
    })  # fmt: skip
    return text
