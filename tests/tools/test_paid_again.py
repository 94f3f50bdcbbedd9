"""vlmrl-sweep's note on stages that every experiment of a table runs again (paid_again.py)."""

import subprocess
import sys

import yaml

from pipeline.tools.sweeps.cli import main
from pipeline.tools.sweeps.paid_again import format_paid_again, paid_again
from pipeline.tools.sweeps.table import Table, load_table
from tests.conftest import REPO

# stage one's shape in dvc.yaml: collect and label persist, dataset does not
DVC_YAML = {
    "stages": {
        "collect": {
            "foreach": "${envs}",
            "do": {
                "cmd": "python collect.py ${item}",
                "params": ["env.${item}", "collect.${item}"],
                "outs": [{"data/rollouts/${item}": {"persist": True}}],
            },
        },
        "label": {
            "foreach": "${envs}",
            "do": {
                "cmd": "python label.py ${item}",
                "deps": ["data/rollouts/${item}"],
                "params": ["label.per_env.${item}"],
                "outs": [{"data/label_cache/${item}": {"persist": True}}, "data/labels/${item}.pq"],
            },
        },
        "dataset": {
            "foreach": "${envs}",
            "do": {
                "cmd": "python dataset.py ${item}",
                "deps": ["data/labels/${item}.pq"],
                "params": ["dataset"],
                "outs": ["data/datasets/${item}"],
            },
        },
    }
}
PARAMS = {
    "envs": ["E-v0"],
    "env": {"E-v0": {"image_size": 84}},
    "collect": {"E-v0": {"episodes": 10}},
    "label": {"per_env": {"E-v0": {"teacher": "good"}}},
    "dataset": {"shard": 100},
    "train": {},
}


def _repo(tmp_path, params=PARAMS):
    tmp_path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True
    )
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return tmp_path


def _table(**cells):
    return Table.model_validate({
        "table": "t", "seeds": [0, 1],
        "cells": {name: {"train": {"env": "E-v0", "method": "sac", "steps": 10}, "params": p}
                  for name, p in cells.items()},
    })  # fmt: skip


def test_a_table_that_changes_collect_pays_collect_and_label_in_every_experiment(tmp_path):
    """collect's params differ, so collect runs in each experiment, and so does label, which
    persists and reads collect's output; dataset, which does not persist, is the run cache's.
    Cells with other labels form their own group, with their own params."""
    repo = _repo(tmp_path)
    bigger = {"env": {"E-v0": {"image_size": 64}}}
    table = _table(
        a=bigger, b=bigger, c={**bigger, "label": {"per_env": {"E-v0": {"teacher": "bad"}}}}
    )
    found = paid_again(table, repo)
    assert [(g.stages, g.experiments, g.params) for g in found] == [
        (("collect@E-v0", "label@E-v0"), ("t-a-s0", "t-a-s1", "t-b-s0", "t-b-s1"),
         (("env.E-v0.image_size", 64),)),
        (("collect@E-v0", "label@E-v0"), ("t-c-s0", "t-c-s1"),
         (("env.E-v0.image_size", 64), ("label.per_env.E-v0.teacher", "bad"))),
    ]  # fmt: skip
    note = format_paid_again(found, repo / "params.yaml")
    assert "4 experiment(s) (t-a-s0, t-a-s1, t-b-s0 and 1 more)" in note
    assert "env.E-v0.image_size: 64\n" in note and 'label.per_env.E-v0.teacher: "bad"' in note


def test_label_alone_is_paid_again_and_nothing_once_params_yaml_holds_the_tables_values(tmp_path):
    repo = _repo(tmp_path)
    relabel = {"label": {"per_env": {"E-v0": {"teacher": "bad"}}}}
    found = paid_again(_table(a=relabel), repo)
    assert [g.stages for g in found] == [("label@E-v0",)]
    # committed: params.yaml holds what the table sets (the note's advice)
    params = {**PARAMS, "label": {"per_env": {"E-v0": {"teacher": "bad"}}}}
    assert paid_again(_table(a=relabel), _repo(tmp_path / "committed", params)) == []
    assert paid_again(_table(a={"dataset": {"shard": 7}}), repo) == []  # run cache restores it
    assert format_paid_again([], repo / "params.yaml") == ""


def test_an_env_the_table_adds_builds_its_whole_stage_one_in_every_experiment(tmp_path):
    repo = _repo(tmp_path)
    table = Table.model_validate({
        "table": "t", "seeds": [0],
        "params": {"envs": ["E-v0", "F-v0"], "env": {"F-v0": {"image_size": 64}}},
        "cells": {"f": {"train": {"env": "F-v0", "method": "sac", "steps": 10}}},
    })  # fmt: skip
    [group] = paid_again(table, repo)
    assert group.stages == (f"F-v0's stage one (not in {repo / 'params.yaml'}'s envs)",)
    assert group.experiments == ("t-f-s0",)
    assert group.params == (("envs", ["E-v0", "F-v0"]), ("env.F-v0.image_size", 64))


def test_check_and_queue_say_which_stages_the_shipped_p2_table_pays_again(capsys):
    """P2 (frames_cartpole.yaml) sets the env's frame size and episodes: each of its
    experiments collects again (about 11 of a run's 150 minutes on a 2-core machine)."""
    table = load_table(REPO / "benchmarks/tables/frames_cartpole.yaml")
    found = paid_again(table, REPO)
    assert found and all(
        g.stages[:2] == ("collect@cartpole-swingup", "label@cartpole-swingup") for g in found
    )
    runs = [name for g in found for name in g.experiments]
    assert (
        len(runs)
        == len(set(runs))
        == len(table.cells) * len(table.seeds) + len(table.teacher_groups())
    )
    assert main(["check", str(REPO / "benchmarks/tables/frames_cartpole.yaml"), "--repo",
                 str(REPO)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "each run collect@cartpole-swingup, label@cartpole-swingup" in out
    assert "env.cartpole-swingup.image_size: 64" in out
