"""Resume states hold no pickle (pipeline.learn.agents.resume): a run goes on from one exactly, PPO's envs
included (pipeline.learn.agents.env_state); the fingerprint is read from `state.json` before any tensor;
a damaged state, one of other settings or one of the old pickled format (`state.pt`, never
unpickled) is named in a warning and the run starts over."""

from __future__ import annotations

import io
import json
import os

import gymnasium as gym
import pytest
import torch

from pipeline.core.envs import make_env
from pipeline.learn.agents.ppo import train_ppo
from pipeline.learn.agents.resume import Resume, read_plain
from tests.conftest import env_cfg, ppo_params

STATE = {
    "step": 12,
    "curve": [(4, -1.5), (8, 2.0)],
    "logs": [{"step": 8.0, "eval_return": 3.25}],
    "weights": {"w": torch.arange(6.0).reshape(2, 3)},
    "optimizer": {0: {"step": torch.tensor(3.0)}},  # int keys, as in an optimiser's state
}


class _Killed(Exception):
    """Stands for a SIGKILL right after a resume state was saved."""


class _KilledAfterFirstSave(Resume):
    def save(self, state):
        super().save(state)
        raise _Killed


def _make():
    cfg = env_cfg(include_state=True, max_episode_steps=40)
    return gym.wrappers.RecordEpisodeStatistics(make_env("MountainCar-v0", cfg, pixels=False))


def _ppo(resume=None):
    hp = ppo_params(num_envs=2, rollout_steps=16, minibatches=2, normalize_obs=True,
                    normalize_reward=True)  # fmt: skip
    return train_ppo(_make, hp, 256, 0, obs_fn=lambda o: o["state"], resume=resume)


@pytest.fixture(scope="module")
def whole():
    agent, curve = _ppo()
    return agent.state_dict(), curve


def _same_run(result, whole):
    agent, curve = result
    assert curve == whole[1] and curve, "the curve differs from the uninterrupted run's"
    for key, value in whole[0].items():
        assert torch.equal(agent.state_dict()[key], value), key


def test_a_killed_ppo_run_goes_on_from_its_envs_mid_episode(whole, tmp_path):
    """8 updates of 32 steps, episodes of 40: the state at update 3 is mid-episode in both envs,
    which go on from there (no pickle: their attributes, written into envs built afresh)."""
    with pytest.raises(_Killed):
        _ppo(_KilledAfterFirstSave(tmp_path, "f", every=3))
    header = json.loads((tmp_path / Resume.STATE).read_text())
    assert header["state"] and list(tmp_path.glob("*.pt")) == []
    assert read_plain(tmp_path)["update"] == 3
    _same_run(_ppo(Resume(tmp_path, "f", every=3)), whole)


def test_a_garbled_state_is_named_and_the_run_starts_over(whole, tmp_path, caplog):
    with pytest.raises(_Killed):
        _ppo(_KilledAfterFirstSave(tmp_path, "f", every=3))
    path = tmp_path / Resume.STATE
    path.write_bytes(b"\x80\x04garbled" + path.read_bytes()[:50])
    with caplog.at_level("WARNING"):
        _same_run(_ppo(Resume(tmp_path, "f", every=3)), whole)
    assert f"{path} is not valid JSON" in caplog.text and "starting over" in caplog.text


def test_a_state_nested_past_the_recursion_limit_is_named(tmp_path):
    """Valid JSON, 200,000 levels deep: a named error, not a RecursionError traceback."""
    from pipeline.learn.agents.resume import ResumeStateError, read_header

    (tmp_path / Resume.STATE).write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ResumeStateError, match="is not valid JSON"):
        read_header(tmp_path)


def test_damaged_tensors_are_named_and_the_run_starts_over(tmp_path, caplog):
    resume = Resume(tmp_path, "f", every=1)
    resume.save(STATE)
    (tensors,) = tmp_path.glob("state.*.safetensors")
    data = bytearray(tensors.read_bytes())
    data[-1] ^= 0xFF  # one flipped bit in a weight: still a valid safetensors file
    tensors.write_bytes(bytes(data))
    with caplog.at_level("WARNING"):
        assert resume.load() is None
    assert f"{tensors} is damaged" in caplog.text and "starting over" in caplog.text
    tensors.unlink()
    with caplog.at_level("WARNING"):
        assert resume.load() is None
    assert f"{tensors} does not exist" in caplog.text


def test_a_full_disk_during_a_save_is_one_named_error_and_keeps_the_last_state(
    tmp_path, monkeypatch
):
    """ENOSPC while the new state's files are written: ResumeSaveError naming the folder and
    the fix; the previous state still loads, and no orphan tensors file is left."""
    import errno
    from pathlib import Path

    import pipeline.core.io as core_io
    from pipeline.learn.agents.resume import ResumeSaveError

    Resume(tmp_path, "f", every=1).save(STATE)
    before = sorted(p.name for p in tmp_path.iterdir())
    real = core_io.atomic_write_bytes

    def full(path, data):
        if Path(path).name == Resume.STATE:  # the tensors land, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    # resume.py's atomic_write_json writes through core.io's atomic_write_bytes: state.json fails
    monkeypatch.setattr(core_io, "atomic_write_bytes", full)
    changed = {**STATE, "step": -1}
    with pytest.raises(
        ResumeSaveError, match=rf"cannot save the resume state in {tmp_path} \(No space left"
    ):
        Resume(tmp_path, "f", every=1).save(changed)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert Resume(tmp_path, "f", every=1).load() is not None


def test_a_state_round_trips_exactly(tmp_path):
    Resume(tmp_path, "f", every=1).save(STATE)
    back = Resume(tmp_path, "f", every=1).load()
    assert back["curve"] == STATE["curve"] and isinstance(back["curve"][0], tuple)
    assert back["logs"] == STATE["logs"] and list(back["optimizer"]) == [0]
    assert torch.equal(back["weights"]["w"], STATE["weights"]["w"])


def test_a_new_save_replaces_the_old_tensors_only_after_its_json(tmp_path):
    resume = Resume(tmp_path, "f", every=1)
    resume.save(STATE)
    resume.save({**STATE, "step": 13, "weights": {"w": torch.zeros(2)}})
    assert len(list(tmp_path.glob("state.*.safetensors"))) == 1
    assert resume.load()["step"] == 13


def test_the_fingerprint_is_checked_before_any_tensor_is_read(tmp_path, caplog):
    Resume(tmp_path, "other settings", every=1).save(STATE)
    for tensors in tmp_path.glob("state.*.safetensors"):
        tensors.unlink()  # reading them would fail: the warning must be about the settings
    with caplog.at_level("WARNING"):
        assert Resume(tmp_path, "f", every=1).load() is None
    assert "belongs to other settings or data: starting over" in caplog.text
    assert "does not exist" not in caplog.text


class _RunsCode:
    """Unpickling it makes a directory: the proof that loading ran the file's code."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_an_old_pickled_state_is_never_unpickled(tmp_path, caplog):
    marker = tmp_path / "ran"
    buffer = io.BytesIO()
    torch.save({"step": 5, "fingerprint": "f", "payload": _RunsCode(marker)}, buffer)
    old = tmp_path / "resume" / Resume.OLD_STATE
    old.parent.mkdir()
    old.write_bytes(buffer.getvalue())
    with caplog.at_level("WARNING"):
        assert Resume(old.parent, "f", every=1).load() is None
    assert not marker.exists()
    assert f"{old} is a resume state of an older version" in caplog.text
    assert not old.exists()  # gone: the run starts over and saves the new format
