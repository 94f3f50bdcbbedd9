import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from pipeline.core.config import ConfigError, parse_params
from pipeline.core.io import sha256_file
from pipeline.learn.agents.checkpoint import CheckpointError
from pipeline.learn.agents.off_policy import NetworkParams, SACParams
from pipeline.learn.agents.ppo import ActorCritic
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.methods.table import load_policy
from pipeline.teach.rollouts.behaviours import CheckpointSourceError
from pipeline.teach.rollouts.collect import CollectError, collect, episode_seed
from pipeline.teach.rollouts.format import JOURNAL_NAME, MANIFEST_NAME
from pipeline.teach.rollouts.reader import iter_rollouts
from pipeline.teach.rollouts.verify import verify_rollouts
from tests.conftest import REPO, collect_cfg, env_cfg, tiny_params_dict, write_params

MC = "MountainCar-v0"
MCC = "MountainCarContinuous-v0"


def _samples(rollout_dir):
    return [(s.key, s.frame_png, s.record) for s in iter_rollouts(rollout_dir)]


def test_collect_writes_verified_shards_and_manifest(tmp_path):
    manifest = collect(MC, env_cfg(), collect_cfg(episodes=3), tmp_path, progress=False)
    totals = manifest["totals"]
    # 20-step episodes (max_episode_steps), 21 samples each, shards close after >= 30 samples
    assert totals == {"episodes": 3, "steps": 60, "samples": 63, "shards": 2}
    assert [s["episodes"] for s in manifest["shards"]] == [[0, 1], [2, 2]]
    assert [e["seed"] for e in manifest["episodes"]] == [episode_seed(0, i) for i in range(3)]
    assert not (tmp_path / JOURNAL_NAME).exists()
    report = verify_rollouts(tmp_path)
    assert report.ok, report.problems
    first = next(iter_rollouts(tmp_path))
    assert first.key == "000000/000000" and first.record["is_first"]
    assert first.frame().shape == (32, 32, 3)
    assert set(first.record["context"]) == {"position", "velocity"}
    assert first.record["behaviour"] == "random"


def test_collect_is_deterministic(tmp_path):
    a = collect(MC, env_cfg(), collect_cfg(), tmp_path / "a", progress=False)
    b = collect(MC, env_cfg(), collect_cfg(), tmp_path / "b", progress=False)
    assert [s["sha256"] for s in a["shards"]] == [s["sha256"] for s in b["shards"]]
    c = collect(MC, env_cfg(), collect_cfg(seed=1), tmp_path / "c", progress=False)
    assert [s["sha256"] for s in a["shards"]] != [s["sha256"] for s in c["shards"]]


def test_rerun_with_same_settings_does_nothing(tmp_path):
    first = collect(MC, env_cfg(), collect_cfg(), tmp_path, progress=False)
    mtimes = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    again = collect(MC, env_cfg(), collect_cfg(), tmp_path, progress=False)
    assert again == first
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == mtimes


def test_raising_episodes_extends_and_keeps_existing_shards(tmp_path):
    first = collect(MC, env_cfg(), collect_cfg(episodes=3), tmp_path / "x", progress=False)
    extended = collect(MC, env_cfg(), collect_cfg(episodes=5), tmp_path / "x", progress=False)
    assert extended["shards"][: len(first["shards"])] == first["shards"]
    assert extended["totals"]["episodes"] == 5
    collect(MC, env_cfg(), collect_cfg(episodes=5), tmp_path / "y", progress=False)
    assert _samples(tmp_path / "x") == _samples(tmp_path / "y")  # same samples, whatever the shards


def test_changed_settings_refuse_to_mix_unless_replace(tmp_path):
    collect(MC, env_cfg(), collect_cfg(), tmp_path, progress=False)
    with pytest.raises(CollectError, match=r"different settings.*--replace"):
        collect(MC, env_cfg(image_size=16), collect_cfg(), tmp_path, progress=False)
    with pytest.raises(CollectError, match="hold 3 episodes and params ask for 2"):
        collect(MC, env_cfg(), collect_cfg(episodes=2), tmp_path, progress=False)
    manifest = collect(
        MC, env_cfg(image_size=16), collect_cfg(), tmp_path, replace=True, progress=False
    )
    assert manifest["observation"]["pixels"] == [16, 16, 3]
    assert verify_rollouts(tmp_path).ok


def test_corrupted_kept_shard_is_not_built_upon(tmp_path):
    collect(MC, env_cfg(), collect_cfg(episodes=3), tmp_path, progress=False)
    with open(tmp_path / "shard-000000.tar", "r+b") as f:
        f.seek(600)
        f.write(b"garbage")
    with pytest.raises(CollectError, match=r"shard-000000\.tar does not match its recorded sha256"):
        collect(MC, env_cfg(), collect_cfg(episodes=4), tmp_path, progress=False)


def _start_collect(params_path, out):
    cmd = [
        sys.executable,
        "-m",
        "stages.collect",
        "--params",
        str(params_path),
        "--env",
        MC,
        "--out",
        str(out),
    ]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_killed_collect_resumes_without_duplicates_or_gaps(tmp_path, caplog):
    episodes = 30  # 21 samples each, 30 to a shard: the kill comes after 2 of 21 shards
    params = write_params(tmp_path / "params.yaml", tiny_params_dict(episodes=episodes))
    out = tmp_path / "resumed"
    proc = _start_collect(params, out)
    journal = out / JOURNAL_NAME
    while proc.poll() is None:  # kill once at least two shards are safely on disk
        if journal.exists() and len(json.loads(journal.read_text())["shards"]) >= 2:
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / MANIFEST_NAME).exists(), "collect finished before the kill; test is void"
    kept = json.loads(journal.read_text())["shards"]
    kept_hashes = {s["name"]: s["sha256"] for s in kept}

    from stages.collect import main  # the rerun and the uninterrupted twin: in this process

    def run(out_dir):
        return main(["--params", str(params), "--env", MC, "--out", str(out_dir)])

    with caplog.at_level("INFO"):
        assert run(out) == 0
    assert "resuming after" in caplog.text
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    # every completed shard was kept as it was
    assert {s["name"]: s["sha256"] for s in manifest["shards"][: len(kept)]} == kept_hashes
    assert [e["episode"] for e in manifest["episodes"]] == list(range(episodes))
    assert verify_rollouts(out).ok
    # and the result is byte-identical to a collection that was never interrupted
    assert run(tmp_path / "fresh") == 0
    fresh_manifest = json.loads((tmp_path / "fresh" / MANIFEST_NAME).read_text())
    assert manifest["shards"] == fresh_manifest["shards"]
    assert not list(out.glob("*.tmp")) and not journal.exists()


def test_checkpoint_behaviour_runs_a_saved_actor(tmp_path):
    class Actor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 1)  # MountainCarContinuous state: position, velocity

        def forward(self, state):
            return 3.0 * torch.tanh(self.net(state))  # overshoots the [-1, 1] bounds on purpose

    torch.manual_seed(0)
    actor = Actor().eval()
    path = tmp_path / "actor.pt2"
    torch.export.save(torch.export.export(actor, (torch.zeros(1, 2),)), path)
    cfg = collect_cfg(
        behaviour="checkpoint", checkpoint=str(path), episodes=1,
        trust_checkpoint_code=sha256_file(path),
    )  # fmt: skip
    collect("MountainCarContinuous-v0", env_cfg(), cfg, tmp_path / "out", progress=False)
    samples = list(iter_rollouts(tmp_path / "out"))
    assert verify_rollouts(tmp_path / "out").ok
    for sample in samples[:-1]:
        rec = sample.record
        with torch.no_grad():
            expected = actor(torch.tensor([rec["state"]], dtype=torch.float32)).clamp(-1, 1)
        assert rec["behaviour"] == "checkpoint"
        np.testing.assert_allclose(rec["action"], expected[0].numpy(), atol=1e-6)


def test_checkpoint_that_is_not_an_actor_is_a_clear_error(tmp_path):
    bogus = tmp_path / "actor.pt2"
    bogus.write_bytes(b"not a program")
    cfg = collect_cfg(
        behaviour="checkpoint", checkpoint=str(bogus), trust_checkpoint_code=sha256_file(bogus)
    )
    with pytest.raises(ValueError, match=r"is not a torch\.export program"):
        collect(MC, env_cfg(), cfg, tmp_path / "out", progress=False, load_policy=load_policy)


# ---- acting checkpoints: an agent directory, or a torch.export file only when trusted ---------


def _sympify_payload(path: Path, marker: Path) -> Path:
    """A torch.export program with a dynamic batch size whose symbolic size in models/model.json
    makes `marker` when torch's deserializer sympifies it (issue 47, finding 1): no pickle."""

    class Actor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 1)

        def forward(self, state):
            return torch.tanh(self.net(state))

    clean = path.with_suffix(".clean.pt2")
    batch = torch.export.Dim("batch")
    program = torch.export.export(
        Actor(), (torch.zeros(2, 2),), dynamic_shapes={"state": {0: batch}}
    )
    torch.export.save(program, clean)
    payload = f"__import__('os').mkdir({str(marker)!r}) or Symbol('"

    def edit(name: str, data: bytes) -> bytes:
        if not name.endswith("models/model.json"):
            return data
        text, n = re.subn(r"Symbol\('", lambda m: payload, data.decode(), count=1)
        assert n == 1, "the program has a symbolic size to carry the payload"
        return text.encode()

    with zipfile.ZipFile(clean) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, edit(info.filename, zin.read(info.filename)))
    return path


def test_a_sympify_payload_runs_nothing_without_the_trust_setting(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # params.yaml paths are relative to the repository root
    marker = tmp_path / "ran"
    hostile = _sympify_payload(tmp_path / "actor.pt2", marker)
    torch.export.load(hostile)  # the attack is real: plain loading runs the file's code
    assert marker.is_dir(), "precondition: torch.export.load runs the payload"
    marker.rmdir()

    # refused by the params check, before DVC runs anything
    raw = tiny_params_dict((MCC,), behaviour="checkpoint", checkpoint="actor.pt2")
    with pytest.raises(
        ConfigError,
        match=r"collect\.MountainCarContinuous-v0: .*trust_checkpoint_code: [0-9a-f]{64}",
    ):
        parse_params(raw)
    # and by collect, for a file that appeared after the params were read
    cfg = collect_cfg(behaviour="checkpoint", checkpoint="later.pt2", episodes=1)
    hostile.rename(tmp_path / "later.pt2")
    with pytest.raises(CheckpointSourceError) as caught:
        collect(MCC, env_cfg(), cfg, tmp_path / "out", progress=False, load_policy=load_policy)
    message = str(caught.value)
    assert (
        "\n" not in message and "collect.MountainCarContinuous-v0.trust_checkpoint_code" in message
    )
    assert not marker.exists() and not (tmp_path / "out").exists()
    # the stage: one line on stderr, exit status 2, nothing run
    from stages.collect import main

    raw["collect"][MCC]["checkpoint"] = "later.pt2"
    params = write_params(tmp_path / "params.yaml", raw)
    capsys.readouterr()
    assert main(["--params", str(params), "--env", MCC, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "trust_checkpoint_code: " in err, err
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_a_checkpoint_file_is_trusted_by_its_sha256_not_its_path(tmp_path):
    """`true` trusts a path, whose file may change: refused, with the sha256 to record; a file
    that changed after its sha256 was recorded is refused before it is loaded."""
    marker = tmp_path / "ran"
    path = _sympify_payload(tmp_path / "actor.pt2", marker)
    digest = sha256_file(path)
    with pytest.raises(ValueError, match=rf"not `true`: set `trust_checkpoint_code: {digest}`"):
        collect_cfg(behaviour="checkpoint", checkpoint=str(path), trust_checkpoint_code=True)
    cfg = collect_cfg(behaviour="checkpoint", checkpoint=str(path), trust_checkpoint_code="0" * 64)
    with pytest.raises(CheckpointSourceError, match=rf"has sha256 {digest}, not the one trusted"):
        collect(MCC, env_cfg(), cfg, tmp_path / "out", progress=False, load_policy=load_policy)
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_a_trained_agents_directory_acts_in_collect(tmp_path):
    """`checkpoint: models/<run>`: the agent train@<run> writes (safetensors and agent.json),
    acting as deployed, deterministic; its weights are part of the collection's fingerprint."""
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    network = NetworkParams(obs="state", hidden_dim=16, feature_dim=8, frame_stack=1)
    agent = SACAgent((2,), space, SACParams(network=network), seed=1)
    directory = tmp_path / "models" / "tiny"
    agent.save(directory, {"env": MCC, "run": "tiny"})
    cfg = collect_cfg(behaviour="checkpoint", checkpoint=str(directory), episodes=1)
    collect(MCC, env_cfg(), cfg, tmp_path / "out", progress=False, load_policy=load_policy)
    assert verify_rollouts(tmp_path / "out").ok
    samples = list(iter_rollouts(tmp_path / "out"))
    assert len(samples) > 2
    for sample in samples[:-1]:
        rec = sample.record
        want = agent.act(np.asarray(rec["state"], np.float32), deterministic=True)
        assert rec["behaviour"] == "checkpoint"
        np.testing.assert_allclose(rec["action"], want, atol=1e-6)
    # another agent in the same directory is another collection
    SACAgent((2,), space, SACParams(network=network), seed=2).save(directory, {"env": MCC})
    with pytest.raises(CollectError, match="--replace"):
        collect(MCC, env_cfg(), cfg, tmp_path / "out", progress=False, load_policy=load_policy)


def test_a_discrete_agents_directory_acts_in_collect(tmp_path):
    agent = ActorCritic(2, 3, 8)
    agent.save(tmp_path / "ppo", {"method": "ppo", "env": MC})
    cfg = collect_cfg(behaviour="checkpoint", checkpoint=str(tmp_path / "ppo"), episodes=1)
    collect(MC, env_cfg(), cfg, tmp_path / "out", progress=False, load_policy=load_policy)
    for sample in list(iter_rollouts(tmp_path / "out"))[:-1]:
        rec = sample.record
        want = agent.act(np.asarray(rec["state"], np.float32), deterministic=True)
        assert rec["action"] == want and rec["behaviour"] == "checkpoint"


def test_a_checkpoint_that_is_missing_or_no_agent_is_one_line(tmp_path):
    cfg = collect_cfg(behaviour="checkpoint", checkpoint=str(tmp_path / "models" / "none"))
    with pytest.raises(CheckpointSourceError, match=r"does not exist; point it at an agent"):
        collect(MC, env_cfg(), cfg, tmp_path / "out", progress=False, load_policy=load_policy)
    (tmp_path / "models" / "empty").mkdir(parents=True)
    cfg = collect_cfg(behaviour="checkpoint", checkpoint=str(tmp_path / "models" / "empty"))
    with pytest.raises(CheckpointError, match=r"agent\.json does not exist"):
        collect(MC, env_cfg(), cfg, tmp_path / "out", progress=False, load_policy=load_policy)


@pytest.mark.parametrize(
    ("state", "reward", "says"),
    [([0.1, float("nan")], 1.0, "state"), ([0.1, 0.2], float("inf"), "reward inf")],
)
def test_a_non_finite_state_or_reward_is_refused_naming_episode_and_step(state, reward, says):
    """NaN / inf from a brought env would be written as `NaN` / `Infinity` (not JSON) and quoted
    to the teacher: collect stops at the sample, naming episode, step and value, writing nothing."""
    from pipeline.teach.rollouts import collect as module

    written = []

    class Writer:
        def write(self, *args):
            written.append(args)

    obs = {module.PIXELS: np.zeros((8, 8, 3), np.uint8), module.STATE: np.asarray(state)}
    with pytest.raises(CollectError, match=rf"episode 3, step 7: .*non-finite {says}"):
        module._write_sample(Writer(), 3, 7, 0, obs, {module.CONTEXT: {}}, action=[0.0],
                             reward=reward, terminated=False, truncated=False, is_last=False,
                             behaviour="random")  # fmt: skip
    assert written == []
