"""Stage two for ERPv end to end on the default params (budgets shrunk): collect (RAE) -> label ->
masks -> dataset -> pretrain_critic -> train (sac, erpv) -> evaluate, through the stages' entry
points; the train stage runs in a fresh interpreter that must not import a teacher."""

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import yaml

from pipeline.core.config import load_params
from pipeline.learn.curves import read_metric
from pipeline.learn.methods.table import get_method
from tests.conftest import REPO, sigkill_once_saved

ENV = "MountainCarContinuous-v0"


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("erpv")
    raw = yaml.safe_load((REPO / "params.yaml").read_text())  # the defaults; budgets shrunk below
    raw["rounds"] = {}  # the shipped rounds follow runs replaced here
    raw["envs"] = [ENV]
    raw["env"][ENV]["max_episode_steps"] = 150
    raw["collect"][ENV].update(episodes=2, rae_switch_steps=[20, 50])
    raw["train"] = {
        "sac": {"env": ENV, "method": "sac", "steps": 300, "seed": 0},
        "erpv": {"env": ENV, "method": "erpv", "steps": 300, "seed": 0},
    }
    for section in ("sac", "erpv"):
        raw[section].update(start_steps=100, log_every=50)
    raw["critic"].update(envs=[ENV], steps=200)
    raw["evaluate"]["episodes"] = 2
    (root / "params.yaml").write_text(yaml.safe_dump(raw))
    p = str(root / "params.yaml")

    from stages import collect, dataset, label, masks

    d = root
    assert collect.main(["--params", p, "--env", ENV, "--out", f"{d}/rollouts"]) == 0
    assert label.main(["--params", p, "--rollouts", f"{d}/rollouts", "--cache", f"{d}/lc",
                       "--out", f"{d}/labels.parquet"]) == 0  # fmt: skip
    assert masks.main(["--params", p, "--rollouts", f"{d}/rollouts", "--labels",
                       f"{d}/labels.parquet", "--cache", f"{d}/mc", "--out",
                       f"{d}/masks.parquet"]) == 0  # fmt: skip
    assert dataset.main(["--params", p, "--rollouts", f"{d}/rollouts", "--labels",
                         f"{d}/labels.parquet", "--masks", f"{d}/masks.parquet", "--out",
                         f"{d}/dataset"]) == 0  # fmt: skip
    return root


def _train_argv(d, run):
    return ["--params", f"{d}/params.yaml", "--run", run, "--dataset", f"{d}/dataset", "--critics",
            f"{d}/critics", "--out", f"{d}/models/{run}", "--live", f"{d}/live/{run}",
            "--summary", f"{d}/summaries/{run}.json"]  # fmt: skip


def test_pretrain_train_evaluate_end_to_end(pipeline_dir):
    from stages import evaluate, pretrain_critic, train

    d = pipeline_dir
    assert pretrain_critic.main(["--params", f"{d}/params.yaml", "--env", ENV, "--dataset",
                                 f"{d}/dataset", "--out", f"{d}/critics/{ENV}", "--live",
                                 f"{d}/critic_live", "--summary", f"{d}/critic.json"]) == 0  # fmt: skip
    critic_meta = json.loads((d / "critics" / ENV / "erpv" / "agent.json").read_text())
    assert list(critic_meta["data_hashes"]) == ["dataset/data/train-00000-of-00001.parquet"]
    # every other method's folder holds a marker that does not depend on C_V
    ppo = json.loads((d / "critics" / ENV / "ppo" / "reads_no_critic.json").read_text())
    assert ppo == {"env": ENV, "method": "ppo", "critic": None,
                   "why": "ppo reads no C_V (ERPv's is in ../erpv/)"}  # fmt: skip

    # erpv in a fresh interpreter: it must learn from the cached labels without any teacher
    code = (
        "import sys\nfrom stages.train import main\n"
        f"assert main({_train_argv(d, 'erpv')!r}) == 0\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    modules = out.stdout.split()
    assert "pipeline.learn.methods.erpv" in modules
    assert not [m for m in modules if m.startswith("pipeline.teach.teachers")]
    assert train.main(_train_argv(d, "sac")) == 0

    live = d / "live" / "erpv"
    for name in ("vpg/q_f", "alpha", "ver/alpha_target", "eval_return", "critic_loss"):
        assert read_metric(live, name), name
    assert all(0.0 <= v <= 1.0 for _, v in read_metric(live, "vpg/gate_open"))
    # nothing is plotted before it is measured: no Q_f row during the warm-up
    start = get_method("erpv").params(load_params(d / "params.yaml")).start_steps
    assert min(step for step, _ in read_metric(live, "vpg/q_f")) >= start
    # the DVC metric says what the curves ended on, by names no one takes for evaluate's figures
    summary = json.loads((d / "summaries" / "erpv.json").read_text())
    eval_episodes = get_method("erpv").params(load_params(d / "params.yaml")).eval_episodes
    assert set(summary) == {"step", "last_episode_return", "last_eval_return", "eval_episodes"}
    assert summary["eval_episodes"] == eval_episodes
    assert summary["last_eval_return"] == read_metric(live, "eval_return")[-1][1]
    assert summary["last_episode_return"] == read_metric(live)[-1][1]

    for run in ("sac", "erpv"):
        metrics = d / "metrics" / f"{run}.json"
        argv = [
            "--params",
            f"{d}/params.yaml",
            "--agent",
            f"{d}/models/{run}",
            "--out",
            str(metrics),
        ]
        assert evaluate.main(argv) == 0
        result = json.loads(metrics.read_text())
        assert result["episodes"] == 2 and result["method"] == run and result["env"] == ENV
        assert 0.0 <= result["success_rate"] <= 1.0 and result["length_mean"] <= 150


def test_a_saved_and_reloaded_agent_acts_like_the_trained_one(pipeline_dir, tmp_path):
    """The deployed policy (load_agent + deployed, as evaluate uses them) gives the in-memory
    agent's actions."""
    from pathlib import Path

    from pipeline.core.config import TrainRun, load_params
    from pipeline.learn.agents.checkpoint import read_meta
    from pipeline.learn.evaluation import deployed
    from pipeline.learn.methods.base import TrainInputs
    from pipeline.learn.methods.table import load_agent

    d = Path(pipeline_dir)
    params = load_params(d / "params.yaml")
    run = TrainRun(env=ENV, method="sac", steps=150, seed=3)
    inputs = TrainInputs(dataset=d / "dataset")
    result = get_method(run.method).train("sac", run, params, inputs, progress=False)
    agent = result.agent
    agent.save(tmp_path / "agent", result.meta)
    policy = deployed(load_agent(tmp_path / "agent"), read_meta(tmp_path / "agent"))
    states = np.random.default_rng(0).uniform([-1.2, -0.07], [0.6, 0.07], (16, 2))
    for s in states.astype(np.float32):
        policy.begin({"state": s})  # state agents stack nothing: each act reads its state
        assert np.array_equal(policy.act({"state": s}), agent.act(s, deterministic=True))


# three train stages in fresh interpreters; fast: the in-process resume tests of the SAC family
# (test_pixel_methods.py) and a SIGKILLed train stage (PPO, test_training.py)
@pytest.mark.slow
def test_a_killed_training_resumes_to_the_uninterrupted_result(pipeline_dir, tmp_path):
    """SIGKILL a train stage after its first resume state; the rerun goes on from there and
    ends with the checkpoint and curves byte-identical to a run never interrupted (CPU)."""

    d = pipeline_dir
    raw = yaml.safe_load((d / "params.yaml").read_text())
    raw["train"] = {"long": {"env": ENV, "method": "sac", "steps": 450, "seed": 0}}
    raw["sac"].update(resume_every=100, log_every=100)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))

    def argv(out):
        return ["--params", str(tmp_path / "params.yaml"), "--run", "long", "--dataset", f"{d}/dataset",
                "--out", f"{out}/model", "--live", f"{out}/live", "--summary",
                f"{out}/summary.json", "--resume-dir", f"{out}/resume"]  # fmt: skip

    def run(out):
        code = f"from stages.train import main; raise SystemExit(main({argv(out)!r}))"
        return subprocess.Popen([sys.executable, "-c", code], cwd=REPO)

    assert run(tmp_path / "whole").wait() == 0
    killed = run(tmp_path / "killed")
    state = tmp_path / "killed" / "resume" / "state.json"
    sigkill_once_saved(killed, state)
    assert state.exists() and not (tmp_path / "killed" / "model" / "agent.json").exists()
    assert run(tmp_path / "killed").wait() == 0
    assert not (tmp_path / "killed" / "resume").exists()  # cleared once finished
    for name in ("model/agent.safetensors", "model/agent.json", "summary.json"):
        whole, resumed = tmp_path / "whole" / name, tmp_path / "killed" / name
        assert resumed.read_bytes() == whole.read_bytes(), name
    tsv = sorted(p.relative_to(tmp_path / "whole") for p in (tmp_path / "whole").rglob("*.tsv"))
    assert tsv and all(
        (tmp_path / "killed" / p).read_bytes() == (tmp_path / "whole" / p).read_bytes() for p in tsv
    )


@pytest.mark.slow
def test_a_killed_critic_pretraining_resumes_to_the_uninterrupted_result(pipeline_dir, tmp_path):
    """SIGKILL pretrain_critic@<env> after its first resume state; the rerun goes on from there
    (its curve starts where the state was taken) and writes C_V and its curves byte-identical to
    a pre-training never interrupted, then clears the state."""
    d = pipeline_dir
    raw = yaml.safe_load((d / "params.yaml").read_text())
    raw["critic"].update(steps=600, resume_every=100)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))

    def run(out, stderr=None):
        argv = ["--params", str(tmp_path / "params.yaml"), "--env", ENV, "--dataset",
                f"{d}/dataset", "--out", f"{out}/critic", "--live", f"{out}/live", "--summary",
                f"{out}/summary.json", "--resume-dir", f"{out}/resume"]  # fmt: skip
        code = f"from stages.pretrain_critic import main; raise SystemExit(main({argv!r}))"
        return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stderr=stderr)

    assert run(tmp_path / "whole").wait() == 0
    killed = run(tmp_path / "killed")
    state = tmp_path / "killed" / "resume" / "state.json"
    sigkill_once_saved(killed, state)
    assert state.exists() and not (tmp_path / "killed" / "critic").exists()
    resumed = run(tmp_path / "killed", stderr=subprocess.PIPE)
    _, err = resumed.communicate()
    assert resumed.returncode == 0 and b"resuming" in err, err.decode()[-2000:]
    assert not (tmp_path / "killed" / "resume").exists()  # cleared once C_V is saved
    whole = sorted(p.relative_to(tmp_path / "whole") for p in (tmp_path / "whole").rglob("*"))
    files = [p for p in whole if (tmp_path / "whole" / p).is_file()]
    assert any(p.suffix == ".safetensors" for p in files) and any(p.suffix == ".tsv" for p in files)
    for p in files:
        assert (tmp_path / "killed" / p).read_bytes() == (tmp_path / "whole" / p).read_bytes(), p


def test_erpv_without_guidance_is_sac_on_the_same_offline_data(pipeline_dir, tmp_path):
    """ERPv with lambda_1 = lambda_2 = 0 trains the same weights, byte for byte, as SAC reading
    the same labelled dataset at the same offline fraction (sac-offline): the control that
    isolates what the labels add. The gate diagnostics are computed and logged all the same.
    The identity is not vacuous: the weights left their initialisation, and with lambda_1 > 0
    (the positive control) they differ."""
    from pathlib import Path

    from safetensors.torch import load_file

    from pipeline.core.config import TrainRun
    from pipeline.dataset.layout import dataset_action_space
    from pipeline.dataset.transitions import load_offline_transitions
    from pipeline.learn.critic import pretrain_vlm_critic
    from pipeline.learn.methods.base import TrainInputs

    d = Path(pipeline_dir)
    params = load_params(d / "params.yaml")
    hp = get_method("erpv").params(params)
    offline = load_offline_transitions(d / "dataset", "state", ("action",))
    critic, _ = pretrain_vlm_critic(
        offline, dataset_action_space(d / "dataset"), hp, 50, 0, progress=False
    )
    critic.save(tmp_path / "critics" / ENV / "erpv")
    inputs = TrainInputs(dataset=d / "dataset", critics=tmp_path / "critics")
    runs = {
        "sac-offline": TrainRun(env=ENV, method="sac", steps=250, seed=5,
                                overrides={"offline_fraction": hp.offline_fraction}),
        "erpv-l0": TrainRun(env=ENV, method="erpv", steps=250, seed=5,
                            overrides={"lambda_1": 0.0, "lambda_2": 0.0}),
        "erpv-l10": TrainRun(env=ENV, method="erpv", steps=250, seed=5,
                             overrides={"lambda_1": 10.0, "lambda_2": 0.0}),
    }  # fmt: skip
    tensors, logs = {}, {}
    for name, run in runs.items():
        result = get_method(run.method).train(name, run, params, inputs, progress=False)
        result.agent.save(tmp_path / name, result.meta)
        tensors[name] = load_file(tmp_path / name / "agent.safetensors")
        logs[name] = result.logs
    assert tensors["sac-offline"].keys() == tensors["erpv-l0"].keys()
    for key, value in tensors["sac-offline"].items():
        assert value.numpy().tobytes() == tensors["erpv-l0"][key].numpy().tobytes(), key
    # the actor trained: its weights left their initialisation (an untrained agent, same seed)
    from pipeline.learn.agents.checkpoint import module_tensors

    fresh = result.agent.__class__(
        result.agent.obs_shape, gym.spaces.Box(result.agent.scale.low_np,
                                               result.agent.scale.high_np),
        result.agent.cfg, critic, seed=5,
    )  # fmt: skip
    init = module_tensors(fresh._modules())
    moved = [k for k, v in init.items() if k.startswith("actor.")
             and v.numpy().tobytes() != tensors["erpv-l0"][k].numpy().tobytes()]  # fmt: skip
    assert moved, "no actor weight moved in 250 steps"
    # the positive control: VPG's term with weight changes the actor
    assert any(
        tensors["erpv-l10"][k].numpy().tobytes() != tensors["erpv-l0"][k].numpy().tobytes()
        for k in tensors["erpv-l0"]
        if k.startswith("actor.")
    )
    logged = set().union(*(row.keys() for row in logs["erpv-l0"]))
    assert {
        "vpg/gate_open",
        "vpg/zeros/gate_open",
        "vpg/own/gate_open",
        "vpg/coupling",
        "guidance/ratio",
    } <= logged


@pytest.mark.slow  # two erpv runs, a C_V each, from one built pipeline: 7-10 s
def test_a_state_and_a_pixel_erpv_run_share_an_env(pipeline_dir, tmp_path):
    """`critic.variants.<env>` pre-trains more C_V of one env (here a pixel one beside the state
    one) and a run picks one with `critic_variant`: a state and a pixel erpv run on one env."""
    from pipeline.core.config import ConfigError, parse_params
    from pipeline.learn.methods.table import check_params
    from stages import pretrain_critic, train

    d = pipeline_dir
    raw = yaml.safe_load((d / "params.yaml").read_text())
    # small pixel networks: what is tested is which C_V a run reads, not what it learns
    small = {"obs": "pixels", "encoder_filters": 8, "feature_dim": 16, "hidden_dim": 32,
             "transition_hidden_dim": 32}  # fmt: skip
    raw["critic"].update(steps=10, variants={ENV: {"pix": {"network": small}}})
    raw["erpv"]["start_steps"] = 100
    raw["train"]["erpv-pix"] = {"env": ENV, "method": "erpv", "steps": 104, "seed": 0,
                                "overrides": {"critic_variant": "pix",
                                              "network": small}}  # fmt: skip
    check_params(parse_params(raw))
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(raw))
    critics = tmp_path / "critics"
    assert pretrain_critic.main(["--params", str(p), "--env", ENV, "--dataset", f"{d}/dataset",
                                 "--out", f"{critics}/{ENV}", "--live", f"{tmp_path}/live",
                                 "--summary", f"{tmp_path}/critic.json"]) == 0  # fmt: skip
    state = json.loads((critics / ENV / "erpv" / "agent.json").read_text())
    pix = json.loads((critics / ENV / "erpv" / "variants" / "pix" / "agent.json").read_text())
    assert (state["network"]["obs"], pix["network"]["obs"]) == ("state", "pixels")
    assert (tmp_path / "live" / "variants" / "pix" / "plots" / "metrics").is_dir()

    argv = _train_argv(d, "erpv-pix")
    argv[argv.index("--params") + 1] = str(p)
    argv[argv.index("--critics") + 1] = str(critics)
    argv[argv.index("--out") + 1] = str(tmp_path / "models" / "erpv-pix")
    assert train.main(argv) == 0
    meta = json.loads((tmp_path / "models" / "erpv-pix" / "agent.json").read_text())
    assert (meta["config"]["critic_variant"], meta["obs"]) == ("pix", "pixels")

    # a variant no env has, and a variant of an env without C_V, are refused by name
    raw["train"]["erpv-pix"]["overrides"]["critic_variant"] = "rgb"
    with pytest.raises(ConfigError, match=r"critic_variant 'rgb' is not a C_V of"):
        check_params(parse_params(raw))
    raw["train"]["erpv-pix"]["overrides"]["critic_variant"] = "pix"
    raw["critic"]["variants"]["MountainCar-v0"] = {"x": {"gamma": 0.9}}
    with pytest.raises(ConfigError, match=r"critic.variants.MountainCar-v0: .* not in critic.envs"):
        check_params(parse_params(raw))
