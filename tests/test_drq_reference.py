"""The reference DrQ of benchmarks/drq_reference.py keeps the authors' structure (an actor of its
own on tied convs, targets every 2nd update at tau 0.01, encoder included), and its training run
trains and evaluates on the pixel preset's env and sizes as a benchmarks.pixels cell."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from benchmarks.drq_reference import RefDrQAgent, RefReplay, main
from tests.conftest import REPO

SIZE = 48


def _agent(k: int = 1) -> RefDrQAgent:
    torch.manual_seed(0)
    return RefDrQAgent((9, SIZE, SIZE), 1, stride=2, hidden=32, k=k)


def _batch(n: int = 8) -> tuple[torch.Tensor, ...]:
    rng = np.random.default_rng(0)
    replay = RefReplay((9, SIZE, SIZE), 1, n)
    for _ in range(n):
        frames = rng.integers(0, 256, (2, 9, SIZE, SIZE), dtype=np.uint8)
        replay.add(frames[0], rng.uniform(-1, 1, 1), float(rng.uniform()), frames[1], False)
    assert replay.full and len(replay) == n
    return replay.sample(n, rng)


def test_actor_convs_are_the_critics_and_its_head_its_own():
    agent = _agent()
    for a, c in zip(agent.actor.encoder.convs, agent.critic.encoder.convs, strict=True):
        assert a.weight is c.weight and a.bias is c.bias
    assert agent.actor.encoder.head[0].weight is not agent.critic.encoder.head[0].weight
    head = agent.actor.encoder.head[0].weight.detach().clone()
    agent.update(*_batch())
    assert torch.equal(agent.actor.encoder.head[0].weight, head)  # no actor step on update 1
    agent.update(*_batch())
    assert not torch.equal(agent.actor.encoder.head[0].weight, head)  # the actor loss trains it


def test_targets_move_every_second_update_by_tau_encoder_included():
    agent = _agent()
    target0 = {k: v.clone() for k, v in agent.critic_target.state_dict().items()}
    agent.update(*_batch())
    assert all(torch.equal(v, target0[k]) for k, v in agent.critic_target.state_dict().items())
    agent.update(*_batch())
    online = agent.critic.state_dict()
    for key, value in agent.critic_target.state_dict().items():
        if value.is_floating_point():
            torch.testing.assert_close(value, 0.01 * online[key] + 0.99 * target0[key])
    assert not torch.equal(
        agent.critic_target.state_dict()["encoder.convs.0.weight"],
        target0["encoder.convs.0.weight"],
    )


def test_act_is_the_mean_when_deterministic_and_in_range():
    agent = _agent()
    obs = np.random.default_rng(1).integers(0, 256, (9, SIZE, SIZE), dtype=np.uint8)
    a, b = agent.act(obs, deterministic=True), agent.act(obs, deterministic=True)
    assert a.shape == (1,) and np.array_equal(a, b) and -1 <= a[0] <= 1
    with torch.no_grad():
        mean = agent.actor.mean(torch.as_tensor(obs).float()[None])[0].numpy()
    np.testing.assert_allclose(a, mean)


def _tiny_run(tmp_path, out: str, resume_every: int = 0, start_steps: int = 16) -> list[str]:
    """`main`'s arguments for a run of tiny budgets over the CPU preset: 40 agent steps in
    episodes of 6 (48 env steps at repeat 8), updates from `start_steps`, an evaluation every 16."""
    raw = yaml.safe_load((REPO / "benchmarks/params/pixels_cpu.yaml").read_text())
    raw["steps"] = 40
    raw["env"]["cartpole-swingup"].update(image_size=SIZE, max_episode_steps=48)
    raw["drq"] = {**raw["drq"], "start_steps": start_steps, "batch_size": 8, "log_every": 16,
                  "eval_episodes": 1, "resume_every": resume_every}  # fmt: skip
    raw["drq"]["network"] = {**raw["drq"]["network"], "hidden_dim": 32}
    preset = tmp_path / f"preset-{out}.yaml"
    preset.write_text(yaml.safe_dump(raw))
    return ["--params", str(REPO / "params.yaml"), "--preset", str(preset), "--out",
            str(tmp_path / out), "--seed", "3"]  # fmt: skip


def test_a_reference_run_trains_and_evaluates_on_the_preset(tmp_path, monkeypatch):
    """The run logs a row with a periodic evaluation every `log_every` steps, updates after the
    seed steps, and its result is a pixels cell's; a rerun finds the result and trains nothing."""
    monkeypatch.setenv("MUJOCO_GL", "egl")
    argv = _tiny_run(tmp_path, "out")
    assert main(argv) == 0
    path = tmp_path / "out" / "drq-reference-k1-seed3.json"
    result = json.loads(path.read_text())
    assert result["arm"] == "drq-reference" and result["seed"] == 3 and result["steps"] == 40
    assert [step for step, _ in result["eval"]] == [16, 32]
    assert "critic_loss" in result["logs"][0] and "alpha" in result["logs"][1]
    assert len(result["final_returns"]) == 5 and np.isfinite(result["final_return"])
    assert result["curve"] and result["curve"][0][0] == 6  # 48 env steps at repeat 8
    mtime = path.stat().st_mtime_ns
    assert main(argv) == 0 and path.stat().st_mtime_ns == mtime


# three reference runs of rendered cartpole; fast: the reference run above and the train
# stage's resume tests (test_pixel_methods.py)
@pytest.mark.slow
def test_an_interrupted_reference_run_resumes_to_the_uninterrupted_result(
    tmp_path, monkeypatch, capsys
):
    """Updates from step 8, its first resume state at the episode end at step 12, interrupted in
    the update of step 20: the same command goes on from step 12 (networks, optimisers, replay
    and RNGs as they were) and ends with the uninterrupted run's curves, evaluations and final
    returns; the resume state is gone once the result is written."""
    monkeypatch.setenv("MUJOCO_GL", "egl")
    assert main(_tiny_run(tmp_path, "whole", resume_every=8, start_steps=8)) == 0
    update, calls = RefDrQAgent.update, [0]

    def failing(self, *batch):
        calls[0] += 1
        if calls[0] == 13:  # step 20
            raise KeyboardInterrupt
        return update(self, *batch)

    argv = _tiny_run(tmp_path, "killed", resume_every=8, start_steps=8)
    monkeypatch.setattr(RefDrQAgent, "update", failing)
    with pytest.raises(KeyboardInterrupt):
        main(argv)
    state = tmp_path / "killed" / "resume" / "drq-reference-k1-seed3" / "state.json"
    assert state.exists()
    monkeypatch.setattr(RefDrQAgent, "update", update)
    capsys.readouterr()
    assert main(argv) == 0
    assert f"resuming {state.parent} from step 12" in capsys.readouterr().out
    assert not state.parent.exists()
    name = "drq-reference-k1-seed3.json"
    whole = json.loads((tmp_path / "whole" / name).read_text())
    resumed = json.loads((tmp_path / "killed" / name).read_text())
    for key in ("curve", "eval", "logs", "final_returns"):
        assert resumed[key] == whole[key], key
    assert len(whole["curve"]) == 6


def test_pixel_report_takes_reference_results_at_its_budget_only(tmp_path):
    """`benchmarks.pixels --extra`: a reference result joins the table as its own arm; one made
    at another budget, or a file that is not a result, is refused by name."""
    import pytest

    from benchmarks.pixels import read_extra, table

    def result(arm, seed, steps=100, final=10.0):
        return {"name": f"{arm}-seed{seed}", "arm": arm, "seed": seed, "steps": steps,
                "eval": [(50, final / 2), (80, 4.0), (100, final)], "final_return": final,
                "train_seconds": 1.0, "updates_per_s": 2.0}  # fmt: skip

    good = tmp_path / "ref.json"
    good.write_text(json.dumps(result("drq-reference", 0, final=600.0)))
    extra = read_extra([good], steps=100)
    text = table([result("drq", 0), result("drq", 1), *extra], ["drq", "drq-reference"])
    rows = {line.split()[0]: line.split() for line in text.splitlines()[3:]}
    assert rows["drq"][1:5] == ["2", "10.0", "+-", "0.0"] and rows["drq"][8] == "-"
    # last 20%: the evaluations at steps 80 and 100 of 100, not the one at 50
    assert rows["drq"][5:8] == ["7.0", "+-", "0.0"]
    # one seed: no sample std
    assert rows["drq-reference"][1:10] == ["1", "600.0", "+-", "n/a", "302.0", "+-", "n/a", "100",
                                           "[1/1]"]  # fmt: skip
    # a resumed run times its last piece only: train s averages the runs made in one piece
    resumed = {**result("drq", 2), "train_seconds": 0.25, "resumed_from": 50}
    rows = {line.split()[0]: line.split() for line in table(
        [result("drq", 0), result("drq", 1), resumed], ["drq"]).splitlines()[3:]}  # fmt: skip
    assert rows["drq"][9:11] == ["1", "[2/3]"]
    whole_only = table([resumed], ["drq"]).splitlines()[3].split()
    assert whole_only[9] == "-"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(result("drq-reference", 1, steps=50)))
    with pytest.raises(SystemExit, match=r"other\.json: a run of 50 steps"):
        read_extra([other], steps=100)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"arm": "x"}))
    with pytest.raises(SystemExit, match=r"bad\.json: not a pixel result"):
        read_extra([bad], steps=100)


def test_late_evaluation_averages_the_last_fifth_and_the_table_dashes_a_run_without_one():
    from benchmarks.pixels import late_evaluation, table

    curve = [(500, 1.0), (7500, 100.0), (8000, 300.0), (9000, 200.0), (10000, 400.0)]
    assert late_evaluation(curve, 10_000) == 300.0  # 8k, 9k and 10k
    assert late_evaluation(curve[:2], 10_000) is None
    no_evals = {"name": "sac-seed0", "arm": "sac", "seed": 0, "steps": 100, "eval": [],
                "final_return": 5.0, "train_seconds": 1.0, "updates_per_s": 2.0}  # fmt: skip
    row = table([no_evals], ["sac"]).splitlines()[3].split()
    assert row[:6] == ["sac", "1", "5.0", "+-", "n/a", "-"]  # periodic evaluation off
