"""The compare stage's PNG curves: drawn for any number of episodes. The training logs: the
same bytes as dvclive 3.49.1 wrote them, without dvclive's private hooks or the repository."""

import ast
import importlib.util
import inspect
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import pipeline.learn.curves
from pipeline.learn.curves import plot_curves, trailing_mean, write_training_log


def test_trailing_mean_starts_at_the_first_episode():
    values = np.array([1.0, 3.0, 5.0, 7.0])
    assert trailing_mean(values, 2).tolist() == [1.0, 2.0, 4.0, 6.0]
    assert trailing_mean(values, 10).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert trailing_mean(values, 1).tolist() == values.tolist()


def _pixels_of(path, rgb):
    image = np.asarray(Image.open(path).convert("RGB")).astype(int)
    return int((np.abs(image - np.array(rgb)).sum(axis=-1) < 30).sum())


@pytest.mark.parametrize("episodes", [1, 3, 40])
def test_every_run_is_visible_however_few_its_episodes(episodes, tmp_path):
    """A run with fewer episodes than the smoothing window once drew nothing."""
    rng = np.random.default_rng(0)
    curve = [(100 * (i + 1), float(r)) for i, r in enumerate(rng.normal(size=episodes))]
    plot_curves({"run (sac)": curve}, "t", tmp_path / "c.png")
    c0 = (31, 119, 180)  # matplotlib's C0, the first run's colour
    assert _pixels_of(tmp_path / "c.png", c0) > 40  # more than the legend's short line


# Written by pipeline.learn.curves as it was when it drove a dvclive 3.49.1 `Live` (commit d856de8),
# for the inputs below: the stages' curves and summaries in dvc.lock are these bytes, so a rewrite
# of the logger must give them again. None: a directory.
MIXED_CURVE = [(5, -1.0), (15, 2.0), (25, 0.1 + 0.2)]
MIXED_ROWS = [
    {"step": 10.0, "critic_loss": 1.0, "q/f": 3.5},
    {"step": 20.0, "critic_loss": 0.5, "alpha": 0.1, "return": 7.0},
    {"step": 30.0},  # sets the step, logs nothing
    {"step": 40.0, "alpha": float("nan"), "critic_loss": float("inf"), "q/f": -1e-20,
     "eval_return": 123456789.125},
    {"step": 35.0, "alpha": float("-inf"), "eval_return": 2},  # a step back: the summary's step
]  # fmt: skip
EXPECTED = {
    "empty": {"live": None, "m": None, "m/summary.json": "{}\n"},
    "mixed": {
        "live": None,
        "live/plots": None,
        "live/plots/metrics": None,
        "live/plots/metrics/alpha.tsv": "step\talpha\n20\t0.1\n40\tnan\n35\t-inf\n",
        "live/plots/metrics/critic_loss.tsv": "step\tcritic_loss\n10\t1.0\n20\t0.5\n40\tinf\n",
        "live/plots/metrics/eval_return.tsv": "step\teval_return\n40\t123456789.125\n35\t2.0\n",
        "live/plots/metrics/q": None,
        "live/plots/metrics/q/f.tsv": "step\tf\n10\t3.5\n40\t-1e-20\n",
        "live/plots/metrics/return.tsv":
            "step\treturn\n5\t-1.0\n15\t2.0\n25\t0.30000000000000004\n20\t7.0\n",
        "m": None,
        "m/summary.json": '{\n    "return": 7.0,\n    "critic_loss": "inf",\n    "q": {\n'
            '        "f": -1e-20\n    },\n    "alpha": "-inf",\n    "eval_return": 2.0,\n'
            '    "step": 35\n}\n',
    },
}  # fmt: skip


def _tree(root: Path) -> dict[str, str | None]:
    return {
        p.relative_to(root).as_posix(): None if p.is_dir() else p.read_bytes().decode()
        for p in sorted(root.rglob("*"))
        if not p.relative_to(root).as_posix().startswith(".git")
    }


@pytest.mark.parametrize(
    "case, curve, rows", [("empty", [], []), ("mixed", MIXED_CURVE, MIXED_ROWS)]
)
def test_training_log_bytes_match_dvclive(case, curve, rows, tmp_path, monkeypatch):
    """The same files, byte for byte, as under dvclive; in a git repository with no commit and
    no DVC, nothing else appears there (no .dvc, no dvc.yaml) and git is not needed."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    write_training_log("live", "m/summary.json", curve, rows)
    assert _tree(tmp_path) == EXPECTED[case]
    assert not (tmp_path / ".dvc").exists()
    write_training_log("live", "m/summary.json", curve, rows)  # a rerun: the same bytes again
    assert _tree(tmp_path) == EXPECTED[case]


def test_training_log_replaces_what_a_previous_run_left(tmp_path, monkeypatch):
    """What dvclive's Live cleared on start goes (the old metrics, its other plots, params,
    reports, dvc.yaml files); what is not its own stays."""
    monkeypatch.chdir(tmp_path)
    stale = ["live/plots/metrics/old.tsv", "live/plots/metrics/q/old.tsv", "live/plots/images/x.png",
             "live/plots/sklearn/r.json", "live/plots/custom/c.json", "live/params.yaml",
             "live/dvc.yaml", "live/sub.dvc.yaml", "live/report.html", "live/report.md"]  # fmt: skip
    kept = ["live/plots/keep/x.tsv", "live/metrics.json", "live/keep.txt", "live/sub/dvc.yaml"]
    for name in stale + kept + ["s.json"]:
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        Path(name).write_text("stale")
    write_training_log("live", "s.json", [(1, 2.0)])
    files = {k for k, v in _tree(tmp_path).items() if v is not None}
    assert files == {*kept, "live/plots/metrics/return.tsv", "s.json"}
    assert Path("s.json").read_text() == '{\n    "return": 2.0,\n    "step": 1\n}\n'


def _live_private_members() -> set[str]:
    """Every underscore name dvclive's Live defines or sets on itself (its `_init_*` hooks,
    `_dvc_file`, ...), read from dvclive's source without importing it (that imports dvc)."""
    spec = importlib.util.find_spec("dvclive")
    assert spec is not None and spec.submodule_search_locations
    source = (Path(spec.submodule_search_locations[0]) / "live.py").read_text()
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and ast.unparse(node.value) == "self":
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _dvclive_private_uses(source: str, private: set[str]) -> list[str]:
    """What in `source` reaches into dvclive's private side: a private dvclive module or name
    imported, a subclass of anything imported from dvclive (how Live's hooks get overridden), any
    attribute access to an underscore name (the module touches no object's privates), a method
    or string naming one of Live's private members (`def _init_dvc`, `setattr(x, "_init_dvc")`)."""
    tree = ast.parse(source)
    found, from_dvclive = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "dvclive":
                    from_dvclive.add((alias.asname or alias.name).split(".")[0])
                    if any(part.startswith("_") for part in alias.name.split(".")):
                        found.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dvclive":
            for alias in node.names:
                from_dvclive.add(alias.asname or alias.name)
                if any(part.startswith("_") for part in [*node.module.split("."), alias.name]):
                    found.append(f"from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = {n.id for base in node.bases for n in ast.walk(base) if isinstance(n, ast.Name)}
            if bases & from_dvclive:
                found.append(f"class {node.name} subclasses {sorted(bases & from_dvclive)}")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"attribute .{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in private:
            found.append(f"def {node.name} (line {node.lineno})")
        elif isinstance(node, ast.Constant) and node.value in private:
            found.append(f"string {node.value!r} (line {node.lineno})")
    return found


OLD_OVERRIDE = """
def _live(directory, summary_path):
    from dvclive import Live

    class _Live(Live):
        def __init__(self):
            self._summary_path = str(summary_path)
            super().__init__(str(directory), dvcyaml=False, save_dvc_exp=False, report=None)

        def _init_dvc(self):
            self._dvc_file = None

    return _Live()
"""


def test_curves_use_no_private_part_of_dvclive():
    """pipeline.learn.curves once subclassed dvclive's Live to override its private `_init_dvc` (and
    `metrics_file`): a dvclive release could change either without notice. The check catches that
    code (OLD_OVERRIDE, the version before), and finds none of it in the module now."""
    private = _live_private_members()
    assert {"_init_dvc", "_init_cleanup", "_dvc_file"} <= private  # the scan reads dvclive
    old = _dvclive_private_uses(OLD_OVERRIDE, private)
    assert "class _Live subclasses ['Live']" in old and any("_init_dvc" in f for f in old)
    assert _dvclive_private_uses(inspect.getsource(pipeline.learn.curves), private) == []


def test_an_envs_runs_are_one_long_table_per_metric():
    """compare's tables for the default `dvc plots show` page: one row per (run, step), the
    runs in their given order, values logged as dvclive logs them (nan as text)."""
    from pipeline.learn.curves import env_curves_tsv

    tsv = env_curves_tsv(
        {"a (sac)": [(0, 1.5), (100, 2.0)], "b (erpv)": [(50, float("nan"))]}, "eval_return"
    ).decode()
    assert tsv == "step\trun\teval_return\n0\ta (sac)\t1.5\n100\ta (sac)\t2.0\n50\tb (erpv)\tnan\n"


def test_compare_gathers_each_envs_runs_and_leaves_out_a_metric_a_run_does_not_log(tmp_path):
    """compare_curves: per metric and env, the runs in params' order, labelled with their method;
    a PPO run (no eval_return) appears under `return` only. write_compare_tables replaces what
    its directory held, so an env no longer trained leaves no table; a run with no curves is
    named in the error."""
    from pipeline.learn.curves import compare_curves, write_compare_tables, write_training_log

    curves = tmp_path / "train"
    write_training_log(
        curves / "a", tmp_path / "a.json", [(10, 1.0)], [{"step": 5, "eval_return": 2.0}]
    )
    write_training_log(curves / "b", tmp_path / "b.json", [(20, 3.0)])
    write_training_log(curves / "c", tmp_path / "c.json", [(30, 4.0)])
    runs = [("b", "env-x", "ppo"), ("a", "env-x", "sac"), ("c", "env-y", "sac")]
    tables = compare_curves(runs, curves)
    assert list(tables["return"]["env-x"]) == ["b (ppo)", "a (sac)"]
    assert tables["return"]["env-y"] == {"c (sac)": [(30, 4.0)]}
    assert tables["eval_return"] == {"env-x": {"a (sac)": [(5, 2.0)]}}

    out = tmp_path / "compare"
    (out / "return").mkdir(parents=True)
    (out / "return" / "env-gone.tsv").write_text("step\trun\treturn\n")
    write_compare_tables(tables, out)
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*.tsv"))
    assert written == ["eval_return/env-x.tsv", "return/env-x.tsv", "return/env-y.tsv"]
    assert (out / "return" / "env-x.tsv").read_text().splitlines()[1:] == [
        "20\tb (ppo)\t3.0",
        "10\ta (sac)\t1.0",
    ]

    with pytest.raises(FileNotFoundError, match="missing"):
        compare_curves([("missing", "env-x", "sac")], curves)
