"""benchmarks/seed_builds.py: the seed builds behind the reproducibility tolerance."""

import yaml

from benchmarks.seed_builds import build, shifted_params
from tests.conftest import REPO


def test_a_seed_moves_every_run_c_v_and_round_seed_and_nothing_else():
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    assert shifted_params(params, 0) == params  # seed 0: the committed build's
    shifted = shifted_params(params, 3)
    assert {run["seed"] for run in shifted["train"].values()} == {3}
    assert shifted["critic"]["seed"] == 3
    for name, spec in shifted["rounds"].items():
        assert spec["seed"] == params["rounds"][name]["seed"] + 30
    for section in ("train", "critic", "rounds"):
        shifted.pop(section), params.pop(section)
    assert shifted == params  # collect, label, evaluate, ...: as they were


def test_a_seed_already_built_is_skipped(tmp_path, capsys):
    (tmp_path / "out" / "seed4").mkdir(parents=True)
    assert build(4, tmp_path / "no-repo", tmp_path / "work", tmp_path / "out") == (
        tmp_path / "out" / "seed4"
    )
    assert "skipped" in capsys.readouterr().out and not (tmp_path / "work").exists()
