"""The report's curves figure: each cell's curves over training, per seed and as the mean over
seeds with its ddof-1 band, read from the experiments' stored curves."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.tools.sweeps.figures import curve_bands, plot_curves
from pipeline.tools.sweeps.report import summaries
from pipeline.tools.sweeps.status import Status
from pipeline.tools.sweeps.table import Table

TABLE = {
    "table": "t",
    "seeds": [0, 1],
    "curve": "eval_return",
    "thresholds": [5],
    "window": 1,
    "diagnostics": ["vpg/gate_open"],
    "cells": {
        "base": {"train": {"env": "E-v0", "method": "sac", "steps": 3}},
        "guided": {"train": {"env": "E-v0", "method": "erpv", "steps": 3}},
    },
}


def _done(cell: str, seed: int, curves: dict[str, list[list[float]]] | None) -> Status:
    return Status(cell, seed, f"t-{cell}-s{seed}", "done", rev="r", value=1.0, curves=curves)


def test_each_cell_gets_the_mean_over_seeds_and_a_ddof1_band_of_the_curves_it_logged(tmp_path):
    table = Table.model_validate(TABLE)
    found = [
        _done("base", 0, {"eval_return": [[1, 0.0], [2, 2.0], [3, 4.0]]}),
        _done("base", 1, {"eval_return": [[1, 2.0], [2, 4.0], [3, 6.0]]}),
        _done("guided", 0, {"eval_return": [[1, 1.0], [2, 1.0]],
                            "vpg/gate_open": [[1, 0.5], [2, 0.7]]}),
        _done("guided", 1, {"eval_return": [[1, 3.0], [2, 3.0], [3, 3.0]],
                            "vpg/gate_open": [[1, 0.1], [2, 0.3], [3, 0.5]]}),
        Status("guided", 2, "t-guided-s2", "running"),  # no value: not drawn
    ]  # fmt: skip
    bands = curve_bands(table, found, summaries(table, found))
    assert list(bands) == ["eval_return", "vpg/gate_open"]
    assert set(bands["eval_return"]) == {"base", "guided"}
    assert set(bands["vpg/gate_open"]) == {"guided"}  # sac logs no gate: left out, not zero
    base = bands["eval_return"]["base"]
    assert len(base.seeds) == 2 and base.n == 2 and base.steps.tolist() == [1, 2, 3]
    assert base.mean.tolist() == [1.0, 3.0, 5.0]
    assert base.std == pytest.approx([np.sqrt(2.0)] * 3)  # ddof 1 over (0, 2), (2, 4), (4, 6)
    # the steps every seed covers: guided seed 0 stops at step 2
    guided = bands["eval_return"]["guided"]
    assert guided.steps.tolist() == [1, 2] and guided.mean.tolist() == [2.0, 2.0]
    assert bands["vpg/gate_open"]["guided"].mean == pytest.approx([0.3, 0.5])
    assert plot_curves(table, found, summaries(table, found), tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_a_cell_whose_runs_logged_a_curve_in_some_runs_only_is_not_drawn_and_no_curve_no_file(
    tmp_path,
):
    table = Table.model_validate(TABLE)
    found = [
        _done("base", 0, {"eval_return": [[1, 0.0]]}),
        _done("base", 1, {}),  # a run that logged no evaluation: no mean of one seed shown
    ]
    assert curve_bands(table, found, summaries(table, found)) == {}
    assert not plot_curves(table, found, summaries(table, found), tmp_path / "curves.png")
    assert not (tmp_path / "curves.png").exists()
    one = [_done("base", 0, {"eval_return": [[1, 0.0], [2, 1.0]]})]
    band = curve_bands(table, one, summaries(table, one))["eval_return"]["base"]
    assert band.mean.tolist() == [0.0, 1.0] and np.isnan(band.std).all()  # one seed: no band


def test_the_report_draws_committed_curves_and_drops_a_figure_whose_curves_are_gone(tmp_path):
    """A fresh machine holds only results.json: its committed experiments draw the same curves.
    A report with no done curve leaves no figure of an older one behind."""
    import yaml

    from pipeline.tools.sweeps.report import write_report
    from pipeline.tools.sweeps.status import committed

    table = Table.model_validate(TABLE)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(TABLE))
    found = [_done("base", s, {"eval_return": [[1, float(s)], [2, 2.0 + s]]}) for s in (0, 1)]
    results = tmp_path / "results"
    write_report(table, tmp_path / "t.yaml", found, results)
    assert (results / "curves.png").read_bytes()[:4] == b"\x89PNG"
    kept = list(committed(table, results).values())
    band = curve_bands(table, kept, summaries(table, kept))["eval_return"]["base"]
    assert band.steps.tolist() == [1, 2] and band.mean.tolist() == [0.5, 2.5]
    write_report(table, tmp_path / "t.yaml", [_done("base", 0, None)], results)
    assert not (results / "curves.png").exists()
    assert (results / "table.md").exists()
