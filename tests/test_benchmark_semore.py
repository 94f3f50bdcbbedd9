"""The Semore ablation benchmark (benchmarks.semore_ablation): its presets stay valid over
params.yaml, and its table orders the variants."""

from __future__ import annotations

import re

import pytest

from pipeline.methods.semore import SemoreParams
from pipeline.methods.table import get_method
from tests.conftest import REPO


@pytest.mark.parametrize("preset", ["semore_cpu.yaml", "semore_paper.yaml"])
def test_semore_ablation_presets_parse_over_params_yaml(preset):
    """The benchmark's presets stay valid against the current params.yaml and config."""
    from benchmarks.semore_ablation import load_preset

    params, steps = load_preset(str(REPO / "params.yaml"), str(REPO / "benchmarks/params" / preset))
    hp = get_method("semore").params(params)
    assert isinstance(hp, SemoreParams)
    assert steps > hp.start_steps and hp.network.obs == "pixels"


def test_semore_ablation_table_reports_the_ordering():
    from benchmarks.semore_ablation import steps_to, table

    results = [
        {"variant": v, "seed": s, "steps": 100, "final_return": base + s, "train_seconds": 1.0,
         "eval": [(50, base), (100, base + 50)]}
        for v, base in (("sac", 10.0), ("m1", 30.0), ("m4", 80.0))
        for s in range(2)
    ]  # fmt: skip
    assert steps_to([(50, 10.0), (100, 120.0)], 100.0) == 100
    assert steps_to([(50, 10.0)], 100.0) is None
    text = table(results, 100.0)
    assert "ours, by mean final return: sac < m1 < m4" in text
    assert "10.5 +- 0.5" in text and "100 (2/2)" in text
    with_random = table(results, 100.0, {"variant": "random", "final_returns": [-40.0, -20.0]})
    assert re.search(r"random\s+2\s+-30.0 \+- 10.0", with_random)
    assert "ours, by mean final return: sac < m1 < m4" in with_random  # not a ranked variant
