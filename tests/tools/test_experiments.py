"""vlmrl-seeds: the seeds of an experiment sweep averaged per configuration and run."""

import numpy as np
import pytest

from pipeline.tools.experiments import format_table, param_keys, summarise


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

    from pipeline.tools.experiments import welch_p

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


def test_a_seed_band_is_the_mean_and_std_of_the_distinct_seeds_curves(tmp_path):
    """Curves logged at other steps are interpolated onto the steps all seeds cover; a repeated
    seed's curves are averaged into one first; std is ddof 1."""
    from pipeline.tools.experiments import SeedSummary, plot_seed_bands, seed_band

    curves = {
        "e0": [(0, 0.0), (10, 10.0), (20, 20.0)],
        "e1": [(0, 2.0), (5, 2.0), (15, 4.0), (30, 4.0)],  # other steps, longer
        "e1b": [(0, 4.0), (5, 4.0), (15, 6.0), (30, 6.0)],  # seed 1 again
    }
    summary = SeedSummary((), "a", (1.0, 2.0, 3.0), seeds=(0, 1, 1), revs=("e0", "e1", "e1b"))
    steps, mean, std, n = seed_band(summary, lambda rev, run: curves[rev])
    assert n == 2 and steps.tolist() == [0, 5, 10, 15, 20]  # up to the shortest curve's end
    seed0 = np.interp(steps, [0, 10, 20], [0, 10, 20])
    seed1 = np.interp(steps, [0, 5, 15, 30], [3, 3, 5, 5])  # the repeats' mean
    np.testing.assert_allclose(mean, (seed0 + seed1) / 2)
    np.testing.assert_allclose(std, np.std([seed0, seed1], axis=0, ddof=1))
    one = SeedSummary((("lr", 1),), "a", (1.0,), seeds=(0,), revs=("e0",))
    missing = SeedSummary((("lr", 2),), "b", (1.0,), seeds=(0,), revs=("nowhere",))

    def read(rev, run):
        if rev == "nowhere":
            raise FileNotFoundError("plots/train/b/plots/metrics/eval_return.tsv")
        return curves[rev]

    left_out = plot_seed_bands([summary, one, missing], read, "eval_return", tmp_path / "s.png")
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    assert left_out == [
        "lr=2 / b: no eval_return curve (plots/train/b/plots/metrics/eval_return.tsv)"
    ]


TOY_TRAIN = """
import json, os, yaml
p = yaml.safe_load(open("params.yaml"))
seed, lr = p["train"]["a"]["seed"], p["lr"]
os.makedirs("metrics/eval", exist_ok=True)
os.makedirs("plots/train/a/plots/metrics", exist_ok=True)
json.dump({"return_mean": 10 * lr + seed}, open("metrics/eval/a.json", "w"))
with open("plots/train/a/plots/metrics/eval_return.tsv", "w") as f:
    f.write("step\\teval_return\\n")
    for s in (100, 200, 300):
        f.write(f"{s}\\t{s / 10 + seed * seed + 100 * lr}\\n")
"""
TOY_DVC = """stages:
  train:
    cmd: python train.py
    deps: [train.py]
    params: [lr, train.a.seed]
    outs: [plots/train/a]
    metrics:
      - metrics/eval/a.json:
          cache: false
"""


@pytest.mark.slow  # a DVC project and five `dvc exp run`s
def test_vlmrl_seeds_draws_each_configurations_seed_band_from_dvc_experiments(tmp_path, capsys):
    """Through DVC itself: experiments over two learning rates x seeds; the figure's bands are
    read at each experiment's revision (the curves are DVC-cached outputs, not in git)."""
    import os
    import subprocess
    import sys

    from pipeline.tools.experiments import dvc_curve_reader, main, seed_band

    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}

    def run(*cmd):
        subprocess.run(cmd, cwd=tmp_path, env=env, check=True, capture_output=True)

    (tmp_path / "train.py").write_text(TOY_TRAIN)
    (tmp_path / "dvc.yaml").write_text(TOY_DVC)
    (tmp_path / "params.yaml").write_text("lr: 1\ntrain:\n  a:\n    seed: 0\n")
    run("git", "init", "-q")
    run("git", "config", "user.email", "t@example.com")
    run("git", "config", "user.name", "t")
    run("dvc", "init", "-q")
    run("dvc", "repro", "-q")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "baseline: lr 1, seed 0")
    for lr, seed in ((1, 1), (1, 2), (2, 0), (2, 1), (2, 2)):
        run("dvc", "exp", "run", "-q", "-S", f"lr={lr}", "-S", f"train.a.seed={seed}")

    png = tmp_path / "seeds.png"
    assert main(["--repo", str(tmp_path), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "lr=1" in out and "lr=2" in out and png.read_bytes()[:4] == b"\x89PNG"
    assert "left out" not in out

    import dvc.api

    from pipeline.tools.experiments import param_keys, summarise, with_file_prefix

    # one eval file: DVC names its column `return_mean`, not `metrics/eval/a.json:return_mean`
    rows = dvc.api.exp_show(repo=str(tmp_path))
    assert "return_mean" in rows[1] and not summarise(rows, {"lr", "train.a.seed"})
    rows = with_file_prefix(rows, "return_mean", tmp_path)
    summaries = summarise(rows, param_keys({"lr": 1, "train": {"a": {"seed": 0}}}))
    by_lr = {dict(s.config)["lr"]: s for s in summaries}
    assert by_lr[1].n == by_lr[2].n == 3
    for lr, s in by_lr.items():
        steps, mean, std, _ = seed_band(s, dvc_curve_reader(tmp_path, "eval_return"))
        curves = np.array([[x / 10 + seed**2 + 100 * lr for x in (100, 200, 300)]
                           for seed in (0, 1, 2)])  # fmt: skip
        assert steps.tolist() == [100, 200, 300]
        np.testing.assert_allclose(mean, curves.mean(axis=0))
        np.testing.assert_allclose(std, curves.std(axis=0, ddof=1))


def test_a_bare_metric_column_is_named_after_its_one_eval_file(tmp_path):
    """DVC drops the file from a metric's column when one file holds the key; it is put back
    from the workspace's one metrics/eval/<run>.json holding it, and left alone otherwise."""
    import json

    from pipeline.tools.experiments import with_file_prefix

    (tmp_path / "metrics" / "eval" / "rounds").mkdir(parents=True)
    (tmp_path / "metrics" / "eval" / "rounds" / "r1.json").write_text(json.dumps({"x": 1}))
    rows = [{"rev": "main", "return_mean": 3.0}]
    assert with_file_prefix(rows, "return_mean", tmp_path) == rows  # no file holds it
    (tmp_path / "metrics" / "eval" / "run.json").write_text(json.dumps({"return_mean": 3.0}))
    named = with_file_prefix(rows, "return_mean", tmp_path)
    assert named == [{"rev": "main", "metrics/eval/run.json:return_mean": 3.0}]
    assert [s.run for s in summarise(named, set())] == ["run"]
    (tmp_path / "metrics" / "eval" / "rounds" / "r1.json").write_text('{"return_mean": 1}')
    assert with_file_prefix(rows, "return_mean", tmp_path) == rows  # two: DVC would prefix
