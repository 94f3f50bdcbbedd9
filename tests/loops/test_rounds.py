"""Labelling rounds (pipeline.loops.rounds): the chain of rounds in params.yaml, the agent acting in
collect, the dataset parts a round's training reads. The DVC journey (reruns, costs, a killed
round) is tests/loops/test_rounds_dvc.py (slow)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml

from pipeline.core.config import ConfigError, parse_params
from pipeline.dataset.build import build_dataset
from pipeline.dataset.transitions import load_offline_transitions
from pipeline.loops.rounds import AgentBehaviour
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.masks import make_mask_backend
from pipeline.teach.masks.compute import compute_masks
from pipeline.teach.rollouts.collect import Acting, CollectError, collect
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.conftest import REPO, collect_cfg, env_cfg, label_cfg, tiny_params_dict

ENV = "MountainCarContinuous-v0"


def _params(**rounds):
    raw = tiny_params_dict((ENV,))
    raw["train"] = {
        "mcc-erpv": {
            "env": ENV,
            "method": "erpv",
            "steps": 300,
            "seed": 0,
            "overrides": {"save_training_state": True},
        }
    }
    raw["rounds"] = rounds
    return raw


def _round(k: int, before: str | None = None, **overrides):
    return {
        "run": "mcc-erpv", "env": ENV, "method": "erpv", "round": k,
        "previous_agent": f"models/rounds/{before}" if before else "models/mcc-erpv",
        "previous_data": f"data/rounds/{before}" if before else f"data/datasets/{ENV}",
        "episodes": 2, "steps": 100, "seed": 0, **overrides,
    }  # fmt: skip


def test_a_chain_of_rounds_parses():
    params = parse_params(_params(r1=_round(1), r2=_round(2, "r1"), r3=_round(3, "r2")))
    assert [r.round for r in params.rounds.values()] == [1, 2, 3]


@pytest.mark.parametrize(
    ("rounds", "message"),
    [
        ({"r1": _round(1, previous_agent="models/other")},
         "rounds.r1.previous_agent: 'models/other'; round 1 of mcc-erpv follows 'models/mcc-erpv'"),
        ({"r1": _round(1), "r2": _round(2, "r1", previous_data="data/rounds/r0")},
         "rounds.r2.previous_data: 'data/rounds/r0'; round 2 of mcc-erpv follows 'data/rounds/r1'"),
        ({"r2": _round(2, "r1")}, "round 2 of mcc-erpv needs one round 1 of it before"),
        ({"r1": _round(1), "r1b": _round(1)}, "are all round 1 of mcc-erpv; one chain per run"),
        ({"r1": _round(1, run="nope")}, "rounds.r1.run: no run train.nope"),
        ({"r1": _round(1, method="sac")}, "rounds.r1.method: 'sac', but train.mcc-erpv's is"),
        ({"r1": _round(1, explore="greedy")}, "explore"),
    ],
    ids=["agent", "data", "gap", "twice", "run", "method", "explore"],
)  # fmt: skip
def test_a_broken_chain_names_the_round_and_what_to_write(rounds, message):
    with pytest.raises(ConfigError, match=None) as info:
        parse_params(_params(**rounds))
    assert message in str(info.value)


def test_the_shipped_rounds_follow_their_runs_and_dvc_reads_their_keys():
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    params = parse_params(copy.deepcopy(raw))
    assert params.rounds, "params.yaml ships a chain of rounds"
    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["round"]
    assert stage["foreach"] == "${rounds}"
    assert {
        "rounds.${key}",
        "train.${item.run}",
        "${item.method}",
        "label.per_env.${item.env}",
    } <= (set(stage["do"]["params"]))
    assert {"${item.previous_agent}", "${item.previous_data}"} <= set(stage["do"]["deps"])


class _Fixed:
    """An agent that acts with a constant, or noise when sampling: what AgentBehaviour asks."""

    obs_kind, frame_stack = "pixels", 2

    def __init__(self):
        self.seen = []

    def act(self, obs, deterministic=False):
        self.seen.append(np.asarray(obs).copy())
        noise = 0.0 if deterministic else float(np.random.default_rng(len(self.seen)).normal())
        return np.array([np.clip(0.5 + 0.1 * noise, -1, 1)], dtype=np.float32)


def test_collect_records_the_acting_agent_and_refuses_mixups(tmp_path):
    agent = _Fixed()
    acting = Acting(AgentBehaviour(agent, "deterministic"), {"agent": "models/x", "round": 1})
    cfg = collect_cfg(behaviour="agent", episodes=2)
    manifest = collect(ENV, env_cfg(max_episode_steps=10), cfg, tmp_path / "r", acting=acting,
                       progress=False)  # fmt: skip
    assert manifest["acting_agent"] == {"agent": "models/x", "round": 1}
    assert manifest["totals"]["steps"] == 20
    assert agent.seen[0].shape == (2 * 3, 32, 32)  # two stacked frames, as in training
    with pytest.raises(CollectError, match="behaviour 'agent'"):
        collect(ENV, env_cfg(), cfg, tmp_path / "s", progress=False)
    with pytest.raises(CollectError, match="behaviour 'agent'"):
        collect(ENV, env_cfg(), collect_cfg(), tmp_path / "t", acting=acting, progress=False)
    # another agent's weights are other data: the fingerprint differs, nothing is mixed
    other = Acting(AgentBehaviour(_Fixed(), "deterministic"), {"agent": "models/y", "round": 1})
    with pytest.raises(CollectError):
        collect(ENV, env_cfg(max_episode_steps=10), cfg, tmp_path / "r", acting=other,
                progress=False)  # fmt: skip
    raw = _params()
    raw["collect"][ENV]["behaviour"] = "agent"  # a round's alone: not a collect.<env> choice
    with pytest.raises(ConfigError, match="'agent' is a labelling round's previous agent"):
        parse_params(raw)


def test_a_rounds_dataset_parts_are_read_after_the_static_dataset(tmp_path):
    """The replay's offline half is the static dataset plus every round's part: episode numbers
    repeat across parts (each collection counts from 0) and are told apart."""
    parts = []
    for name, seed in (("static", 0), ("r1", 1)):
        rollouts = tmp_path / name / "rollouts"
        collect(ENV, env_cfg(max_episode_steps=12), collect_cfg(episodes=2, seed=seed), rollouts,
                progress=False)  # fmt: skip
        labels = tmp_path / name / "labels.parquet"
        label_rollouts(rollouts, label_cfg(tasks={"action": 2}), ScriptedTeacher(1.0, 0),
                       tmp_path / name / "cache", labels, progress=False)  # fmt: skip
        compute_masks(
            rollouts, labels, make_mask_backend(parse_params(tiny_params_dict()).masks),
            tmp_path / name / "mc", tmp_path / name / "m.parquet", batch_size=8, progress=False,
        )  # fmt: skip
        build_dataset(rollouts, labels, tmp_path / name / "m.parquet", tmp_path / name / "ds",
                      shard_max_samples=100)  # fmt: skip
        parts.append(tmp_path / name / "ds")
    alone = [load_offline_transitions(p, "state", ("action",)) for p in parts]
    both = load_offline_transitions(parts[0], "state", ("action",), also=[parts[1]])
    assert len(both) == sum(len(a) for a in alone) == 2 * 2 * 12
    np.testing.assert_array_equal(both.obs[len(alone[0].obs) :], alone[1].obs)
    np.testing.assert_array_equal(both["a_v"][len(alone[0]) :], alone[1]["a_v"])
    tail = both.obs_index[len(alone[0]) :] - len(alone[0].obs)
    np.testing.assert_array_equal(tail, alone[1].obs_index)
    # each transition knows its part (Semore's selective insertion decides per part)
    np.testing.assert_array_equal(both.part, np.repeat([0, 1], [len(a) for a in alone]))
    assert not alone[1].part.any()


def test_round_one_needs_its_runs_training_state():
    from pipeline.learn.methods.table import check_params

    raw = _params(r1=_round(1))
    raw["train"]["mcc-erpv"]["overrides"] = {}
    raw["erpv"] = yaml.safe_load((REPO / "params.yaml").read_text())["erpv"]
    with pytest.raises(ConfigError, match=r"set `save_training_state: true` in train\.mcc-erpv"):
        check_params(parse_params(raw))


def test_a_training_state_round_trips_without_pickle(tmp_path):
    import torch

    from pipeline.learn.agents.state_io import StateFileError, load_state, save_state

    weight = torch.nn.Parameter(torch.ones(3))
    optimiser = torch.optim.Adam([weight])
    weight.grad = torch.ones(3)
    optimiser.step()
    state = {
        "agent": {"optimizers": {"actor": optimiser.state_dict()}, "update_step": 7},
        "buffer": {"obs": np.arange(6, dtype=np.float32).reshape(2, 3), "counters": (2, 1, 0),
                   "episode_open": True, "fields": {}},
    }  # fmt: skip
    save_state(tmp_path, "ts", state)
    back = load_state(tmp_path, "ts")
    again = torch.optim.Adam([torch.nn.Parameter(torch.ones(3))])
    again.load_state_dict(back["agent"]["optimizers"]["actor"])  # int keys kept as ints
    torch.testing.assert_close(again.state_dict()["state"][0]["exp_avg"],
                               optimiser.state_dict()["state"][0]["exp_avg"])  # fmt: skip
    np.testing.assert_array_equal(back["buffer"]["obs"], state["buffer"]["obs"])
    assert back["buffer"]["counters"] == (2, 1, 0) and back["agent"]["update_step"] == 7
    (tmp_path / "ts.json").write_text("{not json")
    with pytest.raises(StateFileError, match=r"ts\.json"):
        load_state(tmp_path, "ts")


def test_a_damaged_round_cache_names_the_round_to_rerun(tmp_path):
    """A round's own caches are rebuilt by its round stage, not the env's label or masks stage."""
    from pipeline.core.segments import StoreError

    rollouts = tmp_path / "rollouts"
    collect(ENV, env_cfg(max_episode_steps=8), collect_cfg(episodes=1), rollouts, progress=False)
    cfg, cache = label_cfg(tasks={"action": 2}), tmp_path / "cache"
    label_rollouts(rollouts, cfg, ScriptedTeacher(1.0, 0), cache, tmp_path / "a.parquet",
                   progress=False)  # fmt: skip
    segment = sorted(cache.glob("segment-*.parquet"))[0]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0x01
    segment.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"dvc repro round@r2"):
        label_rollouts(rollouts, cfg, ScriptedTeacher(1.0, 0), cache, tmp_path / "b.parquet",
                       progress=False, rebuild="`dvc repro round@r2`")  # fmt: skip
