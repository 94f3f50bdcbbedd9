"""Every pixel method of the SAC family (sac, drq, erpv, erpv with random shifts, semore) trains a
few steps from a dataset that the pipeline's stages built from frames (collect -> label -> masks
-> dataset -> pretrain_critic on pixels, the CPU pixel preset's networks at a smaller frame size),
and a run SIGKILLed after its first resume state finishes, on rerun, byte-identical to a run never
interrupted (and, in process, an interrupted one resumes to the same networks)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from benchmarks.pixels import ENV, merged_params, read_preset
from pipeline.config import load_params, parse_params
from pipeline.methods.table import get_method, load_agent
from tests.conftest import REPO, sigkill_once_saved

RUNS = {  # run name -> (method, section overrides)
    "sac": ("sac", {}),
    "drq": ("drq", {}),
    "erpv": ("erpv", {}),
    "erpv-shift": ("erpv", {"image_pad": 2}),
    "semore": ("semore", {}),  # the preset's variant, m4
    "semore-m1": ("semore", {"variant": "m1"}),  # the ablation unlike the others: stacked input
}
STEPS = 32  # updates from step 16: 17 of them


@pytest.fixture(scope="module")
def pixel_pipeline(tmp_path_factory):
    """The pixel preset's params at 48x48 frames (the smallest where Semore's 3 stride-2 layers
    keep its 5x5 SSIM window) with tiny budgets and networks, and its data built by the stages."""
    d = tmp_path_factory.mktemp("pixels")
    preset, _ = read_preset(REPO / "benchmarks" / "params" / "pixels_cpu.yaml")
    raw = merged_params(REPO / "params.yaml", preset)
    raw["env"][ENV].update(image_size=48, max_episode_steps=24)
    raw["collect"][ENV].update(episodes=2, rae_switch_steps=[5, 10])
    raw["critic"].update(steps=20)
    small = {"batch_size": 8, "start_steps": 16, "log_every": 16, "resume_every": 16,
             "eval_episodes": 0, "replay_capacity": 500}  # fmt: skip
    for section in ("sac", "drq", "erpv", "semore"):
        raw[section].update(small)
        raw[section]["network"].update(hidden_dim=32, feature_dim=16, transition_hidden_dim=32,
                                       encoder_filters=8)  # fmt: skip
    raw["semore"]["network"].update(attention_dim=8)
    raw["train"] = {
        name: {"env": ENV, "method": method, "steps": STEPS, "seed": 0}
        for name, (method, _) in RUNS.items()
    }
    raw["rounds"] = {}  # the shipped rounds follow runs replaced here
    raw["evaluate"]["episodes"] = 1
    p = d / "params.yaml"
    p.write_text(yaml.safe_dump(raw, sort_keys=False))

    from stages import collect, dataset, label, masks, pretrain_critic

    assert collect.main(["--params", str(p), "--env", ENV, "--out", f"{d}/r"]) == 0
    assert label.main(["--params", str(p), "--rollouts", f"{d}/r", "--cache", f"{d}/lc",
                       "--out", f"{d}/labels.parquet"]) == 0  # fmt: skip
    assert masks.main(["--params", str(p), "--rollouts", f"{d}/r", "--labels",
                       f"{d}/labels.parquet", "--cache", f"{d}/mc", "--out",
                       f"{d}/masks.parquet"]) == 0  # fmt: skip
    assert dataset.main(["--params", str(p), "--rollouts", f"{d}/r", "--labels",
                         f"{d}/labels.parquet", "--masks", f"{d}/masks.parquet", "--out",
                         f"{d}/ds"]) == 0  # fmt: skip
    assert pretrain_critic.main(["--params", str(p), "--env", ENV, "--dataset", f"{d}/ds",
                                 "--out", f"{d}/critics/{ENV}", "--live", f"{d}/cl",
                                 "--summary", f"{d}/critic.json"]) == 0  # fmt: skip
    return d


def _params_for(d, name, resume_every=None, steps=STEPS):
    """The fixture's params with run `name` alone and its section overrides applied (as a sweep
    cell's)."""
    raw = yaml.safe_load((d / "params.yaml").read_text())
    method, over = RUNS[name]
    raw[method].update(over)
    if resume_every is not None:
        raw[method]["resume_every"] = resume_every
    raw["train"] = {name: {**raw["train"][name], "steps": steps}}
    return raw


def _train_argv(d, params, name, out):
    return ["--params", str(params), "--run", name, "--rollouts", f"{d}/r", "--labels",
            f"{d}/labels.parquet", "--dataset", f"{d}/ds", "--critics", f"{d}/critics",
            "--out", f"{out}/model", "--live", f"{out}/live", "--summary", f"{out}/summary.json",
            "--resume-dir", f"{out}/resume"]  # fmt: skip


@pytest.mark.parametrize("name", list(RUNS))
def test_each_pixel_method_trains_from_a_pipeline_built_pixel_dataset(pixel_pipeline, name):
    from pipeline.agents.checkpoint import read_meta
    from pipeline.evaluation import deployed, evaluate_policy
    from stages import train

    d = pixel_pipeline
    params = d / f"{name}.yaml"
    params.write_text(yaml.safe_dump(_params_for(d, name)))
    assert train.main(_train_argv(d, params, name, d / "out" / name)) == 0
    model = d / "out" / name / "model"
    meta = read_meta(model)
    method, over = RUNS[name]
    assert meta["method"] == method and meta["obs"] == "pixels"
    assert meta["config"]["network"]["encoder_stride"] == 2  # the preset's small encoder
    assert meta["config"]["image_pad"] == over.get("image_pad", 4 if method == "drq" else 0)
    assert meta["update_step"] == STEPS - 16 + 1
    hp = get_method(method).params(load_params(params))
    assert hp.network.obs == "pixels"
    policy = deployed(load_agent(model), meta)
    result = evaluate_policy(policy, ENV, load_params(params).env[ENV], 1, seed=0)
    assert result.episodes == 1


# three train stages in fresh interpreters; fast: the in-process resume tests below and a
# SIGKILLed train stage (PPO, test_training.py)
@pytest.mark.slow
def test_a_killed_pixel_run_resumes_to_the_uninterrupted_result(pixel_pipeline, tmp_path):
    """SIGKILL an erpv-shift train stage (frames on the training device, shifted, the labelled
    dataset and C_V) after its first resume state; the rerun ends byte-identical to the
    uninterrupted run."""
    d, name = pixel_pipeline, "erpv-shift"
    params = tmp_path / "params.yaml"
    # the first resume state at the first episode end (24 steps), then 48 more steps to kill in
    params.write_text(yaml.safe_dump(_params_for(d, name, resume_every=24, steps=72)))

    def run(out):
        code = (
            "from stages.train import main; "
            f"raise SystemExit(main({_train_argv(d, params, name, out)!r}))"
        )
        return subprocess.Popen([sys.executable, "-c", code], cwd=REPO)

    assert run(tmp_path / "whole").wait() == 0
    killed = run(tmp_path / "killed")
    state = tmp_path / "killed" / "resume" / "state.json"
    sigkill_once_saved(killed, state)
    assert state.exists() and not (tmp_path / "killed" / "model" / "agent.json").exists()
    assert run(tmp_path / "killed").wait() == 0
    for part in ("model/agent.safetensors", "model/agent.json", "summary.json"):
        whole, resumed = tmp_path / "whole" / part, tmp_path / "killed" / part
        assert resumed.read_bytes() == whole.read_bytes(), part


@pytest.mark.parametrize(
    "name",
    # three runs each; drq's is sac's with shifted frames, whose resume the slow SIGKILL test
    # above checks (erpv-shift)
    ["sac", pytest.param("drq", marks=pytest.mark.slow), "semore"],
)
def test_an_interrupted_pixel_run_resumes_to_the_uninterrupted_result(
    pixel_pipeline, tmp_path, monkeypatch, name
):
    """Interrupted in its update after the first resume state (in process: cheaper than a
    SIGKILL, the same state on disk), the rerun ends with the uninterrupted run's networks, curve
    and metric rows."""
    import torch

    from pipeline.agents.off_policy import OffPolicyAgent
    from pipeline.config import parse_params
    from pipeline.methods.base import TrainInputs

    d = pixel_pipeline
    params = parse_params(_params_for(d, name, resume_every=24, steps=48))
    method = get_method(RUNS[name][0])
    run = params.train[name]
    inputs = TrainInputs(d / "r", d / "labels.parquet", dataset=d / "ds", critics=d / "critics")
    whole = method.train(name, run, params, inputs, progress=False, resume_dir=tmp_path / "w")

    update, calls = OffPolicyAgent.update, [0]

    def dies_at_update_20(self, batch):
        calls[0] += 1
        if calls[0] == 20:  # updates start at step 16, the resume state is taken at step 24
            raise KeyboardInterrupt
        return update(self, batch)

    monkeypatch.setattr(OffPolicyAgent, "update", dies_at_update_20)
    with pytest.raises(KeyboardInterrupt):
        method.train(name, run, params, inputs, progress=False, resume_dir=tmp_path / "k")
    assert (tmp_path / "k" / "state.json").exists()
    monkeypatch.setattr(OffPolicyAgent, "update", update)
    resumed = method.train(name, run, params, inputs, progress=False, resume_dir=tmp_path / "k")
    assert resumed.curve == whole.curve and resumed.logs == whole.logs
    a, b = whole.agent.training_state(), resumed.agent.training_state()
    for module, state in a["modules"].items():
        for key, tensor in state.items():
            assert torch.equal(tensor, b["modules"][module][key]), (module, key)


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


def test_one_pixel_run_beside_a_state_run_of_the_same_method(pixel_pipeline, tmp_path):
    """`train.<run>.overrides` switches one run to frames; the section (and the other run) stay
    on state observations."""
    from pipeline.agents.checkpoint import read_meta
    from stages import train

    d = pixel_pipeline
    raw = yaml.safe_load((d / "params.yaml").read_text())
    raw["sac"]["network"] = {**raw["sac"]["network"], "obs": "state"}  # not drq's (an alias)
    run = {"env": ENV, "method": "sac", "steps": STEPS, "seed": 0}
    raw["train"] = {"sac-state": run, "sac-pixels": {**run, "overrides": {"network": {"obs": "pixels"}}}}  # fmt: skip
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    for name, obs in (("sac-state", "state"), ("sac-pixels", "pixels")):
        assert train.main(_train_argv(d, params, name, tmp_path / name)) == 0
        meta = read_meta(tmp_path / name / "model")
        assert meta["obs"] == obs and meta["config"]["network"]["obs"] == obs, name
        # the rest of the network is the section's, merged key by key
        assert meta["config"]["network"]["encoder_stride"] == 2


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
    params.write_text(yaml.safe_dump(_params_for(d, "sac")))
    assert train.main(_train_argv(d, params, "sac", tmp_path / "run")) == 0
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
    assert f"{row['final_return']:.1f} +- 0.0" in text and f"{sum(own) / 2:.1f}" in text

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


def test_guidance_terms_split_the_erpv_actors_own_gradient(pixel_pipeline, tmp_path):
    """benchmarks.guidance_terms on a trained erpv run: the gradients of L_pi and lambda_1 L_V
    it measures add up to the one the agent's own actor step applies (same batch, same sample
    a_r); the table's figures come from them; a run without guidance is refused by name."""
    import numpy as np
    import torch

    from benchmarks.guidance_terms import agent_terms, load_guided, table, term_gradients
    from pipeline.methods.base import TrainInputs
    from stages import train

    d = pixel_pipeline
    params_path = tmp_path / "params.yaml"
    params_path.write_text(yaml.safe_dump(_params_for(d, "erpv")))
    assert train.main(_train_argv(d, params_path, "erpv", tmp_path / "run")) == 0
    params, erpv = load_params(params_path), get_method("erpv")
    inputs = TrainInputs(d / "r", d / "labels.parquet", d / "ds", d / "critics")
    agent, buffer = load_guided(erpv, params, "erpv", inputs, tmp_path / "run" / "model")
    batch = buffer.sample(16, np.random.default_rng(0))
    assert bool(batch["has_label"].any())
    torch.manual_seed(1)
    g_pi, g_v, _ = term_gradients(agent, batch)

    actor = [p for p in agent.actor.parameters() if p.requires_grad]
    applied = {}

    def capture(*_, **__):  # the agent's own step, stopped before the optimiser moves
        applied["g"] = torch.cat([p.grad.flatten() if p.grad is not None
                                  else torch.zeros_like(p).flatten() for p in actor])  # fmt: skip

    agent.actor_optimizer.step = capture
    with torch.no_grad():
        h, next_h = agent.features(batch["obs"]), agent.features(batch["next_obs"])
    torch.manual_seed(1)
    agent.update_actor_and_alpha(h, next_h, batch)
    assert torch.allclose(applied["g"], g_pi + g_v, atol=1e-6)
    assert float(g_v.norm()) > 0  # the guidance does pull on this batch

    terms = agent_terms(erpv, params, "erpv", inputs, tmp_path / "run" / "model", batches=2)
    assert terms["lambda_1"] == agent.cfg.lambda_1 == 10 and 0 <= terms["gate_open"] <= 1
    assert terms["ratio"] == pytest.approx(terms["grad_v"] / terms["grad_pi"])
    assert table({"erpv-seed0": terms}).splitlines()[1].split()[:2] == ["erpv-seed0", "10"]
    sac = yaml.safe_load(params_path.read_text())
    sac["train"] = {"sac": {**sac["train"]["erpv"], "method": "sac"}}
    sac_path = tmp_path / "sac.yaml"
    sac_path.write_text(yaml.safe_dump(sac))
    with pytest.raises(SystemExit, match="sac: a sac run has no policy guidance"):
        load_guided(get_method("sac"), load_params(sac_path), "sac", inputs, tmp_path / "run")
