"""The pixel benchmark (benchmarks.pixels): its presets stay valid over params.yaml, its arms and
data keys, `--compile`, `--reevaluate`, and its C_V step's resume, on the pixel dataset of
tests.pixel_data."""

from __future__ import annotations

import pytest
import yaml

from benchmarks.pixels import ENV, merged_params, read_preset
from pipeline.config import parse_params
from pipeline.methods.table import get_method
from tests.conftest import REPO, count_calls
from tests.pixel_data import STEPS, build_pixel_pipeline, params_for, train_argv


@pytest.fixture(scope="module")
def pixel_pipeline(tmp_path_factory):
    return build_pixel_pipeline(tmp_path_factory.mktemp("pixels"))


PRESETS = ["pixels_cpu.yaml", "pixels_cpu_drqnet.yaml", "pixels_paper.yaml"]


@pytest.mark.parametrize("preset", PRESETS)
def test_pixel_presets_parse_over_params_yaml(preset):
    """Every pixel preset stays valid against the current params.yaml and config: every arm's run
    passes check_params (steps above start_steps, frames for every method, C_V for erpv)."""
    from benchmarks.pixels import ARMS
    from pipeline.config import parse_params
    from pipeline.methods.table import check_params

    raw_preset, steps = read_preset(REPO / "benchmarks" / "params" / preset)
    raw = merged_params(REPO / "params.yaml", raw_preset)
    raw["envs"] = [ENV]
    raw["train"] = {arm: {"env": ENV, "method": method, "steps": steps, "seed": 0,
                          **({"overrides": ov} if ov else {})}
                    for arm, (method, _, ov) in ARMS.items()}  # fmt: skip
    params = parse_params(raw)
    check_params(params)
    for method in {m for m, _, _ in ARMS.values()}:
        assert get_method(method).params(params).network.obs == "pixels", method


def test_compile_reaches_every_arms_agent_and_is_absent_unless_asked():
    """`benchmarks.pixels --compile MODE` sets the agents' `compile` in every arm's section; left
    out, the merged params carry no `compile` key, so results made before it keep their specs."""
    from benchmarks.pixels import ARMS, with_compile
    from pipeline.config import parse_params

    raw_preset, steps = read_preset(REPO / "benchmarks" / "params" / "pixels_paper.yaml")
    merged = merged_params(REPO / "params.yaml", raw_preset)
    assert with_compile(merged, None) is merged
    methods = {m for m, _, _ in ARMS.values()}
    assert not any("compile" in merged[m] for m in methods)
    raw = with_compile(merged, "reduce-overhead")
    raw["train"] = {arm: {"env": ENV, "method": method, "steps": steps, "seed": 0,
                          **({"overrides": ov} if ov else {})}
                    for arm, (method, _, ov) in ARMS.items()}  # fmt: skip
    params = parse_params(raw)
    for method in methods:
        assert get_method(method).params(params).compile == "reduce-overhead", method
    with pytest.raises(SystemExit, match="--compile 'fast': one of off, default"):
        with_compile(merged, "fast")


def test_the_no_ver_and_no_vpg_arms_turn_one_term_off_and_keep_the_rest_of_erpv(tmp_path):
    """`erpv-no-ver` is erpv with lambda_2 = 0 (VPG alone), `erpv-no-vpg` erpv with lambda_1 = 0
    (VER alone); their cells read the same data and C_V as erpv's: only the section override
    differs."""
    import argparse

    from benchmarks.pixels import table_cells
    from benchmarks.sweep import cell_params

    raw_preset, steps = read_preset(REPO / "benchmarks" / "params" / "pixels_cpu_drqnet.yaml")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(merged_params(REPO / "params.yaml", raw_preset)))
    args = argparse.Namespace(arms=["erpv", "erpv-no-ver", "erpv-no-vpg"], seeds=1, eval_episodes=5)
    a, b, c = (get_method("erpv").params(cell_params(path, x)) for x in table_cells(args, steps))
    assert (a.lambda_1, a.lambda_2) == (10.0, 10.0)
    assert a.model_copy(update={"lambda_2": 0.0}) == b
    assert a.model_copy(update={"lambda_1": 0.0}) == c
    cells = table_cells(args, steps)
    assert [x.data for x in cells] == ["scripted+critic"] * 3


def test_arms_that_read_no_critic_never_wait_for_one(monkeypatch, tmp_path):
    """drq, sac and semore read no C_V: their data key has no `+critic`, and preparing it asks
    prepare_data for no C_V (a drq-only table pre-trained a pixel C_V for 3,000 steps first)."""
    import argparse

    from benchmarks import pixels

    args = argparse.Namespace(arms=["drq", "sac-offline", "semore-m4", "erpv-constant"], seeds=1,
                              eval_episodes=1)  # fmt: skip
    keys = [cell.data for cell in pixels.table_cells(args, 10)]
    assert keys == ["scripted", "scripted", "scripted", "constant+critic"]
    asked = []
    monkeypatch.setattr(pixels, "collect_rollouts", lambda params, out: None)
    monkeypatch.setattr(pixels, "prepare_data", lambda *a, critic, **k: asked.append(critic))
    raw_preset, _ = read_preset(REPO / "benchmarks" / "params" / "pixels_cpu_drqnet.yaml")
    params = parse_params(merged_params(REPO / "params.yaml", raw_preset))
    for key in keys:
        pixels.prepare(params, tmp_path, key)
    assert asked == [False, False, False, True]


def test_the_benchmarks_default_preset_is_a_checked_one(capsys):
    """benchmarks.pixels and its reference DrQ default to the same preset, one of those checked
    above (the reference is a control only at the table's sizes)."""
    from benchmarks import drq_reference
    from benchmarks.pixels import DEFAULT_PRESET

    assert DEFAULT_PRESET == "benchmarks/params/pixels_cpu_drqnet.yaml"  # the one that learns
    with pytest.raises(SystemExit):
        drq_reference.main(["--help"])
    assert DEFAULT_PRESET in " ".join(capsys.readouterr().out.split())


@pytest.mark.slow  # four spawned evaluation workers, each a fresh interpreter
def test_reevaluation_replays_each_cells_agent_and_checks_it_against_its_result(
    pixel_pipeline, tmp_path, capsys
):
    """`benchmarks.pixels --reevaluate N` on a sweep's layout (`<out>/runs/<cell>.json`,
    `<out>/agents/<cell>`): the agent's first episodes are its result's own, the rest extend them;
    a torn agent is named once the others are kept; a rerun plays nothing, a torn kept replay is
    played again; an agent that is not its result's stops with the cell named."""
    import json
    import shutil

    import torch

    from benchmarks.pixels import _replay_final, reevaluate, reevaluation_table
    from benchmarks.sweep import Cell
    from stages import train

    d, out = pixel_pipeline, tmp_path / "sweep"
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(params_for(d, "sac")))
    assert train.main(train_argv(d, params, "sac", tmp_path / "run")) == 0
    (out / "runs").mkdir(parents=True)
    (out / "agents").mkdir()
    (tmp_path / "run" / "model").rename(out / "agents" / "sac-seed0")
    (out / "params.yaml").write_bytes(params.read_bytes())
    threads = torch.get_num_threads()
    # the result's own evaluation, as `finish` makes it in a one-thread worker
    try:
        own = _replay_final(str(params), str(out / "agents" / "sac-seed0"), 2, 1)
    finally:
        torch.set_num_threads(threads)
    result = {"name": "sac-seed0", "arm": "sac", "seed": 0, "final_returns": own,
              "final_return": sum(own) / 2}  # fmt: skip
    (out / "runs" / "sac-seed0.json").write_text(json.dumps(result))
    (out / "runs" / "sac-seed1.json").write_text(json.dumps({**result, "seed": 1}))  # no agent
    (out / "runs" / "sac-seed2.json").write_text(json.dumps({**result, "seed": 2}))
    shutil.copytree(out / "agents" / "sac-seed0", out / "agents" / "sac-seed2")
    (out / "agents" / "sac-seed2" / "agent.safetensors").write_bytes(b"torn")
    cells = [
        Cell(name=f"sac-seed{s}", run={"env": ENV, "method": "sac", "steps": STEPS, "seed": s})
        for s in (0, 1, 2, 3)  # seed 3: no result
    ]

    with pytest.raises(SystemExit, match="sac-seed2: its agent could not be evaluated"):
        reevaluate(cells, out, 3, workers=2)
    assert "sac-seed1: its result has no agent" in capsys.readouterr().out
    kept = out / "reevaluated" / "sac-seed0-n3.json"  # the good cell's replay is not lost
    row = json.loads(kept.read_text())
    assert len(row["returns"]) == 3 and row["returns"][:2] == own
    assert row["final_return"] == pytest.approx(sum(row["returns"]) / 3)

    shutil.rmtree(out / "agents" / "sac-seed2")
    rows = reevaluate(cells, out, 3)
    assert rows == [row]
    assert "1 cells re-evaluated before, 0 to play" in capsys.readouterr().out
    kept.write_text('{"name": "sac-seed0", "retu')  # torn: played again, to the same row
    assert reevaluate(cells, out, 3) == [row]
    assert "0 cells re-evaluated before, 1 to play" in capsys.readouterr().out
    text = reevaluation_table(rows, ["sac"])
    assert f"{row['final_return']:.1f} +- n/a" in text and f"{sum(own) / 2:.1f}" in text

    result["final_returns"] = [own[0] + 1.0, own[1]]  # another run's result beside this agent
    (out / "runs" / "sac-seed0.json").write_text(json.dumps(result))
    with pytest.raises(SystemExit, match="sac-seed0: its agent's first 2 evaluation episodes"):
        reevaluate(cells, out, 3)


def test_reevaluate_names_a_bad_count_and_an_out_with_no_runs(tmp_path):
    import re

    from benchmarks.pixels import main

    with pytest.raises(SystemExit, match="--reevaluate 0: the number of episodes is at least 1"):
        main(["--out", str(tmp_path), "--reevaluate", "0"])
    with pytest.raises(SystemExit, match=re.escape(f"{tmp_path} has no params.yaml")):
        main(["--out", str(tmp_path), "--reevaluate", "30"])
    assert not list(tmp_path.iterdir())  # it trained and wrote nothing


def test_an_interrupted_critic_preparation_resumes(pixel_pipeline, tmp_path, monkeypatch):
    """The sweep's C_V step (the longest of a pixel table's preparation) keeps a resume state: a
    Ctrl-C after it goes on from it on the rerun (the remaining updates only), and the finished
    C_V is the uninterrupted one, its state cleared."""
    import torch

    from benchmarks.sweep import _critic
    from pipeline.agents.replay import TransitionStore
    from pipeline.methods.erpv import VLMCritic

    raw = yaml.safe_load((pixel_pipeline / "params.yaml").read_text())
    raw["critic"].update(steps=30, resume_every=10)
    params = parse_params(raw)
    dataset = pixel_pipeline / "ds"
    whole = _critic(ENV, params, dataset, tmp_path / "whole")

    count_calls(monkeypatch, TransitionStore, "sample", interrupt_at=15)
    with pytest.raises(KeyboardInterrupt):
        _critic(ENV, params, dataset, tmp_path / "killed")
    monkeypatch.undo()
    states = list((tmp_path / "killed").glob("critic-*.resume/state.json"))
    assert len(states) == 1, states

    calls = count_calls(monkeypatch, TransitionStore, "sample")
    resumed = _critic(ENV, params, dataset, tmp_path / "killed")
    assert calls[0] == 20  # updates 11-30
    assert not states[0].parent.exists()
    a, b = (VLMCritic.load(d / ENV).state_dict() for d in (whole, resumed))
    assert all(torch.equal(a[k], b[k]) for k in a)
