"""benchmarks.import_times: the instrument of the stage start-up cost (issue: speed)."""

import pytest

from benchmarks import import_times


# four fresh interpreters that import torch (about 6 s): a benchmark's instrument, not the product
@pytest.mark.slow
def test_it_measures_an_import_and_names_how_torch_came_in():
    whole, torch = import_times.import_times("stages.train")
    assert whole > 0 and 0 < torch <= whole  # training imports torch, inside the whole import
    chain = import_times.torch_chain("stages.train")
    assert chain.endswith("stages.train") and chain.startswith("pipeline.")
    assert import_times.torch_chain("json") == "-"  # no torch: nothing to name
    assert "stages.verify" in import_times.stage_modules()
