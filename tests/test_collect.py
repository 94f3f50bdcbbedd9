import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from pipeline.rollouts.collect import CollectError, collect, episode_seed
from pipeline.rollouts.format import JOURNAL_NAME, MANIFEST_NAME
from pipeline.rollouts.reader import iter_rollouts
from pipeline.rollouts.verify import verify_rollouts
from tests.conftest import REPO, collect_cfg, env_cfg, tiny_params_dict, write_params

MC = "MountainCar-v0"


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
    cfg = collect_cfg(behaviour="checkpoint", checkpoint=str(path), episodes=1)
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
    cfg = collect_cfg(behaviour="checkpoint", checkpoint=str(bogus))
    with pytest.raises(ValueError, match=r"is not a torch\.export program"):
        collect(MC, env_cfg(), cfg, tmp_path / "out", progress=False)
