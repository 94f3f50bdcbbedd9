"""vlmrl-seeds: the seeds of an experiment sweep averaged per configuration and run."""

import pytest

from pipeline.experiments import format_table, param_keys, summarise


def _row(rev, lam, seed, returns):
    row = {"rev": rev, "erpv.lambda_1": lam, "train.a.seed": seed, "train.b.seed": 0,
           "evaluate.episodes": 10}  # fmt: skip
    for run, value in returns.items():
        row[f"metrics/eval/{run}.json:return_mean"] = value
        row[f"metrics/eval/{run}.json:return_std"] = 99.0
    return row


def test_seeds_are_averaged_per_configuration_and_run():
    rows = [
        _row("workspace", 10.0, 0, {"a": 1.0, "b": 5.0}),  # repeats its baseline: left out
        _row("main", 10.0, 0, {"a": 1.0, "b": 5.0}),
        _row("exp-1", 10.0, 1, {"a": 3.0, "b": 5.0}),
        _row("exp-2", 0.0, 0, {"a": 10.0, "b": 7.0}),
        _row("exp-3", 0.0, 1, {"a": 20.0}),  # b's metric missing: not counted as a zero
    ]
    params = param_keys({"erpv": {"lambda_1": 1}, "train": {"a": {"seed": 0}, "b": {"seed": 0}},
                         "evaluate": {"episodes": 10}})  # fmt: skip
    assert params == {"erpv.lambda_1", "train.a.seed", "train.b.seed", "evaluate.episodes"}
    got = {(s.config, s.run): s for s in summarise(rows, params)}
    ten, zero = (("erpv.lambda_1", 10.0),), (("erpv.lambda_1", 0.0),)
    assert set(got) == {(ten, "a"), (ten, "b"), (zero, "a"), (zero, "b")}
    assert got[(ten, "a")].values == (1.0, 3.0) and got[(ten, "a")].mean == 2.0
    assert got[(ten, "a")].n == 2 and got[(ten, "a")].std == pytest.approx(2**0.5)  # ddof 1
    assert got[(zero, "a")].mean == 15.0 and got[(zero, "b")].values == (7.0,)
    only_a = summarise(rows, params, runs="a")
    assert {s.run for s in only_a} == {"a"}
    table = format_table(summarise(rows, params), "return_mean")
    assert "erpv.lambda_1=10.0" in table and "2.0 +- 1.4" in table and "ddof 1" in table
    assert "no experiment" in format_table([], "return_mean")


def test_experiments_that_repeat_a_seed_count_as_one_seed():
    """Three experiments of b, whose seed never changed: one seed (its std is not 0 over three
    agreeing seeds), flagged; a's two distinct seeds are two."""
    rows = [
        _row("main", 10.0, 0, {"a": 1.0, "b": 5.0}),
        _row("exp-1", 10.0, 1, {"a": 3.0, "b": 5.0}),
        _row("exp-2", 10.0, 1, {"a": 3.0, "b": 5.0}),
    ]
    params = param_keys({"erpv": {"lambda_1": 1}, "train": {"a": {"seed": 0}, "b": {"seed": 0}}})
    got = {s.run: s for s in summarise(rows, params)}
    assert got["b"].n == 1 and got["b"].repeated == {0: 3} and got["b"].mean == 5.0
    assert got["a"].n == 2 and got["a"].repeated == {1: 2} and got["a"].mean == 2.0
    table = format_table(list(got.values()), "return_mean")
    assert "5.0 +- n/a (one seed)" in table and "seed 0 x3: repeats of a seed count once" in table
