"""A checkpoint edited by hand (or by anyone with write access to where it is shared) is refused
with the file, what is wrong and the fix, before it acts: never loaded with a silent cast, never
a traceback that names no file."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from pipeline.learn.agents.checkpoint import (
    AGENT_JSON,
    AGENT_WEIGHTS,
    CheckpointError,
    read_checkpoint,
    write_checkpoint,
)
from pipeline.learn.agents.off_policy import NetworkParams, SACParams
from pipeline.learn.agents.ppo import ActorCritic
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.evaluation import EvaluationError, deployed, evaluate_policy
from pipeline.learn.methods.table import load_agent
from tests.conftest import env_cfg as tiny_env_cfg

MCC = "MountainCarContinuous-v0"


def _sac(tmp_path: Path) -> Path:
    network = NetworkParams(obs="state", hidden_dim=16, feature_dim=8, transition_hidden_dim=8)
    agent = SACAgent((2,), gym.spaces.Box(-1.0, 1.0, (1,), np.float32), SACParams(network=network))
    out = tmp_path / "sac"
    agent.save(out, {"run": "r", "env": MCC, "method": "sac", "obs": "state"})
    return out


def _ppo(tmp_path: Path) -> Path:
    out = tmp_path / "ppo"
    ActorCritic(2, 3, 8).save(out, {"method": "ppo"})
    return out


def _edit_header(path: Path, edit) -> None:
    """Rewrite a safetensors file's JSON header with `edit(header)`, the tensor bytes kept."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    edit(header)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + size :])


def _first(header: dict) -> str:
    return next(k for k in header if k != "__metadata__")


def _dtype_to_i32(header: dict) -> None:
    header[_first(header)]["dtype"] = "I32"  # same width as F32: the bytes still fit


def _transpose(header: dict) -> None:
    entry = header[next(k for k in header if k != "__metadata__" and len(header[k]["shape"]) == 2)]
    entry["shape"] = entry["shape"][::-1]


def _rename(header: dict) -> None:
    header["renamed.weight"] = header.pop(_first(header))


@pytest.mark.parametrize("make", [_sac, _ppo], ids=["sac", "ppo"])
@pytest.mark.parametrize(
    ("edit", "words"),
    [(_dtype_to_i32, "torch.int32"), (_transpose, "the network needs"), (_rename, "missing")],
    ids=["dtype", "shape", "key"],
)
def test_edited_weights_are_refused_naming_the_tensor_and_the_fix(tmp_path, make, edit, words):
    directory = make(tmp_path)
    load_agent(directory)  # the untouched checkpoint loads
    _edit_header(directory / AGENT_WEIGHTS, edit)
    with pytest.raises(CheckpointError) as err:
        load_agent(directory)
    message = str(err.value)
    assert str(directory / AGENT_WEIGHTS) in message and words in message, message
    assert "dvc checkout" in message


@pytest.mark.parametrize(
    "edit",
    [
        lambda meta: meta.pop("obs_shape"),
        lambda meta: meta.update(obs_shape="two"),
        lambda meta: meta.update(config={"network": {"obs": "radar"}}),
    ],
    ids=["missing key", "wrong type", "bad config"],
)
def test_an_edited_agent_json_is_refused_naming_it(tmp_path, edit):
    directory = _sac(tmp_path)
    meta = json.loads((directory / AGENT_JSON).read_text())
    edit(meta)
    (directory / AGENT_JSON).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as err:
        load_agent(directory)
    assert str(directory / AGENT_JSON) in str(err.value) and "dvc checkout" in str(err.value)


def test_edited_action_bounds_are_not_served(tmp_path):
    """The bounds in agent.json scale every action; edited, the agent would act at another scale
    (and it did: the edit was served). The file no longer matches the sha256 its weights carry:
    refused on load; and bounds that disagree with the env are refused at evaluation too."""
    directory = _sac(tmp_path)
    meta = json.loads((directory / AGENT_JSON).read_text())
    agent = load_agent(directory)
    meta["action_high"] = [9.0]
    (directory / AGENT_JSON).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    with pytest.raises(CheckpointError, match=r"agent\.json is not the agent\.json its weights"):
        load_agent(directory)
    env_cfg = tiny_env_cfg(max_episode_steps=5)
    with pytest.raises(EvaluationError, match=r"action bounds .*9\.0.* are not Mountain"):
        evaluate_policy(deployed(agent, meta), MCC, env_cfg, 1, 0)


def test_a_checkpoint_saved_before_a_new_setting_still_loads(tmp_path):
    """A setting added later (here erpv's `vpg_weight`) takes its default, which is what the code
    did before it existed: an older agent.json without it loads (it was refused as saved with
    another config, breaking every ERPv agent saved before the option)."""
    from pipeline.learn.methods.erpv import ERPvParams

    network = NetworkParams(obs="state", hidden_dim=16, feature_dim=8, transition_hidden_dim=8)
    agent = SACAgent((2,), gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
                     ERPvParams(network=network))  # fmt: skip
    agent.save(tmp_path / "erpv", {"run": "r", "env": MCC, "method": "erpv", "obs": "state"})
    meta, tensors = read_checkpoint(tmp_path / "erpv")
    del meta["config"]["vpg_weight"]  # as an agent saved before the option wrote it
    write_checkpoint(tmp_path / "erpv", tensors, meta)
    loaded = load_agent(tmp_path / "erpv")
    x = np.array([0.1, 0.0], np.float32)
    np.testing.assert_array_equal(loaded.act(x, True), agent.act(x, True))
    # warm-starting an agent of another config from it is still refused
    other = SACAgent((2,), gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
                     ERPvParams(network=network, vpg_weight="q_scaled"))  # fmt: skip
    with pytest.raises(CheckpointError, match="another config"):
        other.load_weights(tmp_path / "erpv")


def test_agent_json_and_weights_of_two_checkpoints_do_not_mix(tmp_path):
    """Each weights file carries the sha256 of the agent.json written with it: a copied-in
    agent.json (another run of the same method) and weights whose header lost the hash are both
    refused, naming the file."""
    import shutil

    a, b = _sac(tmp_path / "a"), _sac(tmp_path / "b")
    meta_b, tensors_b = read_checkpoint(b)
    write_checkpoint(b, tensors_b, {**meta_b, "run": "b"})
    shutil.copy(b / AGENT_JSON, a / AGENT_JSON)
    with pytest.raises(CheckpointError, match=rf"{a / AGENT_JSON} is not the agent\.json"):
        load_agent(a)
    _edit_header(b / AGENT_WEIGHTS, lambda header: header.pop("__metadata__"))
    with pytest.raises(CheckpointError, match=rf"{b / AGENT_JSON} is not the agent\.json"):
        load_agent(b)


def test_vlmrl_verify_checks_a_checkpoint(tmp_path, capsys):
    from pipeline.tools.integrity import main as verify_main

    directory = _sac(tmp_path)
    assert verify_main(["--models", str(directory)]) == 0
    assert (
        f"{directory} (model): ok; checked against the sha256 in its weights"
        in capsys.readouterr().out
    )
    meta = json.loads((directory / AGENT_JSON).read_text())
    meta["action_high"] = [9.0]
    (directory / AGENT_JSON).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    assert verify_main(["--models", str(directory)]) == 1
    assert "is not the agent.json its weights" in capsys.readouterr().out
