"""Every pixel method of the SAC family (sac, drq, erpv, erpv with random shifts, semore) trains a
few steps from a dataset that the pipeline's stages built from frames (tests.pixel_data: collect
-> label -> masks -> dataset -> pretrain_critic on pixels), and a run SIGKILLed after its first
resume state finishes, on rerun, byte-identical to a run never interrupted (and, in process, an
interrupted one resumes to the same networks). The pixel benchmark's own tests are in
tests/learn/test_pixel_throughput.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from pipeline.core.config import load_params, parse_params
from pipeline.learn.methods.table import get_method, load_agent
from tests.conftest import REPO, sigkill_once_saved
from tests.pixel_data import ENV, RUNS, STEPS, build_pixel_pipeline, params_for, train_argv


@pytest.fixture(scope="module")
def pixel_pipeline(tmp_path_factory):
    return build_pixel_pipeline(tmp_path_factory.mktemp("pixels"))


@pytest.mark.parametrize("name", list(RUNS))
def test_each_pixel_method_trains_from_a_pipeline_built_pixel_dataset(pixel_pipeline, name):
    from pipeline.learn.agents.checkpoint import read_meta
    from pipeline.learn.evaluation import deployed, evaluate_policy
    from stages import train

    d = pixel_pipeline
    params = d / f"{name}.yaml"
    params.write_text(yaml.safe_dump(params_for(d, name)))
    assert train.main(train_argv(d, params, name, d / "out" / name)) == 0
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
    params.write_text(yaml.safe_dump(params_for(d, name, resume_every=24, steps=72)))

    def run(out):
        code = (
            "from stages.train import main; "
            f"raise SystemExit(main({train_argv(d, params, name, out)!r}))"
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
    [
        "sac",
        pytest.param("drq", marks=pytest.mark.slow),
        pytest.param("semore", marks=pytest.mark.slow),
    ],
)
def test_an_interrupted_pixel_run_resumes_to_the_uninterrupted_result(
    pixel_pipeline, tmp_path, monkeypatch, name
):
    """Interrupted in its update after the first resume state (in process: cheaper than a
    SIGKILL, the same state on disk), the rerun ends with the uninterrupted run's networks, curve
    and metric rows."""
    import torch

    from pipeline.learn.agents.off_policy import OffPolicyAgent
    from pipeline.learn.methods.base import TrainInputs

    d = pixel_pipeline
    params = parse_params(params_for(d, name, resume_every=24, steps=48))
    method = get_method(RUNS[name][0])
    run = params.train[name]
    inputs = TrainInputs(dataset=d / "ds", critics=d / "critics")
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


def test_under_the_resume_root_a_finished_run_keeps_its_final_state_and_reruns_no_step(
    pixel_pipeline, tmp_path, monkeypatch
):
    """A rounds experiment killed in round 3 runs rounds 1-2 again (their caches persist, so
    DVC's run cache cannot restore them). Under VLMRL_RESUME_ROOT (a queued run) a finished run
    keeps its final state, and run again it makes no update and ends with the same networks,
    replay (what the next round goes on from), curve and rows. Elsewhere the state goes at the
    end, as before."""
    import torch

    from pipeline.learn.agents.off_policy import OffPolicyAgent
    from pipeline.learn.agents.resume import read_header, read_plain
    from pipeline.learn.methods.base import RESUME_ROOT_ENV, TrainInputs

    d = pixel_pipeline
    raw = params_for(d, "sac", resume_every=24, steps=24)  # updates from step 16
    raw["sac"]["save_training_state"] = True
    params = parse_params(raw)
    method, run = get_method(RUNS["sac"][0]), params.train["sac"]
    inputs = TrainInputs(dataset=d / "ds", critics=d / "critics")

    def train(resume_dir):
        return method.train("sac", run, params, inputs, progress=False, resume_dir=resume_dir)

    plain = train(tmp_path / "plain")
    assert not (tmp_path / "plain").exists()
    monkeypatch.setenv(RESUME_ROOT_ENV, str(tmp_path / "root"))
    first = train(".resume/sac")
    [state] = (tmp_path / "root" / "sac").glob("*/state.json")
    assert read_plain(state.parent)["step"] == 24 == read_header(state.parent)["about"]["steps"]

    def no_update(self, batch):
        raise AssertionError("a finished run made an update again")

    monkeypatch.setattr(OffPolicyAgent, "update", no_update)
    again = train(".resume/sac")
    for result in (first, again):
        assert result.curve == plain.curve and result.logs == plain.logs
        for part in ("agent", "buffer"):
            a, b = _flat(plain.training_state[part]), _flat(result.training_state[part])
            assert a.keys() == b.keys(), part
            for key, value in a.items():
                same = torch.equal(value, b[key]) if torch.is_tensor(value) else value == b[key]
                assert same, (part, key)


def _flat(tree, prefix=""):
    """A nested state (dicts, lists, tensors, arrays, numbers) as {path: leaf}, arrays as
    tensors."""
    import numpy as np
    import torch

    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{prefix}/{key}").items()}
    if isinstance(tree, list | tuple):
        return {k: v for i, sub in enumerate(tree) for k, v in _flat(sub, f"{prefix}/{i}").items()}
    return {prefix: torch.from_numpy(tree) if isinstance(tree, np.ndarray) else tree}


def test_one_pixel_run_beside_a_state_run_of_the_same_method(pixel_pipeline, tmp_path):
    """`train.<run>.overrides` switches one run to frames; the section (and the other run) stay
    on state observations."""
    from pipeline.learn.agents.checkpoint import read_meta
    from stages import train

    d = pixel_pipeline
    raw = yaml.safe_load((d / "params.yaml").read_text())
    raw["sac"]["network"] = {**raw["sac"]["network"], "obs": "state"}  # not drq's (an alias)
    run = {"env": ENV, "method": "sac", "steps": STEPS, "seed": 0}
    raw["train"] = {"sac-state": run, "sac-pixels": {**run, "overrides": {"network": {"obs": "pixels"}}}}  # fmt: skip
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    for name, obs in (("sac-state", "state"), ("sac-pixels", "pixels")):
        assert train.main(train_argv(d, params, name, tmp_path / name)) == 0
        meta = read_meta(tmp_path / name / "model")
        assert meta["obs"] == obs and meta["config"]["network"]["obs"] == obs, name
        # the rest of the network is the section's, merged key by key
        assert meta["config"]["network"]["encoder_stride"] == 2


def test_erpv_at_lambda_zero_is_sac_offline_from_frames_and_lambda_1_is_not(
    pixel_pipeline, tmp_path
):
    """ERPv's two terms (eq. 4 weighted by lambda_1, eq. 7 by lambda_2) at zero leave SAC with
    the same offline fraction: the pixel agent's weights are sac-offline's byte for byte (the
    state case is in test_erpv_pipeline.py). The positive control: lambda_1 = 10 moves the actor,
    so the identity is not a run that ignored its settings."""
    from safetensors.torch import load_file

    from stages import train

    d = pixel_pipeline
    runs = {
        "pix-sac-offline": ("sac", {"offline_fraction": 0.5}),
        "pix-erpv-l0": ("erpv", {"lambda_1": 0.0, "lambda_2": 0.0}),
        "pix-erpv-l10": ("erpv", {"lambda_1": 10.0, "lambda_2": 0.0}),
    }
    tensors = {}
    for name, (method, overrides) in runs.items():
        raw = yaml.safe_load((d / "params.yaml").read_text())
        raw["train"] = {name: {"env": ENV, "method": method, "steps": STEPS, "seed": 0,
                               "overrides": overrides}}  # fmt: skip
        params = tmp_path / f"{name}.yaml"
        params.write_text(yaml.safe_dump(raw))
        assert train.main(train_argv(d, params, name, tmp_path / name)) == 0
        tensors[name] = load_file(tmp_path / name / "model" / "agent.safetensors")
    sac, l0, l10 = tensors.values()
    assert sac.keys() == l0.keys()
    differ = [k for k in sac if sac[k].numpy().tobytes() != l0[k].numpy().tobytes()]
    assert not differ, f"lambda = 0 differs from sac-offline in {differ[:5]}"
    actor = [k for k in l0 if k.startswith("actor.")]
    assert any(l10[k].numpy().tobytes() != l0[k].numpy().tobytes() for k in actor)


@pytest.fixture(scope="module")
def erpv_probe_model(pixel_pipeline):
    """A pixel erpv agent trained a few steps on the pipeline-built dataset, for the probes."""
    from stages import train

    d = pixel_pipeline
    params = d / "erpv-probe.yaml"
    params.write_text(yaml.safe_dump(params_for(d, "erpv")))
    assert train.main(train_argv(d, params, "erpv", d / "out" / "erpv-probe")) == 0
    return d / "out" / "erpv-probe" / "model"


def test_the_gate_probe_reads_a_pixel_agent_and_splits_the_gate_by_agreement(
    pixel_pipeline, erpv_probe_model
):
    """benchmarks.gate_probe on a pixel erpv agent: its frames stacked as the replay stacks them,
    and the teacher's gate split by whether the agent agrees with the label. The split partitions
    the rows: the open rates on either side, weighted by their shares, are the overall one."""
    from benchmarks.gate_probe import format_probe, gate_probe

    d, model = pixel_pipeline, erpv_probe_model
    probe = gate_probe(model, d / "critics", d / "ds", ENV, batches=4, batch_size=8)
    split, overall = probe["teacher_split"], probe["per_critic/teacher"]["open"]
    share = split["agree_share"]
    parts = [(share, split["open_where_agrees"]), (1 - share, split["open_where_disagrees"])]
    assert sum(w * rate for w, rate in parts if rate is not None) == pytest.approx(overall)
    assert split["coupling"] is None or split["coupling"] >= 0
    assert "the gate opens on" in format_probe(probe)


def test_the_spread_probe_gives_each_terms_slope_along_a_log_std_shift(
    pixel_pipeline, erpv_probe_model
):
    """benchmarks.spread_probe on a pixel erpv agent: each term's figure is the derivative of that
    term along a shift of every raw log-std output, so a central difference of the same term from
    the same noise agrees with it; without C_V the `vpg` term is absent and the others are the
    same figures."""
    import torch

    from benchmarks.spread_probe import actor_terms, format_probe, labelled_batches, spread_probe
    from pipeline.learn.agents.checkpoint import read_meta
    from pipeline.learn.methods.erpv import VLMCritic, critic_dir

    d, model = pixel_pipeline, erpv_probe_model
    probe = spread_probe(model, d / "ds", ENV, d / "critics", batches=3, batch_size=8)
    alone = spread_probe(model, d / "ds", ENV, None, batches=3, batch_size=8)
    rows, rows_alone = probe["rows"]["dataset"], alone["rows"]["dataset"]
    assert set(probe["rows"]) == {"dataset"} and probe["step"] is None
    assert set(rows["grad_log_std"]) == {"entropy", "q", "vpg"}
    assert set(rows_alone["grad_log_std"]) == {"entropy", "q"}
    for term in ("entropy", "q"):
        assert rows_alone["grad_log_std"][term] == rows["grad_log_std"][term]
    assert probe["target_entropy"] == -1.0 and "| vpg |" in format_probe(probe)

    agent = load_agent(model)
    critic = VLMCritic.load(critic_dir(d / "critics" / ENV, None))
    config = read_meta(model)["config"]
    obs, a_v = next(labelled_batches(agent, d / "ds", None, 1, 8, seed=0))
    terms, out, _, _ = actor_terms(agent, obs, a_v, critic, config, noise_seed=0)
    half, eps = out.shape[-1] // 2, 1e-2
    for term in ("entropy", "q"):
        (grad,) = torch.autograd.grad(terms[term], out, retain_graph=True)
        up, down = (
            float(actor_terms(agent, obs, a_v, critic, config, 0, shift=s)[0][term].detach())
            for s in (eps, -eps)
        )
        slope = rows["grad_log_std"][term]["per_batch"][0]  # the probe's first batch: this one
        assert slope == pytest.approx(float(grad[:, half:].sum()), rel=1e-6)
        assert (up - down) / (2 * eps) == pytest.approx(slope, rel=0.05, abs=1e-3), term


def test_the_spread_probe_pulls_the_mean_where_the_run_did(pixel_pipeline, erpv_probe_model):
    """`vpg_action="mean"` (a run with eq. 3 on tanh(mu)): the probe's `vpg` then has no slope
    along the log-std, as that run's L_V had none; the sample's form has one; the other terms
    are the same figures either way."""
    d, model = pixel_pipeline, erpv_probe_model
    kw = {"batches": 3, "batch_size": 8}
    sampled = spread_probe_of(model, d, vpg_action="sampled", **kw)
    mean = spread_probe_of(model, d, vpg_action="mean", **kw)
    assert (sampled["vpg_action"], mean["vpg_action"]) == ("sampled", "mean")
    slopes, slopes_mean = (p["rows"]["dataset"]["grad_log_std"] for p in (sampled, mean))
    assert all(v == 0.0 for v in slopes_mean["vpg"]["per_batch"])
    assert any(v != 0.0 for v in slopes["vpg"]["per_batch"])
    for term in ("entropy", "q"):
        assert slopes_mean[term] == slopes[term]


def spread_probe_of(model, d, **kw):
    from benchmarks.spread_probe import spread_probe

    return spread_probe(model, d / "ds", ENV, d / "critics", **kw)


def test_the_spread_probe_reads_a_runs_resume_state_and_its_own_rows(
    pixel_pipeline, tmp_path, monkeypatch
):
    """`--state`: a queued run keeps its final resume state, whose networks are its saved
    agent's. Put into another seed's agent (the architecture), they give the dataset's figures
    of the run's own checkpoint to the bit; the state's online replay gives the agent's own rows,
    which carry no label (no `vpg`)."""
    from benchmarks.spread_probe import format_probe, spread_probe
    from pipeline.learn.methods.base import RESUME_ROOT_ENV
    from stages import train

    d, out, other = pixel_pipeline, tmp_path / "run", tmp_path / "other"
    for seed, where in ((0, out), (1, other)):
        raw = params_for(d, "erpv")
        raw["train"]["erpv"]["seed"] = seed
        params = tmp_path / f"params-{seed}.yaml"
        params.write_text(yaml.safe_dump(raw))
        if seed == 0:  # a queued run: its final state stays
            monkeypatch.setenv(RESUME_ROOT_ENV, str(tmp_path / "root"))
        else:
            monkeypatch.delenv(RESUME_ROOT_ENV)
        assert train.main(train_argv(d, params, "erpv", where)) == 0
    [state] = (tmp_path / "root").glob("*/*/state.json")
    kw = {"critics": d / "critics", "batches": 3, "batch_size": 8}
    resumed = spread_probe(other / "model", d / "ds", ENV, state=state.parent, **kw)
    own_checkpoint = spread_probe(out / "model", d / "ds", ENV, **kw)
    other_checkpoint = spread_probe(other / "model", d / "ds", ENV, **kw)
    assert resumed["step"] == STEPS and resumed["alpha"] == own_checkpoint["alpha"]
    assert resumed["rows"]["dataset"] == own_checkpoint["rows"]["dataset"]
    assert other_checkpoint["rows"]["dataset"] != own_checkpoint["rows"]["dataset"]
    own = resumed["rows"]["own"]
    assert set(own["grad_log_std"]) == {"entropy", "q"}
    assert all(len(g["per_batch"]) == 3 for g in own["grad_log_std"].values())
    assert f"resume state at step {STEPS}" in format_probe(resumed) and "own rows" in (
        format_probe(resumed)
    )
    with pytest.raises(ValueError, match="no resume state"):
        spread_probe(out / "model", d / "ds", ENV, state=tmp_path, **kw)


def test_the_label_probe_trains_on_one_episode_and_scores_the_other(pixel_pipeline, tmp_path):
    """benchmarks.label_probe on the pipeline-built pixel dataset: for the state and for the
    stacked frames, each episode held out once; the held-out rows and the training rows are
    the labelled rows, and the scores are shares and squared errors of labels in [-1, 1]."""
    import json

    import numpy as np

    from benchmarks.label_probe import labelled_rows, main

    frames, labels, episode = labelled_rows(pixel_pipeline / "ds", "pixels", 3)
    assert frames.shape[1] == 9 and len(frames) == len(labels) == len(episode)
    features = tmp_path / "encoder.npy"  # a collapsed encoder's: the same vector on every row
    np.save(features, np.full((len(labels), 50), 0.3, np.float32))
    out = tmp_path / "probe.json"
    main(["--dataset", str(pixel_pipeline / "ds"), "--steps", "3", "--batch", "8",
          "--hidden", "16", "--features", str(features), "--out", str(out)])  # fmt: skip
    results = json.loads(out.read_text())["results"]
    assert len(results) == 6
    names = {k.split(",")[0] for k in results}
    assert {"state", "pixels"} < names and any(n.startswith("encoder.npy (spread") for n in names)
    for row in results.values():
        assert row["rows_train"] + row["rows_test"] == len(labels)
        assert 0 <= row["sign_agreement"] <= 1
        assert 0 <= row["mse"] <= 4 and 0 <= row["mse_of_the_mean_label"] <= 4


def test_the_label_probe_reads_a_trained_agents_frozen_encoder(pixel_pipeline, tmp_path):
    """`--agent DIR`: the latent the agent's actor reads, loaded from its checkpoint, gives the
    features the head learns from, one row per labelled row, and the actor's own deterministic
    actions on those rows are scored against the labels; `--kinds` with nothing after it trains
    no encoder from scratch. Recomputed here through the agent: the features are its encoder's
    outputs (a shared actor's latent) and the actions what `act` gives for the same frames."""
    import json

    import numpy as np
    import torch

    from benchmarks.label_probe import actor_row, agent_readout, labelled_rows, main
    from stages import train

    d = pixel_pipeline
    params = tmp_path / "sac.yaml"
    params.write_text(yaml.safe_dump(params_for(d, "sac")))
    assert train.main(train_argv(d, params, "sac", tmp_path / "sac")) == 0
    model = tmp_path / "sac" / "model"
    frames, labels, _ = labelled_rows(d / "ds", "pixels", 3)
    features, actions = agent_readout(model, frames, batch=5)  # batches that divide no rows
    assert features.shape == (len(labels), 16) and actions.shape == labels.shape
    agent = load_agent(model)
    with torch.no_grad():
        direct = agent.encoder(torch.from_numpy(frames[:7])).numpy()
    np.testing.assert_allclose(features[:7], direct, rtol=1e-5, atol=1e-6)
    for i in (0, len(frames) - 1):
        np.testing.assert_allclose(actions[i], agent.act(frames[i], True), rtol=1e-5, atol=1e-6)
    out = tmp_path / "probe.json"
    main(["--dataset", str(d / "ds"), "--steps", "3", "--batch", "8", "--hidden", "16",
          "--kinds", "--agent", str(model), "--out", str(out)])  # fmt: skip
    results = json.loads(out.read_text())["results"]
    spread = f"{features.std(0, ddof=1).mean():.2g}"
    probes = [k for k in results if k.startswith(f"model (spread {spread}), held-out episode")]
    assert len(probes) == 2 and len(results) == 3
    # main reads in batches of 256: the same actions up to the kernels' rounding
    assert results["model: its actor, every labelled row"] == pytest.approx(
        actor_row(actions, labels), rel=1e-4, abs=1e-6
    )
    flipped = actor_row(-labels, labels)  # the instrument: opposite actions agree nowhere
    assert flipped["sign_agreement"] == 0.0 and actor_row(labels, labels)["mse"] == 0.0


def test_the_label_probe_reads_a_motions_direction_from_stacked_frames():
    """The probe's instrument check: where the label is the direction a square moved between the
    oldest and the newest stacked frame (one pixel), the pixel probe learns it and generalises.
    With frames scaled twice (the probe's first bug: the encoder scales uint8 itself) it fit
    0.58 of these training rows and 0.31 of the held-out ones."""
    import numpy as np

    from benchmarks.label_probe import probe

    rng = np.random.default_rng(0)
    labels = np.where(rng.random(64) < 0.5, 1.0, -1.0).astype(np.float32)[:, None]
    frames = np.zeros((64, 9, 16, 16), np.uint8)  # 3 stacked RGB frames, oldest first
    for i, moved in enumerate(labels[:, 0].astype(int)):
        frames[i, 0:3, 6:10, 6:9] = 200
        frames[i, 6:9, 6:10, 6 + moved : 9 + moved] = 200
    row = probe("pixels", frames, labels, np.arange(48), np.arange(48, 64), 60, 16, 32, 0)
    assert row["sign_agreement_on_the_training_rows"] == 1.0 and row["sign_agreement"] >= 0.9
    assert row["mse"] < 0.1 * row["mse_of_the_mean_label"]


def test_the_clone_probe_acts_with_what_it_learned_from_the_labels(pixel_pipeline, tmp_path):
    """benchmarks.clone_probe: a clone per kind and seed, trained on every labelled row, then
    played in the env; its policy stacks the env's frames as the dataset's rows are stacked and
    acts as its network does on them. The instrument: a state clone trained long enough fits
    its training rows' signs and beats the mean label's error."""
    import json

    import numpy as np
    import torch

    from benchmarks.clone_probe import clone_policy, main
    from benchmarks.label_probe import fit, labelled_rows
    from pipeline.core.stacking import to_channels

    d = pixel_pipeline
    out = tmp_path / "clone.json"
    main(["--dataset", str(d / "ds"), "--params", str(d / "params.yaml"), "--env", ENV,
          "--steps", "3", "--batch", "8", "--hidden", "16", "--seeds", "0", "1",
          "--episodes", "2", "--out", str(out)])  # fmt: skip
    results = json.loads(out.read_text())["results"]
    assert sorted(results) == sorted(
        f"{k}, {s}" for k in ("state", "pixels") for s in ("seed 0", "seed 1", "over clones")
    )
    for kind in ("state", "pixels"):
        rows = [results[f"{kind}, seed {s}"] for s in (0, 1)]
        for row in rows:
            assert len(row["returns"]) == 2 and np.isfinite(row["returns"]).all()
            assert row["return_mean"] == pytest.approx(np.mean(row["returns"]))
        assert results[f"{kind}, over clones"]["return_mean"] == pytest.approx(
            np.mean([r["return_mean"] for r in rows])
        )

    frames, labels, _ = labelled_rows(d / "ds", "pixels", 3)
    model = fit("pixels", frames, labels, np.arange(len(labels)), 2, 8, 16, 0).eval()
    policy = clone_policy(model, "pixels", 3, frames.shape[-1])
    first = np.moveaxis(frames[0][:3], 0, -1)  # the first row's oldest frame, (H, W, 3)
    policy.begin({"pixels": first})
    acted = policy.act({"pixels": first})  # an episode's first frame: stacked 3 times
    with torch.no_grad():
        want = model(torch.from_numpy(to_channels(np.stack([first] * 3))[None]))[0].numpy()
    np.testing.assert_array_equal(acted, want)

    # the pipeline's tiny dataset has few labelled rows, all alike: the instrument is a label
    # that a state determines, on 256 states
    rng = np.random.default_rng(0)
    states = rng.uniform(-1, 1, (256, 5)).astype(np.float32)
    state_labels = np.tanh(3 * states[:, :1] - states[:, 1:2])
    clone = fit("state", states, state_labels, np.arange(256), 400, 32, 64, 0).eval()
    with torch.no_grad():
        pred = clone(torch.from_numpy(states)).numpy()
    assert (np.sign(pred) == np.sign(state_labels)).mean() > 0.9
    mean_mse = ((state_labels - state_labels.mean(0)) ** 2).mean()
    assert ((pred - state_labels) ** 2).mean() < 0.5 * mean_mse


@pytest.mark.slow  # a benchmark's option, 10 s: two kinds x two seeds x two rounds
def test_the_clone_probes_rounds_add_the_teachers_labels_of_the_clones_own_states(
    pixel_pipeline, tmp_path
):
    """`--teacher DIR --rounds N`: each round the clone plays episodes of its own, the teacher
    labels every state it visited with its deterministic action, and a fresh clone learns from
    the dataset's rows and every round's; each round's clone is evaluated."""
    import json

    import gymnasium as gym
    import numpy as np

    from benchmarks.clone_probe import main, teacher_labels, visited_rows
    from benchmarks.label_probe import fit, labelled_rows
    from pipeline.learn.agents.off_policy import NetworkParams, SACParams
    from pipeline.learn.agents.sac import SACAgent
    from pipeline.learn.methods.table import load_policy

    d = pixel_pipeline
    states, labels, _ = labelled_rows(d / "ds", "state", 3)
    space = gym.spaces.Box(-1.0, 1.0, labels.shape[1:], np.float32)
    network = NetworkParams(obs="state", hidden_dim=16, feature_dim=8, encoder_layers=1)
    agent = SACAgent(states.shape[1:], space, SACParams(network=network), seed=1)
    agent.save(tmp_path / "teacher", {"env": ENV, "run": "tiny"})

    teacher = load_policy(tmp_path / "teacher", True)
    answers = teacher_labels(teacher, states[:5])
    for state, answer in zip(states[:5], answers, strict=True):
        np.testing.assert_allclose(answer, agent.act(state, True), rtol=1e-6)
    cfg = load_params(d / "params.yaml").env[ENV]
    clone = fit("state", states, labels, np.arange(len(labels)), 2, 8, 16, 0).eval()
    rows, at = visited_rows(clone, "state", 3, None, ENV, cfg, 2, 5)
    assert rows.shape[1:] == states.shape[1:] and len(rows) > 2
    np.testing.assert_array_equal(rows, at)  # a state clone reads the state
    np.testing.assert_array_equal(rows, visited_rows(clone, "state", 3, None, ENV, cfg, 2, 5)[0])
    bounds = (np.full(space.shape, -1.0, np.float32), np.full(space.shape, 1.0, np.float32))
    random, _ = visited_rows(clone, "state", 3, None, ENV, cfg, 2, 5, bounds)  # the control
    np.testing.assert_array_equal(random, visited_rows(clone, "state", 3, None, ENV, cfg, 2, 5,
                                                       bounds)[0])  # fmt: skip
    assert random.shape == rows.shape and not np.array_equal(random, rows)
    # a pixel clone's rows are the stacked frames it read, as the dataset's rows are stacked
    frames, _, _ = labelled_rows(d / "ds", "pixels", 3)
    pixel_clone = fit("pixels", frames, labels, np.arange(len(labels)), 2, 8, 16, 0).eval()
    seen, at = visited_rows(pixel_clone, "pixels", 3, frames.shape[-1], ENV, cfg, 1, 5)
    assert seen.shape[1:] == frames.shape[1:] and seen.dtype == np.uint8 and len(at) == len(seen)
    np.testing.assert_array_equal(seen[0][:3], seen[0][6:])  # an episode's first: stacked 3 times

    for kind in ("state", "pixels"):
        out = tmp_path / f"rounds-{kind}.json"
        main(["--dataset", str(d / "ds"), "--params", str(d / "params.yaml"), "--env", ENV,
              "--kinds", kind, "--steps", "2", "--batch", "8", "--hidden", "16", "--seeds",
              "0", "1", "--episodes", "1", "--teacher", str(tmp_path / "teacher"), "--rounds", "2",
              "--round-episodes", "1", "--round-behaviour", "random", "--out", str(out)])  # fmt: skip
        results = json.loads(out.read_text())["results"]
        for seed in (0, 1):  # each seed's clones start again from the dataset's rows
            first = results[f"{kind}, seed {seed}, round 1"]
            second = results[f"{kind}, seed {seed}, round 2"]
            assert 0 < first["teacher_labels"] < second["teacher_labels"]
            assert first["rows"] == len(labels) + first["teacher_labels"]
            assert results[f"{kind}, seed {seed}"]["rows"] == len(labels)
        assert f"{kind}, round 2, over clones" in results
    with pytest.raises(SystemExit, match="--rounds: give --teacher"):
        main(["--dataset", str(d / "ds"), "--params", str(d / "params.yaml"), "--env", ENV,
              "--kinds", "pixels", "--rounds", "1"])  # fmt: skip


def test_a_pixel_erpv_run_goes_on_through_a_labelling_round(pixel_pipeline, tmp_path, monkeypatch):
    """P2's amendment runs erpv from frames with labelling rounds: the run keeps its training
    state (a pixel replay), the round's agent collects frames, the env's teacher labels them,
    and training goes on from the run's state with the round's part in the offline half. Built
    in a folder laid out as the repository (a round reads the env's data at its DVC paths)."""
    import json

    from pipeline.dataset.transitions import load_offline_transitions
    from pipeline.learn.agents.checkpoint import read_meta
    from pipeline.learn.evaluation import deployed, evaluate_policy
    from stages import round as round_stage
    from stages import train

    d = pixel_pipeline
    monkeypatch.chdir(tmp_path)
    for link, target in [(f"data/rollouts/{ENV}", d / "r"), (f"data/label_cache/{ENV}", d / "lc"),
                         (f"data/labels/{ENV}.parquet", d / "labels.parquet"),
                         (f"data/datasets/{ENV}", d / "ds"), ("models/critic", d / "critics")]:  # fmt: skip
        (tmp_path / link).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / link).symlink_to(target)
    raw = params_for(d, "erpv")
    raw["train"]["erpv"]["overrides"] = {"save_training_state": True}
    # P2's teacher labels every frame and answers in format; a round of one tiny episode would
    # otherwise hold one prompt a task, and the scripted teacher at 0.8 may garble it
    raw["label"]["per_env"][ENV] = {"teacher": {"backend": "scripted", "reliability": 1.0,
                                                "seed": 0}, "tasks": {"action": 1}}  # fmt: skip
    raw["rounds"] = {"erpv-r1": {
        "run": "erpv", "env": ENV, "method": "erpv", "round": 1, "previous_agent": "models/erpv",
        "previous_data": f"data/datasets/{ENV}", "episodes": 1, "steps": 8, "seed": 7}}  # fmt: skip
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    assert train.main(["--params", "params.yaml", "--run", "erpv", "--dataset", f"data/datasets/{ENV}",
                       "--critics", "models/critic", "--out", "models/erpv", "--live", "live/erpv",
                       "--summary", "erpv.json"]) == 0  # fmt: skip
    assert round_stage.main(["--params", "params.yaml", "--round", "erpv-r1",
                             "--data", "data/rounds/erpv-r1", "--caches", "data/round_caches/erpv-r1",
                             "--out", "models/rounds/erpv-r1", "--live", "live/erpv-r1",
                             "--summary", "erpv-r1.json"]) == 0  # fmt: skip
    before, after = (
        read_meta(tmp_path / "models/erpv"),
        read_meta(tmp_path / "models/rounds/erpv-r1"),
    )
    assert after["obs"] == "pixels" and after["update_step"] == before["update_step"] + 8
    part = load_offline_transitions(tmp_path / "data/rounds/erpv-r1/dataset", "pixels", ("action",))
    assert len(part) > 0 and part["has_label"].any()  # the teacher's labels of the agent's frames
    summary = json.loads((tmp_path / "erpv-r1.json").read_text())
    assert summary["costs"]["frames_collected"] > 0 and summary["costs"]["prompts"] > 0
    agent = load_agent(tmp_path / "models/rounds/erpv-r1")
    result = evaluate_policy(deployed(agent, after), ENV, load_params(params).env[ENV], 1, seed=0)
    assert result.episodes == 1
