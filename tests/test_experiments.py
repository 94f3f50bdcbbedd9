"""vlmrl-seeds: the seeds of an experiment sweep averaged per configuration and run."""

import numpy as np
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


def test_each_run_is_compared_with_the_baseline_by_welchs_test():
    """--baseline: every other run of a configuration gets Welch's two-sided p-value against the
    baseline run's distinct seeds there (checked against the formula), n/a with one seed."""
    import math

    from scipy import stats

    from pipeline.experiments import welch_p

    a = [1.0, 2.0, 4.0]
    b = [10.0, 12.5, 11.0, 15.0]
    rows = [_row(f"exp-{i}", 10.0, i, {"a": a[i], "b": b[i]}) for i in range(3)]
    rows.append(_row("exp-3", 10.0, 3, {"b": b[3]}))
    rows.append(_row("exp-4", 0.0, 0, {"a": 3.0, "b": 7.0}))  # one seed per run
    for row in rows:  # both runs take the experiment's seed
        row["train.b.seed"] = row["train.a.seed"]
    params = param_keys({"erpv": {"lambda_1": 1}, "train": {"a": {"seed": 0}, "b": {"seed": 0}}})
    got = {(s.config, s.run): s for s in summarise(rows, params)}
    ten, zero = (("erpv.lambda_1", 10.0),), (("erpv.lambda_1", 0.0),)
    # Welch: t = (mean_a - mean_b) / sqrt(va/na + vb/nb), Welch-Satterthwaite degrees of freedom
    va, vb = np.var(a, ddof=1) / 3, np.var(b, ddof=1) / 4
    t = (np.mean(a) - np.mean(b)) / math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    expected = 2 * stats.t.sf(abs(t), dof)
    assert welch_p(got[(ten, "a")], got[(ten, "b")]) == pytest.approx(expected, rel=1e-9)
    assert welch_p(got[(zero, "a")], got[(zero, "b")]) is None
    table = format_table(summarise(rows, params), "return_mean", baseline="b")
    assert "Welch p vs b" in table.splitlines()[0]
    line = next(x for x in table.splitlines() if "=10.0" in x and " a " in x)
    assert f"p = {expected:.2g}" in line
    assert "p n/a (needs two seeds each)" in next(
        x for x in table.splitlines() if "=0.0" in x and " a " in x
    )
    assert all("p " not in x.split("+-")[1] for x in table.splitlines()[1:] if " b " in x)
