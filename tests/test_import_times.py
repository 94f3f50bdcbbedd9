"""benchmarks.import_times: the instrument of the stage start-up cost (issue: speed)."""

import pytest

from benchmarks import import_times


# four fresh interpreters that import torch (about 6 s): a benchmark's instrument, not the product
@pytest.mark.slow
def test_it_measures_an_import_and_names_how_torch_came_in():
    # C_V's pre-training imports torch with its module (stages.train does so on use, since the
    # method table imports no torch; tests/test_imports.py lists the modules that import none)
    whole, torch = import_times.import_times("stages.pretrain_critic")
    assert whole > 0 and 0 < torch <= whole
    chain = import_times.torch_chain("stages.pretrain_critic")
    assert chain.endswith("stages.pretrain_critic") and chain.startswith("pipeline.")
    assert import_times.torch_chain("json") == "-"  # no torch: nothing to name
    assert "stages.verify" in import_times.stage_modules()
