"""The report's figures: each cell's final values per seed (`<metric>.png`) and its curves
over training, the thresholds' curve and each diagnostic (`curves.png`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pipeline.tools.experiments import SeedSummary, save_png, seed_band
from pipeline.tools.sweeps.status import Status
from pipeline.tools.sweeps.table import Table


def plot_cells(table: Table, cells: Mapping[str, SeedSummary], path: Path) -> None:
    """Each cell's per-seed values (dots) with the mean and +- 1 std (ddof 1) over seeds
    (`cells`: the report's `summaries`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [c for c in table.cells if c in cells]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(names) + 1.5), 4.0), dpi=120)
    for x, cell in enumerate(names):
        s = cells[cell]
        values = list(s.per_seed().values())
        ax.scatter([x] * len(values), values, color="C0", alpha=0.6, s=14)
        ax.errorbar([x + 0.15], [s.mean], yerr=[0.0 if s.n < 2 else s.std], fmt="o",
                    color="black", capsize=4)  # fmt: skip
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(table.metric)
    ax.set_title(f"{table.table}: seeds (dots), mean +- 1 std (ddof 1)", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_png(fig, path)


class Band(NamedTuple):
    """One cell's curve over its seeds (`curve_bands`)."""

    seeds: list[list[list[float]]]  # each run's curve as stored, [[step, value], ...]
    steps: np.ndarray  # the steps every seed covers
    mean: np.ndarray
    std: np.ndarray  # over distinct seeds, ddof 1: NaN for one seed
    n: int  # distinct seeds


def curve_bands(
    table: Table, found: list[Status], cells: Mapping[str, SeedSummary]
) -> dict[str, dict[str, Band]]:
    """Per curve (the thresholds' `curve`, then each diagnostic) and per cell of `cells` (the
    report's `summaries`) whose done runs logged it: its `Band` at the steps every seed covers
    (`seed_band`), read from `found`'s stored curves. A rounds cell's curve goes on through
    its rounds. A cell is left out of a curve that one of its runs did not log (sac logs no
    gate): no mean of fewer seeds than the cell has."""
    curves = {f.name: f.curves or {} for f in found}
    out: dict[str, dict[str, Band]] = {}
    for name in dict.fromkeys([table.curve, *table.diagnostics]):
        for cell, summary in cells.items():
            if not all(curves[run].get(name) for run in summary.revs):
                continue
            seeds = [curves[run][name] for run in summary.revs]

            def read(rev: str, _run: str, name: str = name) -> list[tuple[float, float]]:
                return [(s, v) for s, v in curves[rev][name]]

            out.setdefault(name, {})[cell] = Band(seeds, *seed_band(summary, read))
    return out


def plot_curves(
    table: Table, found: list[Status], cells: Mapping[str, SeedSummary], path: Path
) -> bool:
    """`curve_bands` as one panel per curve: each seed thin, the mean over seeds bold with its
    +- 1 std band (ddof 1), the thresholds dashed. False (and no file) where no done run logged
    any of the curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bands = curve_bands(table, found, cells)
    if not bands:
        return False
    columns = min(2, len(bands))
    rows = -(-len(bands) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.0 * columns, 3.4 * rows), dpi=110,
                             squeeze=False, sharex=True)  # fmt: skip
    colors = {cell: f"C{i % 10}" for i, cell in enumerate(table.cells)}
    for ax, (name, drawn) in zip(axes.flat, bands.items(), strict=False):
        for cell, band in drawn.items():
            for curve in band.seeds:
                x, y = np.asarray(curve, dtype=np.float64).T
                ax.plot(x, y, color=colors[cell], alpha=0.25, linewidth=0.8)
            ax.plot(band.steps, band.mean, color=colors[cell], linewidth=2.0,
                    label=f"{cell} ({band.n} seed{'s' * (band.n > 1)})")  # fmt: skip
            if band.n > 1:
                ax.fill_between(band.steps, band.mean - band.std, band.mean + band.std,
                                color=colors[cell], alpha=0.15)  # fmt: skip
        if name == table.curve:
            for threshold in table.thresholds:
                ax.axhline(threshold, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in axes.flat[len(bands) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("training step")
    fig.suptitle(f"{table.table}: each seed (thin), mean over seeds +- 1 std (ddof 1)",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    save_png(fig, path)
    return True
