"""benchmarks.import_times: the instrument of the stage start-up cost (issue: speed)."""

from benchmarks import import_times


def test_it_measures_an_import_and_names_how_torch_came_in():
    whole, torch = import_times.import_times("stages.train")
    assert whole > 0 and 0 < torch <= whole  # training imports torch, inside the whole import
    chain = import_times.torch_chain("stages.train")
    assert chain.endswith("stages.train") and chain.startswith("pipeline.")
    assert import_times.torch_chain("json") == "-"  # no torch: nothing to name
    assert "stages.verify" in import_times.stage_modules()
