"""The SAC family's `compile` setting: every network compiled in place (checkpoints keep their
keys), one CUDA-graph-trees iteration per update and per action under `reduce-overhead`, agents
loaded for acting run eagerly, and a compiled update computes what the eager one does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.learn.agents.checkpoint import read_checkpoint, read_meta, write_checkpoint
from pipeline.learn.agents.loop import train_off_policy
from pipeline.learn.agents.off_policy import NetworkParams, SACParams
from pipeline.learn.agents.replay import ReplayBuffer
from pipeline.learn.agents.sac import SACAgent
from tests.toy_envs import PointMass

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def cfg(**overrides) -> SACParams:
    network = NetworkParams(obs="state", hidden_dim=32, feature_dim=8, transition_hidden_dim=16)
    return SACParams(network=network, **{"batch_size": 8, "start_steps": 20, **overrides})


def compiled(agent: SACAgent) -> dict[str, bool]:
    return {name: m._compiled_call_impl is not None for name, m in agent._modules().items()}


def test_off_by_default_and_every_network_compiled_in_place_when_set():
    eager = SACAgent.for_env(PointMass(), cfg(), seed=0)
    assert eager.cfg.compile == "off" and not any(compiled(eager).values())
    agent = SACAgent.for_env(PointMass(), cfg(compile="default"), seed=0)  # compiles lazily
    assert all(compiled(agent).values()), compiled(agent)
    # in place: the weights keep their names, so checkpoints and resume states do not change
    for name, module in agent._modules().items():
        assert module.state_dict().keys() == eager._modules()[name].state_dict().keys(), name


def test_an_unknown_mode_is_refused_by_name():
    with pytest.raises(ValueError, match="compile"):
        cfg(compile="max-autotune")


@pytest.mark.parametrize(("mode", "marks"), [("reduce-overhead", True), ("default", False)])
def test_cuda_graphs_start_one_iteration_per_update_and_per_action(monkeypatch, mode, marks):
    """Without the marks, cudagraph trees free an update's critic features before its actor step
    reads them (seen on an H200). Compilation itself is stubbed: this checks the loop's calls."""
    events: list[str] = []
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: None)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: events.append("mark"))
    env = PointMass()
    agent = SACAgent.for_env(env, cfg(compile=mode), seed=0)
    for module in agent._modules().values():  # every network call, in order with the marks
        module.register_forward_pre_hook(lambda *_: events.append("net"))
    calls = {"update": 0, "act": 0}
    for name in calls:
        inner = getattr(agent, name)

        def counted(*args, _inner=inner, _name=name, **kwargs):
            calls[_name] += 1
            n = len(events)
            out = _inner(*args, **kwargs)
            ran = events[n:]
            assert "net" in ran, _name
            # one mark, before any network runs
            assert ran.count("mark") == int(marks) and ran[0] == ("mark" if marks else "net")
            return out

        setattr(agent, name, counted)
    buffer = ReplayBuffer("state", (1,), 1, 1000)
    train_off_policy(env, agent, buffer, 30, seed=0, progress=False)
    assert calls == {"update": 11, "act": 10}  # steps 20-29 act; updates from step 20 on
    assert events.count("mark") == (21 if marks else 0)


def test_an_agent_loaded_for_acting_runs_eagerly(tmp_path):
    """Compiling is a training setting (Inductor needs a C++ compiler where it runs); the saved
    config keeps it, and checkpoints from before the setting existed still load."""
    agent = SACAgent.for_env(PointMass(), cfg(compile="reduce-overhead"), seed=0)
    agent.save(tmp_path / "a")
    assert read_meta(tmp_path / "a")["config"]["compile"] == "reduce-overhead"
    loaded = SACAgent.load(tmp_path / "a")
    assert loaded.cfg.compile == "off" and not any(compiled(loaded).values())
    for name, module in loaded._modules().items():
        for key, value in module.state_dict().items():
            assert torch.equal(value, agent._modules()[name].state_dict()[key]), (name, key)
    eager = SACAgent.for_env(PointMass(), cfg(), seed=0)
    meta = read_meta(tmp_path / "a")
    del meta["config"]["compile"]  # as an older checkpoint wrote it
    eager.save(tmp_path / "old", meta={})
    _, tensors = read_checkpoint(tmp_path / "old")
    write_checkpoint(tmp_path / "old", tensors, meta)
    assert SACAgent.load(tmp_path / "old").cfg.compile == "off"


@pytest.mark.slow  # Inductor compiles C++ for the CPU: about a minute
def test_a_compiled_update_computes_what_the_eager_one_does(monkeypatch):
    import torch._inductor.config as inductor

    monkeypatch.setattr(inductor, "fallback_random", True)  # eager's RNG inside compiled code
    env = PointMass()
    rng = np.random.default_rng(0)
    batches = [
        {
            "obs": torch.as_tensor(rng.normal(size=(8, 1)), dtype=torch.float32),
            "action": torch.as_tensor(rng.uniform(-1, 1, size=(8, 1)), dtype=torch.float32),
            "reward": torch.as_tensor(rng.normal(size=8), dtype=torch.float32),
            "next_obs": torch.as_tensor(rng.normal(size=(8, 1)), dtype=torch.float32),
            "done": torch.zeros(8),
        }
        for _ in range(4)
    ]
    runs = {}
    for mode in ("off", "default"):
        agent = SACAgent.for_env(env, cfg(compile=mode), seed=0)
        torch.manual_seed(1)
        metrics = [agent.update(b) for b in batches]  # two actor steps, two target updates
        action = agent.act(np.array([0.3], np.float32), deterministic=True)
        runs[mode] = (metrics, action, agent)
    (m_eager, a_eager, eager), (m_comp, a_comp, comp) = runs["off"], runs["default"]
    assert all(compiled(comp).values())
    for row_eager, row_comp in zip(m_eager, m_comp, strict=True):
        assert row_eager.keys() == row_comp.keys()
        for key, value in row_eager.items():
            assert row_comp[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    np.testing.assert_allclose(a_comp, a_eager, rtol=1e-4, atol=1e-5)
    for name, module in eager._modules().items():
        for key, value in module.state_dict().items():
            other = comp._modules()[name].state_dict()[key]
            torch.testing.assert_close(other, value, rtol=1e-4, atol=1e-5, msg=f"{name}.{key}")


@pytest.mark.slow  # Inductor compiles C++ for the CPU: about a minute
def test_a_compiled_run_killed_and_resumed_gives_the_uninterrupted_result(tmp_path, monkeypatch):
    """The resume state of a compiled agent (its modules' state dicts, loaded into compiled
    modules) goes on to the uninterrupted compiled run's curve, metrics and weights."""
    import torch._inductor.config as inductor

    from pipeline.learn.agents.resume import Resume

    monkeypatch.setattr(inductor, "fallback_random", True)
    settings = cfg(compile="default", log_every=10)

    def run(resume_dir, fail_after=None):
        env = PointMass()  # episodes of 20 steps: a save at steps 20 and 40
        agent = SACAgent.for_env(env, settings, seed=0)
        if fail_after is not None:
            inner, calls = agent.update, []

            def update(batch):
                calls.append(1)
                if len(calls) > fail_after:
                    raise KeyboardInterrupt  # killed mid-run, after the step-20 save
                return inner(batch)

            agent.update = update
        buffer = ReplayBuffer("state", (1,), 1, 1000)
        resume = Resume(resume_dir, "f", every=20)
        curve, logs = train_off_policy(env, agent, buffer, 60, seed=0, progress=False,
                                       resume=resume)  # fmt: skip
        return curve, logs, agent

    whole_curve, whole_logs, whole = run(tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut", fail_after=15)  # updates begin at step 19: killed at step 34
    assert Resume(tmp_path / "cut", "f", every=20).load()["step"] == 20
    curve, logs, resumed = run(tmp_path / "cut")
    assert all(compiled(resumed).values())
    assert curve == whole_curve and logs == whole_logs
    for name, module in whole._modules().items():
        for key, value in module.state_dict().items():
            assert torch.equal(value, resumed._modules()[name].state_dict()[key]), (name, key)
