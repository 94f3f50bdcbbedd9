"""Labelling rounds through DVC (slow): a rerun after all rounds makes no teacher call and trains
nothing; a change to round 2 reruns rounds 2 and later only (read from `dvc status`); round 2's
repeated frames come from the cache; a killed round resumes to the uninterrupted result."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from pipeline.learn.agents.state_io import load_plain_state
from tests.conftest import sigkill_once_saved, tiny_params_dict, write_params
from tests.test_dvc_pipeline import _ran, _run, _scratch_repo, _stale, _with_stage_two

pytestmark = pytest.mark.slow

ENV = "MountainCarContinuous-v0"
RUN = "mcc-erpv"


def _round(k: int, **overrides):
    before = f"{RUN}-r{k - 1}"
    return {
        "run": RUN, "env": ENV, "method": "erpv", "round": k,
        "previous_agent": f"models/rounds/{before}" if k > 1 else f"models/{RUN}",
        "previous_data": f"data/rounds/{before}" if k > 1 else f"data/datasets/{ENV}",
        # one seed for every round: each round's episodes start from the same states, so their
        # first frames repeat and their answers come from the cache
        "episodes": 2, "steps": 150, "seed": 7, **overrides,
    }  # fmt: skip


def _params():
    params = _with_stage_two(tiny_params_dict((ENV,), episodes=2), {RUN: (ENV, "erpv")})
    params["erpv"]["resume_every"] = 40
    params["train"][RUN]["overrides"] = {"save_training_state": True}
    params["rounds"] = {f"{RUN}-r{k}": _round(k) for k in (1, 2, 3)}
    return params


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    repo = _scratch_repo(tmp_path_factory.mktemp("rounds") / "repo", _params())
    return repo, _run(["dvc", "repro"], repo)


def _costs(repo, k):
    return json.loads((repo / "metrics" / "rounds" / f"{RUN}-r{k}.json").read_text())["costs"]


def test_rounds_pay_once_and_rerun_only_from_the_changed_round(built, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(built[0], repo, symlinks=True)
    rounds = [f"round@{RUN}-r{k}" for k in (1, 2, 3)]
    assert set(rounds) <= set(_ran(built[1]))
    first, second = _costs(repo, 1), _costs(repo, 2)
    assert first["teacher_calls"] > 0 and first["frames_collected"] == 2 * 21
    # round 2's episodes start where round 1's did: their first frames are answered already
    assert second["answered_before"] >= 2
    assert second["teacher_calls"] == second["distinct_prompts"] - second["answered_before"]
    # what the calls cost here: each new prompt's own call, recorded by the env's telemetry
    # store, priced at the latency measured (costs/rounds/, apart from the pure metrics)
    for k, costs in ((1, first), (2, second)):
        here = json.loads((repo / "costs" / "rounds" / f"{RUN}-r{k}.json").read_text())
        assert here["teacher_calls"] == costs["teacher_calls"]
        assert here["recorded"]["calls"] == costs["teacher_calls"]
        assert here["recorded"]["unrecorded"] == 0
        assert here["recorded"]["seconds_per_call"] > 0
        assert here["seconds_at_erpv_rate"] == costs["teacher_seconds_at_erpv_rate"]
    assert "at the latency measured here" in built[1]
    audit = (repo / "data/rounds" / f"{RUN}-r2" / "audit.html").read_text()
    assert f"Labelling round 2 of run <code>{RUN}</code>" in audit  # which round a label is from
    # ... and every earlier label of the run, each with its round (0: the env's static data)
    listed = re.findall(r"<tr><td>(\d)</td><td class=\"l\"><code>([^<]+)</code>", audit)
    assert listed == [("0", f"data/rollouts/{ENV}"), ("1", f"data/rounds/{RUN}-r1/rollouts"),
                      ("2", f"data/rounds/{RUN}-r2/rollouts")], listed  # fmt: skip
    manifest = json.loads((repo / "data/rounds" / f"{RUN}-r2/rollouts/manifest.json").read_text())
    assert manifest["acting_agent"]["agent"] == f"models/rounds/{RUN}-r1"
    card = (repo / "data/rounds" / f"{RUN}-r2/dataset/README.md").read_text()
    assert f"labelling round 2 of run `{RUN}` by the agent `models/rounds/{RUN}-r1`" in card
    agent = json.loads((repo / "models/rounds" / f"{RUN}-r3" / "agent.json").read_text())
    assert agent["round"] == 3 and len(agent["data"]["round_parts"]) == 3
    # when each part entered the replay: the static dataset at update 0 with the run's seed,
    # round k's part at the update count of the agent round k went on from, with k's seed
    updates = [0]
    for agent_dir in (f"models/{RUN}", *(f"models/rounds/{RUN}-r{k}" for k in (1, 2))):
        state = load_plain_state(repo / agent_dir, "training_state")
        updates.append(state["agent"]["update_step"])
    assert updates[1] > 0 and updates == sorted(updates)
    parts = json.loads((repo / "data/rounds" / f"{RUN}-r3" / "parts.json").read_text())
    assert parts["entries"] == [[0, 0], *([u, 7] for u in updates[1:])], parts
    for k in (1, 2, 3):  # each round's agent evaluated as a run's is
        evaluation = json.loads((repo / "metrics/eval/rounds" / f"{RUN}-r{k}.json").read_text())
        assert evaluation["env"] == ENV and evaluation["episodes"] >= 1

    assert _ran(_run(["dvc", "repro"], repo)) == []  # no teacher call, nothing trained

    params = _params()
    params["rounds"][f"{RUN}-r2"]["steps"] = 120
    write_params(repo / "params.yaml", params)
    stale = _stale(repo)
    # r3 follows its output; the knowledge page lists the rounds (params `rounds`)
    assert sorted(stale) == ["check_params", "knowledge", f"round@{RUN}-r2"], stale
    before = (repo / "metrics/rounds" / f"{RUN}-r2.json").read_text()
    output = _run(["dvc", "repro"], repo)
    ran = _ran(output)
    assert ran == sorted(
        [
            "check_params",
            "knowledge",
            *(f"{stage}@{RUN}-r{k}" for stage in ("round", "evaluate_round") for k in (2, 3)),
        ]
    ), ran
    # the same frames: every answer from the round's persisted cache, and the costs (a pure
    # function of the inputs, as on a fresh build) unchanged
    assert f"round {RUN}-r2: " in output and "calls_made_now 0" in output.split(f"{RUN}-r2: ")[1]
    assert json.loads(before)["costs"] == _costs(repo, 2)


def test_a_killed_round_resumes_to_the_uninterrupted_result(built, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(built[0], repo, symlinks=True)
    name = f"{RUN}-r1"
    for outputs in ("data/rounds", "data/round_caches", "models/rounds"):
        shutil.rmtree(repo / outputs / name)
    state = repo / ".resume" / "rounds" / name / "state.json"
    cmd = [
        sys.executable, "-m", "stages.round", "--params", "params.yaml", "--round", name,
        "--data", f"data/rounds/{name}", "--caches", f"data/round_caches/{name}",
        "--out", f"models/rounds/{name}",
        "--live", f"plots/rounds/{name}", "--summary", f"metrics/rounds/{name}.json",
        "--resume-dir", f".resume/rounds/{name}",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sigkill_once_saved(proc, state)
    assert state.exists() and not (repo / "models/rounds" / name / "agent.json").exists()
    _run(cmd, repo)
    weights = "models/rounds/" + name + "/agent.safetensors"
    assert (repo / weights).read_bytes() == (built[0] / weights).read_bytes()
    assert not state.exists()  # finished: nothing left to resume
